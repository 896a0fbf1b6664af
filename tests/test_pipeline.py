"""The pipeline workflow on scripted roles: who speaks when, what each sees, and rewards."""

import asyncio

import pytest

from teamrl.config import load_config
from teamrl.engine.team import Seat, Team
from teamrl.rewards.credit import assign_hybrid_rewards, plan_coverage, process_scores, score_tester
from teamrl.tasks.programming import ProgrammingTask
from teamrl.tasks.sandbox import Sandbox
from teamrl.workflows.pipeline import pipeline

TASK = ProgrammingTask(
    task_id="t1",
    kind="write",
    family="arith",
    difficulty=1,
    func_name="f",
    spec="f(x): return x times 3",
    examples=("f(1) == 3", "f(0) == 0"),
    hidden_tests=("assert f(2) == 6", "assert f(-1) == -3", "assert f(0) == 0", "assert f(5) == 15"),
    reference_solution="def f(x):\n    return x * 3\n",
    buggy_solution="def f(x):\n    return x + 3\n",
    issue_text="",
    failing_test="",
    plan="multiply x by 3; return it",
    plan_keys=("multiply", "3"),
    review_comment="f(1) gives 4, expected 3",
    demo_tests=("assert f(1) == 3", "assert f(2) == 6"),
)
BUGGY = (
    "<code>def f(x):\n    return x + 3</code>"  # passes f(0)? no: 3 != 0; passes none of the 4 -> check below
)
GOOD = "<code>def f(x):\n    return x * 3</code>"


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox()


def scripted(log, answers):
    """Each role answers from its queue of texts and logs (role, round, prompt)."""

    def make(role):
        def script(call):
            log.append((role, call.round, call.prompt))
            return answers[role].pop(0)

        return script

    return {r: Seat(script=make(r)) for r in answers}


def run(cfg, answers, sandbox):
    log = []
    team = Team(scripted(log, answers))
    episode = asyncio.run(pipeline(team, TASK, cfg.workflow, sandbox))
    assign_hybrid_rewards(episode, cfg.workflow.roles, cfg.reward.alpha, cfg.reward.format_penalty)
    return episode, log


def test_revision_loop_order_visibility_and_rewards(sandbox):
    cfg = load_config(overrides=["workflow.max_review_rounds=2"])
    answers = {
        "planner": ["<plan>multiply x by 3</plan>"],
        "coder": [BUGGY, GOOD],
        "reviewer": ["<review>revise: f(1) gives 4, expected 3</review>", "<review>approve</review>"],
        "tester": ["<tests>assert f(1) == 3\nassert f(0) == 0</tests>"],
    }
    episode, log = run(cfg, answers, sandbox)
    assert [(r, k) for r, k, _ in log] == [
        ("planner", 0),
        ("coder", 0),
        ("reviewer", 0),
        ("coder", 1),
        ("reviewer", 1),
        ("tester", 0),
    ]
    prompts = {(r, k): p for r, k, p in log}
    assert "solution:" not in prompts[("planner", 0)]  # the planner sees only the task
    assert "plan: multiply x by 3" in prompts[("coder", 0)]
    assert "review: f(1) gives 4, expected 3" in prompts[("coder", 1)]  # the revision sees the review
    assert "return x + 3" in prompts[("coder", 1)]  # ... and its previous code
    assert "return x + 3" in prompts[("reviewer", 0)] and "return x * 3" in prompts[("reviewer", 1)]
    assert "return x * 3" in prompts[("tester", 0)]  # the tester sees the final code

    v = episode.verifier
    assert v["code_pass"] == [0.0, 1.0]
    assert episode.outcome == 1.0 and v["solved"]
    # process scores, by hand: plan names 'multiply' and '3' -> 1; the coder's one revision raised
    # the pass fraction -> 1; reviewer: revise on failing code (right) + approve on passing (right) -> 1;
    # tests pass on the reference, and f(0) == 0 fails on the buggy x + 3 -> 1.
    assert episode.process == {"planner": 1.0, "coder": 1.0, "reviewer": 1.0, "tester": 1.0}
    assert episode.rewards == pytest.approx({r: 1.0 for r in episode.process})


def test_wrong_verdicts_bad_tests_and_format_errors_are_penalised(sandbox):
    cfg = load_config(
        overrides=["workflow.max_review_rounds=2", "reward.alpha=0.5", "reward.format_penalty=0.5"]
    )
    answers = {
        "planner": ["I think we should multiply"],  # no tags: format error
        "coder": [BUGGY],
        "reviewer": ["<review>approve</review>"],  # approves failing code: wrong
        "tester": [
            "<tests>assert f(1) == 4\nassert f(2) == 6</tests>"
        ],  # first test is wrong on the reference
    }
    episode, log = run(cfg, answers, sandbox)
    assert [r for r, _, _ in log] == ["planner", "coder", "reviewer", "tester"]  # approve ends the review
    assert "plan: (none)" in log[1][2]  # the coder is told the plan is missing
    assert episode.errors and "planner" in episode.errors[0]
    assert episode.outcome == 0.0
    assert episode.process == {"planner": 0.0, "coder": 0.0, "reviewer": 0.0, "tester": 0.0}
    # r = 0.5 * 0 + 0.5 * p - 0.5 * malformed
    assert episode.rewards == pytest.approx({"planner": -0.5, "coder": 0.0, "reviewer": 0.0, "tester": 0.0})


def test_single_agent_order_and_no_review_rounds(sandbox):
    cfg = load_config(overrides=["workflow.order=[coder]"])
    episode, log = run(cfg, {"coder": [GOOD]}, sandbox)
    assert [r for r, _, _ in log] == ["coder"]
    assert "plan" not in log[0][2]
    assert episode.rewards == pytest.approx({"coder": 1.0})


def test_partial_pass_fraction_is_the_outcome(sandbox):
    cfg = load_config(overrides=["workflow.order=[coder]", "reward.alpha=1.0"])
    # x * x passes f(0)==0 only... and f(-1)? 1 != -3. f(2)=4 != 6, f(5)=25 != 15 -> 1/4
    episode, _ = run(cfg, {"coder": ["<code>def f(x):\n    return x * x</code>"]}, sandbox)
    assert episode.outcome == pytest.approx(0.25)
    assert episode.rewards["coder"] == pytest.approx(0.25)


def test_hostile_code_is_a_zero_not_a_crash(sandbox):
    cfg = load_config(overrides=["workflow.order=[coder]"])
    hostile = "<code>import os\nos._exit(3)\ndef f(x):\n    return x * 3</code>"
    episode, _ = run(cfg, {"coder": [hostile]}, sandbox)
    assert episode.outcome == 0.0


def test_credit_helpers_by_hand():
    assert plan_coverage("Multiply x by 3; return", ["multiply", "3", "add"]) == pytest.approx(2 / 3)
    assert plan_coverage(None, ["a"]) == 0.0
    assert score_tester([True, True], [True, False]) == 1.0
    assert score_tester([True, True], [True, True]) == 0.5
    assert score_tester([True, False], [False, False]) == 0.0
    assert score_tester([], []) == 0.0


def test_coder_without_revision_gets_its_pass_fraction():
    from teamrl.protocol import Episode, Turn

    cfg = load_config()
    ep = Episode(task_id="t", turns=[Turn(role="coder", prompt="", text="")])
    ep.verifier = {"code_pass": [0.75], "code_turns": [0], "reviews": []}
    assert process_scores(ep, cfg.workflow.roles) == {"coder": 0.75}
