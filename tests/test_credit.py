"""Credit strategies: config, per-turn scores, MAPoRL and MARTI by hand, counterfactual replays."""

from __future__ import annotations

import asyncio

import pytest

from teamrl.config import ConfigError, load_config
from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team
from teamrl.protocol import Episode, Message, Turn
from teamrl.rewards.counterfactual import ReplayTeam, counterfactual_credit, schedule_replays
from teamrl.rewards.credit import (
    ScoredTurn,
    apply_credit,
    assign_hybrid_rewards,
    maporl_turn_credit,
    marti_turn_credit,
    scored_turns,
)


def test_default_credit_is_hybrid():
    r = load_config().reward
    assert r.credit == "hybrid" and r.counterfactual_baseline == "reference"


@pytest.mark.parametrize(
    "override,needle",
    [
        ("reward.credit=coma", "reward.credit: Input should be 'shared', 'hybrid', 'counterfactual'"),
        ("reward.maporl.gamma=1.5", "reward.maporl.gamma: Input should be less than or equal to 1"),
        ("reward.maporl.beta_persuade=.inf", "reward.maporl.beta_persuade: Input should be a finite number"),
        ("reward.marti.mode=delta", "reward.marti.mode: Input should be 'quality' or 'margin'"),
        ("reward.marti.alpha=-1", "reward.marti.alpha: Input should be greater than or equal to 0"),
        ("reward.counterfactual_baseline=random", "Input should be 'reference' or 'empty'"),
        ("reward.counterfactual_budget=-1", "reward.counterfactual_budget: Input should be greater"),
        ("reward.maporl.gama=0.5", "reward.maporl.gama: unknown key; did you mean 'gamma'?"),
    ],
)
def test_bad_credit_settings_name_the_key_and_the_fix(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[override])
    assert needle in str(err.value)


def test_a_counterfactual_budget_below_one_group_is_refused():
    with pytest.raises(
        ConfigError, match=r"counterfactual_budget=4 is below algorithm.group_size=8.*raise it"
    ):
        load_config(overrides=["reward.credit=counterfactual", "reward.counterfactual_budget=4"])
    # without counterfactual credit the budget is read by nothing: refused, with the reason
    with pytest.raises(
        ConfigError, match=r"reward.counterfactual_budget: applies to the counterfactual reward"
    ):
        load_config(overrides=["reward.counterfactual_budget=4"])


# -- a pipeline episode, verified by hand -----------------------------------------------------------


def turn(role: str, kind: str, content: str, verdict: str | None = None, error: str | None = None) -> Turn:
    message = None if error else Message(role=role, kind=kind, content=content, verdict=verdict)
    return Turn(role=role, prompt=f"{role} prompt", text=content, message=message, error=error)


def pipeline_episode(plan_error: bool = False) -> Episode:
    """planner, coder (fails), reviewer (revise: right), coder (passes), reviewer (approve: right), tester."""
    ep = Episode(
        task_id="t",
        turns=[
            turn("planner", "plan", "multiply x by 3", error="bad tags" if plan_error else None),
            turn("coder", "code", "return x + 3"),
            turn("reviewer", "review", "wrong", verdict="revise"),
            turn("coder", "code", "return x * 3"),
            turn("reviewer", "review", "", verdict="approve"),
            turn("tester", "tests", "assert f(1) == 3"),
        ],
        outcome=1.0,
    )
    ep.verifier = {
        "code_pass": [0.0, 1.0],
        "code_turns": [1, 3],
        "reviews": [[2, 0], [4, 1]],
        "plan": "multiply x by 3",
        "plan_keys": ["multiply", "3"],
        "tests_on_reference": [True],
        "tests_on_buggy": [False],
        "solved": True,
    }
    return ep


def test_scored_turns_of_a_pipeline_episode():
    roles = load_config().workflow.roles
    got = scored_turns(pipeline_episode(), roles)
    assert [(t.role, t.step, t.score) for t in got] == [
        ("planner", 0, 1.0),  # both plan keys named
        ("coder", 1, 0.0),  # version 0 passes no hidden test
        ("reviewer", 2, 1.0),  # revise on failing code: right
        ("coder", 3, 1.0),
        ("reviewer", 4, 1.0),  # approve on passing code: right
        ("tester", 5, 1.0),  # sound and catches the buggy variant
    ]


