"""The :class:`TaskSuite` protocol: where a workflow's tasks come from, train and held-out apart.

A config selects a suite in its ``tasks:`` section by a built-in name (``programming``, ``reasoning``,
``humaneval``) or an import path to user code (``tasks: {suite: mypkg.tasks:MySuite, ...}``). A suite is
a class with a settings model (:attr:`TaskSuite.Settings`, a :class:`TaskSettings` subclass: the fields
of the section) built from those settings, which samples tasks of a split.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from teamrl.protocol.settings import TaskSettings

SPLITS = ("train", "heldout")
T = TypeVar("T", bound=TaskSettings)


class TaskSuite(ABC, Generic[T]):
    """Tasks of two splits, ``train`` (sampled for RL and demonstrations) and ``heldout`` (evaluation).
    Every task has a ``task_id`` (str) that is the same for the same task (a group's episodes share it)."""

    Settings: ClassVar[type[TaskSettings]]
    task_type: ClassVar[type | None] = None  # the class of its tasks (a workflow of another is refused)

    def __init__(self, settings: T) -> None:
        self.settings = settings

    @abstractmethod
    def sample(self, split: str, n: int, rng: random.Random) -> list[Any]:
        """``n`` tasks of ``split`` drawn with ``rng`` (the trainer seeds it per iteration)."""

    def fixed_set(self, split: str, n: int) -> list[Any]:
        """The same ``n`` tasks of ``split`` every time (the evaluation set)."""
        tasks = self.sample(
            split, n, random.Random(f"teamrl-{type(self).__name__}-{self.settings.seed}-{split}")
        )
        return checked_draw(tasks, f"{type(self).__name__}.fixed_set({split!r}, {n})")


class TaskSuiteError(ValueError):
    """A suite's draw the trainer cannot use: different tasks under one ``task_id``."""


def checked_draw(tasks: list[Any], what: str) -> list[Any]:
    """``tasks`` (a suite's draw, ``what`` says which) if no two different tasks share a ``task_id`` (a
    task's id names its group and seeds its episodes, so two tasks under one id would be compared as one);
    else :class:`TaskSuiteError`. Tasks of a class without its own ``__eq__`` cannot be told apart and
    pass; the same task drawn twice passes."""
    first: dict[Any, Any] = {}
    for task in tasks:
        task_id = getattr(task, "task_id", None)
        if not isinstance(task_id, str):  # refused where the suite is built, with what a task needs
            continue
        seen = first.setdefault(task_id, task)
        if seen is not task and type(task).__eq__ is not object.__eq__ and seen != task:
            raise TaskSuiteError(
                f"{what}: two different tasks share task_id {task_id!r}; a task's id must be the same for "
                "the same task and differ between tasks (it names the task's group and seeds its episodes)"
            )
    return tasks
