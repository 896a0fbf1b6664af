"""algorithm.tree: tree-shaped groups (Tree-GRPO). The sampled episodes of a task share their trained role's
turns down a tree: a shared turn is generated once and continued by several episodes; below a trained
turn the frozen teammates are sampled per episode."""

import pytest

from teamrl.config import load_config
from teamrl.engine.engine import Engine
from teamrl.engine.team import EpisodeSeeds, Seat, Team, seeded
from teamrl.policies.scripted import ScriptedPolicy
from teamrl.recipes import Phase
from teamrl.trainer.overlap import plan_iteration
from teamrl.trainer.trainer import Trainer
from tests.test_trainer import SMALL


def test_branches_split_the_leaves_evenly_level_by_level():
    def path(leaf, leaves, tree, depth):
        seeds = EpisodeSeeds(0, 0, tree=tree, leaf=leaf, leaves=leaves)
        return [seeds.branch() for _ in range(depth)]

    # 7 sampled episodes (a group of 8 with one greedy anchor), 4 branches: sizes 2, 2, 2, 1
    assert [path(j, 7, (4,), 1)[0] for j in range(7)] == [(0,), (0,), (1,), (1,), (2,), (2,), (3,)]
    # two levels: 2 x 2 over 8 leaves; below the tree every turn is the episode's own (None)
    assert path(5, 8, (2, 2), 3) == [(1,), (1, 2), None]
    assert [path(j, 8, (2, 2), 2)[1] for j in range(8)] == [
        (0, 0),
        (0, 0),
        (0, 1),
        (0, 1),
        (1, 2),
        (1, 2),
        (1, 3),
        (1, 3),
    ]
    seeds = EpisodeSeeds(0, 0, tree=(2,), leaf=0, leaves=4)
    assert not seeds.branched
    seeds.branch()
    assert seeds.branched and seeds.depth == 1

    def siblings(leaves, tree, depth):
        out = []
        for j in range(leaves):
            seeds = EpisodeSeeds(0, 0, tree=tree, leaf=j, leaves=leaves)
            for _ in range(depth):
                seeds.branch()
            out.append(seeds.sibling())
        return out

    # an episode's place among those that share its deepest shared turn
    assert siblings(7, (4,), 1) == [0, 1, 0, 1, 0, 1, 0]
    assert siblings(8, (2, 2), 1) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert siblings(8, (2, 2), 2) == siblings(8, (2, 2), 3) == [0, 1] * 4


def _seeded_text(req):
    return f"<plan>{req.prompt}|{req.seed}</plan>"


def _play(team, engine, tree, leaves=4):
    async def episode():
        plan = await team.act("planner", "task", "plan")  # frozen, upstream of every trained turn
        code = await team.act("coder", plan.message.content, "plan")  # trained
        review = await team.act("reviewer", code.message.content, "plan")  # frozen, below a trained turn
        fix = await team.act("coder", review.message.content, "plan")  # trained, second level
        tests = await team.act("tester", "brief", "plan")  # frozen, its prompt blind to the trained turns
        return plan, code, review, fix, tests

    def start(j):
        seeds = EpisodeSeeds(7, 100 + j, tree=tree, leaf=j, leaves=leaves)
        return seeded(episode(), seeds)

    return engine.run([lambda j=j: start(j) for j in range(leaves)])


def test_episodes_share_the_trained_turn_of_their_branch_and_sample_their_own_teammates_below_it():
    calls = []
    engine = Engine({"p": ScriptedPolicy(lambda req: calls.append(req.prompt) or _seeded_text(req))})
    seats = {r: Seat(policy="p", temperature=0.7) for r in ("planner", "coder", "reviewer", "tester")}
    team = Team(seats, engine)
    team.share_turns({"planner", "reviewer", "tester"})
    team.train_turns({"coder"})
    out = _play(team, engine, (2,))
    plan, code, review, fix, tests = ([e[k] for e in out] for k in range(5))
    text = [[t.message.content for t in turns] for turns in (plan, code, review, fix, tests)]
    # the frozen upstream turn: one sample for the group
    assert len(set(text[0])) == 1 and [t.reused for t in plan] == [False, True, True, True]
    # the trained turn: one sample per branch (episodes 0-1 and 2-3), generated once each
    assert text[1][0] == text[1][1] != text[1][2] == text[1][3]
    assert [t.reused for t in code] == [False, True, False, True]
    # below it the two episodes of a branch see different reviews of the same code
    assert len(set(text[2])) == 4 and not any(t.reused for t in review)
    # below the tree (one level) the trained role's turns are each episode's own
    assert len(set(text[3])) == 4 and not any(t.reused for t in fix)
    # a teammate blind to the trained turns: the k-th episode of every branch gets the same sample
    assert text[4][0] == text[4][2] != text[4][1] == text[4][3]
    assert [t.reused for t in tests] == [False, False, True, True]
    assert len(calls) == 1 + 2 + 4 + 4 + 2
    # seeded: the same rollout again plays the same turns
    team.share_turns({"planner", "reviewer", "tester"})
    again = _play(team, engine, (2,))
    assert [[t.text for t in e] for e in again] == [[t.text for t in e] for e in out]


