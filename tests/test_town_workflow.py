"""LLM agents in the town (issue 20): the workflow's replies parsed strictly, the stated plan's coherence, the
memory stream's recall, each turn's reward by hand, rewards a reply cannot forge, the judge's calibration at
evaluation, config errors and the workflow protocol."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np
import pytest

from teamrl.engine.team import RoleCall, Seat, Team
from teamrl.protocol import Message, render_message
from teamrl.world.town import Action, Town
from teamrl.world.workflow import (
    Memory,
    Mind,
    TownConfig,
    TownSuite,
    TownTask,
    TownTasksConfig,
    TownWorkflow,
    expert_action,
    follows_plan,
    parse_action,
    parse_plan,
    town_prompt,
    view_of,
)

AGENTS = [f"agent_{i}" for i in range(4)]


def _reply(content: str) -> str:
    return render_message(Message(role="resident", kind="answer", content=content))


def _play(wf: TownWorkflow, script: Any, seed: int = 3) -> Any:
    team = Team({"resident": Seat(script=script)})
    return asyncio.run(wf.play(team, TownTask("town-x", seed)))


def test_actions_and_plans_parse_strictly() -> None:
    assert parse_action("move park", AGENTS) == Action("move", place="park")
    assert parse_action("  talk   agent_2 party ", AGENTS) == Action("talk", to="agent_2", topic="party")
    assert parse_action("use coffee", AGENTS) == Action("use", obj="coffee")
    assert parse_action("wait", AGENTS) == Action("wait")
    assert parse_action("use moon", AGENTS) == Action("use", obj="moon")  # parses; the world refuses it
    for bad in ("", "move park; use coffee", "wait\nmove park", "talk 2 party", "REWARD: 10", "x" * 500):
        assert parse_action(bad, AGENTS) is None, bad
    assert parse_plan("PLAN: market library park") == ["market", "library", "park"]
    for bad in (
        "PLAN:",
        "PLAN: moon",
        "PLAN: cafe cafe cafe cafe cafe",
        "plan: cafe",
        "PLAN: cafe\nPLAN: park",
    ):
        assert parse_plan(bad) is None, bad


def test_coherence_follows_the_stated_plan() -> None:
    mind = Mind(plan=["cafe", "park"])
    assert follows_plan(mind, "home", Action("move", place="cafe"))
    assert not follows_plan(mind, "home", Action("move", place="park"))  # skips the plan's next place
    assert not follows_plan(mind, "home", Action("wait"))  # idles away from it
    assert follows_plan(mind, "cafe", Action("use", obj="coffee"))  # acts at it
    assert not follows_plan(mind, "cafe", Action("move", place="cafe"))  # already there
    mind.plan_step = 2  # done: anything but leaving
    assert follows_plan(mind, "park", Action("wait")) and not follows_plan(
        mind, "park", Action("move", place="home")
    )
    assert not follows_plan(Mind(), "cafe", Action("wait"))  # no plan: never coherent


def test_recall_weighs_importance_by_recency() -> None:
    mind = Mind()
    mind.stream = [
        Memory(0, "party at the park", 3.0),
        Memory(5, "saw rain", 1.0),
        Memory(8, "took bread", 2.0),
    ]
    # at t=10, decay 0.9: 3*0.9^10 = 1.05, 1*0.9^5 = 0.59, 2*0.9^2 = 1.62
    assert [m.text for m in mind.recall(10, 2, 0.9)] == ["party at the park", "took bread"]
    assert [m.text for m in mind.recall(10, 2, 0.5)] == ["saw rain", "took bread"]  # 0.003, 0.031, 0.5
    assert mind.recall(10, 0, 0.9) == []


def test_prompts_show_what_the_agent_can_know_only() -> None:
    town = Town(6, 12, seed=5)
    cfg = TownConfig()
    for agent in town.agents[1:]:
        view = view_of(town, agent, Mind(), cfg)
        prompt = town_prompt(view, "act")
        assert "party place unknown" in prompt and "at the park" not in prompt.split("\n")[1]
        others = [o for o in town.agents if o != agent]
        assert not any(
            town.state[o].private in prompt and o in prompt for o in others if o not in view["here"]
        )
    view = view_of(town, "agent_0", Mind(), cfg)
    assert "party at the park" in town_prompt(view, "plan")
    assert town_prompt(view, "act", "villager").startswith("### villager: agent_0 t=0/12")


def test_each_turn_is_paid_its_agents_return_from_its_tick_by_hand() -> None:
    """Two agents, two ticks, no reflections after tick 0: the rewards computed by hand from the rules."""
    cfg = TownConfig(
        agents=2, horizon=2, reflect_every=0, weights={"goal": 1, "social": 0.5, "coherence": 0.25}
    )
    cfg.second_judge = None
    wf = TownWorkflow(cfg)
    town = Town(2, 2, seed=11)
    a0, a1 = town.agents
    s0 = town.state[a0]
    obj = s0.private
    place = {"coffee": "cafe", "bread": "market"}[obj]

    def script(call: RoleCall) -> str:
        agent, t = call.context["view"]["agent"], call.context["view"]["t"]
        if call.context["kind"] == "plan":
            return _reply(f"PLAN: {place}" if agent == a0 else "gibberish")
        if agent == a0:
            return _reply(f"move {place}" if t == 0 else f"use {obj}")
        return _reply("wait")

    ep = _play(wf, script, seed=11)
    assert s0.place != place  # (the seed puts agent_0 elsewhere: its first move is to its object)
    # agent_0: t=0 moves to its plan's place (coherent 0.25); t=1 uses its object (goal 1 + coherent 0.25)
    # agent_1: a malformed plan (no plan: never coherent), waits twice: 0 every tick
    plan0, plan1, act00, act10, act01, act11 = range(6)
    assert ep.attempt_rewards[plan0] == pytest.approx(1.5)
    assert ep.attempt_rewards[act00] == pytest.approx(1.5)
    assert ep.attempt_rewards[act01] == pytest.approx(1.25)
    assert ep.attempt_rewards[plan1] == pytest.approx(-cfg.invalid_penalty)  # malformed plan
    assert ep.attempt_rewards[act10] == ep.attempt_rewards[act11] == 0.0
    assert ep.attempt_groups[act01] == f"{a0} act t=1" and ep.attempt_groups[plan1] == f"{a1} plan t=0"
    assert ep.verifier["private_achieved"] == 0.5 and ep.verifier["malformed"] == pytest.approx(1 / 6)


def _garbage(call: RoleCall) -> str:
    rng = random.Random(call.prompt)
    return rng.choice(
        [
            _reply("REWARD: 100 goal achieved"),
            _reply("PLAN: park\nuse book"),
            "<answer>talk agent_0 party</answer><answer>use book</answer>",
            _reply("use book"),
            _reply("talk agent_99 party"),
            "x" * 300,
            _reply("move moon"),
        ]
    )


def test_replies_cannot_forge_rewards() -> None:
    """Garbage, claims of success and impossible actions earn no goal: the rewards come from the world."""
    wf = TownWorkflow(TownConfig(weights={"goal": 1, "social": 0.1, "coherence": 0.05, "plausibility": 0.5}))
    for seed in range(4):
        ep = _play(wf, _garbage, seed=seed)
        assert ep.verifier["shared_achieved"] == 0 and ep.verifier["private_achieved"] == 0
        assert ep.verifier["malformed"] > 0.3
        assert ep.outcome <= 1 / 6  # at most the book (one claimant, if it starts in the library)
        assert max(ep.attempt_rewards.values()) <= 1.0 + 0.5 + 0.05 * 12
        assert len(ep.turns) == 6 * 14 and all(t.role == "resident" for t in ep.turns)


def test_the_expert_lives_a_sensible_day_and_teaches_it() -> None:
    wf = TownWorkflow(TownConfig())
    experts = wf.experts(random.Random(0))
    suite = TownSuite(TownTasksConfig())
    eps = [_play(wf, experts["resident"], seed=t.seed) for t in suite.fixed_set("heldout", 8)]
    private = np.mean([e.verifier["private_achieved"] for e in eps])
    assert private == 1.0 and np.mean([e.verifier["solved"] for e in eps]) >= 0.25
    assert all(e.verifier["malformed"] == 0 for e in eps)
    assert np.mean([e.verifier["plausibility"] for e in eps]) > 0.7
    # a view the expert plays from: it tells whom it does not know to know, once it knows
    view = {
        "agent": "agent_0", "t": 3, "horizon": 12, "place": "cafe", "here": ["agent_1", "agent_2"],
        "knowers": ["agent_1"], "private": "coffee", "private_done": True, "wants_book": False,
        "book_done": False, "book_free": True, "knows_party": True, "shared_done": False, "plan": [],
        "memory": [],
    }  # fmt: skip
    assert expert_action(view, random.Random(0)) == Action("talk", to="agent_2", topic="party")


def test_splits_never_share_a_town_and_tasks_are_stable() -> None:
    suite = TownSuite(TownTasksConfig(heldout_size=8))
    train = {t.seed for t in suite.sample("train", 200, random.Random(0))}
    held = {t.seed for t in suite.fixed_set("heldout", 200)}
    assert not train & held
    assert suite.fixed_set("heldout", 5) == suite.fixed_set("heldout", 5)
    with pytest.raises(ValueError, match="split"):
        suite.sample("test", 1, random.Random(0))


def test_evaluation_reports_the_judges_calibration_and_noise() -> None:
    wf = TownWorkflow(TownConfig())
    experts = wf.experts(random.Random(0))
    eps = [_play(wf, experts["resident"], seed=s) for s in range(3)] + [_play(wf, _garbage, seed=9)]
    out, saved = wf.evaluate(None, [], eps, 1)  # type: ignore[arg-type]
    assert out["eval/judge/auc"] == 1.0 and out["eval/judge/drifted"] == 0.0 and saved == {}
    assert 0 < out["eval/judge/noise"] < 0.3 and out["eval/judge/second_spearman"] > 0.5
    again, _ = wf.evaluate(None, [], eps, 1)  # type: ignore[arg-type]
    assert again["eval/judge/drift"] == 0.0 and len(wf.monitor.history) == 2


def test_a_judge_that_changes_between_evaluations_is_flagged() -> None:
    wf = TownWorkflow(TownConfig())
    wf.evaluate(None, [], [], 1)  # type: ignore[arg-type]
    wf.monitor.judge = lambda transcript: 0.9  # e.g. a model judge whose weights were changed
    out, _ = wf.evaluate(None, [], [], 1)  # type: ignore[arg-type]
    assert out["eval/judge/drifted"] == 1.0 and "drifted" in wf.monitor.message()


def test_config_errors_are_plain() -> None:
    with pytest.raises(ValueError, match="one role"):
        TownConfig(order=["resident", "mayor"], roles={"resident": {}, "mayor": {}})
    with pytest.raises(ValueError, match="rule, rule_noisy"):
        TownConfig(judge="/nonexistent/judge")


def test_the_workflow_keeps_the_protocol() -> None:
    from teamrl.testing import check_workflow

    check_workflow("town", TownConfig(agents=3, horizon=4))


def test_a_day_reads_back_from_its_transcript() -> None:
    """An LLM day is drawn from the transcript its episode keeps: the same rows as the town's own."""
    from teamrl.world.timeline import rows_from_transcript, timeline_rows
    from teamrl.world.town import scripted_action

    town = Town(5, 8, seed=2)
    rng = np.random.default_rng(0)
    while not town.over:
        actions = {a: scripted_action(town, a, rng) for a in town.agents}
        actions["agent_4"] = Action("use", obj="book")  # some actions that cannot happen
        town.step(actions)
    assert rows_from_transcript(town.transcript(), town.horizon) == timeline_rows(town)
    with pytest.raises(ValueError, match="not a line"):
        rows_from_transcript("hello\nworld")
