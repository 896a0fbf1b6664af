"""The contract between environments and algorithms in :mod:`teamrl.marl`.

A :class:`VecMultiAgentEnv` runs ``num_envs`` copies of one multi-agent environment in lock step:

* agents have a fixed order (``env.agents``); each agent has its own gymnasium observation and action
  space (heterogeneous teams such as predators and prey have different ones);
* every array is batched over copies on axis 0: observations ``[B, obs_dim]`` per agent, rewards
  ``[B]`` per agent, discrete actions ``[B]`` (int64) or continuous ones ``[B, act_dim]`` per agent;
* ``state`` is the global state ``[B, state_dim]`` for centralised critics and mixers;
* copies reset themselves: when a copy's episode ends, ``step`` returns the first observation of its
  next episode, and the last observation / state of the finished episode in ``final_obs`` /
  ``final_state`` (for bootstrapping a truncated episode);
* ``action_masks`` (``[B, n_actions]`` bool per agent, True = allowed) is given for envs that mask
  actions (turn-based games: the agent not on turn may only take its no-op), else ``None``.

Algorithms are modules with a pydantic ``Config`` and ``train(cfg, run) -> dict`` (see
:class:`RunContext` in ``teamrl/marl/run.py``); nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces


@dataclass
class VecStep:
    obs: dict[str, np.ndarray]  # agent -> [B, obs_dim] float32
    state: np.ndarray  # [B, state_dim] float32
    rewards: dict[str, np.ndarray]  # agent -> [B] float32 (zeros after reset)
    terminated: np.ndarray  # [B] bool: the episode ended in a terminal state
    truncated: np.ndarray  # [B] bool: the episode was cut by a time limit
    action_masks: dict[str, np.ndarray] | None = None  # agent -> [B, n_actions] bool
    final_obs: dict[str, np.ndarray] | None = None  # agent -> [B, obs_dim]; rows valid where done
    final_state: np.ndarray | None = None  # [B, state_dim]; rows valid where done
    info: dict[str, Any] | None = None

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated


class VecMultiAgentEnv(Protocol):
    agents: list[str]
    num_envs: int
    observation_spaces: dict[str, spaces.Box]
    action_spaces: dict[str, spaces.Space]
    state_dim: int
    max_steps: int | None  # episode length limit, if the env has one

    def reset(self, seed: int | None = None) -> VecStep: ...

    def step(self, actions: dict[str, np.ndarray]) -> VecStep: ...

    def close(self) -> None: ...
