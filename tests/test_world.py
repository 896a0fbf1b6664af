"""The town (issue 20): PettingZoo's API tests, the world's rules by hand, the objectives and their weights,
and what the statistics of an episode count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test

from teamrl.world.town import (
    PARTY_PLACE,
    Action,
    Town,
    TownParallelEnv,
    action_table,
    aec_env,
    decode,
    encode,
    parallel_env,
    planned,
    scripted_action,
)

WAIT = Action("wait")


def test_the_pettingzoo_api_and_seed_tests_pass() -> None:
    parallel_api_test(parallel_env(), num_cycles=60)
    parallel_seed_test(parallel_env)
    api_test(aec_env(n_agents=3, horizon=6), num_cycles=40)


def _town(n: int = 4, horizon: int = 8) -> Town:
    town = Town(n, horizon, seed=0)
    for i, a in enumerate(town.agents):  # a known start: everyone home, agent 0 alone knows the party
        s = town.state[a]
        s.place, s.private, s.wants_book, s.knows_party = "home", "coffee", i in (1, 2), i == 0
    return town


def test_talk_needs_both_at_one_place_and_the_news_spreads_only_about_the_party() -> None:
    town = _town()
    a0, a1, a2, a3 = town.agents
    town.state[a3].place = "cafe"
    earned = town.step({a0: Action("talk", to=a3, topic="party"), a1: Action("talk", to=a0, topic="party")})
    assert earned[a0]["social"] == 0.0 and town.invalid[a0] == 1  # a3 is at the cafe
    assert earned[a1]["social"] == 1.0  # a1 told a0 something, though it knew nothing of the party
    assert not town.state[a1].knows_party and town.state[a0].heard
    town.step({a0: Action("talk", to=a1, topic="weather")})
    assert not town.state[a1].knows_party  # small talk carries no news
    town.step({a0: Action("talk", to=a1, topic="party")})
    assert town.state[a1].knows_party
    earned = town.step({a0: Action("talk", to=a1, topic="party")})
    assert earned[a0]["social"] == 0.0  # the same partner again: no new acquaintance


def test_private_goals_and_the_one_book_in_conflict() -> None:
    town = _town()
    a0, a1, a2, _ = town.agents
    earned = town.step({a0: Action("use", obj="coffee")})
    assert earned[a0]["goal"] == 0.0 and town.invalid[a0] == 1  # the coffee is at the cafe
    town.step(
        {
            a0: Action("move", place="cafe"),
            a1: Action("move", place="library"),
            a2: Action("move", place="library"),
        }
    )
    earned = town.step(
        {a0: Action("use", obj="coffee"), a1: Action("use", obj="book"), a2: Action("use", obj="book")}
    )
    assert earned[a0]["goal"] == 1.0 and town.state[a0].done["private"]
    assert town.book_holder == a1 and earned[a1]["goal"] == 1.0  # agent order breaks the tie
    assert earned[a2]["goal"] == 0.0 and town.invalid[a2] == 1 and not town.state[a2].done["book"]


def test_the_gathering_counts_in_the_second_half_of_the_day_for_those_who_knew() -> None:
    town = _town(n=4, horizon=8)
    a0, a1, a2, a3 = town.agents
    town.state[a1].knows_party = True
    move = {a: Action("move", place=PARTY_PLACE) for a in town.agents}
    town.step(move)  # tick 1: everyone at the park, too early
    assert not any(s.done["shared"] for s in town.state.values())
    for _ in range(3):
        town.step({})
    earned = town.step({})  # tick 5 > horizon // 2
    assert [town.state[a].done["shared"] for a in town.agents] == [True, True, False, False]
    assert earned[a0]["goal"] == 1.0 and earned[a2]["goal"] == 0.0


def test_the_reward_is_the_weighted_objectives_and_coherence_follows_the_plan() -> None:
    env = TownParallelEnv(n_agents=3, horizon=4, goal_weight=2.0, social_weight=0.5, coherence_weight=0.25)
    env.reset(seed=3)
    table = action_table(env.possible_agents)
    town = env.town
    plans = {a: sorted(planned(town, a), key=repr)[0] for a in env.agents}
    index = {a: encode(act, a, env.possible_agents, table) for a, act in plans.items()}
    for a, act in plans.items():  # encode is decode's inverse
        assert decode(index[a], a, env.possible_agents, table) == act
    _, rewards, _, _, infos = env.step(index)
    for a in env.possible_agents:
        o = infos[a]["objectives"]
        assert o["coherence"] == 1.0  # it followed its plan
        assert rewards[a] == pytest.approx(2.0 * o["goal"] + 0.5 * o["social"] + 0.25 * o["coherence"])


def test_scripted_agents_reach_their_goals_and_the_statistics_count_them() -> None:
    town = Town(6, 24, seed=1)
    rng = np.random.default_rng(0)
    while not town.over:
        town.step({a: scripted_action(town, a, rng) for a in town.agents})
    stats = town.stats()
    assert stats["private_achieved"] == 1.0 and stats["book_achieved"] == 0.5  # one book, two who want it
    assert stats["shared_achieved"] > 0.5 and stats["know_party"] > stats["shared_achieved"] - 1e-9
    # the statistics by hand from the talk log
    pairs: dict[tuple[str, str], int] = {}
    for _, f, t, _ in town.talks:
        pairs[(f, t)] = pairs.get((f, t), 0) + 1
    total = sum(pairs.values())
    assert stats["conversations_per_agent"] == pytest.approx(total / 6)
    assert stats["partners_per_agent"] == pytest.approx(len(pairs) / 6)
    assert stats["talk_entropy"] == pytest.approx(
        -sum(c / total * math.log(c / total) for c in pairs.values())
    )


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 agents"):
        Town(1)
    with pytest.raises(ValueError, match="at least 2 ticks"):
        Town(3, horizon=1)


def test_teamrl_marl_trains_on_the_town(tmp_path, capsys) -> None:  # noqa: ANN001
    from teamrl.cli import main

    args = [
        "marl",
        "train",
        "--algo",
        "mappo",
        "--env",
        "teamrl.world.town:parallel_env",
        "--out",
        str(tmp_path),
    ]
    args += ["--name", "r", "--episodes", "4", "--set", "total_env_steps=192", "--set", "num_envs=8"]
    args += ["--set", "env.n_agents=3", "--set", "env.social_weight=0.3"]
    assert main(args) == 0
    assert "mappo on teamrl.world.town:parallel_env" in capsys.readouterr().out
    # what the town reports about each finished day is logged as env/<key> curves, and drawn
    import json

    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    logged = {k for r in rows for k in r if k.startswith("env/")}
    assert {"env/conversations_per_agent", "env/shared_achieved", "env/plausibility"} <= logged
    assert all(0.0 <= r["env/shared_achieved"] <= 1.0 for r in rows if "env/shared_achieved" in r)
    assert (tmp_path / "r" / "env_curves.png").stat().st_size > 5_000
    # the final evaluation keeps its first day, and the report draws it as a timeline
    record = json.loads((tmp_path / "r" / "episode_record.json").read_text())
    assert record["kind"] == "town_day" and len(record["data"]["places"]) == record["data"]["horizon"]
    assert set(record["data"]["agents"]) == {"agent_0", "agent_1", "agent_2"}
    from teamrl.report.figures import marl_record
    from teamrl.report.load import load_run

    run = load_run(tmp_path / "r")
    png = marl_record(run)
    assert png is not None and png[:4] == b"\x89PNG" and len(png) > 5_000 and not run.warnings
    assert main(["report", str(tmp_path / "r")]) == 0
    assert "A played episode" in (tmp_path / "r" / "report" / "index.html").read_text()
    # a record of an unknown kind or with bad data is a warning, never a crash
    for bad in ({"kind": "dream", "data": {}}, {"kind": "town_day", "data": {"agents": 3}}):
        (tmp_path / "r" / "episode_record.json").write_text(json.dumps(bad))
        run = load_run(tmp_path / "r")
        assert marl_record(run) is None and "episode_record.json" in run.warnings[-1]


def test_the_judged_objective_is_paid_at_the_end_of_an_episode() -> None:
    env = TownParallelEnv(
        n_agents=3, horizon=2, goal_weight=0, social_weight=0, coherence_weight=0, plausibility_weight=2.0
    )
    env.reset(seed=1)
    _, rewards, _, _, _ = env.step(dict.fromkeys(env.agents, 0))
    assert set(rewards.values()) == {0.0}
    _, rewards, _, trunc, infos = env.step(dict.fromkeys(env.agents, 0))
    judged = infos["agent_0"]["episode"]["plausibility"]
    assert all(trunc.values()) and judged == env.judge(env.town.transcript()) > 0
    assert all(r == pytest.approx(2.0 * judged) for r in rewards.values())


def test_the_diversity_bonus_is_the_normalised_entropy_of_partners_and_topics() -> None:
    town = _town(n=3)
    a0, a1, a2 = town.agents
    assert town.talk_diversity(a0) == 0.0
    town.step({a0: Action("talk", to=a1, topic="party")})
    town.step({a0: Action("talk", to=a1, topic="party")})
    assert town.talk_diversity(a0) == 0.0  # one (partner, topic) twice: no spread
    town.step({a0: Action("talk", to=a2, topic="food")})
    town.step({a0: Action("talk", to=a2, topic="weather")})
    counts = [2, 1, 1]
    h = -sum(c / 4 * math.log(c / 4) for c in counts)
    assert town.talk_diversity(a0) == pytest.approx(h / math.log(4))


def test_the_timeline_reads_who_was_where_who_talked_and_who_took_what(tmp_path) -> None:  # noqa: ANN001
    from teamrl.world.timeline import plot_timeline, timeline_rows

    town = Town(4, 8, seed=3)
    a0, a1, a2, a3 = town.agents
    for a in town.agents:
        town.state[a].place = "home"
    town.positions[0] = {a: "home" for a in town.agents}
    town.state[a2].private = "coffee"
    town.step({a0: Action("talk", to=a1, topic="party"), a2: Action("move", place="cafe")})
    town.step({a2: Action("use", obj="coffee"), a3: Action("use", obj="coffee")})  # a3 is not at the cafe
    rows = timeline_rows(town)
    assert rows["places"] == [
        dict.fromkeys(town.agents, "home"),
        {a0: "home", a1: "home", a2: "cafe", a3: "home"},
    ]
    assert rows["talks"] == [[0, a0, a1, "party"]]
    assert rows["taken"] == [[1, a2, "coffee"]]  # the impossible use is not drawn
    out = plot_timeline(rows, tmp_path / "day.png", title="two ticks")
    assert out.stat().st_size > 5_000 and out.read_bytes()[:4] == b"\x89PNG"
