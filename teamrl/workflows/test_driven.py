"""Workflow ``test_driven``: roles exchange executable evidence, not opinions (issue 18).

The Tester writes tests from the brief (and the plan, when a Planner speaks first) beside the Coder's first
version (``coder_sees_tests: true``: before it, in the Coder's prompt); the sandbox runs the brief's own
examples (``run_examples``) and the Tester's tests on every code version, and an execution report (how many
pass; each failing call with expected vs actual, or the exception) goes to the Reviewer, if there is one,
and back to the Coder. The Reviewer approves or names a failing case; without one the Coder revises while
anything in the report fails (``revise_until: examples``: while one of the brief's examples fails); at most
``max_revisions`` revisions, written by the coder or, when ``order`` has a second role of kind 'code' (a
fixer), by that role: its own adapter, so RL on the coder's first versions cannot unlearn revising (measured:
docs/results/team-value.md). The team submits the version that
passed most of what it ran, the examples counting first (``submit: best``). Hidden tests stay hidden: they
never run in a report, and only judge the versions afterwards (``teamrl.workflows.pipeline.verify``).

Credit: every code version by what it did (``first_version_credit``, ``revision_credit``): the first by its
own hidden-test pass fraction, each revision by what it changed, ranked against the same version of the
task's other episodes (``Episode.attempt_groups``).

Controls on the same prompts: ``order: [coder]`` with ``max_revisions: 0`` is the Coder alone;
``coder_writes_tests: true`` is one model doing the whole loop. Per-role scores are the pipeline's
(``teamrl.rewards.credit.process_scores``) except the tests turn's (:func:`tester_score`).

It is written on the public workflow API only, like the built-ins.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from teamrl.engine.team import RoleCall, ScriptedRole, Team
from teamrl.protocol import Episode, Message, Turn, render_message
from teamrl.protocol.settings import WorkflowSettings
from teamrl.rewards.credit import ScoredTurn, process_scores, scored_turns
from teamrl.tasks.programming import ProgrammingTask
from teamrl.tasks.sandbox import Sandbox
from teamrl.tasks.sandbox.calls import (
    Call,
    CallTest,
    UnjudgeableTest,
    judge_calls,
    parse_assert,
    parse_asserts,
    run_calls,
)
from teamrl.workflows.base import Workflow
from teamrl.workflows.branching import TurnGroupConfig, TurnGroups, turn_group_metrics
from teamrl.workflows.foresight import imagine
from teamrl.workflows.pipeline import PipelineState, RoleConfig, split_tests, take_turn, verify
from teamrl.workflows.turn_scores import programming_turn_score

NOT_RUN = "(not run)"
_TESTS = "<tests>"  # a stand-in role name for the tests turn when the coder writes it


def _default_roles() -> dict[str, RoleConfig]:
    return {
        "planner": RoleConfig(kind="plan", sop="Plan the steps.", max_new_tokens=40),
        "tester": RoleConfig(kind="tests", sop="Write asserts from the brief.", max_new_tokens=64),
        "coder": RoleConfig(kind="code", sop="Write the function; make the tests pass.", max_new_tokens=56),
        "reviewer": RoleConfig(
            kind="review", sop="Read the test report; approve or name the failing case.", max_new_tokens=48
        ),
    }


class TDDConfig(WorkflowSettings):
    """Workflow ``test_driven``: tests first, then code, then run, report, revise."""

    name: str = "test_driven"
    order: list[str] = Field(default_factory=lambda: ["planner", "tester", "coder", "reviewer"])
    roles: dict[str, RoleConfig] = Field(default_factory=_default_roles)
    max_revisions: int = Field(2, ge=0, le=8, description="coder revisions after an execution report at most")
    report_failures: int = Field(3, ge=1, le=16, description="failing tests shown in a report at most")
    submit: Literal["best", "last"] = Field(
        "best",
        description="which code version the team submits: best = the one that passed most of what the "
        "report ran (the brief's examples first, then the team's tests; the latest of equals), last = the "
        "last one written",
    )
    revise_until: Literal["report", "examples"] = Field(
        "examples",
        description="without a reviewer, when the coder stops revising: report = once everything in the "
        "execution report passes (the brief's examples and the team's tests); examples = once the brief's "
        "examples pass (the team's tests are still run and shown, and decide between versions; they may be "
        "wrong, the examples are the spec); without examples to run, as report",
    )
    coder_writes_tests: bool = Field(
        False,
        description="one model does the whole loop: the code role also writes the tests (with the tests SOP "
        "below) and no role of kind 'tests' may be in workflow.order; the control of issue 18",
    )
    tests_sop: str = Field(
        "Write asserts from the brief.", description="SOP of the tests turn (coder_writes_tests)"
    )
    run_examples: bool = Field(
        True,
        description="run the brief's own examples (public, as an issue's examples are) in every execution "
        "report, beside the team's tests; hidden tests are never run there",
    )
    coder_sees_tests: bool = Field(
        False,
        description="show the team's tests in the coder's prompt (tests before the code); false: they are "
        "written beside the code and reach the coder through the execution report only",
    )
    revision_credit: Literal["own", "episode", "none"] = Field(
        "own",
        description="how the learner credits a code revision: own = by what it changed (its version's "
        "hidden-test pass fraction minus the previous version's), ranked against the same revision round of "
        "the task's other episodes; episode = with the episode's advantage, like the role's first version "
        "(then a revision that breaks right code shares the reward of the right version the team submits); "
        "none = revisions are not learned from in RL (they keep what SFT taught them)",
    )
    first_version_credit: Literal["own", "episode"] = Field(
        "own",
        description="how the learner credits the code role's first version: own = by its own hidden-test "
        "pass fraction, ranked against the first versions of the task's other episodes (what the version "
        "did, whatever the revisions after it did: a wrong first version that a revision fixes is not "
        "paid like a right one); episode = with the episode's advantage (the submitted version's outcome)",
    )
    imagine: bool = Field(
        False,
        description="before handing over its first version, the coder predicts its execution report with its "
        "teammate model (Team.foresight, teamrl.workflows.foresight) and, while it expects failure, writes "
        "another version (imagine_tries in all), keeping the one it expects most of; the others' tokens are "
        "counted in the episode's verifier['foresight'] (for evaluation and deployment: in RL the kept "
        "version is a selected sample)",
    )
    imagine_tries: int = Field(3, ge=1, le=16, description="first versions written at most with imagine")
    imagine_threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description="imagine: the predicted chance of passing below which the coder tries again",
    )
    turn_group: TurnGroupConfig = Field(
        default_factory=TurnGroupConfig,
        description="turn-level groups (AT-GRPO): K candidates of a trained role's turn, scored one by one "
        "(teamrl.workflows.turn_scores), one continuing the episode; RL rollouts only",
    )

    @model_validator(mode="after")
    def _stages(self) -> TDDConfig:
        for name in self.order:
            if name not in self.roles:
                raise ValueError(
                    f"workflow.order names {name!r}, which is not in workflow.roles {sorted(self.roles)}"
                )
        kinds = [self.roles[r].kind for r in self.order]
        if kinds.count("code") not in (1, 2):
            raise ValueError(
                "workflow.order needs one role of kind 'code' (the coder), or two (the coder, then a fixer "
                f"that writes the revisions) (got {kinds})"
            )
        if kinds.count("code") == 2 and self.max_revisions == 0:
            raise ValueError(
                f"workflow.order has a second role of kind 'code' ({self.code_roles()[1]!r}, the fixer), "
                "which writes revisions, but workflow.max_revisions is 0: raise it or drop the fixer"
            )
        if kinds.count("code") == 2 and len(set(self.code_roles())) == 1:
            raise ValueError(
                f"workflow.order names {self.code_roles()[0]!r} twice; the coder speaks in every round "
                "already (a fixer is a second role of kind 'code', with its own name and adapter)"
            )
        if kinds.count("tests") > 1:
            raise ValueError(f"workflow.order may have one role of kind 'tests' at most (got {kinds})")
        if self.coder_writes_tests and "tests" in kinds:
            raise ValueError(
                "workflow.coder_writes_tests: the code role writes the tests, so workflow.order may not also "
                f"have a role of kind 'tests' (got {kinds})"
            )
        if "tests" in kinds and kinds.index("tests") > kinds.index("code"):
            raise ValueError("the 'tests' role must come before the 'code' role: tests are written first")
        if "review" in kinds and kinds.index("review") < kinds.index("code"):
            raise ValueError("a 'review' role must come after the 'code' role in workflow.order")
        return self

    def code_roles(self) -> tuple[str, str]:
        """(coder, fixer): the role that writes the first code version and the one that writes the
        revisions; the same role unless ``order`` has a second role of kind 'code'."""
        code = [r for r in self.order if self.roles[r].kind == "code"]
        return code[0], code[-1]


def execution_report(tests: Sequence[CallTest], results: Sequence[Any], function: str, shown: int) -> str:
    """How many of the tests pass, then at most ``shown`` failing calls: expected vs actual, or the error."""
    if not tests:
        return "no test to run"
    failing = [r.describe(t, function) for t, r in zip(tests, results, strict=True) if not r.passes(t)]
    lines = [f"{len(tests) - len(failing)} of {len(tests)} tests pass"]
    lines += [f"FAIL {line[:160]}" for line in failing[:shown]]
    return "\n".join(lines)


def submitted_version(
    on_versions: Sequence[Sequence[bool]], n_versions: int, rule: str, n_examples: int = 0
) -> int:
    """The version the team submits: with ``rule`` "best" the one whose run passed most (``on_versions``,
    one list per version: the brief's ``n_examples`` examples first, then the team's own tests), the
    examples counting before the team's tests (they are the spec; the team's tests may be wrong) and the
    latest of equals; else (or without results) the last."""
    if rule != "best" or len(on_versions) != n_versions or n_versions == 0:
        return n_versions - 1
    return max(
        range(n_versions),
        key=lambda k: (sum(on_versions[k][:n_examples]), sum(on_versions[k][n_examples:]), k),
    )


def submit(episode: Episode, on_versions: Sequence[Sequence[bool]], rule: str, n_examples: int = 0) -> None:
    """Judge the episode on the submitted version (see :func:`submitted_version`): its hidden-test pass
    fraction is the outcome. The team chooses it from what it ran, never from the hidden tests."""
    code_pass: list[float] = episode.verifier.get("code_pass", [])  # type: ignore[assignment]
    if not code_pass:
        return
    k = submitted_version(on_versions, len(code_pass), rule, n_examples)
    episode.verifier["submitted"] = k
    episode.outcome = code_pass[k]
    episode.verifier["solved"] = code_pass[k] == 1.0


def credit_revisions(
    episode: Episode, code_turns: Sequence[int], first: bool = False, revisions: str = "own"
) -> None:
    """Give each code revision (version k >= 1) its own reward, what it changed: its hidden-test pass
    fraction minus the previous version's, grouped with the k-th versions of the task's other episodes
    (``Episode.attempt_groups``); with ``first`` the first version too, by its own pass fraction (what it
    changed from nothing). ``revisions`` (``workflow.revision_credit``): ``none``: the revisions get 0 in a
    group of their own, so no advantage (they are not learned from); ``episode``: they are left to the
    episode's advantage. A turn already scored alone (a turn-level group's) keeps its reward."""
    code_pass: list[float] = episode.verifier.get("code_pass", [])  # type: ignore[assignment]
    if first and code_turns and code_pass and code_turns[0] not in episode.attempt_rewards:
        episode.attempt_rewards[code_turns[0]] = code_pass[0]
        episode.attempt_groups[code_turns[0]] = "version 0"
    if revisions == "episode":
        return
    learned = revisions == "own"
    for k in range(1, min(len(code_turns), len(code_pass))):
        turn = code_turns[k]
        if turn in episode.attempt_rewards:
            continue
        episode.attempt_rewards[turn] = code_pass[k] - code_pass[k - 1] if learned else 0.0
        episode.attempt_groups[turn] = f"revision {k}" if learned else "revision (not learned)"


def examples_as_tests(task: ProgrammingTask) -> list[CallTest]:
    """The brief's examples (``f(x) == y``) as calls and expected values; one that cannot be judged so is
    left out."""
    tests, _ = parse_asserts([f"assert {e}" for e in task.examples], task.func_name)
    return tests


def named_call(text: str, function: str) -> Call | None:
    """The first call of ``function`` with literal arguments that ``text`` names (a review's failing case,
    ``revise: f(3) returned 4, expected 5``); None when it names none that can be judged."""
    start = text.find(f"{function}(")
    while start != -1:
        # the shortest span up to a ")" that parses as a call (a ")" inside a string argument does not)
        for end in (i for i in range(start, min(len(text), start + 400)) if text[i] == ")"):
            try:
                return parse_assert(f"assert {text[start : end + 1]} == 0", function).call
            except UnjudgeableTest:
                continue
        start = text.find(f"{function}(", start + 1)
    return None


async def judge_review_cases(
    episode: Episode, task: ProgrammingTask, state: PipelineState, sandbox: Sandbox
) -> dict[str, bool]:
    """For each review that asks for a revision: is the case it names a real failure, i.e. does the code it
    reviewed return something else there than the reference (which must itself return)? Keyed by the
    review's turn index (as a string: JSON keys); a review naming no judgeable case maps to False."""
    out: dict[str, bool] = {}
    for turn_index, version in state.reviews:
        message = episode.turns[turn_index].message
        if message is None or message.verdict != "revise" or version >= len(state.code):
            continue
        call = named_call(message.content or "", task.func_name)
        if call is None:
            out[str(turn_index)] = False
            continue
        (want,), _ = await run_calls(sandbox, task.reference_solution, task.func_name, [call])
        (got,), _ = await run_calls(sandbox, state.code[version], task.func_name, [call])
        out[str(turn_index)] = want.error is None and not got.passes(CallTest(call, want.value))
    return out