def test_scored_turns_of_a_debate_episode_and_an_unknown_workflow():
    ep = Episode(task_id="d", turns=[Turn(role=r, round=k, prompt="", text="") for k in (0, 1) for r in "ab"])
    ep.turns.append(Turn(role="judge", round=2, prompt="", text=""))
    ep.verifier = {"debaters": ["a", "b"], "correct": [[False, True], [True, True]], "verdict_correct": True}
    got = [(t.role, t.step, t.score) for t in scored_turns(ep)]
    assert got == [("a", 0, 0.0), ("b", 0, 1.0), ("a", 1, 1.0), ("b", 1, 1.0), ("judge", 2, 1.0)]
    with pytest.raises(ValueError, match="per-turn verifier scores"):
        scored_turns(Episode(task_id="x", turns=ep.turns))


def test_shared_gives_every_role_the_outcome_and_hybrid_changes_nothing():
    cfg = load_config()
    ep = pipeline_episode(plan_error=True)
    ep.outcome = 0.75
    assign_hybrid_rewards(ep, cfg.workflow.roles, cfg.reward.alpha, cfg.reward.format_penalty)
    hybrid = dict(ep.rewards)
    apply_credit(ep, cfg.reward, cfg.workflow.roles)
    assert ep.rewards == hybrid
    apply_credit(ep, load_config(overrides=["reward.credit=shared"]).reward, cfg.workflow.roles)
    assert ep.rewards == {"planner": 0.75, "coder": 0.75, "reviewer": 0.75, "tester": 0.75}


def test_role_alpha_overrides_alpha_for_the_roles_it_names():
    cfg = load_config(overrides=["reward.role_alpha={reviewer: 1.0, planner: 0.0}"])
    ep = pipeline_episode()
    ep.outcome = 0.75
    assign_hybrid_rewards(ep, cfg.workflow.roles, cfg.reward.alpha, 0.0, cfg.reward.role_alpha)
    p = ep.process
    assert ep.rewards["reviewer"] == pytest.approx(0.75)  # the outcome alone
    assert ep.rewards["planner"] == pytest.approx(p["planner"])  # its process score alone
    assert ep.rewards["coder"] == pytest.approx(0.6 * 0.75 + 0.4 * p["coder"])  # reward.alpha
    with pytest.raises(ConfigError, match="reward.role_alpha names 'judge'"):
        load_config(overrides=["reward.role_alpha={judge: 1.0}"])
    with pytest.raises(ConfigError, match="role_alpha"):
        load_config(overrides=["reward.role_alpha={coder: 1.5}"])


# -- MAPoRL by hand ---------------------------------------------------------------------------------

INCENTIVES = {"alpha_follow": 0.1, "alpha_independent": 0.2, "beta_persuade": 0.3, "beta_oppose": 0.4}


def debate(a: tuple[float, float], b: tuple[float, float]) -> list[ScoredTurn]:
    """Two debaters a, b over two rounds (a round is a step)."""
    return [
        ScoredTurn("a", 0, a[0]),
        ScoredTurn("b", 0, b[0]),
        ScoredTurn("a", 1, a[1]),
        ScoredTurn("b", 1, b[1]),
    ]


def test_maporl_influence_aware_reward_without_incentives():
    # gamma 0.5; team means m(0) = (0 + 1) / 2 = 0.5, m(1) = 1.
    # a at round 0: (0 + 0.5 * 1) / (1 + 0.5) = 1/3; b at round 0: (1 + 0.5) / 1.5 = 1;
    # the last round has no future: its own score.
    got = maporl_turn_credit(debate((0, 1), (1, 1)), gamma=0.5)
    assert got == pytest.approx([1 / 3, 1.0, 1.0, 1.0])
    # gamma 1: every later step weighs as much as the turn itself
    got = maporl_turn_credit(debate((0, 1), (0, 0)), gamma=1.0)
    assert got == pytest.approx([(0 + 0.5) / 2, (0 + 0.5) / 2, 1.0, 0.0])


def test_maporl_correct_switch_following_a_right_teammate_and_persuading_it():
    got = maporl_turn_credit(debate((0, 1), (1, 1)), gamma=0.5, **INCENTIVES)
    # a: wrong -> right while b (what a saw) was right: a correct switch to the others' side, +alpha_follow.
    # b at round 0 was right and a moved wrong -> right after it: b persuaded a, +beta_persuade.
    assert got == pytest.approx([1 / 3, 1.0 + 0.3, 1.0 + 0.1, 1.0])


