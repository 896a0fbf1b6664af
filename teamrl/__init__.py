"""teamrl: train teams of LLM agents with reinforcement learning.

The public API, for plugins and scripts (names load on first use, so ``import teamrl`` stays light)::

    from teamrl import Workflow, WorkflowSettings, SeatConfig, Team, Turn, Episode, reward_function

- :class:`Workflow`, :class:`WorkflowSettings`, :class:`SeatConfig`: write a workflow (how a team plays,
  is verified and rewarded); :class:`Rollouts` is what its own evaluation may run.
- :class:`TaskSuite`, :class:`TaskSettings`: write a task suite.
- :func:`reward_function`, :class:`RewardContext`: write a reward function.
- :class:`Team`, :class:`RoleCall`, :class:`Turn`, :class:`Episode`, :class:`Message`,
  :func:`render_message`, :func:`extract_answer`: what a workflow works with.
- :func:`load_config`, :class:`Config`, :class:`ConfigError`, :func:`train`: run one.
- ``teamrl.testing``: ``check_workflow`` and ``check_reward``, conformance checks for your plugins.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Workflow": "teamrl.workflows.base",
    "Rollouts": "teamrl.workflows.base",
    "WorkflowSettings": "teamrl.protocol.settings",
    "TaskSettings": "teamrl.protocol.settings",
    "SeatConfig": "teamrl.protocol.settings",
    "ConfigError": "teamrl.protocol.settings",
    "TaskSuite": "teamrl.tasks.base",
    "reward_function": "teamrl.rewards.functions",
    "RewardContext": "teamrl.rewards.functions",
    "Team": "teamrl.engine.team",
    "RoleCall": "teamrl.engine.team",
    "Turn": "teamrl.protocol.messages",
    "Episode": "teamrl.protocol.messages",
    "Message": "teamrl.protocol.messages",
    "render_message": "teamrl.protocol.messages",
    "extract_answer": "teamrl.tasks.reasoning",
    "ReasoningTask": "teamrl.tasks.reasoning",
    "ProgrammingTask": "teamrl.tasks.programming",
    "Config": "teamrl.config",
    "load_config": "teamrl.config",
    "train": "teamrl.trainer.api",
}

__all__ = [
    "Config",
    "ConfigError",
    "Episode",
    "Message",
    "ProgrammingTask",
    "ReasoningTask",
    "RewardContext",
    "RoleCall",
    "Rollouts",
    "SeatConfig",
    "TaskSettings",
    "TaskSuite",
    "Team",
    "Turn",
    "Workflow",
    "WorkflowSettings",
    "extract_answer",
    "load_config",
    "render_message",
    "reward_function",
    "train",
]

if TYPE_CHECKING:
    from teamrl.config import Config, load_config
    from teamrl.engine.team import RoleCall, Team
    from teamrl.protocol.messages import Episode, Message, Turn, render_message
    from teamrl.protocol.settings import ConfigError, SeatConfig, TaskSettings, WorkflowSettings
    from teamrl.rewards.functions import RewardContext, reward_function
    from teamrl.tasks.base import TaskSuite
    from teamrl.tasks.programming import ProgrammingTask
    from teamrl.tasks.reasoning import ReasoningTask, extract_answer
    from teamrl.trainer.api import train
    from teamrl.workflows.base import Rollouts, Workflow


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'teamrl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
