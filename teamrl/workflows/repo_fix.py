"""Workflow ``repo_fix``: fix an issue in a small generated repository (issue 18, the seed's scene).

The task (:mod:`teamrl.tasks.repos`) is a repository of 2 to 4 files, an issue reporting a symptom at the
top-level call, and the repository's own tests, one failing. The Planner names the file and function to
change (``util.py:calc``); the Tester writes asserts that reproduce the issue, before any fix; the Coder
writes a whole new version of one function (``# util.py`` then the def), seeing the plan and the tests; the
change is applied and the repository's tests and the Tester's run in the sandbox; an execution report goes
back to the Coder, who revises while one fails, at most ``max_revisions`` times. Hidden tests stay hidden
until the verifier judges every version on them. A change that cannot be applied (an unknown file, a def of
another name or other parameters, anything besides one def) is refused: a format error of its turn, a
version that passes nothing.

Scores: the Planner 1 when it names the bug's file and function (0.5 the right file only, 0 for naming
more than one place); the Tester ``test_driven``'s (half for asserts right on the fixed repository, the
other half for catching the buggy one and the Coder's wrong versions); the Coder the pipeline's (its first
version's pass fraction, or its revisions' improvements). Outcome: the final version's hidden-test pass
fraction; solved when it is 1.

It is written on the public workflow API only, like the built-ins.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from teamrl.engine.team import RoleCall, ScriptedRole, Team
from teamrl.protocol import Episode, Message, render_message
from teamrl.protocol.settings import WorkflowSettings
from teamrl.rewards.credit import process_scores
from teamrl.tasks.repos import (
    Change,
    ChangeError,
    RepoTask,
    RepoTest,
    apply_change,
    judge_repo,
    parse_change,
    parse_repo_tests,
    report_tests,
)
from teamrl.tasks.sandbox.calls import SandboxLike
from teamrl.workflows.base import Workflow
from teamrl.workflows.pipeline import RoleConfig, split_tests
from teamrl.workflows.test_driven import execution_report, tester_score

_LOCATION = re.compile(r"([A-Za-z_]\w*\.py)\s*:\s*([A-Za-z_]\w*)")


def _default_roles() -> dict[str, RoleConfig]:
    return {
        "planner": RoleConfig(kind="plan", sop="Name the file and function to fix.", max_new_tokens=16),
        "tester": RoleConfig(kind="tests", sop="Write asserts that reproduce the issue.", max_new_tokens=64),
        "coder": RoleConfig(kind="code", sop="Rewrite one function to fix the issue.", max_new_tokens=48),
    }


class RepoFixConfig(WorkflowSettings):
    """Workflow ``repo_fix``: plan a location, reproduce the issue, change one function, run, revise."""

    name: str = "repo_fix"
    order: list[str] = Field(default_factory=lambda: ["planner", "tester", "coder"])
    roles: dict[str, RoleConfig] = Field(default_factory=_default_roles)
    max_revisions: int = Field(2, ge=0, le=8, description="coder revisions after an execution report at most")
    report_failures: int = Field(2, ge=1, le=16, description="failing tests shown in a report at most")

    @model_validator(mode="after")
    def _stages(self) -> RepoFixConfig:
        for name in self.order:
            if name not in self.roles:
                raise ValueError(
                    f"workflow.order names {name!r}, which is not in workflow.roles {sorted(self.roles)}"
                )
        kinds = [self.roles[r].kind for r in self.order]
        if kinds.count("code") != 1 or kinds[-1] != "code":
            raise ValueError(f"workflow.order needs exactly one role of kind 'code', last (got {kinds})")
        for kind in ("plan", "tests"):
            if kinds.count(kind) > 1:
                raise ValueError(f"workflow.order has at most one role of kind {kind!r} (got {kinds})")
        if "review" in kinds:
            raise ValueError("repo_fix has no 'review' stage: the execution report drives the revisions")
        return self


def plan_location(plan: str | None) -> tuple[str, str] | None:
    """The one ``file.py:function`` a plan names; None when it names none, or more than one place."""
    found = {(m.group(1), m.group(2)) for m in _LOCATION.finditer(plan or "")}
    return found.pop() if len(found) == 1 else None


def plan_score(plan: str | None, task: RepoTask) -> float:
    """1 for the bug's file and function, 0.5 for its file only, else 0."""
    named = plan_location(plan)
    if named is None:
        return 0.0
    return 1.0 if named == (task.bug_file, task.bug_function) else 0.5 * (named[0] == task.bug_file)


