"""The town's judges (issue 20): the rule judge by hand, calibration on the shipped anchors, drift flagged,
two judges' agreement."""

from __future__ import annotations

import json

import pytest

from teamrl.world.judge import (
    ANCHORS,
    JudgeMonitor,
    RuleJudge,
    agreement,
    calibrate,
    load_anchors,
    make_anchors,
)


def test_the_shipped_anchors_are_make_anchors() -> None:
    shipped = load_anchors()
    assert shipped == make_anchors(8, 0)  # regenerated: teamrl.world.judge.write_anchors()
    assert {a["label"] for a in shipped} == {"good", "bad"} and len(shipped) == 16
    assert json.loads(ANCHORS.read_text())["made_by"] == "make_anchors(n=8, seed=0)"


def test_the_rule_judge_by_hand() -> None:
    judge = RuleJudge()
    answered = "t=0 a at the cafe talks to b about party\nt=1 b at the cafe talks to a about food"
    unanswered = "t=0 a at the cafe talks to b about party\nt=1 b at the cafe waits"
    impossible = "t=0 a at the cafe talks to b about party (cannot)\nt=1 b at the cafe waits"
    chatter = "\n".join(f"t={t} a at the cafe talks to b about weather" for t in range(6))
    assert judge(answered) > judge(unanswered) > judge(impossible)
    assert judge(chatter) < judge(answered)
    assert judge("") == 0.0
    # unanswered: valid 1, answered 0, variety 0.5 * 1 + 0.5 * 1/4, no chatter 1 -> weighted mean
    want = (0.4 * 1 + 0.25 * 0 + 0.2 * (0.5 + 0.125) + 0.15 * 1) / 1.0
    assert judge(unanswered) == pytest.approx(want)
    noisy = RuleJudge(noise=0.2, seed=3)
    assert noisy(answered) == noisy(answered) != judge(answered)  # seeded per transcript
    assert 0.0 <= noisy(chatter) <= 1.0


def test_the_rule_judge_ranks_every_good_anchor_above_every_bad_one() -> None:
    c = calibrate(RuleJudge(), load_anchors())
    assert c.auc == 1.0 and c.mean_good > c.mean_bad + 0.2
    with pytest.raises(ValueError, match="good and bad"):
        calibrate(RuleJudge(), [a for a in load_anchors() if a["label"] == "good"])


def test_a_judge_that_drifts_is_flagged() -> None:
    anchors = load_anchors()
    state = {"shift": 0.0}

    def drifting(transcript: str) -> float:
        return min(1.0, RuleJudge()(transcript) + state["shift"])

    monitor = JudgeMonitor(drifting, anchors, threshold=0.05)
    monitor.check(0)
    state["shift"] = 0.02
    assert not monitor.check(10)["drifted"] and "stable" in monitor.message()
    state["shift"] = 0.2  # the judge now scores everything higher: not comparable any more
    row = monitor.check(20)
    assert row["drifted"] and row["drift"] > 0.05 and monitor.drifted
    assert "drifted at step 20" in monitor.message()


def test_two_judges_agreement() -> None:
    transcripts = [a["transcript"] for a in load_anchors()]
    same = agreement(RuleJudge(), RuleJudge(), transcripts)
    assert same["spearman"] == pytest.approx(1.0) and same["mean_abs_diff"] == 0.0
    noisy = agreement(RuleJudge(), RuleJudge(noise=0.1, seed=1), transcripts)
    assert 0.5 < noisy["spearman"] < 1.0 and noisy["mean_abs_diff"] > 0
    with pytest.raises(ValueError, match="two transcripts"):
        agreement(RuleJudge(), RuleJudge(), transcripts[:1])
