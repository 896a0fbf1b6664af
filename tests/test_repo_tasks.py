"""Repository tasks (teamrl/tasks/repos.py) and workflow repo_fix: generation, the split, changes applied
and judged in the sandbox, the ways a change or a test can try to earn reward without a fix, and the team
playing with its scripted experts."""

from __future__ import annotations

import asyncio
import random

import pytest
from tiny_base import train_tiny_coder

from teamrl.config import ConfigError, load_config
from teamrl.engine.team import RoleCall, Seat, Team
from teamrl.protocol import Episode, Message, render_message
from teamrl.tasks.repos import (
    ChangeError,
    RepoSuite,
    RepoTask,
    RepoTasksConfig,
    apply_change,
    build_repo,
    judge_repo,
    parse_change,
    parse_repo_tests,
)
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.testing import check_workflow
from teamrl.trainer.build import build_workflow
from teamrl.workflows.repo_fix import RepoFix, plan_location, plan_score


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(SandboxLimits())


@pytest.fixture(scope="module")
def tasks() -> list[RepoTask]:
    return RepoSuite(RepoTasksConfig(modules=(2, 4), difficulty=(1, 2))).sample("train", 12, random.Random(5))


def _judge(sandbox: Sandbox, modules, tests):  # noqa: ANN001, ANN202
    return asyncio.run(judge_repo(sandbox, modules, tests))


def _change(task: RepoTask, source: str, file: str | None = None) -> str:
    return f"# {file or task.bug_file}\n{source.strip(chr(10))}"


# ---------------------------------------------------------------- generation and the split


def test_generation_is_deterministic() -> None:
    settings = RepoTasksConfig(modules=(2, 4), difficulty=(1, 2))
    first = RepoSuite(settings).sample("train", 8, random.Random(1))
    build_repo.cache_clear()
    again = RepoSuite(settings).sample("train", 8, random.Random(1))
    assert first == again
    assert RepoSuite(settings).fixed_set("heldout", 5) == RepoSuite(settings).fixed_set("heldout", 5)
    assert len({t.task_id for t in first}) == 8


def test_a_repository_is_small_and_its_bug_is_elsewhere_than_its_symptom(tasks: list[RepoTask]) -> None:
    for task in tasks:
        assert 2 <= len(task.modules) <= 4 and task.modules[-1][0] == "app.py"
        assert all(source.count("def ") <= 2 for _, source in task.modules)
        assert task.issue_text.startswith("run(") and task.bug_file != "app.py"
        assert (task.bug_function, task.bug_file) in task.functions
        brief = task.brief()
        assert task.issue_text in brief and task.failing_test in brief
        assert not any(h.text() in brief for h in task.hidden_tests if h.text() != task.failing_test)


def test_the_failing_repo_test_fails_on_the_buggy_repo_and_passes_after_the_reference_fix(
    sandbox: Sandbox, tasks: list[RepoTask]
) -> None:
    for task in tasks[:6]:
        on_buggy = _judge(sandbox, task.modules, task.repo_tests)
        assert on_buggy.error is None
        assert on_buggy.passed == [True] * (len(task.repo_tests) - 1) + [False]  # some pass, the last fails
        assert all(_judge(sandbox, task.fixed_modules, task.repo_tests).passed)
        hidden_buggy = _judge(sandbox, task.modules, task.hidden_tests)
        assert all(_judge(sandbox, task.fixed_modules, task.hidden_tests).passed)
        assert hidden_buggy.passed.count(False) >= 3  # the bug shows at its function and at run()
        failing = {t.function for t, ok in zip(task.hidden_tests, hidden_buggy.passed, strict=True) if not ok}
        assert failing == {task.bug_function, "run"}


def test_train_and_heldout_are_split_by_the_fix_not_names() -> None:
    suite = RepoSuite(RepoTasksConfig(modules=(2, 3)))
    train = suite.sample("train", 60, random.Random(0))
    heldout = suite.sample("heldout", 30, random.Random(0))
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    assert all(not suite.is_heldout(t) for t in train) and all(suite.is_heldout(t) for t in heldout)
    # the same semantics under other function and file names falls in the same split
    parts = (("arith", ((("add", 3),),), "calc", "util"), ("cap", ((), (("above", 7),)), "cap", "core"))
    renamed = (("arith", ((("add", 3),),), "apply", "ops"), ("cap", ((), (("above", 7),)), "bound", "lib"))
    task, other = build_repo(1, parts, 0), build_repo(1, renamed, 0)
    assert other.task_id != task.task_id and other.split_position == task.split_position
    assert other.location == "ops.py:apply" and task.location == "util.py:calc"
    assert build_repo(1, parts, 1).split_position != task.split_position  # another buggy function
    assert build_repo(1, (parts[0], renamed[1]), 0).split_position == task.split_position  # the same one


