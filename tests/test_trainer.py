"""End to end on a very small embedded model: SFT, freeze-rotate RL, checkpoints, resume, eval."""

import json

import pytest
from trainer_spy import record_updates

from teamrl.cli import main as cli_main
from teamrl.config import load_config
from teamrl.trainer.trainer import FrozenParametersChanged, Trainer

SMALL = [
    "policies.default.embedded.hidden_size=64",
    "policies.default.embedded.num_layers=2",
    "policies.default.embedded.num_heads=2",
    "policies.default.embedded.vocab_size=400",
    "policies.default.embedded.demo_episodes=40",
    "policies.default.embedded.steps=8",
    "policies.default.lora.r=4",
    "policies.default.lora.alpha=8",
    "recipe.sft.demo_episodes=8",
    "tasks.heldout_size=3",
    "algorithm.group_size=2",
    "algorithm.tasks_per_iteration=2",
    "algorithm.ppo_epochs=2",
    "recipe.name=freeze_rotate",
    "recipe.rounds=1",
    "recipe.iterations_per_role=1",
    "recipe.roles=[coder,reviewer]",
    "run.progress=false",
    "run.eval_each_phase=true",
]


@pytest.fixture
def small_cfg(tmp_path):
    return load_config(overrides=SMALL + [f"policies.default.embedded.cache_dir={tmp_path / 'cache'}"])


def test_freeze_rotate_run_writes_everything_and_trains_only_the_current_role(
    small_cfg, tmp_path, monkeypatch
):
    trainer = Trainer(small_cfg, tmp_path / "run")
    seen = record_updates(trainer, monkeypatch)
    summary = trainer.fit()
    run = tmp_path / "run"
    assert [e["label"] for e in summary["evals"]] == ["after_sft", "after_round1_coder", "after_rl"]
    assert [roles for roles, _, _ in seen] == [("coder",), ("reviewer",)]
    for roles, skipped, changed in seen:
        assert (
            changed == set(roles) - skipped
        )  # the phase's role moved (unless all advantages were 0), nothing else
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "phase" in r] == [1, 2]
    assert all("rollout/reward/coder" in r for r in rows if "phase" in r)
    assert (run / "config.yaml").exists() and (run / "summary.json").exists()
    assert summary["sandbox_isolation"] == trainer.sandbox.isolation == "bwrap"  # auto: bubblewrap or nothing
    assert (run / "checkpoint" / "adapters" / "coder" / "adapter_config.json").exists()
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert (run / "episodes" / "eval_after_rl.jsonl").exists()


def test_update_changes_exactly_the_trained_adapter(small_cfg, tmp_path):
    trainer = Trainer(small_cfg, tmp_path / "run")
    trainer.sft_roles()
    tasks = trainer.suite.fixed_set("train", 2)
    episodes = trainer.rollout(tasks, 2)
    for ep in episodes:  # make the two episodes of each task differ, so advantages are non-zero
        ep.rewards = {r: float(ep.group) for r in ep.rewards}
    before = trainer.fingerprints()
    stats = trainer.update(episodes, ("coder",))
    after = trainer.fingerprints()
    assert {k for k in before if before[k] != after[k]} == {"coder"}
    assert stats["train/coder/turns"] >= 2 and stats["train/coder/grad_norm"] > 0
    assert "train/coder/kl" in stats


def test_an_update_on_the_forking_tokens_with_warmup_and_target_kl_runs_on_the_real_model(tmp_path):
    more = ["algorithm.top_entropy_quantile=0.2", "algorithm.lr_warmup_steps=100", "algorithm.target_kl=0.5"]
    cfg = load_config(overrides=SMALL + more + [f"policies.default.embedded.cache_dir={tmp_path / 'cache'}"])
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.sft_roles()
    episodes = trainer.rollout(trainer.suite.fixed_set("train", 2), 2)
    for ep in episodes:
        ep.rewards = {r: float(ep.group) for r in ep.rewards}
    before = trainer.fingerprints()
    stats = trainer.update(episodes, ("coder",))
    assert {k for k, v in trainer.fingerprints().items() if v != before[k]} == {"coder"}
    assert 0 < stats["train/coder/policy_token_fraction"] <= 0.5  # a fifth of the learned tokens, ties kept
    assert stats["train/coder/entropy"] > 0 and stats["train/coder/approx_kl_max"] >= 0
    lr = [g["lr"] for g in trainer.learner.optimizers["coder"].param_groups]
    assert 0 < lr[0] <= cfg.algorithm.lr * 8 / 100  # warming up: one update takes at most 8 steps


def test_a_changed_frozen_role_is_caught(small_cfg, tmp_path):
    import torch

    from teamrl.recipes import Phase

    trainer = Trainer(small_cfg, tmp_path / "run")
    trainer.sft_roles()
    before = trainer.fingerprints()
    with torch.no_grad():
        trainer.policy_of("planner").adapter_parameters("planner")[0].add_(1.0)
    with pytest.raises(FrozenParametersChanged, match="planner"):
        trainer.check_frozen(before, Phase("x", ("coder",), 1))


