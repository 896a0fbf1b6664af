"""Task suites and reward functions as plugins: HumanEval-format files, a suite by import path, weighted
reward functions, and the built-ins through the same conformance checks as a user's."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from teamrl import Episode, ReasoningTask, TaskSettings, TaskSuite, Turn, Workflow
from teamrl.config import ConfigError, load_config
from teamrl.engine.team import RoleCall, Seat, Team
from teamrl.protocol import Message, render_message
from teamrl.rewards.functions import RewardContext, combine
from teamrl.rewards.settings import RewardConfig
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.testing import check_reward, check_workflow
from teamrl.trainer.build import build_suite, build_workflow

PROBLEMS = [
    ("add", 'def add(a, b):\n    """a + b"""\n', "    return a + b\n", "assert candidate(1, 2) == 3\n"),
    ("neg", 'def neg(a):\n    """-a"""\n', "    return -a\n", "assert candidate(4) == -4\n"),
    (
        "twice",
        'def twice(s):\n    """s twice"""\n',
        "    return s * 2\n",
        "assert candidate('ab') == 'abab'\n",
    ),
    (
        "last",
        'def last(xs):\n    """last item"""\n',
        "    return xs[-1]\n",
        "assert candidate([1, 5]) == 5\n",
    ),
    (
        "size",
        'def size(xs):\n    """length"""\n',
        "    return len(xs)\n",
        "assert candidate([1, 2, 3]) == 3\n",
    ),
]


@pytest.fixture
def humaneval_file(tmp_path: Path) -> Path:
    path = tmp_path / "mini.jsonl"
    rows = [
        {
            "task_id": f"Mini/{i}",
            "prompt": prompt,
            "canonical_solution": body,
            "test": f"def check(candidate):\n    {test}",
            "entry_point": name,
        }
        for i, (name, prompt, body, test) in enumerate(PROBLEMS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_humaneval_format_file_is_a_suite_the_pipeline_judges(humaneval_file: Path) -> None:
    cfg = load_config(
        None, ["tasks.suite=humaneval", f"tasks.path={humaneval_file}", "tasks.heldout_fraction=0.4"]
    )
    suite = build_suite(cfg)
    train, heldout = suite.sample("train", 10, random.Random(0)), suite.fixed_set("heldout", 10)
    assert train and heldout and not {t.task_id for t in train} & {t.task_id for t in heldout}
    assert {t.task_id for t in train} | {t.task_id for t in heldout} == {f"Mini/{i}" for i in range(5)}
    workflow = build_workflow(cfg.model_copy(update={}), Sandbox(SandboxLimits(), isolation="auto"))

    def coder(right: bool):  # noqa: ANN202
        def write(call: RoleCall) -> str:
            task = call.context["task"]
            code = task.reference_solution if right else task.buggy_solution
            return render_message(Message(role=call.role, kind="code", content=code))

        return write

    silent = {r: Seat(script=lambda call: "") for r in ("planner", "reviewer", "tester")}
    for right in (True, False):
        team = Team({**silent, "coder": Seat(script=coder(right))})
        episodes = [asyncio.run(workflow.play(team, task)) for task in [*train, *heldout]]
        assert all(bool(e.verifier["solved"]) is right for e in episodes)


@pytest.mark.parametrize(
    ("line", "message"),
    [("{not json", "tasks:"), ('{"task_id": "x", "prompt": "p"}', "needs")],
)
def test_a_bad_humaneval_file_is_a_config_error(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    cfg = load_config(None, ["tasks.suite=humaneval", f"tasks.path={path}"])
    with pytest.raises(ConfigError, match=message):
        build_suite(cfg)


class CountSettings(TaskSettings):
    suite: str = "test_plugins:Counting"
    upto: int = 9


class Counting(TaskSuite[CountSettings]):
    Settings = CountSettings
    task_type = ReasoningTask

    def sample(self, split: str, n: int, rng: random.Random) -> list[ReasoningTask]:
        base = 100 if split == "heldout" else 0
        picks = [base + rng.randint(0, self.settings.upto) for _ in range(n)]
        return [ReasoningTask(task_id=f"n{k}", question=f"What is {k} + 1?", answer=k + 1) for k in picks]


def test_a_task_suite_by_import_path_is_built_and_its_settings_checked() -> None:
    cfg = load_config(None, ["workflow.name=debate", "tasks.suite=test_plugins:Counting", "tasks.upto=3"])
    suite = build_suite(cfg)
    assert isinstance(suite, Counting) and suite.settings.upto == 3
    assert all(t.answer <= 4 for t in suite.sample("train", 20, random.Random(1)))
    with pytest.raises(ConfigError, match="tasks.upto"):
        load_config(None, ["workflow.name=debate", "tasks.suite=test_plugins:Counting", "tasks.upto=many"])
    check_workflow("debate", tasks=suite)  # the built-in debate plays a user's tasks


def _episode(roles: list[str]) -> Episode:
    episode = Episode(task_id="t", turns=[Turn(role=r, prompt="p", text="x") for r in roles])
    episode.rewards = dict.fromkeys(roles, 0.25)
    return episode


def test_reward_functions_are_summed_with_their_weights() -> None:
    episodes = [_episode(["a", "b"]), _episode(["a"])]

    def one_for_a(episodes, ctx):  # noqa: ANN001, ANN202
        return [{"a": 1.0} for _ in episodes]

    def everyone(episodes, ctx, value=0.0):  # noqa: ANN001, ANN202
        return [value for _ in episodes]

    ctx = RewardContext(workflow=None, settings=RewardConfig())  # type: ignore[arg-type]
    functions = [("one", one_for_a, 0.5, {}), ("all", everyone, 2.0, {"value": -1.0})]
    combine(episodes, ctx, functions)
    assert episodes[0].rewards == {"a": 0.5 - 2.0, "b": -2.0}
    assert episodes[1].rewards == {"a": 0.5 - 2.0}


@pytest.mark.parametrize("name", ["pipeline", "debate", "self_play"])
def test_the_built_in_workflows_pass_the_users_conformance_checks(name: str) -> None:
    check_workflow(name)


@pytest.mark.parametrize("name", ["hybrid", "shared", "maporl", "marti", "counterfactual"])
def test_the_built_in_reward_functions_pass_the_users_conformance_checks(name: str) -> None:
    check_reward(name, workflow="debate")


class NamelessSettings(TaskSettings):
    suite: str = "test_plugins:Nameless"


class Nameless(TaskSuite[NamelessSettings]):
    Settings = NamelessSettings

    def sample(self, split: str, n: int, rng: random.Random) -> list[dict]:
        return [{"question": "1 + 1?"} for _ in range(n)]


def test_a_suite_whose_tasks_have_no_id_is_refused_before_anything_runs() -> None:
    cfg = load_config(None, ["workflow.name=debate", "tasks.suite=test_plugins:Nameless"])
    with pytest.raises(ConfigError, match="need a `task_id` string"):
        build_suite(cfg)


class ClashingSettings(TaskSettings):
    suite: str = "test_plugins:Clashing"
    mode: str = "same_id"


class Clashing(TaskSuite[ClashingSettings]):
    """A suite's mistakes: every task under one id, one task drawn n times, held-out tasks in train."""

    Settings = ClashingSettings

    def sample(self, split: str, n: int, rng: random.Random) -> list[ReasoningTask]:
        mode = self.settings.mode
        if mode == "same_id":
            return [ReasoningTask(task_id="one", question=f"{i} + 1?", answer=i + 1) for i in range(n)]
        if mode == "repeat":
            return [ReasoningTask(task_id="one", question="1 + 1?", answer=2) for _ in range(n)]
        return [
            ReasoningTask(task_id=f"t{i}", question=f"{i} + 1?", answer=i + 1) for i in range(n)
        ]  # overlap