def test_the_settings_check_their_ranges() -> None:
    with pytest.raises(ConfigError, match="modules must be"):
        load_config(None, ["workflow.name=repo_fix", "tasks.modules=[1, 3]"])
    with pytest.raises(ConfigError, match="difficulty must be"):
        load_config(None, ["workflow.name=repo_fix", "tasks.difficulty=[2, 1]"])
    cfg = load_config(None, ["workflow.name=repo_fix"])
    assert cfg.tasks.suite == "repo" and cfg.workflow.order == ["planner", "tester", "coder"]
    with pytest.raises(ConfigError, match="exactly one role of kind 'code', last"):
        load_config(None, ["workflow.name=repo_fix", "workflow.order=[coder, tester]"])


# ---------------------------------------------------------------- plans and changes


def test_the_plan_is_scored_by_the_place_it_names(tasks: list[RepoTask]) -> None:
    task = tasks[0]
    other = next(fn for fn, file in task.functions if fn != task.bug_function)
    assert plan_score(task.plan, task) == 1.0
    assert plan_score(f"fix {task.bug_file} : {task.bug_function}", task) == 1.0
    assert plan_score(f"{task.bug_file}:{other}", task) == 0.5
    assert plan_score(f"app.py:{task.bug_function}", task) == 0.0
    assert plan_score(f"{task.plan} or app.py:run", task) == 0.0  # naming every place is no plan
    assert plan_score("the bug is somewhere", task) == 0.0 and plan_location(None) is None


def test_a_change_replaces_one_function_in_its_file(tasks: list[RepoTask]) -> None:
    task = tasks[0]
    change = parse_change(task.modules, _change(task, task.reference_fix))
    assert change.location == task.location
    fixed = dict(apply_change(task.modules, change))
    for name, source in task.modules:
        if name != task.bug_file:
            assert fixed[name] == source
    assert task.reference_fix in fixed[task.bug_file]
    assert dict(task.fixed_modules) == fixed
    # "file.py" without the comment mark, and an indented block, are read the same way
    again = parse_change(task.modules, f"{task.bug_file}\n" + task.reference_fix)
    assert again == change


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda t: t.reference_fix, "starts with the file"),
        (lambda t: _change(t, t.reference_fix, "evil.py"), "no file evil.py"),
        (lambda t: _change(t, t.reference_fix, "test_app.py"), "no file test_app.py"),
        (
            lambda t: _change(t, t.reference_fix.replace(t.bug_function, "helper", 1)),
            "defines no function helper",
        ),
        (lambda t: _change(t, t.reference_fix + "run = lambda *a: 0\n"), "one def and nothing else"),
        (lambda t: _change(t, t.reference_fix + "def assert_equal(a, b):\n    return True\n"), "one def"),
        (lambda t: _change(t, "print('PASSED')\nexit(0)\n" + t.reference_fix), "one def"),
        (lambda t: _change(t, "import sys\n" + t.reference_fix), "one def"),
        (lambda t: _change(t, "@staticmethod\n" + t.reference_fix), "no decorators"),
        (lambda t: _change(t, t.reference_fix.replace("):", ", _=exit(0)):", 1)), "keep the parameters"),
        (lambda t: _change(t, t.reference_fix.replace("):", ") -> print('PASSED'):", 1)), "no decorators"),
        (lambda t: _change(t, "def broken(:\n"), "not Python"),
    ],
)
def test_a_change_that_is_not_one_def_of_a_known_function_is_refused(
    tasks: list[RepoTask], make, reason
) -> None:  # noqa: ANN001
    with pytest.raises(ChangeError, match=reason):
        parse_change(tasks[0].modules, make(tasks[0]))


def _hidden_fraction(sandbox: Sandbox, task: RepoTask, text: str) -> float:
    modules = apply_change(task.modules, parse_change(task.modules, text))
    return _judge(sandbox, modules, task.hidden_tests).fraction


