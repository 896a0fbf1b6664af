"""Workflow test_driven: tests first, an execution report of the tester's tests on every code version,
revision from it; hidden tests stay hidden."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from tiny_base import train_tiny_coder

from teamrl.config import ConfigError, load_config
from teamrl.engine.team import RoleCall, Seat, Team
from teamrl.protocol import Message, render_message
from teamrl.tasks.programming import ProgrammingTaskSuite
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.tasks.sandbox.calls import CallResult, parse_asserts
from teamrl.testing import check_workflow
from teamrl.trainer.build import build_workflow
from teamrl.workflows.test_driven import execution_report


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(SandboxLimits())


def test_the_settings_put_tests_before_code() -> None:
    with pytest.raises(ConfigError, match="'tests' role must come before the 'code' role"):
        load_config(None, ["workflow.name=test_driven", "workflow.order=[planner, coder, tester, reviewer]"])
    with pytest.raises(ConfigError, match="needs one role of kind 'code'"):
        load_config(None, ["workflow.name=test_driven", "workflow.order=[tester, reviewer]"])
    assert load_config(None, ["workflow.name=test_driven", "workflow.order=[tester, coder]"]).workflow.order


def test_a_report_counts_the_passing_tests_and_shows_each_failure() -> None:
    tests, _ = parse_asserts(["assert f(1) == 2", "assert f(2) == 4", "assert f(0) == 0"], "f")
    results = [CallResult(2), CallResult(5), CallResult(error="ZeroDivisionError: division by zero")]
    report = execution_report(tests, results, "f", shown=3)
    assert report.splitlines() == [
        "1 of 3 tests pass",
        "FAIL f(2) returned 5, expected 4",
        "FAIL f(0) raised ZeroDivisionError: division by zero",
    ]
    assert execution_report(tests, results, "f", shown=1).count("FAIL") == 1


def test_a_buggy_first_version_is_reported_revised_and_the_hidden_tests_stay_hidden(sandbox: Sandbox) -> None:
    cfg = load_config(None, ["workflow.name=test_driven"])
    workflow = build_workflow(cfg, sandbox)
    task = next(
        t
        for t in ProgrammingTaskSuite(seed=0).sample("train", 40, random.Random(3))
        if t.kind == "fix" and len(t.demo_tests) >= 2
    )
    experts = workflow.experts(random.Random(0))
    prompts: list[str] = []

    def coder(call: RoleCall) -> str:  # buggy first, the reference once it has seen a report
        prompts.append(call.prompt)
        code = task.buggy_solution if call.round == 0 else task.reference_solution
        return render_message(Message(role=call.role, kind="code", content=code.strip("\n")))

    def watching(script):  # noqa: ANN001, ANN202
        def speak(call: RoleCall) -> str:
            prompts.append(call.prompt)
            return script(call)

        return speak

    team = Team({r: Seat(script=coder if r == "coder" else watching(experts[r])) for r in cfg.workflow.order})
    episode = asyncio.run(workflow.play(team, task))
    reports = episode.verifier["reports"]
    assert len(reports) == 2 and "FAIL" in reports[0] and "FAIL" not in reports[1]
    on_versions = episode.verifier["tests_on_versions"]
    assert not all(on_versions[0]) and all(on_versions[1])  # the tester's tests caught the first version
    assert episode.verifier["code_pass"][-1] == 1.0 and episode.verifier["solved"]
    roles = [t.role for t in episode.turns]
    assert roles.index("tester") < roles.index("coder")  # tests before code
    assert roles == ["planner", "tester", "coder", "reviewer", "coder", "reviewer"]
    review = episode.turns[3].message
    assert review is not None and review.verdict == "revise" and review.content in reports[0]
    shown = {line for line in task.demo_tests}
    hidden = [t.text(task.func_name) for t in task.tests if t.text(task.func_name) not in shown]
    assert hidden and not any(h in p for h in hidden for p in prompts)


def test_demonstrations_are_played_concurrently_and_do_not_depend_on_the_interleaving(
    sandbox: Sandbox,
) -> None:
    cfg = load_config(None, ["workflow.name=test_driven", "workflow.order=[planner, tester, coder]"])
    workflow = build_workflow(cfg, sandbox)
    tasks = ProgrammingTaskSuite(seed=0).sample("train", 12, random.Random(5))

    def turns(episodes) -> list[list[tuple[str, str, str]]]:  # noqa: ANN001
        return [[(t.role, t.prompt, t.text) for t in e.turns] for e in episodes]

    def demos(order: list[int]) -> list[list[tuple[str, str, str]]]:
        team = Team({r: Seat(script=s) for r, s in workflow.experts(random.Random(7)).items()})
        episodes = asyncio.run(workflow.demonstrate(team, [tasks[i] for i in order]))
        return [turns(episodes)[order.index(i)] for i in range(len(tasks))]

    forward = demos(list(range(12)))
    assert forward == demos(list(reversed(range(12))))  # a task's demonstration does not depend on the others
    revised = [d for d in forward if [r for r, _, _ in d].count("coder") > 1]
    assert revised and len(revised) < len(forward)  # some first versions are buggy, and revised from a report
    assert all("FAIL" in d[-1][1] for d in revised)  # the revision's prompt holds a real failing report
    # sequential play (judged) gives the very same turns
    team = Team({r: Seat(script=s) for r, s in workflow.experts(random.Random(7)).items()})
    assert turns([asyncio.run(workflow.play(team, t)) for t in tasks]) == forward


def test_the_built_in_passes_the_conformance_checks() -> None:
    check_workflow("test_driven")


def test_a_test_driven_team_trains(tmp_path) -> None:  # noqa: ANN001
    summary = train_tiny_coder(tmp_path, "test_driven")
    last = summary["evals"][-1]
    assert last["label"] == "after_rl" and "eval/reward/tester" in last and "eval/reward/coder" in last


@pytest.mark.parametrize(
    ("verifier", "score"),
    [
        ({"tests_on_reference": [True, False]}, 0.0),  # wrong on the reference: nothing
        ({"tests_on_reference": [True], "tests_on_buggy": [True], "code_pass": [1.0]}, 0.5),
        ({"tests_on_reference": [True], "tests_on_buggy": [False], "code_pass": [1.0]}, 1.0),
        # the coder's first version fails hidden tests: the tests caught it, and the buggy solution
        (
            {
                "tests_on_reference": [True],
                "tests_on_buggy": [False],
                "code_pass": [0.4, 1.0],
                "tests_on_versions": [[False], [True]],
            },
            1.0,
        ),
        # ... did not catch it (they pass on the wrong version), but catch the buggy solution
        (
            {
                "tests_on_reference": [True],
                "tests_on_buggy": [False],
                "code_pass": [0.4, 1.0],
                "tests_on_versions": [[True], [True]],
            },
            0.75,
        ),
    ],
)
def test_the_tester_is_paid_for_catching_wrong_code(verifier: dict, score: float) -> None:
    from teamrl.workflows.test_driven import tester_score

    assert tester_score(verifier) == pytest.approx(score)


@pytest.mark.parametrize(
    ("on_versions", "rule", "expected"),
    [
        ([[False, True], [True, True], [False, False]], "best", 1),  # most of the team's tests
        ([[True, True], [False, True], [True, True]], "best", 2),  # the latest of equals
        ([[True, True], [False, True], [False, False]], "last", 2),
        ([], "best", 2),  # no test results: the last version
    ],
)
def test_the_team_submits_the_version_its_own_tests_prefer(
    on_versions: list, rule: str, expected: int
) -> None:
    from teamrl.workflows.test_driven import submitted_version

    assert submitted_version(on_versions, 3, rule) == expected


def _fix_task():  # noqa: ANN202
    return next(
        t
        for t in ProgrammingTaskSuite(seed=0).sample("train", 40, random.Random(3))
        if t.kind == "fix" and len(t.demo_tests) >= 2
    )


def _scripted_coder(versions: list[str]):  # noqa: ANN202
    def coder(call: RoleCall) -> str:
        code = versions[min(call.round, len(versions) - 1)]
        return render_message(Message(role=call.role, kind="code", content=code.strip("\n")))

    return coder


def test_a_right_version_followed_by_a_worse_one_is_still_submitted(sandbox: Sandbox) -> None:
    """The reviewer-free loop stops once the tests pass; with a reviewer that asks for a revision anyway,
    the later, worse version is written but the team submits the one its tests prefer."""
    task = _fix_task()
    for rule, solved in (("best", True), ("last", False)):
        cfg = load_config(
            None, ["workflow.name=test_driven", f"workflow.submit={rule}", "workflow.max_revisions=1"]
        )
        workflow = build_workflow(cfg, sandbox)
        experts = workflow.experts(random.Random(0))

        def reviewer(call: RoleCall) -> str:
            return render_message(Message(role=call.role, kind="review", content="again", verdict="revise"))

        seats = {r: Seat(script=experts[r]) for r in cfg.workflow.order}
        seats["coder"] = Seat(script=_scripted_coder([task.reference_solution, task.buggy_solution]))
        seats["reviewer"] = Seat(script=reviewer)
        episode = asyncio.run(workflow.play(Team(seats), task))
        assert episode.verifier["code_pass"][0] == 1.0 and episode.verifier["code_pass"][1] < 1.0
        assert episode.verifier["solved"] is solved
        assert episode.outcome == episode.verifier["code_pass"][0 if solved else 1]


def test_one_model_can_do_the_whole_loop(sandbox: Sandbox) -> None:
    """coder_writes_tests: the coder's seat writes the tests (with the tests SOP), then code, sees the report
    and revises; its tests are scored like a tester's and count in its process score."""
    with pytest.raises(ConfigError, match="coder_writes_tests"):
        load_config(None, ["workflow.name=test_driven", "workflow.coder_writes_tests=true"])
    cfg = load_config(
        None, ["workflow.name=test_driven", "workflow.order=[coder]", "workflow.coder_writes_tests=true"]
    )
    workflow = build_workflow(cfg, sandbox)
    task = _fix_task()
    expert = workflow.experts(random.Random(0))["coder"]
    calls: list[RoleCall] = []

    def coder(call: RoleCall) -> str:
        calls.append(call)
        if call.kind == "tests":
            return expert(call)
        return _scripted_coder([task.buggy_solution, task.reference_solution])(call)

    episode = asyncio.run(workflow.play(Team({"coder": Seat(script=coder)}), task))
    assert [c.kind for c in calls] == ["tests", "code", "code"]
    assert "Write asserts from the brief." in calls[0].prompt and "test report" in calls[2].prompt
    assert [t.role for t in episode.turns] == ["coder"] * 3 and episode.verifier["solved"]
    scores = workflow.process_scores(episode)
    assert set(scores) == {"coder"} and 0.0 < scores["coder"] <= 1.0
    turns = workflow.scored_turns(episode)
    assert [t.role for t in turns] == ["coder"] * 3 and turns[0].score > 0  # the tests turn, scored as tests


