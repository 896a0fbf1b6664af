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
        return self.sample(
            split, n, random.Random(f"teamrl-{type(self).__name__}-{self.settings.seed}-{split}")
        )
