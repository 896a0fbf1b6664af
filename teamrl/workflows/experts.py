"""Scripted expert roles for the workflows: they write the demonstrations that SFT learns from.

Running the real workflow with these scripts guarantees that demonstration prompts are exactly
the prompts the models will see in episodes.
"""

from __future__ import annotations

import random
import re

from teamrl.engine.team import RoleCall, ScriptedRole
from teamrl.protocol import Message, render_message
from teamrl.tasks.programming import ProgrammingTask
from teamrl.tasks.reasoning import ReasoningTask, answer_number, build_task, extract_answer, normalize_answer
from teamrl.workflows.debate import majority
from teamrl.workflows.self_play import evaluate_expression

SLIPS = (-10, -2, -1, 1, 2, 10)  # how far a slipped step's result is off


def _code_block(code: str) -> str:
    return code.strip("\n")


def pipeline_experts(rng: random.Random, bug_rate: float = 0.3) -> dict[str, ScriptedRole]:
    """One scripted role per message kind. With probability ``bug_rate`` the expert coder's first
    version is the task's buggy solution, so that the demonstrations contain reviews that ask for
    a revision and coders that fix their code."""

    def plan(call: RoleCall) -> str:
        task: ProgrammingTask = call.context["task"]
        return render_message(Message(role=call.role, kind="plan", content=task.plan))

    def code(call: RoleCall) -> str:
        task: ProgrammingTask = call.context["task"]
        buggy = call.round == 0 and rng.random() < bug_rate
        source = task.buggy_solution if buggy else task.reference_solution
        return render_message(Message(role=call.role, kind="code", content=_code_block(source)))

    def review(call: RoleCall) -> str:
        task: ProgrammingTask = call.context["task"]
        latest = call.context["state"].code[-1]
        if latest.strip() == task.reference_solution.strip():
            msg = Message(role=call.role, kind="review", content="", verdict="approve")
        else:
            msg = Message(role=call.role, kind="review", content=task.review_comment, verdict="revise")
        return render_message(msg)

    def tests(call: RoleCall) -> str:
        task: ProgrammingTask = call.context["task"]
        return render_message(Message(role=call.role, kind="tests", content="\n".join(task.demo_tests)))

    return {"plan": plan, "code": code, "review": review, "tests": tests}


def debate_experts(rng: random.Random, error_rate: float = 0.2) -> dict[str, ScriptedRole]:
    """A ``debater`` that shows its working and with probability ``error_rate`` (half that when it
    revises, having read its peers) slips in one step, and a ``judge`` that picks the correct answer
    when a debater gave it, else the majority answer, else the answer it works out itself."""

    def debater(call: RoleCall) -> str:
        task: ReasoningTask = call.context["task"]
        rate = error_rate if call.round == 0 else error_rate / 2
        return shown_working(call.role, task, rng if rng.random() < rate else None)

    def judge(call: RoleCall) -> str:
        task: ReasoningTask = call.context["task"]
        given = [extract_answer(text) for text in call.context["peers"].values()]
        right = [a for a in given if a is not None and task.answer is not None and task.check(a)]
        pick = right[0] if right else majority(given) or worked_solution(task, None)[1]
        return render_message(Message(role=call.role, kind="answer", content=f"ANSWER: {pick}"))

    return {"debater": debater, "judge": judge}


def shown_working(role: str, task: ReasoningTask, slip: random.Random | None) -> str:
    """An ``answer`` message with the task's worked steps and final answer (one step off with ``slip``)."""
    steps, answer = worked_solution(task, slip)
    # "Steps:" first, so that every number in the working follows a space, as in the question: the
    # tokenizer makes " 12" and "12" different tokens, and copying a number is then one token's work
    working = "".join(f" {step}." for step in steps)
    content = f"Steps:{working} ANSWER: {answer}" if steps else f"ANSWER: {answer}"
    return render_message(Message(role=role, kind="answer", content=content))


_STEP = re.compile(r"(-?\d+(?: (?:[-+*%]|//) -?\d+)+) = (-?\d+)")
_NUMBER = re.compile(r"\d+")