def test_without_a_tests_role_the_coder_revises_from_the_examples_or_writes_once(sandbox: Sandbox) -> None:
    """order [coder]: the brief's examples alone are run and reported; with max_revisions 0 it is the
    Coder alone on the same prompts (the equal-token control of issue 18)."""
    task = _fix_task()
    for revisions, turns in ((2, 2), (0, 1)):
        cfg = load_config(
            None,
            ["workflow.name=test_driven", "workflow.order=[coder]", f"workflow.max_revisions={revisions}"],
        )
        workflow = build_workflow(cfg, sandbox)
        team = Team({"coder": Seat(script=_scripted_coder([task.buggy_solution, task.reference_solution]))})
        episode = asyncio.run(workflow.play(team, task))
        assert len(episode.turns) == turns and episode.verifier["solved"] is (turns == 2)
        assert "tests:" not in episode.turns[0].prompt
    cfg = load_config(None, ["workflow.name=test_driven", "workflow.order=[coder]"])
    episode = asyncio.run(
        build_workflow(cfg, sandbox).play(
            Team({"coder": Seat(script=_scripted_coder([task.buggy_solution, task.reference_solution]))}),
            task,
        )
    )
    first = episode.verifier["reports"][0]
    assert first.startswith("examples: ") and "FAIL" in first and "tests:" not in first
    assert episode.turns[1].prompt.count("FAIL") == first.count("FAIL")  # the coder sees the report


