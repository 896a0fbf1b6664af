"""Tiny runs of the trainer with the shared and the counterfactual credit."""

from __future__ import annotations

import json

from test_trainer import SMALL

from teamrl.config import load_config
from teamrl.trainer.trainer import Trainer


def run(tmp_path, *overrides: str) -> list[dict]:
    cfg = load_config(
        overrides=SMALL
        + [
            f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
            "recipe.roles=[coder]",
            "run.eval_each_phase=false",
            *overrides,
        ]
    )
    Trainer(cfg, tmp_path / "run").fit()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_counterfactual_credit_run_logs_credits_and_replays(tmp_path):
    # 2 tasks x 2 teams; a budget of 2 replays covers the coder's first group, the second falls back
    rows = run(tmp_path, "reward.credit=counterfactual", "reward.counterfactual_budget=2")
    (it,) = [r for r in rows if "phase" in r]
    assert it["credit/counterfactual_rollouts"] == 2 and it["credit/counterfactual_fallbacks"] == 2
    assert -1.0 <= it["credit/coder/counterfactual"] <= 1.0
    assert 0.0 <= it["credit/coder/replay_outcome"] <= 1.0
    assert "rollout/reward/coder" in it and it["credit/counterfactual_tokens"] > 0
    episodes = [json.loads(line) for line in (tmp_path / "run" / "episodes" / "last_rollout.jsonl").open()]
    replayed = [e for e in episodes if "counterfactual_outcome" in e["verifier"]]
    assert len(replayed) == 2
    for e in replayed:  # the coder's reward is its credit R - R_cf
        cf = e["verifier"]["counterfactual_outcome"]["coder"]
        assert abs(e["rewards"]["coder"] - (e["outcome"] - cf)) < 1e-9


def test_shared_credit_run_gives_every_role_the_outcome(tmp_path):
    rows = run(tmp_path, "reward.credit=shared")
    (it,) = [r for r in rows if "phase" in r]
    assert "credit/counterfactual_rollouts" not in it
    roles = ("planner", "coder", "reviewer", "tester")
    assert all(it[f"rollout/reward/{r}"] == it["rollout/outcome"] for r in roles)
