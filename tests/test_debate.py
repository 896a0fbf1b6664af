"""The debate workflow on scripted roles: who speaks when, what each sees, verdicts and rewards."""

from __future__ import annotations

import asyncio
import re

import pytest
from pydantic import ValidationError
from scripted_seats import scripted

from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team
from teamrl.policies.scripted import ScriptedPolicy
from teamrl.tasks.reasoning import ReasoningTask
from teamrl.workflows.debate import DebateConfig, assign_debate_rewards, debate, majority, visible_peers

TASK = ReasoningTask(task_id="t1", question="What is 2 + 3 * 4?", answer=14)
OPEN = ReasoningTask(task_id="t2", question="How many legs do 2 cats have?", answer=None)  # no ground truth


def tagging(log: list) -> dict[str, Seat]:
    """Debaters whose argument names speaker and round ("debater_1@2"): prompts show what each saw."""

    def script(call):
        log.append(call)
        return f"<answer>{call.role}@{call.round} ANSWER: 14</answer>"

    return {f"debater_{i}": Seat(script=script) for i in range(8)} | {"judge": Seat(script=script)}


def play(cfg: DebateConfig, seats: dict[str, Seat], task: ReasoningTask = TASK, group: int = 0):
    return asyncio.run(debate(Team(seats), task, cfg, group))


def test_order_of_turns_across_rounds() -> None:
    cfg = DebateConfig(debaters=3, rounds=2, aggregation="judge")
    log: list = []
    episode = play(cfg, tagging(log))
    expected = [(f"debater_{i}", r) for r in range(3) for i in range(3)] + [("judge", 3)]
    assert [(c.role, c.round) for c in log] == expected
    assert [(t.role, t.round) for t in episode.turns] == expected
    assert all(c.kind == "answer" for c in log)


def test_exact_prompts_of_debaters_and_a_judge_that_sees_the_answers() -> None:
    cfg = DebateConfig(debaters=3, rounds=1, aggregation="judge", debater_sop="Debate.", judge_sop="Judge.")
    replies = {
        "debater_0": ["<answer>3 * 4 = 12, 2 + 12 = 14. ANSWER: 14</answer>", "<answer>ANSWER: 14</answer>"],
        "debater_1": ["<answer>2 + 3 = 5, 5 * 4 = 20. ANSWER: 20</answer>", "<answer>ANSWER: 20</answer>"],
        "debater_2": ["I think 14", "<answer>still unsure</answer>"],
        "judge": ["<answer>ANSWER: 14</answer>"],
    }
    log: list = []
    play(cfg, scripted(log, replies))
    prompts = {(c.role, c.round): c.prompt for c in log}
    assert prompts[("debater_0", 0)] == "### debater_0: Debate.\nquestion: What is 2 + 3 * 4?\n"
    assert prompts[("debater_1", 1)] == (
        "### debater_1: Debate.\n"
        "question: What is 2 + 3 * 4?\n"
        "your last argument: 2 + 3 = 5, 5 * 4 = 20. ANSWER: 20\n"
        "debater_2: (none)\n"  # its round-0 reply had no <answer> tags
        "debater_0: 3 * 4 = 12, 2 + 12 = 14. ANSWER: 14\n"
    )
    assert prompts[("judge", 2)] == (
        "### judge: Judge.\n"
        "question: What is 2 + 3 * 4?\n"
        "debater_0 answer: 14\n"
        "debater_1 answer: 20\n"
        "debater_2 answer: (none)\n"  # tags but no final answer
    )
    judge_call = log[-1]
    assert judge_call.context["peers"] == {
        "debater_0 answer": "14",
        "debater_1 answer": "20",
        "debater_2 answer": "(none)",
    }


def test_a_judge_that_sees_the_arguments_gets_the_full_last_round() -> None:
    cfg = DebateConfig(debaters=2, rounds=1, aggregation="judge", judge_sees="arguments", judge_sop="Judge.")
    replies = {
        "debater_0": ["<answer>ANSWER: 20</answer>", "<answer>3 * 4 = 12\n2 + 12 = 14\nANSWER: 14</answer>"],
        "debater_1": ["<answer>ANSWER: 14</answer>", "<answer>I agree. ANSWER: 14</answer>"],
        "judge": ["<answer>ANSWER: 14</answer>"],
    }
    log: list = []
    play(cfg, scripted(log, replies))
    assert log[-1].prompt == (
        "### judge: Judge.\n"
        "question: What is 2 + 3 * 4?\n"
        "debater_0:\n3 * 4 = 12\n2 + 12 = 14\nANSWER: 14\n"
        "debater_1: I agree. ANSWER: 14\n"
    )


def _shown(prompt: str) -> list[tuple[str, int]]:
    return [(role, int(r)) for role, r in re.findall(r"(debater_\d)@(\d)", prompt)]