def test_the_examples_count_before_the_team_s_own_tests_when_submitting() -> None:
    from teamrl.workflows.test_driven import submitted_version

    # version 0 passes both examples and fails the (possibly wrong) team test; version 1 the reverse
    assert submitted_version([[True, True, False], [False, True, True]], 2, "best", n_examples=2) == 0
    assert submitted_version([[True, True, False], [False, True, True]], 2, "best", n_examples=0) == 1


def test_tests_written_beside_the_code_reach_the_coder_only_through_the_report(sandbox: Sandbox) -> None:
    task = _fix_task()
    for sees in (False, True):
        cfg = load_config(
            None,
            [
                "workflow.name=test_driven",
                "workflow.order=[tester, coder]",
                f"workflow.coder_sees_tests={sees}",
            ],
        )
        workflow = build_workflow(cfg, sandbox)
        experts = workflow.experts(random.Random(0))
        seats = {
            "tester": Seat(script=experts["tester"]),
            "coder": Seat(script=_scripted_coder([task.buggy_solution, task.reference_solution])),
        }
        episode = asyncio.run(workflow.play(Team(seats), task))
        first_code = episode.turns[1].prompt
        assert ("tests:" in first_code) is sees
        report = episode.verifier["reports"][0]
        assert "examples: " in report and "tests: " in report and report in episode.turns[2].prompt
        assert episode.verifier["solved"]


