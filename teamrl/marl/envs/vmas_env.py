"""VMAS (Bettini et al., the Vectorized Multi-Agent Simulator; pip ``vmas``) scenarios as batched teamrl
environments: ``vmas:<scenario>`` (``vmas:balance``, ``vmas:navigation``, ``vmas:transport`` ...).

VMAS simulates every copy at once in torch, so :class:`VmasVecEnv` hands its batch straight through (no
Python loop over copies): observations and rewards per agent ``[B, ...]``, the global state as all
observations concatenated, auto-reset of the copies that ended (``reset_at``) with their last observation
kept as ``final_obs``. Episodes end by the scenario's own terminal condition or by ``max_steps`` (default
100, as BenchMARL's VMAS tasks): the latter is a truncation. Actions are discrete by default (each scenario's
``Discrete(n)``); ``--set env.continuous_actions=true`` gives its bounded ``Box``. Other ``env.KEY`` values
go to the scenario (``env.n_agents=4``).

VMAS seeds with torch's global generator (``vmas.make_env(seed=...)`` and ``reset(seed=...)`` call
``torch.manual_seed``): a copy's episodes depend on the draws made in between. teamrl's evaluations run
under ``torch.random.fork_rng``, so they change nothing in training.

:class:`VmasParallelEnv` is one copy as a PettingZoo ``ParallelEnv`` (passes ``parallel_api_test`` and
``parallel_seed_test``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from teamrl.marl.core import VecStep

DEFAULT_MAX_STEPS = 100


def scenarios() -> list[str]:
    """The scenario names of the installed vmas ([] when it is not installed)."""
    try:
        import vmas
    except ImportError:
        return []
    return list(vmas.scenarios)


def _box(space: Any) -> spaces.Box:
    low = np.asarray(space.low, np.float32).reshape(-1)
    high = np.asarray(space.high, np.float32).reshape(-1)
    return spaces.Box(low, high, dtype=np.float32)


class VmasVecEnv:
    """``num_envs`` copies of a VMAS scenario, batched by VMAS itself (see the module)."""

    def __init__(self, scenario: str, num_envs: int, seed: int | None = None, **kwargs: Any) -> None:
        try:
            import vmas
        except ImportError:
            raise ValueError(f"env vmas:{scenario} needs the package 'vmas': pip install vmas") from None
        if scenario not in vmas.scenarios:
            import difflib

            close = difflib.get_close_matches(scenario, list(vmas.scenarios), n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ValueError(f"unknown vmas scenario {scenario!r}; {hint}known: {', '.join(vmas.scenarios)}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        continuous = bool(kwargs.pop("continuous_actions", False))
        max_steps = int(kwargs.pop("max_steps", DEFAULT_MAX_STEPS))
        self.env = vmas.make_env(
            scenario,
            num_envs=num_envs,
            device="cpu",
            continuous_actions=continuous,
            max_steps=max_steps,
            seed=seed,
            terminated_truncated=True,
            **kwargs,
        )
        self.num_envs = num_envs
        self.max_steps: int | None = max_steps
        self.agents: list[str] = [a.name for a in self.env.agents]
        self.observation_spaces = {
            a: _box(s) for a, s in zip(self.agents, self.env.observation_space.spaces, strict=True)
        }
        self.action_spaces: dict[str, spaces.Space] = {  # VMAS gives (old) gym spaces: as gymnasium's
            a: spaces.Discrete(int(s.n)) if hasattr(s, "n") else _box(s)
            for a, s in zip(self.agents, self.env.action_space.spaces, strict=True)
        }
        self.state_dim = sum(s.shape[0] for s in self.observation_spaces.values())
        self._pending_seed = seed

    def _obs(self, obs: list[Any]) -> dict[str, np.ndarray]:
        return {
            a: o.detach().numpy().astype(np.float32).reshape(self.num_envs, -1)
            for a, o in zip(self.agents, obs, strict=True)
        }

    def _state(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([obs[a] for a in self.agents], axis=1)

    def reset(self, seed: int | None = None) -> VecStep:
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None  # the constructor's seed is used once
        obs = self._obs(self.env.reset(seed=seed))
        zeros = np.zeros(self.num_envs, bool)
        rewards = {a: np.zeros(self.num_envs, np.float32) for a in self.agents}
        return VecStep(obs, self._state(obs), rewards, zeros, zeros.copy())

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        import torch

        joint = []
        for a in self.agents:
            act = np.asarray(actions[a])
            if isinstance(self.action_spaces[a], spaces.Discrete):
                joint.append(torch.as_tensor(act.reshape(self.num_envs), dtype=torch.long))
            else:
                space = self.action_spaces[a]
                act = np.clip(act.reshape(self.num_envs, -1), space.low, space.high)  # type: ignore[attr-defined]
                joint.append(torch.as_tensor(act, dtype=torch.float32))
        raw_obs, raw_rewards, terminated, truncated, _ = self.env.step(joint)
        obs = self._obs(raw_obs)
        rewards = {
            a: r.detach().numpy().astype(np.float32).reshape(self.num_envs)
            for a, r in zip(self.agents, raw_rewards, strict=True)
        }
        term = terminated.detach().numpy().astype(bool).reshape(self.num_envs)
        trunc = truncated.detach().numpy().astype(bool).reshape(self.num_envs) & ~term
        done = term | trunc
        final_obs = final_state = None
        if done.any():
            final_obs = {a: o.copy() for a, o in obs.items()}
            final_state = self._state(final_obs)
            for i in np.flatnonzero(done):
                fresh = self.env.reset_at(int(i), return_observations=True)
                for a, o in zip(self.agents, fresh, strict=True):
                    obs[a][i] = o[i].detach().numpy().reshape(-1)
        return VecStep(
            obs, self._state(obs), rewards, term, trunc, final_obs=final_obs, final_state=final_state
        )

    def close(self) -> None:
        return None


def make_parallel_env(scenario: str, **kwargs: Any) -> Any:
    """One copy of ``vmas:<scenario>`` as a PettingZoo ``ParallelEnv``."""
    from pettingzoo import ParallelEnv

    class VmasParallelEnv(ParallelEnv):
        metadata = {"name": f"vmas_{scenario}", "render_modes": []}

        def __init__(self) -> None:
            self.vec = VmasVecEnv(scenario, 1, None, **kwargs)
            self.possible_agents = list(self.vec.agents)
            self.agents: list[str] = []

        def observation_space(self, agent: str) -> spaces.Space:
            return self.vec.observation_spaces[agent]

        def action_space(self, agent: str) -> spaces.Space:
            return self.vec.action_spaces[agent]

        def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
            step = self.vec.reset(seed=seed)
            self.agents = list(self.possible_agents)
            return {a: step.obs[a][0] for a in self.agents}, {a: {} for a in self.agents}

        def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
            batch = {a: np.asarray([actions[a]]) for a in self.possible_agents}
            step = self.vec.step(batch)
            agents = list(self.agents)
            obs_src = step.final_obs if step.final_obs is not None else step.obs
            obs = {a: obs_src[a][0] for a in agents}
            rewards = {a: float(step.rewards[a][0]) for a in agents}
            terms = {a: bool(step.terminated[0]) for a in agents}
            truncs = {a: bool(step.truncated[0]) for a in agents}
            if step.done[0]:
                self.agents = []
            return obs, rewards, terms, truncs, {a: {} for a in agents}

        def render(self) -> None:
            return None

        def close(self) -> None:
            return None

    return VmasParallelEnv()
