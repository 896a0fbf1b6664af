"""run.async_rollouts: rollouts played ahead by a worker process while the driver updates, and the
truncated importance-sampling correction of the learner (decoupled PPO)."""

import json
import math

import pytest
import torch

from teamrl.algorithms import grpo_loss
from teamrl.config import load_config
from teamrl.recipes import Phase
from teamrl.report.figures import team_off_policy
from teamrl.report.load import load_run
from teamrl.trainer.learner import reference_logprobs
from teamrl.trainer.overlap import RolloutWorkerFailed, plan_iteration
from teamrl.trainer.trainer import Trainer
from tests.test_trainer import SMALL


# -- the loss ---------------------------------------------------------------------------------------
def test_importance_weights_scale_each_token_s_policy_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    old = logp.detach().clone()  # ratio 1: obj = A per token
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    w = torch.tensor([[0.5, 2.0], [1.5, 9.0]])  # the masked token's weight must not count
    out = grpo_loss(logp, old, adv, mask, is_weight=w)
    # -(0.5 * 1 + 2.0 * 1 + 1.5 * -2) / 3 tokens
    assert out.loss.item() == pytest.approx(-(0.5 + 2.0 - 3.0) / 3)
    out.loss.backward()
    # d/dlogp of -w * ratio * A at ratio 1 is -w * A / num_tokens
    assert logp.grad.flatten().tolist() == pytest.approx([-0.5 / 3, -2.0 / 3, 3.0 / 3, 0.0])
    plain = grpo_loss(logp.detach(), old, adv, mask)
    assert plain.loss.item() == pytest.approx(-(1 + 1 - 2) / 3)


def test_importance_weights_are_checked():
    logp, mask, adv = torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), torch.ones(1)
    with pytest.raises(ValueError, match="is_weight"):
        grpo_loss(logp, logp, adv, mask, is_weight=torch.ones(1, 3))
    with pytest.raises(ValueError, match=">= 0"):
        grpo_loss(logp, logp, adv, mask, is_weight=torch.tensor([[1.0, -0.1]]))


# -- the trainer --------------------------------------------------------------------------------------
def _cfg(tmp_path, *more):
    return load_config(
        overrides=SMALL
        + [f"policies.default.embedded.cache_dir={tmp_path / 'cache'}", "recipe.iterations_per_role=2", *more]
    )


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_worker_plays_what_the_driver_would_and_the_learner_corrects_for_staleness(tmp_path, monkeypatch):
    import teamrl.trainer.learner as learner_module

    scored = []
    score_turns = learner_module.score_turns

    def spy(cfg, policy, role, turns, adapter=None):
        scored.append(adapter)
        return score_turns(cfg, policy, role, turns, adapter)

    monkeypatch.setattr(learner_module, "score_turns", spy)
    trainer = Trainer(_cfg(tmp_path, "run.async_rollouts=1", "algorithm.is_cap=1.5"), tmp_path / "run")
    try:
        trainer.sft_roles()
        phase = Phase("test", ("coder",), 2)
        plan = plan_iteration(trainer.cfg, trainer.suite, phase, 0)
        trainer.ahead.submit(plan, version=0)
        played = trainer.ahead.take(plan, version=0)
        here = trainer.rollout(list(plan.tasks), plan.group_size, plan.share, seed_key=plan.seed_key)
        assert [[t.completion_ids for t in e.turns] for e in played.result.episodes] == [
            [t.completion_ids for t in e.turns] for e in here
        ]
        assert played.result.generated_tokens > 0 and played.result.play_s > 0
        # the KL reference's log-probs of the Coder's turns, computed by the worker, are the driver's
        mine = reference_logprobs(trainer.cfg, trainer.policy_of, here, ["coder"])
        theirs = played.result.ref_logprobs
        assert theirs.keys() == mine.keys() and len(mine) >= len(here)
        for key, values in mine.items():
            assert theirs[key] == pytest.approx(values, abs=1e-5)
        episodes = played.result.episodes
        assert all(not ep.rewards for ep in episodes)  # credit is the driver's to assign
        for ep in episodes:  # the two episodes of a task differ, so every turn has an advantage
            ep.rewards = {"coder": float(ep.group), "reviewer": 0.0}
        # sampled by the adapter being updated: the importance weights are 1 up to rounding
        scored.clear()
        fresh = trainer.update(episodes, ("coder",), theirs)
        # the learner scored the current adapter (pi_prox) only: the worker had scored the reference
        assert scored == [None]
        assert fresh["train/coder/behaviour_logprob_gap"] < 1e-4
        assert fresh["train/coder/is_weight"] == pytest.approx(1.0, abs=1e-4)
        assert fresh["train/coder/is_truncated"] == 0.0
        # the same episodes once more: the adapter moved since they were sampled
        stale = trainer.update(episodes, ("coder",))
        assert stale["train/coder/behaviour_logprob_gap"] > 1e-3
        assert stale["train/coder/is_weight_max"] > 1.0
        assert 0 < stale["train/coder/is_weight"] <= 1.5  # truncated at algorithm.is_cap
    finally:
        trainer.close()