def test_maporl_incorrect_switch_and_being_followed_into_an_error():
    got = maporl_turn_credit(debate((1, 0), (0, 0)), gamma=0.0, **INCENTIVES)
    # a: right -> wrong while b was wrong: persuaded into an error, -alpha_follow.
    # b was wrong and a moved right -> wrong after it: b led a astray, -beta_persuade.
    assert got == pytest.approx([1.0, -0.3, -0.1, 0.0])


def test_maporl_independent_switch_and_others_moving_away():
    got = maporl_turn_credit(debate((0, 1), (0, 0)), gamma=0.0, **INCENTIVES)
    # a: wrong -> right while b was wrong: a correct switch on its own, +alpha_independent.
    # b was wrong, a moved wrong -> right, away from b's side: +beta_oppose.
    assert got == pytest.approx([0.0, 0.4, 1.2, 0.0])
    # a role alone: +/- alpha_independent for its switches, no persuasion
    alone = [ScoredTurn("c", 0, 1.0), ScoredTurn("c", 1, 0.0), ScoredTurn("c", 2, 1.0)]
    assert maporl_turn_credit(alone, gamma=0.0, **INCENTIVES) == pytest.approx([1.0, -0.2, 1.2])


def test_maporl_role_credit_on_a_pipeline_episode():
    cfg = load_config(
        overrides=["reward.credit=maporl", "reward.maporl.gamma=0", "reward.maporl.alpha_follow=0.5"]
    )
    ep = pipeline_episode()
    apply_credit(ep, cfg.reward, cfg.workflow.roles)
    # gamma 0: each turn its own score. The coder's revision (0 -> 1) follows the others it saw
    # (planner 1, reviewer 1: right): +0.5. Scores 1, 0, 1, 1, 1, 1.
    assert ep.rewards == pytest.approx(
        {"planner": 1.0, "coder": (0.0 + 1.5) / 2, "reviewer": 1.0, "tester": 1.0}
    )


# -- MARTI by hand ----------------------------------------------------------------------------------


def test_marti_quality_on_a_pipeline_episode_with_the_format_penalty():
    cfg = load_config(overrides=["reward.credit=marti", "reward.format_penalty=0.5"])
    ep = pipeline_episode(plan_error=True)
    roles = cfg.workflow.roles
    apply_credit(ep, cfg.reward, roles)
    # scores 1, 0, 1, 1, 1, 1; Q = mean of all earlier turns; r' = r + 0.5 (Q r - (1 - Q)(1 - r)):
    # planner 1 (first turn); coder: Q=1, r=0 -> 0; reviewer: Q=1/2 -> 1.25; coder: Q=2/3 -> 4/3;
    # reviewer: Q=3/4 -> 1.375; tester: Q=4/5 -> 1.4. The planner's one turn is malformed: -0.5.
    assert ep.rewards == pytest.approx(
        {"planner": 1.0 - 0.5, "coder": (0 + 4 / 3) / 2, "reviewer": (1.25 + 1.375) / 2, "tester": 1.4}
    )


def test_marti_margin_own_history_and_outcome_bonus():
    turns = [
        ScoredTurn("p", 0, 1.0),
        ScoredTurn("c", 1, 0.0),
        ScoredTurn("c", 2, 1.0),
        ScoredTurn("p", 3, 0.5),
    ]
    # team history, margin: r + 0.5 (r - Q): 1; 0 + 0.5 (0 - 1) = -0.5; 1 + 0.5 (1 - 1/2) = 1.25;
    # 0.5 + 0.5 (0.5 - 2/3) = 5/12
    assert marti_turn_credit(turns, 0.0, mode="margin", alpha=0.5) == pytest.approx([1.0, -0.5, 1.25, 5 / 12])
    # own history: c's second turn sees Q = 0 (its own first), p's second Q = 1; + 0.5 * R (R = 1)
    got = marti_turn_credit(turns, 1.0, mode="margin", alpha=0.5, outcome_bonus=0.5, history="own")
    assert got == pytest.approx([1.5, 0.5, 1.5 + 0.5, 0.5 + 0.5 * (0.5 - 1) + 0.5])
    # quality punishes a wrong turn after a bad history: Q = 0, r = 0 -> 0 + 0.5 (0 - 1) = -0.5
    bad = [ScoredTurn("a", 0, 0.0), ScoredTurn("b", 1, 0.0)]
    assert marti_turn_credit(bad, 0.0, mode="quality", alpha=0.5) == pytest.approx([0.0, -0.5])