def test_a_review_names_a_case_by_its_call() -> None:
    from teamrl.workflows.test_driven import named_call

    call = named_call('revise: cap([1, (2)], "a)") returned 4, expected 5', "cap")
    assert call is not None and call.args == ([1, 2], "a)")
    assert named_call("revise: cap(x) is wrong; try cap(3)", "cap").args == (3,)  # the first judgeable one
    assert named_call("please fix it", "cap") is None and named_call("cap(__import__('os'))", "cap") is None


def test_the_reviewer_is_paid_for_right_verdicts_and_for_naming_real_failures(sandbox: Sandbox) -> None:
    """A revision request naming a call where the reviewed code really differs from the reference scores
    (verdict right + case real) / 2 = 1; naming a call where it agrees with the reference scores 0.5."""
    task = _fix_task()
    cfg = load_config(
        None,
        ["workflow.name=test_driven", "workflow.order=[tester, coder, reviewer]", "workflow.max_revisions=1"],
    )
    workflow = build_workflow(cfg, sandbox)
    experts = workflow.experts(random.Random(0))
    tests, _ = parse_asserts(list(task.hidden_tests), task.func_name)
    # a hidden input where the buggy solution fails (the reviewed code is buggy) ... and one where it passes
    from teamrl.tasks.sandbox.calls import judge_sync

    on_buggy = judge_sync(sandbox, task.buggy_solution, task.func_name, tests)
    failing = next(t for t, ok in zip(tests, on_buggy.passed, strict=True) if not ok)
    passing = next((t for t, ok in zip(tests, on_buggy.passed, strict=True) if ok), None)
    for case, real in ((failing, True), (passing, False)):
        if case is None:
            continue

        def reviewer(call: RoleCall, case=case) -> str:  # noqa: ANN001
            text = "" if call.round else f"{case.call.text(task.func_name)} is wrong"
            verdict = "approve" if call.round else "revise"
            return render_message(Message(role=call.role, kind="review", content=text, verdict=verdict))

        seats = {
            "tester": Seat(script=experts["tester"]),
            "coder": Seat(script=_scripted_coder([task.buggy_solution, task.reference_solution])),
            "reviewer": Seat(script=reviewer),
        }
        episode = asyncio.run(workflow.play(Team(seats), task))
        first_review = episode.verifier["reviews"][0][0]
        assert episode.verifier["review_cases"] == {str(first_review): real}
        # both verdicts are right (revise the buggy version, approve the fixed one)
        assert workflow.process_scores(episode)["reviewer"] == pytest.approx((1.0 + (1.0 + real) / 2) / 2)
        turns = workflow.scored_turns(episode)
        assert turns[first_review].score == pytest.approx((1.0 + real) / 2)


