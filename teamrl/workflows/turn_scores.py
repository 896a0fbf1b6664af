"""Turn-level scores of the programming roles, for turn-level groups (``teamrl.workflows.branching``).

Each scores one turn alone, when it is taken, by running things (the trusted side deciding, as in
``teamrl.workflows.pipeline.verify``, whose sandbox judgements it shares through the judges' cache):

- tests: half for tests that all pass on the task's reference solution, half more if they also catch its
  buggy solution (``teamrl.rewards.credit.score_tester``);
- code: the pass fraction of the code on the hidden tests;
- review: 1 if the verdict matches whether the reviewed code passes every hidden test (approve exactly
  when it does), else 0;
- plan: the plan's key coverage (``teamrl.rewards.credit.plan_coverage``).

A malformed turn scores 0: its content does not parse, so it has no tests, code, plan or verdict. Without a
sandbox every turn scores 0 (ties: the continuing candidate is drawn at random).
"""

from __future__ import annotations

from collections.abc import Callable

from teamrl.protocol import MessageKind, Turn
from teamrl.rewards.credit import plan_coverage, plan_words, score_tester
from teamrl.tasks.programming import ProgrammingTask, plan_vocabulary
from teamrl.tasks.sandbox import Sandbox
from teamrl.tasks.sandbox.calls import judge, judge_trusted, parse_asserts
from teamrl.workflows.branching import TurnScore
from teamrl.workflows.pipeline import split_tests


def _content(turn: Turn) -> str:
    return turn.message.content if turn.message is not None else ""


async def hidden_pass(sandbox: Sandbox | None, task: ProgrammingTask, code: str) -> float:
    """The pass fraction of ``code`` on the task's hidden tests (0 without a sandbox or code)."""
    if sandbox is None or not code.strip():
        return 0.0
    judged = await judge(sandbox, code, task.func_name, task.tests)
    return judged.fraction if judged.error is None else 0.0


def programming_turn_score(
    kind: MessageKind,
    task: ProgrammingTask,
    sandbox: Sandbox | None,
    reviewed: Callable[[], str] | None = None,
) -> TurnScore:
    """The score of a turn of message ``kind`` on ``task`` (see the module); ``reviewed``: the code a
    review turn judges (read when the review is scored)."""

    async def tests(turn: Turn) -> float:
        parsed, _ = parse_asserts(split_tests(_content(turn)), task.func_name)
        if sandbox is None or not parsed:
            return 0.0
        trusted = [task.reference_solution, task.buggy_solution]
        on_reference, on_buggy = await judge_trusted(sandbox, trusted, task.func_name, parsed)
        if on_reference.error is not None:
            return 0.0
        return score_tester(list(on_reference.passed), list(on_buggy.passed))

    async def code(turn: Turn) -> float:
        return await hidden_pass(sandbox, task, _content(turn))

    async def review(turn: Turn) -> float:
        verdict = turn.message.verdict if turn.message is not None else None
        if verdict is None:
            return 0.0
        passes = await hidden_pass(sandbox, task, reviewed() if reviewed is not None else "") == 1.0
        return float((verdict == "approve") == passes)

    async def plan(turn: Turn) -> float:
        text = _content(turn)
        keys = list(task.plan_keys)
        other = sorted((plan_words(text) & plan_vocabulary()) - {k.lower() for k in keys})
        return plan_coverage(text, keys, other)

    scores: dict[str, TurnScore] = {"tests": tests, "code": code, "review": review, "plan": plan}
    if kind not in scores:
        raise ValueError(
            f"no turn-level score for message kind {kind!r}; the programming kinds are {sorted(scores)}"
        )
    return scores[kind]
