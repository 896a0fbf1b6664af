"""Workflow ``pipeline``: Planner -> Coder <-> Reviewer -> Tester, driven by the config.

The stages run in ``workflow.order``; what each role does follows from its message kind:
``plan`` writes a plan, ``code`` writes (or revises) the program, ``review`` approves it or
sends it back to the last code role (at most ``max_review_rounds`` times), ``tests`` writes
tests for the final program. Another role set or order is a config change, not new code.

At the end the episode is verified, the trusted side deciding (``teamrl.tasks.sandbox.calls``):
every distinct code version runs in a sandbox process of its own on the hidden tests' inputs and
its results are compared here with the expected values; the tester's asserts become calls and
expected values (a line that cannot be judged that way is refused, a format error of its turn) and
run on the reference and on the buggy solution (both ours: they share a process).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from teamrl.config import WorkflowConfig
from teamrl.engine.team import Team
from teamrl.protocol import Episode, Turn
from teamrl.rewards.credit import plan_words
from teamrl.tasks.programming import ProgrammingTask, plan_vocabulary
from teamrl.tasks.sandbox import Sandbox
from teamrl.tasks.sandbox.calls import judge_many, judge_trusted, parse_asserts

MAX_TESTS = 8


@dataclass
class PipelineState:
    plan: str | None = None
    code: list[str] = field(default_factory=list)  # every version, in order
    code_turns: list[int] = field(default_factory=list)  # turn index that wrote each version
    reviews: list[tuple[int, int]] = field(default_factory=list)  # (turn index, code version it saw)
    tests: list[str] = field(default_factory=list)
    tests_turn: int | None = None  # turn index that wrote the tests


def prompt_for(role: str, sop: str, task: ProgrammingTask, sections: list[tuple[str, str]]) -> str:
    """The one prompt layout every role sees; sections are (label, text) pairs after the task."""
    lines = [f"### {role}: {sop}", task.brief()]
    for label, text in sections:
        sep = "\n" if "\n" in text else " "
        lines.append(f"{label}:{sep}{text}")
    return "\n".join(lines) + "\n"


def split_tests(content: str) -> list[str]:
    return [line.strip() for line in content.splitlines() if line.strip()][:MAX_TESTS]


async def pipeline(
    team: Team, task: ProgrammingTask, cfg: WorkflowConfig, sandbox: Sandbox | None, group: int = 0
) -> Episode:
    """Play one episode and verify it. With ``sandbox=None`` it stays unverified (demonstrations)."""
    episode, state = await play_pipeline(team, task, cfg, group)
    if sandbox is not None:
        await verify(episode, task, state, sandbox)
    return episode


async def play_pipeline(
    team: Team, task: ProgrammingTask, cfg: WorkflowConfig, group: int = 0
) -> tuple[Episode, PipelineState]:
    """Play the conversation only; its only awaits are ``team.act`` calls."""
    episode = Episode(task_id=task.task_id, group=group)
    state = PipelineState()
    context = {"task": task, "state": state}
    last_coder: str | None = None

    async def speak(role: str, sections: list[tuple[str, str]], round_: int = 0) -> Turn:
        spec = cfg.roles[role]
        prompt = prompt_for(role, spec.sop, task, sections)
        turn = await team.act(role, prompt, spec.kind, round=round_, context=context)
        episode.turns.append(turn)
        if turn.error:
            episode.errors.append(turn.error)
        return turn

    async def write_code(role: str, round_: int, review: str | None) -> None:
        sections = [("plan", state.plan or "(none)")] if state.plan is not None else []
        if review is not None and state.code:
            sections += [("previous solution", state.code[-1] or "(none)"), ("review", review)]
        turn = await speak(role, sections, round_)
        state.code.append(turn.message.content if turn.message else "")
        state.code_turns.append(len(episode.turns) - 1)

    for role in cfg.order:
        kind = cfg.roles[role].kind
        if kind == "plan":
            turn = await speak(role, [])
            state.plan = turn.message.content if turn.message else ""
        elif kind == "code":
            last_coder = role
            await write_code(role, 0, None)
        elif kind == "review":
            for round_ in range(cfg.max_review_rounds):
                turn = await speak(role, [("solution", state.code[-1] or "(none)")], round_)
                state.reviews.append((len(episode.turns) - 1, len(state.code) - 1))
                if turn.message is None or turn.message.verdict != "revise" or last_coder is None:
                    break
                await write_code(last_coder, round_ + 1, turn.message.content or "please fix it")
        elif kind == "tests":
            turn = await speak(role, [("solution", state.code[-1] or "(none)")])
            state.tests = split_tests(turn.message.content) if turn.message else []
            state.tests_turn = len(episode.turns) - 1
        else:  # config validation only admits the kinds above for this workflow
            raise ValueError(f"workflow pipeline has no stage for message kind {kind!r} (role {role})")

    return episode, state


async def verify(episode: Episode, task: ProgrammingTask, state: PipelineState, sandbox: Sandbox) -> None:
    """Judge every code version and the tester's tests, each in sandbox processes of its own, and
    store the figures."""
    tests, refused = parse_asserts(state.tests, task.func_name)
    versions = list(dict.fromkeys(state.code))  # a revision identical to an earlier version runs once
    jobs = [(code, task.func_name, task.tests) for code in versions]
    # the tester's tests (data) on the reference and the buggy solution (ours, not the policy's): one process
    trusted = [task.reference_solution, task.buggy_solution]
    judged, on_trusted = await asyncio.gather(
        judge_many(sandbox, jobs), judge_trusted(sandbox, trusted, task.func_name, tests)
    )
    by_version = dict(zip(versions, judged, strict=True))
    code_pass = [by_version[code].fraction for code in state.code]
    on_reference, on_buggy = (on_trusted[0].passed, on_trusted[1].passed) if tests else ([], [])
    episode.outcome = code_pass[-1] if code_pass else 0.0
    episode.verifier = {
        "code_pass": code_pass,
        "code_turns": state.code_turns,
        "reviews": [list(r) for r in state.reviews],
        "plan": state.plan,
        "plan_keys": list(task.plan_keys),
        # the suite's other key items the plan names: a plan that lists them all is scaled down
        "plan_other": sorted(
            (plan_words(state.plan) & plan_vocabulary()) - {k.lower() for k in task.plan_keys}
        ),
        "tests": [t.text(task.func_name) for t in tests],
        "tests_on_reference": on_reference,
        "tests_on_buggy": on_buggy,
        "solved": bool(code_pass) and code_pass[-1] == 1.0,
    }
    if refused:
        episode.verifier["tests_refused"] = [f"{line}  ({reason})" for line, reason in refused]
        turn = episode.turns[state.tests_turn] if state.tests_turn is not None else None
        if turn is not None and turn.error is None:
            # a test that cannot be judged without running it beside the code it judges is malformed
            turn.error = f"{len(refused)} test(s) cannot be judged: {refused[0][1]}"
            episode.errors.append(turn.error)
    errors = [j.error for j in [*judged, *on_trusted] if j.error is not None]
    if errors:  # the checks never ran (a lost Ray sandbox worker): they count as failed
        episode.verifier["sandbox_error"] = errors[0]