def test_a_revision_is_credited_with_what_it_changed(sandbox: Sandbox) -> None:
    from teamrl.protocol import Episode
    from teamrl.workflows.test_driven import credit_revisions

    episode = Episode(task_id="t", verifier={"code_pass": [1.0, 0.25, 0.75]})
    episode.attempt_rewards[9] = 0.5  # a turn already scored alone keeps its reward
    credit_revisions(episode, [2, 5, 9])
    assert episode.attempt_rewards == {5: -0.75, 9: 0.5}  # breaking right code costs; the first version: none
    assert episode.attempt_groups == {5: "revision 1"}
    # in a played episode: a right first version, then revisions made to satisfy wrong tests
    base = ["workflow.name=test_driven", "workflow.order=[tester, coder]", "workflow.revise_until=report"]
    base.append("workflow.first_version_credit=episode")  # the revisions alone here
    workflow = build_workflow(load_config(None, base), sandbox)
    task = next(
        t for t in ProgrammingTaskSuite(seed=0).sample("train", 40, random.Random(3)) if t.kind == "fix"
    )
    versions = iter([task.reference_solution, task.buggy_solution, task.buggy_solution])

    def coder(call: RoleCall) -> str:
        return render_message(Message(role=call.role, kind="code", content=next(versions).strip("\n")))

    def tester(call: RoleCall) -> str:  # a wrong test: every version fails it
        return render_message(
            Message(role=call.role, kind="tests", content=f"assert {task.func_name}(0) == 'x'")
        )

    played = asyncio.run(
        workflow.play(Team({"tester": Seat(script=tester), "coder": Seat(script=coder)}), task)
    )
    code_turns = [j for j, t in enumerate(played.turns) if t.role == "coder"]
    assert played.verifier["code_pass"][0] == 1.0 and played.verifier["solved"]  # the right one is submitted
    assert played.attempt_rewards[code_turns[1]] < 0 and played.attempt_rewards[code_turns[2]] == 0.0
    assert played.attempt_groups == {code_turns[1]: "revision 1", code_turns[2]: "revision 2"}
    versions = iter([task.reference_solution, task.buggy_solution, task.buggy_solution])
    sets = [*base, "workflow.revision_credit=episode"]
    team = Team({"tester": Seat(script=tester), "coder": Seat(script=coder)})
    assert not asyncio.run(build_workflow(load_config(None, sets), sandbox).play(team, task)).attempt_rewards
    versions = iter([task.reference_solution, task.buggy_solution, task.buggy_solution])
    sets[-1] = "workflow.revision_credit=none"  # revisions not learned from: 0 each, in one group
    unlearned = asyncio.run(build_workflow(load_config(None, sets), sandbox).play(team, task))
    assert unlearned.attempt_rewards == {code_turns[1]: 0.0, code_turns[2]: 0.0}


def _play_fixing(sandbox: Sandbox, task: Any, first: str, sets: list[str], tester: Any = None) -> Any:
    """One test_driven episode whose coder writes ``first``, then the reference at every revision; the
    tester (when ``tester`` is given) scripted by it."""
    versions = iter([first, task.reference_solution, task.reference_solution])

    def coder(call: RoleCall) -> str:
        return render_message(Message(role=call.role, kind="code", content=next(versions).strip("\n")))

    seats = {"coder": Seat(script=coder)} | ({"tester": Seat(script=tester)} if tester else {})
    workflow = build_workflow(load_config(None, ["workflow.name=test_driven", *sets]), sandbox)
    return asyncio.run(workflow.play(Team(seats), task))


def test_a_first_version_credited_on_its_own_is_not_paid_for_the_fix_after_it(sandbox: Sandbox) -> None:
    """first_version_credit: own closes the sandbagging hole: a wrong first version that a revision fixes
    is paid its own pass fraction, not the fixed submission's outcome; a right one is paid 1."""
    from teamrl.protocol import Episode
    from teamrl.workflows.test_driven import credit_revisions

    episode = Episode(task_id="t", verifier={"code_pass": [0.25, 1.0]})
    credit_revisions(episode, [2, 5], first=True)
    assert episode.attempt_rewards == {2: 0.25, 5: 0.75}
    assert episode.attempt_groups == {2: "version 0", 5: "revision 1"}
    task = next(
        t for t in ProgrammingTaskSuite(seed=0).sample("train", 40, random.Random(3)) if t.kind == "fix"
    )

    def play(first: str, credit: str, revisions: str = "own") -> Any:
        sets = ["workflow.order=[coder]", f"workflow.first_version_credit={credit}"]
        return _play_fixing(sandbox, task, first, [*sets, f"workflow.revision_credit={revisions}"])

    sandbagged, right = play(task.buggy_solution, "own"), play(task.reference_solution, "own")
    assert sandbagged.verifier["solved"] and right.verifier["solved"]  # the same outcome for the team
    first = [j for j, t in enumerate(sandbagged.turns) if t.role == "coder"][0]
    assert sandbagged.attempt_rewards[first] < right.attempt_rewards[first] == 1.0
    assert sandbagged.attempt_rewards[first] == sandbagged.verifier["code_pass"][0]
    # also with revisions on the episode's advantage; and not at all with first_version_credit: episode
    assert play(task.buggy_solution, "own", "episode").attempt_rewards == {
        first: sandbagged.attempt_rewards[first]
    }
    assert first not in play(task.buggy_solution, "episode").attempt_rewards