def test_two_tasks_under_one_id_are_refused_and_a_task_drawn_twice_is_not(caplog) -> None:
    from teamrl.tasks.base import TaskSuiteError
    from teamrl.trainer.overlap import iteration_tasks

    def suite(mode: str) -> tuple[object, TaskSuite]:
        cfg = load_config(
            None, ["workflow.name=debate", "tasks.suite=test_plugins:Clashing", f"tasks.mode={mode}"]
        )
        return cfg, build_suite(cfg)

    cfg, clashing = suite("same_id")
    with pytest.raises(TaskSuiteError, match=r"sample\('train', 8\) for RL iteration 3: two different tasks"):
        iteration_tasks(cfg, clashing, 3)
    with pytest.raises(TaskSuiteError, match=r"Clashing.fixed_set\('heldout', 3\): .* share task_id 'one'"):
        clashing.fixed_set("heldout", 3)
    cfg, repeated = suite("repeat")
    assert len(iteration_tasks(cfg, repeated, 0)) == 8  # the same task twice: one group, no error
    cfg, overlapping = suite("overlap")
    caplog.clear()
    with caplog.at_level("WARNING", logger="teamrl.trainer.overlap"):
        iteration_tasks(cfg, overlapping, 0)
        iteration_tasks(cfg, overlapping, 1)
    warned = [r.getMessage() for r in caplog.records if "held-out task ids" in r.getMessage()]
    assert (
        len(warned) == 1
        and "RL iteration 0 plays held-out task ids ['t0', 't1', 't2', 't3', 't4']" in warned[0]
    )


def test_check_workflow_asks_for_settings_it_cannot_make() -> None:
    from teamrl import WorkflowSettings

    class Needy(WorkflowSettings):
        name: str = "needy"
        level: int  # required

    class NeedyFlow(Workflow):
        Settings = Needy

        async def play(self, team, task, group=0):  # noqa: ANN001, ANN202
            raise AssertionError("not reached")

    with pytest.raises(AssertionError, match="(?s)required fields.*pass settings"):
        check_workflow(NeedyFlow)