def test_without_a_trained_role_or_a_tree_nothing_is_shared_beyond_share_turns():
    engine = Engine({"p": ScriptedPolicy(_seeded_text)})
    team = Team(
        {r: Seat(policy="p", temperature=0.7) for r in ("planner", "coder", "reviewer", "tester")}, engine
    )
    team.share_turns({"planner", "reviewer", "tester"})
    # evaluation and demonstrations train no role: the tree changes nothing (the reviewer, shown the same
    # code, is shared as without a tree)
    out = _play(team, engine, (2,))
    assert [e[1].reused for e in out] == [False] * 4
    plain = _play(team, engine, ())
    assert [[t.text for t in e] for e in out] == [[t.text for t in e] for e in plain]


def test_bad_trees_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="at least 2"):
        load_config(overrides=["algorithm.tree=[1]"])
    with pytest.raises(ValueError, match="below the sampled episodes"):
        load_config(overrides=["algorithm.group_size=8", "algorithm.greedy_episodes=1", "algorithm.tree=[7]"])
    with pytest.raises(ValueError, match="seeded_sampling"):
        load_config(overrides=["algorithm.tree=[2]", "run.seeded_sampling=false"])
    with pytest.raises(ValueError, match="choose one"):
        load_config("examples/test_driven.yaml", ["algorithm.tree=[2]", "workflow.turn_group.size=4"])
    assert load_config(overrides=["algorithm.tree=[4, 2]"]).algorithm.tree == [4, 2]


def test_a_tree_rollout_generates_a_shared_turn_once_and_learns_it_in_every_episode_below_it(tmp_path):
    overrides = [
        f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
        "algorithm.group_size=5",
        "algorithm.greedy_episodes=1",
        "algorithm.tree=[2]",
    ]
    trainer = Trainer(load_config(overrides=SMALL + overrides), tmp_path / "run")
    try:
        trainer.sft_roles()  # the roles' SFT snapshots: the KL reference of the update
        plan = plan_iteration(trainer.cfg, trainer.suite, Phase("test", ("coder",), 1), 0)
        trainer.training_roles = ("coder",)
        episodes = trainer.rollout(list(plan.tasks), plan.group_size, plan.share, seed_key=plan.seed_key)
        for task_id in {e.task_id for e in episodes}:
            group = sorted((e for e in episodes if e.task_id == task_id), key=lambda e: e.group)
            first = [next(t for t in e.turns if t.role == "coder") for e in group]
            # the greedy anchor is its own; the 4 sampled episodes share 2 first turns
            assert [t.reused for t in first] == [False, False, True, False, True]
            assert first[1].completion_ids == first[2].completion_ids
            assert first[3].completion_ids == first[4].completion_ids
            # a shared turn's tokens count once: in the episode that generated it
            assert first[2].completion_ids and group[2].num_generated_tokens == sum(
                len(t.completion_ids) for t in group[2].turns if t is not first[2] and not t.reused
            )
        for ep in episodes:  # rewards 0, 1, 4, 9, 16 in a group: no episode at its group's mean
            ep.rewards = {role: float(ep.group) ** 2 for role in trainer.team.roles}
        stats = trainer.update(episodes, ("coder",))
        # the learner trains every episode's coder turns, the shared copies included
        coder_turns = sum(1 for e in episodes for t in e.turns if t.role == "coder" and t.completion_ids)
        assert stats["train/coder/turns"] == coder_turns
    finally:
        trainer.close()