def review_score(episode: Episode, turn_index: int, version: int) -> float:
    """A review's score: its verdict right (approve exactly when the reviewed version passes the hidden
    tests); a request for revision half that and half whether the case it names is a real failure."""
    code_pass: list[float] = episode.verifier.get("code_pass", [])  # type: ignore[assignment]
    passes = version < len(code_pass) and code_pass[version] == 1.0
    message = episode.turns[turn_index].message
    verdict = message.verdict if message else None
    right = float(verdict is not None and (verdict == "approve") == passes)
    cases: dict[str, bool] = episode.verifier.get("review_cases", {})  # type: ignore[assignment]
    if verdict != "revise" or str(turn_index) not in cases:
        return right
    return (right + float(cases[str(turn_index)])) / 2


def tester_score(verifier: dict[str, Any]) -> float:
    """See :meth:`TDD.process_scores`."""
    on_reference: list[bool] = verifier.get("tests_on_reference", [])
    on_buggy: list[bool] = verifier.get("tests_on_buggy", [])
    if not on_reference or not all(on_reference):
        return 0.0
    catches_buggy = not all(on_buggy)
    code_pass: list[float] = verifier.get("code_pass", [])
    on_versions: list[list[bool]] = verifier.get("tests_on_versions", [])
    wrong = [k for k, p in enumerate(code_pass) if p < 1.0 and k < len(on_versions)]
    if not wrong:
        return 0.5 + 0.5 * catches_buggy
    caught = sum(not all(on_versions[k]) for k in wrong) / len(wrong)
    return 0.5 + 0.25 * catches_buggy + 0.25 * caught


