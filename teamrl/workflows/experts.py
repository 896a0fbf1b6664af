"""Scripted expert roles for the pipeline: they write the demonstrations that SFT learns from.

Running the real workflow with these scripts guarantees that demonstration prompts are exactly
the prompts the models will see in episodes.
"""

from __future__ import annotations

import random

from teamrl.engine.team import RoleCall, ScriptedRole
from teamrl.protocol import Message, render_message
from teamrl.tasks.programming import ProgrammingTask


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
