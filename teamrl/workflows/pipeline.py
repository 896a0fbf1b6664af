"""Workflow ``pipeline``: Planner -> Coder <-> Reviewer -> Tester, driven by the config.

The stages run in ``workflow.order``; what each role does follows from its message kind:
``plan`` writes a plan, ``code`` writes (or revises) the program, ``review`` approves it or
sends it back to the last code role (at most ``max_review_rounds`` times), ``tests`` writes
tests for the final program. Another role set or order is a config change, not new code.

At the end the episode is verified in one sandbox process: every code version against the
hidden tests, and the tester's tests against the reference and the buggy solution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teamrl.config import WorkflowConfig
from teamrl.engine.team import Team
from teamrl.protocol import Episode, Turn
from teamrl.tasks.programming import ProgrammingTask
from teamrl.tasks.sandbox import ProgramCheck, Sandbox, judge_checks

MAX_TESTS = 8


@dataclass
class PipelineState:
    plan: str | None = None
    code: list[str] = field(default_factory=list)  # every version, in order
    code_turns: list[int] = field(default_factory=list)  # turn index that wrote each version
    reviews: list[tuple[int, int]] = field(default_factory=list)  # (turn index, code version it saw)
    tests: list[str] = field(default_factory=list)


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
        else:  # config validation only admits the kinds above for this workflow
            raise ValueError(f"workflow pipeline has no stage for message kind {kind!r} (role {role})")

    return episode, state


async def verify(episode: Episode, task: ProgrammingTask, state: PipelineState, sandbox: Sandbox) -> None:
    """Run every check of the episode in one sandbox process and store the figures."""
    hidden = list(task.hidden_tests)
    checks = [ProgramCheck(code=c, tests=hidden) for c in state.code]
    if state.tests:
        checks += [
            ProgramCheck(code=task.reference_solution, tests=state.tests),
            ProgramCheck(code=task.buggy_solution, tests=state.tests),
        ]
    results, error = await judge_checks(sandbox, checks)
    code_pass = [sum(r) / len(r) if r else 0.0 for r in results[: len(state.code)]]
    tests_ref, tests_buggy = (results[-2], results[-1]) if state.tests else ([], [])
    episode.outcome = code_pass[-1] if code_pass else 0.0
    episode.verifier = {
        "code_pass": code_pass,
        "code_turns": state.code_turns,
        "reviews": [list(r) for r in state.reviews],
        "plan": state.plan,
        "plan_keys": list(task.plan_keys),
        "tests": state.tests,
        "tests_on_reference": tests_ref,
        "tests_on_buggy": tests_buggy,
        "solved": bool(code_pass) and code_pass[-1] == 1.0,
    }
    if error is not None:  # the checks never ran (a lost Ray sandbox worker): they count as failed
        episode.verifier["sandbox_error"] = error
