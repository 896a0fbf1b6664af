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
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from teamrl.engine.team import ScriptedRole, Team
from teamrl.protocol import Episode, MessageKind, Turn
from teamrl.protocol.settings import SeatConfig, WorkflowSettings
from teamrl.rewards.credit import ScoredTurn, plan_words, process_scores, scored_turns
from teamrl.tasks.programming import ProgrammingTask, plan_vocabulary
from teamrl.tasks.sandbox import Sandbox
from teamrl.tasks.sandbox.calls import judge_many, judge_trusted, parse_asserts
from teamrl.workflows.base import Workflow

MAX_TESTS = 8


class RoleConfig(SeatConfig):
    """A pipeline role: its seat, the message kind it produces and its SOP."""

    kind: MessageKind = Field(description="the message kind this role produces: plan, code, review or tests")
    sop: str = Field(description="the role's standard operating procedure, shown at the top of its prompt")


_STAGES = ("plan", "code", "review", "tests")


def _default_roles() -> dict[str, RoleConfig]:
    return {
        "planner": RoleConfig(kind="plan", sop="Plan the steps.", max_new_tokens=40),
        "coder": RoleConfig(kind="code", sop="Write the function.", max_new_tokens=56),
        "reviewer": RoleConfig(kind="review", sop="Approve or ask for a revision.", max_new_tokens=48),
        "tester": RoleConfig(kind="tests", sop="Write asserts that catch bugs.", max_new_tokens=64),
    }


class PipelineConfig(WorkflowSettings):
    """Workflow ``pipeline``: the roles of ``order`` speak in turn (see teamrl/workflows/pipeline.py)."""

    name: str = "pipeline"
    order: list[str] = Field(default_factory=lambda: ["planner", "coder", "reviewer", "tester"])
    roles: dict[str, RoleConfig] = Field(default_factory=_default_roles)
    max_review_rounds: int = Field(1, ge=0, le=8, description="reviewer -> coder revision rounds at most")

    @model_validator(mode="after")
    def _stages(self) -> PipelineConfig:
        for name in self.order:
            if name not in self.roles:
                raise ValueError(
                    f"workflow.order names {name!r}, which is not in workflow.roles {sorted(self.roles)}"
                )
        kinds = [self.roles[r].kind for r in self.order]
        if "code" not in kinds:
            raise ValueError("workflow.order needs a role of kind 'code' (the pipeline verifies code)")
        for stage in ("review", "tests"):
            if stage in kinds and kinds.index(stage) < kinds.index("code"):
                raise ValueError(f"a '{stage}' role must come after the first 'code' role in workflow.order")
        for name, role in self.roles.items():
            if role.kind not in _STAGES:
                raise ValueError(
                    f"workflow.roles.{name}.kind is {role.kind!r}; the pipeline's kinds are {_STAGES}"
                )
        return self


WorkflowConfig = PipelineConfig  # its name before workflows were plugins


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


async def take_turn(
    team: Team,
    episode: Episode,
    task: ProgrammingTask,
    role: str,
    spec: RoleConfig,
    sections: list[tuple[str, str]],
    round_: int,
    context: dict[str, Any],
) -> Turn:
    """``role`` speaks (its SOP, the task, ``sections``); the turn and any format error join ``episode``."""
    prompt = prompt_for(role, spec.sop, task, sections)
    turn = await team.act(role, prompt, spec.kind, round=round_, context=context)
    episode.turns.append(turn)
    if turn.error:
        episode.errors.append(turn.error)
    return turn


def split_tests(content: str) -> list[str]:
    return [line.strip() for line in content.splitlines() if line.strip()][:MAX_TESTS]


async def pipeline(
    team: Team, task: ProgrammingTask, cfg: PipelineConfig, sandbox: Sandbox | None, group: int = 0
) -> Episode:
    """Play one episode and verify it. With ``sandbox=None`` it stays unverified (demonstrations)."""
    episode, state = await play_pipeline(team, task, cfg, group)
    if sandbox is not None:
        await verify(episode, task, state, sandbox)
    return episode


async def play_pipeline(
    team: Team, task: ProgrammingTask, cfg: PipelineConfig, group: int = 0
) -> tuple[Episode, PipelineState]:
    """Play the conversation only; its only awaits are ``team.act`` calls."""
    episode = Episode(task_id=task.task_id, group=group)
    state = PipelineState()
    context = {"task": task, "state": state}
    last_coder: str | None = None

    async def speak(role: str, sections: list[tuple[str, str]], round_: int = 0) -> Turn:
        return await take_turn(team, episode, task, role, cfg.roles[role], sections, round_, context)

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


class Pipeline(Workflow[PipelineConfig]):
    """``pipeline``: the roles of ``workflow.order`` speak in turn on a programming task; every code version
    and the tester's tests are judged in the sandbox."""

    Settings = PipelineConfig
    task_suite = "programming"
    task_type = ProgrammingTask
    uses_sandbox = True
    headline = [("success", "eval/solved"), ("pass fraction", "eval/outcome")]

    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        return await pipeline(team, task, self.settings, self.sandbox, group=group)

    async def demonstrate(self, team: Team, tasks: Sequence[Any]) -> list[Episode]:
        # the conversation only: demonstrations need no verdict
        return [await pipeline(team, task, self.settings, None) for task in tasks]

    def process_scores(self, episode: Episode) -> dict[str, float]:
        return process_scores(episode, self.settings.roles)

    def scored_turns(self, episode: Episode) -> list[ScoredTurn]:
        return scored_turns(episode, self.settings.roles)

    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        from teamrl.workflows.experts import pipeline_experts  # it imports this module

        experts = pipeline_experts(rng)
        return {r: experts[self.settings.roles[r].kind] for r in self.settings.order}