@pytest.mark.parametrize(
    ("visible_others", "shuffle", "aggregation", "judge_sees"),
    [(None, False, "judge", "arguments"), (2, True, "judge", "answers"), (1, False, "majority", "answers")],
)
def test_a_debater_sees_only_the_previous_round_of_its_visible_peers(
    visible_others, shuffle, aggregation, judge_sees
) -> None:
    cfg = DebateConfig(
        debaters=4,
        rounds=3,
        visible_others=visible_others,
        shuffle=shuffle,
        aggregation=aggregation,
        judge_sees=judge_sees,
    )
    log: list = []
    episode = play(cfg, tagging(log))
    seen = episode.verifier["seen"]
    for call in log:
        if call.role == "judge":
            expected = [(f"debater_{i}", 3) for i in range(4)] if judge_sees == "arguments" else []
            assert _shown(call.prompt) == expected
            continue
        if call.round == 0:
            assert _shown(call.prompt) == []  # round 0 answers alone
            continue
        peers = seen[call.role][call.round - 1]
        assert len(peers) == (3 if visible_others is None else visible_others)
        assert call.role not in peers and len(set(peers)) == len(peers)
        # its own last argument, then exactly its visible peers of the previous round, in the order shown
        assert _shown(call.prompt) == [(call.role, call.round - 1)] + [(p, call.round - 1) for p in peers]


def test_visible_others_without_shuffle_takes_the_next_peers_round_the_ring() -> None:
    cfg = DebateConfig(debaters=4, rounds=2, visible_others=2)
    episode = play(cfg, tagging([]))
    assert episode.verifier["seen"] == {
        "debater_0": [["debater_1", "debater_2"]] * 2,
        "debater_1": [["debater_2", "debater_3"]] * 2,
        "debater_2": [["debater_3", "debater_0"]] * 2,
        "debater_3": [["debater_0", "debater_1"]] * 2,
    }
    alone = play(DebateConfig(debaters=2, rounds=1, visible_others=0), tagging([]))
    assert alone.verifier["seen"] == {"debater_0": [[]], "debater_1": [[]]}
    assert visible_peers(1, 4, None, None) == [2, 3, 0]


def test_shuffle_is_seeded_per_episode_and_varies() -> None:
    def views(seed: int, group: int):
        cfg = DebateConfig(debaters=4, rounds=2, shuffle=True, seed=seed)
        return play(cfg, tagging([]), group=group).verifier["seen"]

    assert views(0, 0) == views(0, 0)  # same seed, task and group: same views
    ring = {f"debater_{i}": [[f"debater_{(i + k) % 4}" for k in (1, 2, 3)]] * 2 for i in range(4)}
    all_views = [views(seed, group) for seed in (0, 1) for group in range(3)]
    assert any(v != ring for v in all_views)
    assert len({repr(v) for v in all_views}) > 1
    for v in all_views:  # a shuffle reorders the peers, it never adds or drops one
        for role, rounds in v.items():
            assert all(sorted(peers) == sorted(ring[role][0]) for peers in rounds)


def test_rewards_by_hand_with_a_judge_and_format_penalties() -> None:
    cfg = DebateConfig(debaters=3, rounds=1, aggregation="judge")
    replies = {
        "debater_0": ["<answer>ANSWER: 14</answer>", "<answer>I keep it. ANSWER: 14</answer>"],
        "debater_1": ["<answer>2 + 3 = 5, 5 * 4 = 20. ANSWER: 20</answer>", "<answer>ANSWER: 14</answer>"],
        "debater_2": ["I think 14", "<answer>not sure</answer>"],  # no tags; then no final answer
        "judge": ["<answer>ANSWER: 14</answer>"],
    }
    episode = play(cfg, scripted([], replies))
    assign_debate_rewards(episode, alpha=0.5, format_penalty=0.5)
    v = episode.verifier
    assert v["answers"] == [["14", "20", None], ["14", "14", None]]
    assert v["correct"] == [[True, False, False], [True, True, False]]
    assert v["label"] == "14" and v["label_source"] == "ground_truth" and v["verdict"] == "14"
    assert episode.outcome == 1.0
    d2 = episode.turns_of("debater_2")
    assert "expected '<answer>" in d2[0].error and "no final answer" in d2[1].error
    assert episode.errors == [d2[0].error, d2[1].error]
    # p_i: per-round correctness; R_i: final answer; r = 0.5 R + 0.5 p - 0.5 * malformed share
    assert episode.process == pytest.approx(
        {"debater_0": 1.0, "debater_1": 0.5, "debater_2": 0.0, "judge": 1.0}
    )
    assert episode.rewards == pytest.approx(
        {"debater_0": 1.0, "debater_1": 0.75, "debater_2": -0.5, "judge": 1.0}
    )