@dataclass
class _State:
    plan: str | None = None
    tests: list[RepoTest] = field(default_factory=list)
    tests_turn: int | None = None
    changes: list[Change | None] = field(default_factory=list)  # None: refused
    code_turns: list[int] = field(default_factory=list)
    on_versions: list[list[bool] | None] = field(default_factory=list)  # tester's tests; None: not run


class RepoFix(Workflow[RepoFixConfig]):
    """``repo_fix`` (see the module)."""

    Settings = RepoFixConfig
    task_suite = "repo"
    task_type = RepoTask
    uses_sandbox = True
    demonstrations_need_sandbox = True  # the reports in the coder's prompts are real ones
    headline = [
        ("success", "eval/solved"),
        ("pass fraction", "eval/outcome"),
        ("plan right", "eval/plan_right"),
    ]

    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        return await self._play(team, task, group, verify=True)

    async def demonstrate(self, team: Team, tasks: Sequence[Any]) -> list[Episode]:
        # the conversation with its real reports; demonstrations need no verdict on the hidden tests
        return [await self._play(team, task, 0, verify=False) for task in tasks]

    async def _play(self, team: Team, task: Any, group: int, verify: bool) -> Episode:
        cfg, sandbox = self.settings, self.sandbox
        episode = Episode(task_id=task.task_id, group=group)
        state = _State()
        context: dict[str, Any] = {"task": task, "state": state, "report": ""}
        role_of = {cfg.roles[r].kind: r for r in cfg.order}
        functions = [fn for fn, _ in task.functions]
        shown: list[tuple[str, str]] = []

        async def speak(role: str, sections: list[tuple[str, str]], round_: int = 0) -> Message | None:
            spec = cfg.roles[role]
            lines = [f"### {role}: {spec.sop}", task.brief()]
            lines += [f"{label}:{chr(10) if chr(10) in text else ' '}{text}" for label, text in sections]
            turn = await team.act(role, "\n".join(lines) + "\n", spec.kind, round=round_, context=context)
            episode.turns.append(turn)
            if turn.error:
                episode.errors.append(turn.error)
            return turn.message

        if "plan" in role_of:
            message = await speak(role_of["plan"], [])
            state.plan = message.content if message else ""
            shown.append(("plan", state.plan or "(none)"))
        if "tests" in role_of:
            message = await speak(role_of["tests"], shown)
            state.tests_turn = len(episode.turns) - 1
            state.tests, refused = parse_repo_tests(
                split_tests(message.content) if message else [], functions
            )
            if refused:
                episode.verifier["tests_refused"] = [f"{line}  ({reason})" for line, reason in refused]
                self._malformed(
                    episode, state.tests_turn, f"{len(refused)} test(s) cannot be judged: {refused[0][1]}"
                )
            shown.append(("tests", "\n".join(t.text() for t in state.tests) or "(none)"))
        coder = role_of["code"]
        for revision in range(cfg.max_revisions + 1):
            sections = list(shown)
            if state.code_turns:
                previous = episode.turns[state.code_turns[-1]].message
                sections += [("previous change", previous.content if previous else "(none)")]
                sections += [("test report", context["report"])]
            message = await speak(coder, sections, revision)
            state.code_turns.append(len(episode.turns) - 1)
            passing = await self._run(
                episode, task, state, message.content if message else "", context, sandbox
            )
            if passing:
                break
        if sandbox is not None and verify:
            await self._verify(episode, task, state, sandbox)
        return episode

    def _malformed(self, episode: Episode, index: int, error: str) -> None:
        turn = episode.turns[index]
        if turn.error is None:
            turn.error = error
            episode.errors.append(error)

    async def _run(
        self,
        episode: Episode,
        task: RepoTask,
        state: _State,
        text: str,
        context: dict[str, Any],
        sandbox: SandboxLike | None,
    ) -> bool:
        """Apply the coder's change and run the repository's tests and the tester's on it: the report goes
        to ``context["report"]``; True when every test passes."""
        try:
            change: Change | None = parse_change(task.modules, text)
        except ChangeError as exc:
            change = None
            self._malformed(episode, state.code_turns[-1], f"change refused: {exc}")
            context["report"] = f"change refused: {exc}"
        state.changes.append(change)
        state.on_versions.append(None)
        if change is None:
            return False
        if sandbox is None:
            context["report"] = "(not run)"
            return False
        tests = [*task.repo_tests, *state.tests]
        judged = await judge_repo(sandbox, apply_change(task.modules, change), tests)
        state.on_versions[-1] = judged.passed[len(task.repo_tests) :]
        if judged.error is not None:
            context["report"] = f"the tests did not run: {judged.error}"
            return False
        context["report"] = execution_report(
            report_tests(tests), judged.results, "", self.settings.report_failures
        )
        return all(judged.passed)

    async def _verify(self, episode: Episode, task: RepoTask, state: _State, sandbox: SandboxLike) -> None:
        """Judge every applied version on the hidden tests, and the tester's tests on the buggy and the fixed
        repository (ours: they could share a process, but each function's tests get one anyway)."""
        versions = list(dict.fromkeys(c for c in state.changes if c is not None))
        judged, on_buggy, on_fixed = await asyncio.gather(
            asyncio.gather(
                *(judge_repo(sandbox, apply_change(task.modules, c), task.hidden_tests) for c in versions)
            ),
            judge_repo(sandbox, task.modules, state.tests),
            judge_repo(sandbox, task.fixed_modules, state.tests),
        )
        by_version = {c: j.fraction for c, j in zip(versions, judged, strict=True)}
        code_pass = [by_version[c] if c is not None else 0.0 for c in state.changes]
        final = state.changes[-1] if state.changes else None
        episode.outcome = code_pass[-1] if code_pass else 0.0
        tests_on_buggy = on_buggy.passed if state.tests else []
        episode.verifier.update(
            {
                "code_pass": code_pass,
                "code_turns": state.code_turns,
                "reviews": [],
                "plan": state.plan,
                "plan_location": plan_location(state.plan),
                "bug_location": task.location,
                "plan_score": plan_score(state.plan, task),
                "changes": [c.location if c is not None else None for c in state.changes],
                "landed": final is not None
                and (final.file, final.function) == (task.bug_file, task.bug_function),
                "tests": [t.text() for t in state.tests],
                "tests_on_reference": on_fixed.passed if state.tests else [],
                "tests_on_buggy": tests_on_buggy,
                # a refused version left the repository as it was: the tester's tests saw the buggy one
                "tests_on_versions": [v if v is not None else tests_on_buggy for v in state.on_versions],
                "solved": bool(code_pass) and code_pass[-1] == 1.0,
            }
        )
        errors = [j.error for j in [*judged, on_buggy, on_fixed] if j.error is not None]
        if errors:  # the checks never ran (a lost Ray sandbox worker): they count as failed
            episode.verifier["sandbox_error"] = errors[0]

    def process_scores(self, episode: Episode) -> dict[str, float]:
        """The coder's as the pipeline's; the planner's :func:`plan_score`; the tester's ``test_driven``'s."""
        scores = process_scores(episode, self.settings.roles)
        for role in self.settings.order:
            kind = self.settings.roles[role].kind
            if role in scores and kind == "plan":
                scores[role] = float(episode.verifier.get("plan_score", 0.0))  # type: ignore[arg-type]
            elif role in scores and kind == "tests":
                scores[role] = tester_score(episode.verifier)
        return scores

    def metrics(self, episodes: list[Episode], prefix: str) -> dict[str, float]:
        """How often the plan named the bug's place, the final change landed there, a change was refused."""
        if not episodes:
            return {}
        n = len(episodes)
        changes: list[str | None] = [c for e in episodes for c in e.verifier.get("changes", [])]  # type: ignore[attr-defined]
        return {
            f"{prefix}plan_right": sum(e.verifier.get("plan_score") == 1.0 for e in episodes) / n,
            f"{prefix}landed": sum(bool(e.verifier.get("landed")) for e in episodes) / n,
            f"{prefix}change_refused": sum(c is None for c in changes) / max(len(changes), 1),
        }

    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        """The planner names the bug's place; the tester reproduces the issue at the top-level call and at
        the buggy function; the coder's first version is a wrong fix 30% of the time, every other one the
        reference fix."""

        def text(call: RoleCall, kind: str, content: str) -> str:
            return render_message(Message(role=call.role, kind=kind, content=content))  # type: ignore[arg-type]

        def plan(call: RoleCall) -> str:
            return text(call, "plan", call.context["task"].plan)

        def tests(call: RoleCall) -> str:
            return text(call, "tests", "\n".join(call.context["task"].demo_tests))

        def code(call: RoleCall) -> str:
            task: RepoTask = call.context["task"]
            wrong = call.round == 0 and rng.random() < 0.3
            return text(
                call,
                "code",
                f"# {task.bug_file}\n" + (task.wrong_fix if wrong else task.reference_fix).strip("\n"),
            )

        kinds = {"plan": plan, "tests": tests, "code": code}
        return {r: kinds[self.settings.roles[r].kind] for r in self.settings.order}