def self_play_experts(
    rng: random.Random, error_rate: float = 0.3, judge_noise: float = 0.1, slip_per_step: float = 0.08
) -> dict[str, ScriptedRole]:
    """The four roles of the self_play games (teamrl/workflows/self_play.py), by role name.

    ``generator``: the debater's worked answer, one step off with probability ``error_rate``.
    ``judge``: re-checks every "a op b = c" step of the generator's reply and rejects at the first wrong
    one (``Check: 2 + 3 = 5. 5 * 4 = 20, not 21. VERDICT: REJECT``), accepts when all hold (a reply
    without steps it cannot check: accepted when it has an answer); with probability ``judge_noise`` its
    verdict is flipped. ``proposer``: an arithmetic problem in the style of the suite's ``arith`` family,
    built from the example's numbers: a quarter of the time a trivial one (one operation on small
    numbers), half the time as many operations as the example has numbers less one, on numbers near
    its own, a quarter of the time one or two operations more on numbers up to twice its largest.
    ``solver``: the problem's steps in evaluation order (a task's own steps when it is given one); each
    step slips with probability ``slip_per_step``, so longer problems fail more often.
    """

    def generator(call: RoleCall) -> str:
        task: ReasoningTask = call.context["task"]
        return shown_working(call.role, task, rng if rng.random() < error_rate else None)

    def judge(call: RoleCall) -> str:
        checked: list[str] = []
        accept = call.context["answer"] is not None
        for m in _STEP.finditer(call.context["argument"]):
            value = _left_to_right(m.group(1).split())
            if str(value) != m.group(2):
                checked.append(f"{m.group(1)} = {value}, not {m.group(2)}")
                accept = False
                break
            checked.append(m.group(0))
        if rng.random() < judge_noise:
            accept = not accept
        working = "".join(f" {step}." for step in checked)
        verdict = "ACCEPT" if accept else "REJECT"
        content = f"Check:{working} VERDICT: {verdict}" if checked else f"VERDICT: {verdict}"
        return render_message(Message(role=call.role, kind="answer", content=content))

    def proposer(call: RoleCall) -> str:
        numbers = [int(n) for n in _NUMBER.findall(call.context["example"])] or [2, 3]
        style = rng.random()
        if style < 0.25:  # trivial
            operations, pick = 1, lambda: rng.randint(1, 9)
        elif style < 0.75:  # like the example
            operations = min(max(len(numbers) - 1, 1), 4)
            pick = lambda: max(1, rng.choice(numbers) + rng.randint(-3, 3))  # noqa: E731
        else:  # harder
            operations = min(max(len(numbers) - 1, 1) + rng.randint(1, 2), 6)
            pick = lambda: rng.randint(2, max(10, 2 * max(numbers)))  # noqa: E731
        params = [pick()]
        for _ in range(operations):
            op = rng.randrange(3)  # + - * as the arith family writes them
            params += [op, rng.randint(2, 9) if op == 2 else pick()]
        expression = build_task("arith", 1, tuple(params)).question.removeprefix("What is ").removesuffix("?")
        return render_message(Message(role=call.role, kind="answer", content=f"PROBLEM: {expression}"))

    def solver(call: RoleCall) -> str:
        task: ReasoningTask | None = call.context.get("task")
        if task is None:
            evaluated = evaluate_expression(call.context["problem"])
            task = ReasoningTask(
                "proposed", call.context["problem"], evaluated.value, solution=evaluated.steps
            )
        fails = 1 - (1 - slip_per_step) ** max(len(task.solution), 1)
        return shown_working(call.role, task, rng if rng.random() < fails else None)

    return {"generator": generator, "judge": judge, "proposer": proposer, "solver": solver}


def worked_solution(task: ReasoningTask, slip: random.Random | None) -> tuple[list[str], str]:
    """The task's worked steps ("a op b = c") and final answer. With ``slip``, one step's result is off
    by a little and the later steps carry the wrong value on (a task without steps: the answer is off)."""
    answer = str(task.answer)
    if slip is None:
        return list(task.solution), answer
    if not task.solution:
        number = answer_number(answer)
        return [], answer if number is None else normalize_answer(str(number + slip.choice(SLIPS)))
    wrong = slip.randrange(len(task.solution))
    carried: dict[str, str] = {}  # a correct intermediate result -> the value written instead
    steps = []
    for i, step in enumerate(task.solution):
        left, right = step.rsplit(" = ", 1)
        terms = [carried.get(t, t) for t in left.split()]
        value = _left_to_right(terms) + (slip.choice(SLIPS) if i == wrong else 0)
        if str(value) != right:
            carried[right] = str(value)
        steps.append(f"{' '.join(terms)} = {value}")
    return steps, str(value)


def _left_to_right(terms: list[str]) -> int:
    """The value of "a op b op c ..." with + - * // % applied left to right, as the solution steps are
    written (a zero divisor leaves the value as it is)."""
    value = int(terms[0])
    for op, operand in zip(terms[1::2], terms[2::2], strict=True):
        n = int(operand)
        if op == "+":
            value += n
        elif op == "-":
            value -= n
        elif op == "*":
            value *= n
        elif n:
            value = value // n if op == "//" else value % n
    return value
