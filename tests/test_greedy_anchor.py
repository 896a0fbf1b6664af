"""algorithm.greedy_episodes: of each task's training group, the first episodes decode the trained roles'
turns greedily (the group's greedy anchor), and the learner learns them from its own log-probs."""

import pytest

from teamrl.config import load_config
from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team, seeded
from teamrl.policies import GenerationRequest
from teamrl.policies.scripted import ScriptedPolicy
from teamrl.recipes import Phase
from teamrl.trainer.overlap import plan_iteration
from teamrl.trainer.trainer import Trainer
from tests.test_trainer import SMALL


def _temperature(req):
    return f"<plan>{req.prompt}@{req.temperature}</plan>"


def test_a_greedy_episode_decodes_only_the_trained_roles_turns_greedily():
    engine = Engine({"p": ScriptedPolicy(_temperature)})
    seats = {"planner": Seat(policy="p", temperature=0.7), "coder": Seat(policy="p", temperature=0.7)}
    team = Team(seats, engine)

    async def episode(g):
        plan = await team.act("planner", "task", "plan")
        code = await team.act("coder", f"code{g}", "plan")
        return plan, code

    def play():
        return engine.run([lambda g=g: seeded(episode(g), None, greedy=g == 0) for g in range(3)])

    team.share_turns({"planner"})
    team.train_turns({"coder"})
    out = play()
    codes = [c for _, c in out]
    assert [c.message.content for c in codes] == ["code0@0.0", "code1@0.7", "code2@0.7"]
    assert [c.greedy for c in codes] == [True, False, False]
    # the frozen, shared role is sampled as for every episode of the group
    assert [p.message.content for p, _ in out] == ["task@0.7"] * 3
    assert not any(p.greedy for p, _ in out)
    # outside a training rollout (evaluation, demonstrations) the flag changes nothing
    team.share_turns()
    team.train_turns()
    assert not any(c.greedy or p.greedy for p, c in play())
    assert [c.message.content for _, c in play()] == ["code0@0.7", "code1@0.7", "code2@0.7"]


def test_a_group_needs_a_sampled_episode_beside_its_anchors():
    with pytest.raises(ValueError, match="greedy_episodes"):
        load_config(overrides=["algorithm.group_size=4", "algorithm.greedy_episodes=4"])
    assert (
        load_config(
            overrides=["algorithm.group_size=4", "algorithm.greedy_episodes=3"]
        ).algorithm.greedy_episodes
        == 3
    )


def _anchored_rollout(tmp_path, *more):
    """A small trainer with a greedy anchor in groups of 3, its roles SFT'd, and one Coder rollout."""
    overrides = [
        f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
        "algorithm.group_size=3",
        "algorithm.greedy_episodes=1",
        *more,
    ]
    trainer = Trainer(load_config(overrides=SMALL + overrides), tmp_path / "run")
    try:
        trainer.sft_roles()
        plan = plan_iteration(trainer.cfg, trainer.suite, Phase("test", ("coder",), 1), 0)
        trainer.training_roles = ("coder",)
        episodes = trainer.rollout(list(plan.tasks), plan.group_size, plan.share, seed_key=plan.seed_key)
    except BaseException:
        trainer.close()
        raise
    return trainer, episodes


def test_the_anchor_is_played_greedily_and_learned_from_the_learner_s_log_probs(tmp_path, monkeypatch):
    import teamrl.trainer.learner as learner_module

    scored = []
    score_turns = learner_module.score_turns

    def spy(cfg, policy, role, turns, adapter=None):
        out = score_turns(cfg, policy, role, turns, adapter)
        if adapter is None:
            scored.append((turns, out))
        return out

    monkeypatch.setattr(learner_module, "score_turns", spy)
    trainer, episodes = _anchored_rollout(tmp_path)
    try:
        coder = [[t for t in e.turns if t.role == "coder" and t.completion_ids] for e in episodes]
        assert all(coder)
        for e, turns in zip(episodes, coder, strict=True):
            assert all(t.greedy == (e.group == 0) for t in turns)
            assert not any(t.greedy for t in e.turns if t.role != "coder")
        # the anchor's recorded log-probs are greedy decoding's (temperature 1), each token the argmax:
        # log p <= 0 and the same prompt decoded again greedily gives the same tokens
        anchor = coder[0][0]
        policy = trainer.policy_of("coder")
        again = policy.generate([GenerationRequest(anchor.prompt, "coder", len(anchor.completion_ids), 0.0)])[
            0
        ]
        assert again.completion_ids[: len(anchor.completion_ids)] == anchor.completion_ids
        for ep in episodes:  # every turn has an advantage
            ep.rewards = {role: float(ep.group) for role in trainer.team.roles}
        scored.clear()
        stats = trainer.update(episodes, ("coder",))
        greedy_turns = sum(len(t) for e, t in zip(episodes, coder, strict=True) if e.group == 0)
        assert stats["train/coder/greedy_turns"] == greedy_turns
        # the learner scored exactly the anchors' turns under the current adapter, at the role's temperature
        assert len(scored) == 1 and all(t.greedy for t in scored[0][0]) and len(scored[0][0]) == greedy_turns
        assert stats["train/coder/turns"] >= greedy_turns
    finally:
        trainer.close()


def test_with_off_policy_correction_the_anchor_has_weight_one(tmp_path):
    # async rollouts (or vLLM) correct every turn by pi_prox / pi_behaviour: an anchor's recorded
    # log-probs are greedy decoding's, so it must count as on-policy, not as a large or tiny weight
    trainer, episodes = _anchored_rollout(tmp_path, "run.async_rollouts=1")
    try:
        assert any(t.greedy for e in episodes for t in e.turns)
        for ep in episodes:
            ep.rewards = {role: float(ep.group) for role in trainer.team.roles}
        stats = trainer.update(episodes, ("coder",))
        assert stats["train/coder/greedy_turns"] > 0
        # sampled by the adapter being updated and the anchors on-policy: every weight is 1 up to rounding
        assert stats["train/coder/behaviour_logprob_gap"] < 1e-4
        assert stats["train/coder/is_weight"] == pytest.approx(1.0, abs=1e-4)
    finally:
        trainer.close()