def test_a_wrong_judge_scores_zero_and_sets_the_outcome() -> None:
    cfg = DebateConfig(debaters=2, rounds=0, aggregation="judge")
    replies = {
        "debater_0": ["<answer>ANSWER: 14</answer>"],
        "debater_1": ["<answer>ANSWER: 20</answer>"],
        "judge": ["<answer>ANSWER: 20</answer>"],
    }
    episode = play(cfg, scripted([], replies))
    assign_debate_rewards(episode, alpha=0.6, format_penalty=0.5)
    assert episode.outcome == 0.0 and episode.verifier["verdict"] == "20"
    assert episode.rewards == pytest.approx({"debater_0": 1.0, "debater_1": 0.0, "judge": 0.0})


def test_without_ground_truth_the_final_majority_is_the_label() -> None:
    replies = {
        "debater_0": ["<answer>ANSWER: 8</answer>", "<answer>ANSWER: 8</answer>"],
        "debater_1": ["<answer>ANSWER: 6</answer>", "<answer>I was wrong. ANSWER: 8.0</answer>"],
        "debater_2": ["<answer>ANSWER: 6</answer>", "<answer>ANSWER: 6</answer>"],
    }
    cfg = DebateConfig(debaters=3, rounds=1, aggregation="majority")
    episode = play(cfg, scripted([], {r: list(t) for r, t in replies.items()}), task=OPEN)
    assign_debate_rewards(episode, alpha=0.6, format_penalty=0.5)
    v = episode.verifier
    # round 0's majority was 6, but the label is the final round's: 8, 8.0 (the same number), 6 -> 8
    assert v["label"] == "8" and v["label_source"] == "majority" and v["verdict"] == "8"
    assert v["correct"] == [[True, False, False], [True, True, False]]
    assert episode.outcome == 1.0 and not episode.turns_of("judge")
    # r = 0.6 R + 0.4 p: debater_1 is right at the end only
    assert episode.rewards == pytest.approx({"debater_0": 1.0, "debater_1": 0.8, "debater_2": 0.0})

    cfg = DebateConfig(debaters=3, rounds=1, aggregation="judge")
    seats = scripted(
        [], {**{r: list(t) for r, t in replies.items()}, "judge": ["<answer>ANSWER: 6</answer>"]}
    )
    episode = play(cfg, seats, task=OPEN)
    assign_debate_rewards(episode, alpha=0.6, format_penalty=0.5)
    assert episode.verifier["label"] == "8" and episode.outcome == 0.0
    assert episode.rewards == pytest.approx(
        {"debater_0": 1.0, "debater_1": 0.8, "debater_2": 0.0, "judge": 0.0}
    )


def test_majority_vote_ties_and_no_answers() -> None:
    assert majority(["3", "5", None, "5.0", "3"]) == "3"  # 2 - 2: the answer given first wins
    assert majority([None, None]) is None
    replies = {"debater_0": ["no tags"], "debater_1": ["<answer>hmm</answer>"]}
    episode = play(DebateConfig(debaters=2, rounds=0), scripted([], replies), task=OPEN)
    assign_debate_rewards(episode, alpha=0.6, format_penalty=0.5)
    assert episode.verifier["label"] is None and episode.verifier["label_source"] == "none"
    assert episode.outcome == 0.0
    assert episode.rewards == pytest.approx({"debater_0": -0.5, "debater_1": -0.5})


def test_config_is_checked() -> None:
    with pytest.raises(ValidationError, match="visible_others=3 exceeds the 2 other debaters"):
        DebateConfig(debaters=3, visible_others=3)
    with pytest.raises(ValidationError, match="aggregation"):
        DebateConfig(aggregation="vote")
    with pytest.raises(ValidationError, match="extra"):
        DebateConfig(judges=2)
    assert DebateConfig(debaters=2, aggregation="judge").order == ["debater_0", "debater_1", "judge"]
    assert DebateConfig(debaters=2).order == ["debater_0", "debater_1"]


def test_on_the_engine_each_round_of_all_episodes_is_one_batch() -> None:
    policy = ScriptedPolicy(lambda req: "<answer>ANSWER: 14</answer>")
    engine = Engine({"p": policy})
    cfg = DebateConfig(debaters=3, rounds=1, aggregation="judge")
    team = Team({role: Seat(policy="p") for role in cfg.order}, engine)
    episodes = engine.run([lambda g=g: debate(team, TASK, cfg, group=g) for g in range(4)])
    assert policy.batch_sizes == [12, 12, 4]  # round 0, round 1, the judges
    assert [e.group for e in episodes] == [0, 1, 2, 3]
    assert all(e.outcome == 1.0 and len(e.turns) == 7 for e in episodes)
    assert all(t.completion_ids for e in episodes for t in e.turns)