_FORGE = """    import json, os
    line = "".join(json.dumps({"i": i, "value": True, "passed": True}) + "\\n" for i in range(16)).encode()
    def _forge():
        for fd in range(64):
            try:
                os.write(fd, line)
            except OSError:
                pass
"""


@pytest.mark.parametrize(
    "body",
    [
        "    print('PASSED')\n    exit(0)\n",
        "    import os\n    os._exit(0)\n",
        "    raise SystemExit(0)\n",
        # an object that equals everything cannot cross as data
        "    class Any:\n        def __eq__(self, other):\n            return True\n    return Any()\n",
        # rebinding names of the loader or the harness changes nothing the trusted side compares
        "    import sys\n    sys.modules['__main__'].__dict__.clear()\n    return None\n",
        # forged result lines written after the call returned: by a thread, a forked child, an exit handler
        _FORGE + "    import threading, time\n"
        "    threading.Thread(target=lambda: (time.sleep(0.02), _forge()), daemon=True).start()\n"
        "    time.sleep(0.1)\n    return None\n",
        _FORGE + "    if os.fork() == 0:\n        _forge()\n        os._exit(0)\n    return None\n",
        _FORGE + "    import atexit\n    atexit.register(_forge)\n    return None\n",
        "    import json\n    _dumps = json.dumps\n"
        "    json.dumps = lambda o, *a, **k: _dumps({'i': 0, 'value': True, 'passed': True})\n"
        "    return None\n",
    ],
)
def test_a_function_body_that_fakes_success_earns_nothing(
    sandbox: Sandbox, tasks: list[RepoTask], body: str
) -> None:
    task = tasks[1]
    head = task.reference_fix.splitlines()[0]
    fixed = _hidden_fraction(sandbox, task, _change(task, task.reference_fix))
    buggy = _judge(sandbox, task.modules, task.hidden_tests).fraction
    assert fixed == 1.0
    faked = _hidden_fraction(sandbox, task, _change(task, f"{head}\n{body}"))
    assert faked <= buggy < 1.0


def test_a_change_elsewhere_that_patches_the_buggy_function_at_call_time_does_not_solve(
    sandbox: Sandbox, tasks: list[RepoTask]
) -> None:
    task = tasks[2]
    module = task.bug_file.removesuffix(".py")
    args = next(s for f, s in task.modules if f == "app.py").split("def run(")[1].split(")")[0]
    fixed_source = task.reference_fix.replace(f"def {task.bug_function}(", "def _fixed(")
    body = "".join(f"    {line}\n" for line in fixed_source.splitlines())
    call = next(s for f, s in task.modules if f == "app.py").split("return ")[-1].strip()
    patch = (
        f"def run({args}):\n{body}    import {module}\n"
        f"    {module}.{task.bug_function} = _fixed\n"
        f"    globals()['{task.bug_function}'] = _fixed\n    return {call}\n"
    )
    fraction = _hidden_fraction(sandbox, task, f"# app.py\n{patch}")
    on_run = [t.function == "run" for t in task.hidden_tests]
    assert 0.0 < fraction < 1.0  # run() is right now, but the buggy function's own tests still fail
    judged = _judge(
        sandbox,
        apply_change(task.modules, parse_change(task.modules, f"# app.py\n{patch}")),
        task.hidden_tests,
    )
    assert all(ok for ok, is_run in zip(judged.passed, on_run, strict=True) if is_run)
    assert not all(ok for ok, is_run in zip(judged.passed, on_run, strict=True) if not is_run)


def test_a_tester_asserts_only_literal_calls_of_the_repos_functions(tasks: list[RepoTask]) -> None:
    task = tasks[0]
    functions = [fn for fn, _ in task.functions]
    lines = [
        *task.demo_tests,
        "assert print('PASSED') is None",
        "assert run(__import__('os').getpid()) == 1",
        "assert True",
        "import os",
    ]
    tests, refused = parse_repo_tests(lines, functions)
    assert [t.text() for t in tests] == list(task.demo_tests)
    assert len(refused) == 4


# ---------------------------------------------------------------- the workflow


def _coder(texts: list[str]):  # noqa: ANN202
    def write(call: RoleCall) -> str:
        return render_message(
            Message(role=call.role, kind="code", content=texts[min(call.round, len(texts) - 1)])
        )

    return write