class TDD(Workflow[TDDConfig]):
    """``test_driven`` (see the module)."""

    Settings = TDDConfig
    task_suite = "programming"
    task_type = ProgrammingTask
    uses_sandbox = True
    demonstrations_need_sandbox = True  # the reports in the experts' prompts are real ones
    headline = [("success", "eval/solved"), ("pass fraction", "eval/outcome")]

    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        return await self._play(team, task, group, judge=True)

    async def _play(self, team: Team, task: Any, group: int, judge: bool) -> Episode:
        """One episode; ``judge``: run the hidden tests and the rest of the verifier afterwards (the
        experts' demonstrations need only their turns, whose reports are real either way)."""
        cfg, sandbox = self.settings, self.sandbox
        episode = Episode(task_id=task.task_id, group=group)
        state = PipelineState()
        context: dict[str, Any] = {"task": task, "state": state, "report": NOT_RUN}
        role_of = {cfg.roles[r].kind: r for r in cfg.order}
        coder, fixer = cfg.code_roles()
        parsed: list[CallTest] = []
        groups = TurnGroups(cfg.turn_group, team, episode)

        async def speak(role: str, sections: list[tuple[str, str]], round_: int = 0) -> Turn:
            spec = cfg.roles[role]
            if groups.active(role):  # K candidates from this history, each taken aside; one continues

                async def act() -> Turn:
                    aside = Episode(task_id=task.task_id, group=group)
                    return await take_turn(team, aside, task, role, spec, sections, round_, context)

                score = programming_turn_score(spec.kind, task, sandbox, lambda: state.code[-1])
                return await groups.take(act, score)
            return await take_turn(team, episode, task, role, spec, sections, round_, context)

        # the brief's own examples (public, like the examples of an issue) run beside the team's tests
        examples = examples_as_tests(task) if cfg.run_examples else []

        async def report(code: str) -> tuple[str, bool]:
            """The execution report of ``code`` and whether the coder is done: everything in it passed (the
            brief's examples only, with ``revise_until: examples`` and examples to run)."""
            if sandbox is None:
                return NOT_RUN, True
            if not parsed and not examples:
                return execution_report([], [], task.func_name, 0), True
            judged = await judge_calls(sandbox, code, task.func_name, [*examples, *parsed])
            passed = list(judged.passed)
            on_examples.append(passed[: len(examples)])
            on_versions.append(passed[len(examples) :])
            if judged.error is not None:
                return f"the tests did not run: {judged.error}", False
            parts = []
            for label, tests, results in (
                ("examples", examples, judged.results[: len(examples)]),
                ("tests", parsed, judged.results[len(examples) :]),
            ):
                if tests:
                    text = execution_report(tests, results, task.func_name, cfg.report_failures)
                    parts.append(f"{label}: {text}" if examples else text)
            done = passed[: len(examples)] if cfg.revise_until == "examples" and examples else passed
            return "\n".join(parts), all(done)

        shown: list[tuple[str, str]] = []
        reports: list[str] = []  # one per code version
        on_versions: list[list[bool]] = []  # the tester's tests on each code version (when they ran)
        on_examples: list[list[bool]] = []  # the brief's examples on each code version (when they ran)
        if "plan" in role_of:
            turn = await speak(role_of["plan"], [])
            state.plan = turn.message.content if turn.message else ""
            shown.append(("plan", state.plan or "(none)"))
        coder_shown = list(shown)
        if "tests" in role_of or cfg.coder_writes_tests:
            if "tests" in role_of:
                turn = await speak(role_of["tests"], shown)
            else:  # one model does the whole loop: the coder writes the tests too
                spec = cfg.roles[coder].model_copy(update={"kind": "tests", "sop": cfg.tests_sop})
                turn = await take_turn(team, episode, task, coder, spec, shown, 0, context)
            state.tests = split_tests(turn.message.content) if turn.message else []
            state.tests_turn = len(episode.turns) - 1
            parsed, _ = parse_asserts(state.tests, task.func_name)
            if cfg.coder_sees_tests:
                coder_shown.append(("tests", "\n".join(state.tests) or "(none)"))
        review: str | None = None
        for revision in range(cfg.max_revisions + 1):
            sections = list(coder_shown)
            if state.code:
                sections += [
                    ("previous solution", state.code[-1] or "(none)"),
                    ("test report", context["report"]),
                ]
                if review is not None:
                    sections.append(("review", review))
            turn = await speak(fixer if revision else coder, sections, revision)
            if revision == 0 and cfg.imagine:
                turn = await self._imagine(team, episode, task, coder, sections, context, turn)
            state.code.append(turn.message.content if turn.message else "")
            state.code_turns.append(len(episode.turns) - 1)
            context["report"], passing = await report(state.code[-1])
            reports.append(context["report"])
            if "review" in role_of:
                seen = [("solution", state.code[-1] or "(none)"), ("test report", context["report"])]
                verdict = await speak(role_of["review"], seen, revision)
                state.reviews.append((len(episode.turns) - 1, len(state.code) - 1))
                if verdict.message is None or verdict.message.verdict != "revise":
                    break
                review = verdict.message.content or "please fix it"
            elif passing:
                break
        if sandbox is not None and judge:
            await verify(episode, task, state, sandbox)
            if state.reviews:
                episode.verifier["review_cases"] = await judge_review_cases(episode, task, state, sandbox)
        episode.verifier["reports"] = reports
        if "foresight" in context:
            episode.verifier["foresight"] = context["foresight"]
        if state.tests_turn is not None:
            episode.verifier["tests_turn"] = state.tests_turn
        complete = len(on_versions) == len(state.code)
        if complete:
            episode.verifier["tests_on_versions"] = on_versions
            if examples:
                episode.verifier["examples_on_versions"] = on_examples
        if sandbox is not None and judge:
            evidence = [[*e, *t] for e, t in zip(on_examples, on_versions, strict=True)] if complete else []
            submit(episode, evidence, cfg.submit, len(examples))
            first = cfg.first_version_credit == "own"
            credit_revisions(episode, state.code_turns, first, cfg.revision_credit)
        return episode

    async def _imagine(
        self,
        team: Team,
        episode: Episode,
        task: Any,
        coder: str,
        sections: list[tuple[str, str]],
        context: dict[str, Any],
        turn: Turn,
    ) -> Turn:
        """``imagine``: further first versions while the coder's teammate model expects the report to fail;
        the one it expects most of takes the first's place in the episode (see ``TDDConfig.imagine``)."""
        cfg = self.settings
        predict = team.foresight.get(coder)
        if predict is None:
            raise ValueError(
                f"workflow.imagine needs a teammate model for {coder!r} in Team.foresight "
                "(teamrl.workflows.foresight; benchmarks/foresight.py fits one): none is set"
            )

        async def another(k: int) -> Turn:
            aside = Episode(task_id=episode.task_id, group=episode.group)
            context["sample"] = k  # another sample of the same prompt, also for a shared role
            try:
                return await take_turn(team, aside, task, coder, cfg.roles[coder], sections, 0, context)
            finally:
                context.pop("sample", None)

        kept, tries, chances = await imagine(turn, predict, another, cfg.imagine_tries, cfg.imagine_threshold)
        if kept:
            episode.turns[-1] = tries[kept]
            if turn.error and episode.errors and episode.errors[-1] == turn.error:
                episode.errors.pop()
            error = tries[kept].error
            if error:
                episode.errors.append(error)
        episode.discarded.extend(t for i, t in enumerate(tries) if i != kept)  # their tokens were spent
        context["foresight"] = {  # into the verifier once the episode is verified
            "predicted": chances,
            "kept": kept,
            "extra_tokens": sum(len(t.completion_ids) for i, t in enumerate(tries) if i != kept),
        }
        return tries[kept]

    @classmethod
    def check_config(cls, settings: TDDConfig, config: Any) -> None:
        settings.turn_group.check(settings.roles, config)

    def metrics(self, episodes: list[Episode], prefix: str) -> dict[str, float]:
        return turn_group_metrics(episodes, prefix)

    def process_scores(self, episode: Episode) -> dict[str, float]:
        """The pipeline's scores, except the tester's: half for tests that all pass on the reference; the
        other half, when they do, for catching wrong code: the buggy solution and, where the coder wrote
        versions that fail hidden tests, the share of those its tests failed (a quarter each)."""
        scores = process_scores(episode, self.settings.roles)
        tester = next((r for r in self.settings.order if self.settings.roles[r].kind == "tests"), None)
        if tester is not None and tester in scores:
            scores[tester] = tester_score(episode.verifier)
        t = episode.verifier.get("tests_turn")
        if self.settings.coder_writes_tests and isinstance(t, int) and t < len(episode.turns):
            coder = episode.turns[t].role  # one model's loop: its tests count like its code
            scores[coder] = (scores.get(coder, 0.0) + tester_score(episode.verifier)) / 2
        reviews: list[list[int]] = episode.verifier.get("reviews", [])  # type: ignore[assignment]
        by_role: dict[str, list[float]] = {}
        for turn_index, version in reviews:
            role = episode.turns[turn_index].role
            by_role.setdefault(role, []).append(review_score(episode, turn_index, version))
        scores.update({role: sum(v) / len(v) for role, v in by_role.items()})
        return scores

    def scored_turns(self, episode: Episode) -> list[ScoredTurn]:
        """The pipeline's per-turn scores, the tests and review turns scored as :meth:`process_scores`
        scores them."""
        t = episode.verifier.get("tests_turn")
        if not isinstance(t, int) or t >= len(episode.turns):
            out = scored_turns(episode, self.settings.roles)
        else:  # the tests turn (the coder's own with coder_writes_tests) is scored as tests, by tester_score
            turns = list(episode.turns)
            turns[t] = turns[t].model_copy(update={"role": _TESTS})
            roles = {**self.settings.roles, _TESTS: RoleConfig(kind="tests", sop="")}
            out = scored_turns(episode.model_copy(update={"turns": turns}), roles)
            out[t] = ScoredTurn(episode.turns[t].role, out[t].step, tester_score(episode.verifier))
        reviews: list[list[int]] = episode.verifier.get("reviews", [])  # type: ignore[assignment]
        for turn_index, version in reviews:
            out[turn_index] = ScoredTurn(
                out[turn_index].role, out[turn_index].step, review_score(episode, turn_index, version)
            )
        return out

    async def demonstrate(self, team: Team, tasks: Sequence[Any]) -> list[Episode]:
        """The experts' episodes, played concurrently (their sandbox runs overlap; at most the sandbox's
        ``max_parallel`` at once) and not judged (only their turns are learned from). Deterministic: the
        experts draw per task (see :meth:`experts`), so the order the episodes interleave in changes
        nothing, and the base built from them keeps its key."""
        return list(await asyncio.gather(*(self._play(team, task, 0, judge=False) for task in tasks)))

    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        """The pipeline's experts, except that the reviewer reads the report: it names the first failing
        case while one fails, else approves; the coder's first version is buggy 30% of the time (drawn per
        task from ``rng``'s first draw, so any interleaving of episodes gives the same demonstrations) and
        every revision is the reference."""
        salt = rng.getrandbits(64)

        def text(call: RoleCall, kind: str, content: str, verdict: str | None = None) -> str:
            return render_message(Message(role=call.role, kind=kind, content=content, verdict=verdict))  # type: ignore[arg-type]

        def plan(call: RoleCall) -> str:
            return text(call, "plan", call.context["task"].plan)

        def tests(call: RoleCall) -> str:
            return text(call, "tests", "\n".join(call.context["task"].demo_tests))

        def code(call: RoleCall) -> str:
            if call.kind == "tests":  # coder_writes_tests: the one model's tests turn
                return tests(call)
            task = call.context["task"]
            buggy = call.round == 0 and random.Random(f"{salt}:{task.task_id}").random() < 0.3
            return text(call, "code", (task.buggy_solution if buggy else task.reference_solution).strip("\n"))

        def review(call: RoleCall) -> str:
            report: str = call.context["report"]
            failing = [line.removeprefix("FAIL ") for line in report.splitlines() if line.startswith("FAIL ")]
            if failing:
                return text(call, "review", failing[0], "revise")
            return text(call, "review", "", "approve")

        kinds = {"plan": plan, "tests": tests, "code": code, "review": review}
        return {r: kinds[self.settings.roles[r].kind] for r in self.settings.order}