def test_resume_continues_where_a_killed_run_stopped(small_cfg, tmp_path, monkeypatch):
    run = tmp_path / "run"
    trainer = Trainer(small_cfg, run)
    calls = {"n": 0}
    original = trainer.update

    def dies_on_second(episodes, roles):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed mid-run
        return original(episodes, roles)

    monkeypatch.setattr(trainer, "update", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    assert state["step"] == 1 and state["phase"] == 1

    resumed = Trainer(load_config(run / "config.yaml"), run, resume=True)
    assert resumed.state.step == 1
    summary = resumed.fit()
    assert summary["evals"][-1]["label"] == "after_rl"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl_steps = [s for s in steps if s > 0]
    assert sorted(set(rl_steps)) == [1, 2]


def test_cli_eval_scores_a_finished_run(small_cfg, tmp_path, capsys):
    run = tmp_path / "run"
    Trainer(small_cfg, run).fit()
    assert cli_main(["eval", str(run), "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert "held-out evaluation" in out and str(run) in out
    rows = [json.loads(line) for line in (run / "episodes" / "eval_eval.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * small_cfg.run.eval_samples and all("rewards" in r for r in rows)


def test_cli_reports_bad_config_without_a_traceback(capsys):
    code = cli_main(["train", "--set", "algorithm.group_size=1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "algorithm.group_size" in err and "Traceback" not in err


def test_cli_schema_prints_message_schema(capsys):
    assert cli_main(["schema"]) == 0
    assert '"title": "Message"' in capsys.readouterr().out


def test_a_run_with_the_planner_served_by_an_openai_endpoint(tmp_path):
    """SFT, RL and evaluations go through while a frozen role lives behind HTTP; only it is remote."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from openai_server import OpenAIServer

    with OpenAIServer(reply=lambda p: "<plan>compute the result and return it</plan>") as srv:
        cfg = load_config(
            overrides=SMALL
            + [
                f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
                "policies.api.kind=openai",
                f"policies.api.base_url={srv.base_url}",
                "policies.api.model=scripted",
                "workflow.roles.planner.policy=api",
                "workflow.roles.planner.trainable=false",
                "workflow.roles.planner.adapter=false",
                "run.eval_each_phase=false",
            ]
        )
        summary = Trainer(cfg, tmp_path / "run").fit()
        n_requests = len(srv.requests)
    assert [e["label"] for e in summary["evals"]] == ["after_sft", "after_rl"]
    # every episode asked the planner: 2 evaluations of 3 tasks x 2 samples, 2 iterations of 2 x 2 teams
    assert n_requests >= 2 * 3 + 2 * 2 * 2
    assert not (tmp_path / "run" / "checkpoint" / "adapters" / "planner").exists()


def test_evaluations_repeat_exactly_however_the_engine_batches(small_cfg, tmp_path):
    trainer = Trainer(small_cfg, tmp_path / "run")
    trainer.sft_roles()

    def texts():
        trainer.evaluate("x", save_episodes=True)
        rows = (tmp_path / "run" / "episodes" / "eval_x.jsonl").read_text().splitlines()
        return [[t["text"] for t in json.loads(row)["turns"]] for row in rows]

    first = texts()
    trainer.engine.max_batch = 1  # one request per policy call: another batching, another interleaving
    assert texts() == first
    assert len({tuple(ep) for ep in first}) > 1  # the episodes were sampled, not all alike


def test_one_seed_gives_one_initialisation_whatever_the_global_generator(small_cfg, tmp_path):
    import torch

    torch.manual_seed(1)
    first = Trainer(small_cfg, tmp_path / "a").fingerprints()
    torch.manual_seed(2)
    second = Trainer(small_cfg, tmp_path / "b").fingerprints()
    other = load_config(
        overrides=[*SMALL, f"policies.default.embedded.cache_dir={tmp_path / 'cache'}", "run.seed=5"]
    )
    third = Trainer(other, tmp_path / "c").fingerprints()
    assert first == second
    assert first != third  # another run.seed, other adapters


def test_the_base_s_build_threads_are_in_its_key_unless_one_and_are_restored(tmp_path, monkeypatch):
    import torch

    from teamrl.trainer import build

    monkeypatch.setattr(
        build, "demonstrations", lambda cfg, n, seed: {r: [("p: 1", " 2")] * 4 for r in cfg.role_order()}
    )
    seen = []
    monkeypatch.setattr(
        build, "build_embedded_default", lambda *a, **k: seen.append(torch.get_num_threads()) or tmp_path
    )
    base = ["policies.default.embedded.steps=2", f"policies.default.embedded.cache_dir={tmp_path}"]

    def key(*sets: str):
        cfg = load_config(None, [*base, *sets])
        return build.embedded_checkpoint_path(cfg, cfg.policies["default"]).name

    # 1 is the default and stays out of the key (bases built before the setting keep theirs); others are in
    assert key() == key("policies.default.embedded.threads=1") != key("policies.default.embedded.threads=2")
    before = torch.get_num_threads()
    cfg = load_config(None, [*base, "policies.default.embedded.threads=2"])
    build.embedded_checkpoint(cfg, cfg.policies["default"], progress=False)
    assert seen == [2] and torch.get_num_threads() == before