@pytest.mark.parametrize(("k", "staleness"), [(1, [0, 1, 1, 1]), (2, [0, 1, 2, 2])])
def test_an_async_run_learns_from_k_updates_old_episodes_and_logs_it(tmp_path, k, staleness):
    run = tmp_path / "run"
    trainer = Trainer(_cfg(tmp_path, f"run.async_rollouts={k}"), run)
    try:
        summary = trainer.fit()
        process = trainer.ahead._process.process
    finally:
        trainer.close()
    assert process.poll() is not None  # the worker process is gone with the trainer
    rows = [r for r in _rows(run) if "phase" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # the first rollout is played before any update; the later ones (across the phase boundary too)
    # by the adapters of at most k updates before
    assert [r["train/staleness"] for r in rows] == staleness
    assert all(r["perf/rollout_play_s"] > 0 and r["perf/rollout_wait_s"] >= 0 for r in rows)
    assert [e["label"] for e in summary["evals"]] == ["after_sft", "after_round1_coder", "after_rl"]
    png = team_off_policy(load_run(run))
    assert png is not None and png.startswith(b"\x89PNG")


def test_a_stopped_async_run_resumes(tmp_path):
    run = tmp_path / "run"
    cfg = _cfg(tmp_path, "run.async_rollouts=2")
    trainer = Trainer(cfg, run)
    original = trainer.save_checkpoint
    calls = []

    def save_then_stop():
        original()
        calls.append(trainer.state.step)
        if trainer.state.step == 2:
            trainer.request_stop("test")

    trainer.save_checkpoint = save_then_stop
    with pytest.raises(Exception, match="stopped by test after step 2"):
        try:
            trainer.fit()
        finally:
            trainer.close()
    resumed = Trainer(cfg, run, resume=True)
    try:
        resumed.fit()
    finally:
        resumed.close()
    rows = [r for r in _rows(run) if "phase" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # after the resume the first rollout is played again from the restored adapters
    assert [r["train/staleness"] for r in rows] == [0, 1, 0, 1]


def test_a_dead_worker_is_a_clear_error(tmp_path):
    trainer = Trainer(_cfg(tmp_path, "run.async_rollouts=1"), tmp_path / "run")
    try:
        trainer.sft_roles()
        phase = Phase("test", ("coder",), 2)
        first = plan_iteration(trainer.cfg, trainer.suite, phase, 0)
        trainer.ahead.take(first, version=0)  # the worker is up
        trainer.ahead._process.process.kill()
        trainer.ahead._process.process.wait()
        second = plan_iteration(trainer.cfg, trainer.suite, phase, 1)
        with pytest.raises(RolloutWorkerFailed, match="died"):
            trainer.ahead.take(second, version=1)
    finally:
        trainer.close()


@pytest.mark.parametrize(
    ("more", "why"),
    [
        (["reward.credit=counterfactual"], "counterfactual credit"),
        (["run.backend=ray"], "Ray backend"),
        (["run.async_rollouts=9"], "less than or equal to 8"),
    ],
)
def test_settings_that_cannot_overlap_are_refused(tmp_path, more, why):
    from teamrl.config import ConfigError

    with pytest.raises((ConfigError, ValueError), match=why):
        load_config(overrides=SMALL + ["run.async_rollouts=1", *more])


def test_the_off_policy_chart_is_absent_for_a_synchronous_run(tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(_cfg(tmp_path, "recipe.iterations_per_role=1"), run)
    try:
        trainer.fit()
    finally:
        trainer.close()
    assert team_off_policy(load_run(run)) is None
    assert not any("train/staleness" in r for r in _rows(run))
    assert math.isfinite(_rows(run)[-1]["step"])