def _play(sandbox: Sandbox, task: RepoTask, coder=None, seed: int = 0) -> tuple[RepoFix, Episode, list[str]]:  # noqa: ANN001
    cfg = load_config(None, ["workflow.name=repo_fix"])
    workflow = build_workflow(cfg, sandbox)
    assert isinstance(workflow, RepoFix)
    experts = workflow.experts(random.Random(seed))
    prompts: list[str] = []

    def watching(script):  # noqa: ANN001, ANN202
        def speak(call: RoleCall) -> str:
            prompts.append(call.prompt)
            return script(call)

        return speak

    seats = {
        r: Seat(script=watching(coder if r == "coder" and coder else experts[r])) for r in cfg.workflow.order
    }
    episode = asyncio.run(workflow.play(Team(seats), task))
    workflow.assign_rewards(episode, cfg.reward)
    return workflow, episode, prompts


def test_the_team_plays_a_wrong_fix_is_reported_and_revised_and_hidden_tests_stay_hidden(
    sandbox: Sandbox, tasks: list[RepoTask]
) -> None:
    task = tasks[3]
    wrong = _change(task, task.wrong_fix)
    right = _change(task, task.reference_fix)
    workflow, episode, prompts = _play(sandbox, task, _coder([wrong, right]))
    assert [t.role for t in episode.turns] == ["planner", "tester", "coder", "coder"]
    assert episode.turns[0].message is not None and episode.turns[0].message.content == task.location
    v = episode.verifier
    assert v["plan_score"] == 1.0 and v["landed"] and v["solved"] and episode.outcome == 1.0
    assert v["code_pass"][0] < 1.0 and v["changes"] == [task.location, task.location]
    assert v["tests_on_reference"] == [True, True] and v["tests_on_buggy"] == [False, False]
    assert "FAIL" in prompts[-1] and "previous change:" in prompts[-1]
    hidden = [h.text() for h in task.hidden_tests if h.text() not in task.brief()]
    assert hidden and not any(h in p for h in hidden for p in prompts)
    assert episode.process == {"planner": 1.0, "tester": 1.0, "coder": 1.0}
    assert workflow.metrics([episode], "eval/") == {
        "eval/plan_right": 1.0,
        "eval/landed": 1.0,
        "eval/change_refused": 0.0,
    }


@pytest.mark.parametrize(
    "text",
    [
        "# evil.py\ndef run(x):\n    return 0",
        "print('PASSED')\nexit(0)",
        "# app.py\ndef run(*args):\n    print('PASSED')\n    exit(0)",
    ],
)
def test_a_refused_change_is_a_format_error_and_earns_the_coder_nothing(
    sandbox: Sandbox, tasks: list[RepoTask], text: str
) -> None:
    workflow, episode, prompts = _play(sandbox, tasks[4], _coder([text]))
    coder_turns = episode.turns_of("coder")
    assert len(coder_turns) == 3 and all(t.error and "change refused" in t.error for t in coder_turns)
    assert episode.outcome == 0.0 and not episode.verifier["solved"]
    assert episode.verifier["code_pass"] == [0.0, 0.0, 0.0]
    assert "change refused" in prompts[-1]
    assert episode.rewards["coder"] <= 0.0
    assert workflow.metrics([episode], "")["change_refused"] == 1.0


def test_the_experts_demonstrate_and_the_workflow_passes_the_conformance_checks(sandbox: Sandbox) -> None:
    check_workflow("repo_fix", sandbox=sandbox)
    cfg = load_config(None, ["workflow.name=repo_fix"])
    workflow = build_workflow(cfg, sandbox)
    suite = RepoSuite(RepoTasksConfig())
    team = Team({r: Seat(script=s) for r, s in workflow.experts(random.Random(0)).items()})
    episodes = asyncio.run(workflow.demonstrate(team, suite.sample("train", 6, random.Random(0))))
    assert all(not e.errors for e in episodes) and all(e.turns[-1].role == "coder" for e in episodes)


def test_a_repo_fix_team_trains(tmp_path) -> None:  # noqa: ANN001

    summary = train_tiny_coder(tmp_path, "repo_fix")
    last = summary["evals"][-1]
    assert last["label"] == "after_rl" and "eval/plan_right" in last and "eval/reward/coder" in last