def test_revise_until_examples_stops_once_the_brief_examples_pass(sandbox: Sandbox) -> None:
    """With revise_until: examples a version that passes the brief's examples is not revised to satisfy
    the team's own (here wrong) tests, which still run and are shown; one that fails an example is."""
    task = next(
        t
        for t in ProgrammingTaskSuite(seed=0).sample("train", 40, random.Random(3))
        if t.kind == "fix" and t.examples
    )

    def tester(call: RoleCall) -> str:  # a wrong test: every version fails it
        return render_message(
            Message(role=call.role, kind="tests", content=f"assert {task.func_name}(0) == 'x'")
        )

    def play(first: str, until: str) -> Any:
        sets = ["workflow.order=[tester, coder]", f"workflow.revise_until={until}"]
        return _play_fixing(sandbox, task, first, sets, tester)

    right = play(task.reference_solution, "examples")
    assert len(right.verifier["code_pass"]) == 1 and right.verifier["solved"]
    assert right.verifier["tests_on_versions"] == [[False]]  # the team's test ran and failed
    assert "FAIL" in right.verifier["reports"][0]
    assert len(play(task.reference_solution, "report").verifier["code_pass"]) == 3
    # a version failing an example is revised (a syntax error fails them all)
    broken = play("def nothing(:", "examples")
    assert len(broken.verifier["code_pass"]) == 2 and broken.verifier["solved"]


def test_a_fixer_writes_the_revisions_with_its_own_seat(sandbox: Sandbox) -> None:
    """A second role of kind 'code' in workflow.order (a fixer) writes every revision (the coder only the
    first version); each version is credited the same way, whoever wrote it, and both roles are scored."""
    fixer = "workflow.roles.fixer={kind: code, sop: Fix it., max_new_tokens: 56}"
    with pytest.raises(ConfigError, match="max_revisions is 0"):
        load_config(
            None,
            ["workflow.name=test_driven", "workflow.order=[coder, fixer]", fixer, "workflow.max_revisions=0"],
        )
    with pytest.raises(ConfigError, match="names 'coder' twice"):
        load_config(None, ["workflow.name=test_driven", "workflow.order=[coder, coder]"])
    with pytest.raises(ConfigError, match="needs one role of kind 'code'"):
        load_config(None, ["workflow.name=test_driven", "workflow.order=[coder, fixer, coder]", fixer])
    cfg = load_config(None, ["workflow.name=test_driven", "workflow.order=[coder, fixer]", fixer])
    workflow = build_workflow(cfg, sandbox)
    task = _fix_task()
    calls: list[RoleCall] = []

    def seat(versions: list[str]) -> Seat:
        def act(call: RoleCall) -> str:
            calls.append(call)
            return _scripted_coder(versions)(call)

        return Seat(script=act)

    broken = "def nothing(:"  # fails every example, so it is revised twice
    team = Team(
        {"coder": seat([task.buggy_solution]), "fixer": seat([broken, broken, task.reference_solution])}
    )
    episode = asyncio.run(workflow.play(team, task))
    assert [c.role for c in calls] == ["coder", "fixer", "fixer"] and [c.round for c in calls] == [0, 1, 2]
    assert calls[0].prompt.startswith("### coder: ") and calls[1].prompt.startswith("### fixer: Fix it.")
    assert "test report" in calls[1].prompt and "previous solution" in calls[1].prompt
    assert episode.verifier["solved"] and [t.role for t in episode.turns] == ["coder", "fixer", "fixer"]
    assert episode.attempt_groups == {0: "version 0", 1: "revision 1", 2: "revision 2"}
    assert episode.attempt_rewards[2] == 1.0 - episode.verifier["code_pass"][1]
    assert set(workflow.process_scores(episode)) == {"coder", "fixer"}
    # the experts demonstrate both seats: the fixer's demonstrations are the reference
    experts = workflow.experts(random.Random(0))
    assert set(experts) == {"coder", "fixer"}
    demo = asyncio.run(workflow.play(Team({r: Seat(script=s) for r, s in experts.items()}), task))
    assert all(
        t.message.content == task.reference_solution.strip("\n") for t in demo.turns if t.role == "fixer"
    )