# -- counterfactual replays -------------------------------------------------------------------------


async def toy_workflow(team: Team, task_id: str, group: int) -> Episode:
    """a speaks, b reacts to a, c reacts to b; the team wins if c says ok."""
    ep = Episode(task_id=task_id, group=group)
    prompt = "task"
    for role in ("a", "b", "c"):
        t = await team.act(role, prompt, "text")
        ep.turns.append(t)
        prompt = f"{role} said {t.text}"
    ep.outcome = float(ep.turns[-1].text == "ok")
    return ep


def scripted_team(calls: list[str]) -> Team:
    def seat(role: str, reply) -> Seat:
        def script(call):
            calls.append(role)
            return reply(call.prompt)

        return Seat(script=script)

    return Team(
        {
            "a": seat("a", lambda p: "x"),
            "b": seat("b", lambda p: "good" if p == "a said x" else "bad"),
            "c": seat("c", lambda p: "ok" if p == "b said good" else "no"),
        }
    )


def play(team: Team, episodes: list[tuple[str, int]]) -> list[Episode]:
    return Engine({}).run([lambda t=t, g=g: toy_workflow(team, t, g) for t, g in episodes])


def test_replay_keeps_the_turns_before_the_role_and_swaps_the_role_for_its_baseline():
    calls: list[str] = []
    team = scripted_team(calls)
    (original,) = play(team, [("t", 0)])
    assert original.outcome == 1.0 and calls == ["a", "b", "c"]
    calls.clear()
    rival = Seat(script=lambda call: "bad")  # b's baseline says "bad" whatever it sees
    replay = ReplayTeam(team, original, "b", rival)
    again = asyncio.run(toy_workflow(replay, "t", 0))
    assert calls == ["c"]  # a's turn is the recorded one; b is the baseline; c speaks again, live
    assert [t.text for t in again.turns] == ["x", "bad", "no"] and again.outcome == 0.0
    empty = asyncio.run(toy_workflow(ReplayTeam(team, original, "a", None), "t", 0))
    assert [t.text for t in empty.turns] == ["", "bad", "no"]


def test_counterfactual_credit_is_the_outcome_minus_the_replayed_outcome_within_the_budget():
    team = scripted_team([])
    episodes = play(team, [("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)])
    for ep in episodes:
        ep.rewards = {"a": 0.25, "b": 0.25, "c": 0.25}  # the hybrid rewards a fallback keeps

    async def replay(replay_team: Team, ep: Episode) -> Episode:
        return await toy_workflow(replay_team, ep.task_id, ep.group)

    # a's baseline says "y": b and c then fail, so a gets 1 - 0; b's baseline says what b says: 1 - 1.
    same_as_b = Seat(script=lambda call: "good" if call.prompt == "a said x" else "bad")
    baselines = {"a": Seat(script=lambda call: "y"), "b": same_as_b}
    stats = counterfactual_credit(
        episodes, ["a", "b"], team, Engine({}), replay, baseline=baselines.get, budget=6
    )
    # whole groups only: a's two groups (4 replays) fit, b's first group (2 more) fits, its second not
    assert (stats.rollouts, stats.fallbacks) == (6, 2)
    assert [ep.rewards["a"] for ep in episodes] == [1.0, 1.0, 1.0, 1.0]
    assert [ep.rewards["b"] for ep in episodes] == [0.0, 0.0, 0.25, 0.25]
    assert all(ep.rewards["c"] == 0.25 for ep in episodes)  # not credited: keeps its reward
    assert episodes[0].verifier["counterfactual_outcome"] == {"a": 0.0, "b": 1.0}
    m = stats.metrics()
    assert m["credit/counterfactual_rollouts"] == 6 and m["credit/counterfactual_fallbacks"] == 2
    assert m["credit/a/counterfactual"] == 1.0 and m["credit/b/replay_outcome"] == 1.0


def test_schedule_skips_roles_that_did_not_speak():
    eps = [Episode(task_id="t", turns=[Turn(role="a", prompt="", text="")]) for _ in range(2)]
    assert schedule_replays(eps, ["a", "b"], budget=10) == ([(0, "a"), (1, "a")], 0)
    assert schedule_replays(eps, ["a"], budget=1) == ([], 2)
