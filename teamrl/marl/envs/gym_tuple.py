"""Multi-agent gymnasium envs with one Tuple entry per agent (Level-Based Foraging, the multi-robot
warehouse) as PettingZoo ``ParallelEnv``s, so they run through the same adaptor as every PettingZoo env.

Those packages follow the ma-gym convention: ``observation_space`` and ``action_space`` are ``Tuple``s with
one space per agent; ``step`` takes a tuple of actions and returns a tuple of observations, a list of
rewards, one ``done`` and one ``truncated`` flag for the team. :class:`GymTupleParallelEnv` names the agents
``agent_0 .. agent_{n-1}``, gives each its entry of the spaces and of the rewards, ends every agent together
and exposes the episode limit as ``max_cycles`` (QMIX and VDN need it). Both packages report the end of
their time limit as ``done``; an episode cut by the limit is a *truncation* here (PPO then bootstraps from
the last state instead of treating it as terminal): in LBF when food is left on the field at the limit, in
RWARE always (its episodes have no terminal state: they end by ``max_steps`` or ``max_inactivity_steps``).

* ``lbf:<id>``: ``lbforaging`` (pip ``lbforaging``), e.g. ``lbf:Foraging-8x8-2p-3f-v3`` (``-coop``: food
  only a team can load; ``-2s``: partial sight of radius 2); reward: the food level loaded, shared by the
  agents that loaded it, normalised so an episode's rewards sum to at most 1 over the team;
* ``rware:<id>``: ``rware`` (pip ``rware``), e.g. ``rware:rware-tiny-2ag-v2``; reward 1 for the agent
  that delivers a requested shelf (``reward_type`` individual by default).

``--set env.KEY=VALUE`` values go to ``gymnasium.make(id, **kwargs)`` (e.g. ``env.max_episode_steps=25``
for LBF, ``env.max_steps=200`` for RWARE).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

PACKAGES = {"lbf": "lbforaging", "rware": "rware"}  # env name prefix -> the package that registers its ids
EXAMPLES = {"lbf": "Foraging-8x8-2p-3f-v3", "rware": "rware-tiny-2ag-v2"}


def known_ids(prefix: str) -> list[str]:
    """The gymnasium ids the package of ``prefix`` registers ([] when it is not installed)."""
    import gymnasium

    try:
        importlib.import_module(PACKAGES[prefix])
    except ImportError:
        return []
    start = "Foraging" if prefix == "lbf" else "rware"
    return sorted(name for name in gymnasium.registry if name.startswith(start))


class GymTupleParallelEnv(ParallelEnv):
    """One ma-gym style env (Tuple spaces, one entry per agent) as a PettingZoo ``ParallelEnv``."""

    metadata = {"name": "gym_tuple", "render_modes": []}

    def __init__(self, env_id: str, package: str, **kwargs: Any) -> None:
        import gymnasium

        importlib.import_module(package)  # registers the ids
        self._package = package
        # the packages print warnings of their own on checks; the adaptor checks the spaces itself
        self.env = gymnasium.make(env_id, disable_env_checker=True, **kwargs)
        obs_space, act_space = self.env.observation_space, self.env.action_space
        if not isinstance(obs_space, spaces.Tuple) or not isinstance(act_space, spaces.Tuple):
            raise ValueError(
                f"{env_id}: observation and action spaces must be Tuples with one entry per agent (got "
                f"{type(obs_space).__name__}, {type(act_space).__name__})"
            )
        if len(obs_space.spaces) != len(act_space.spaces):
            raise ValueError(
                f"{env_id}: {len(obs_space.spaces)} observation but {len(act_space.spaces)} action spaces"
            )
        self.possible_agents = [f"agent_{i}" for i in range(len(obs_space.spaces))]
        self.agents: list[str] = []
        self._obs_spaces = dict(zip(self.possible_agents, obs_space.spaces, strict=True))
        self._act_spaces = dict(zip(self.possible_agents, act_space.spaces, strict=True))
        unwrapped = self.env.unwrapped
        limit = getattr(unwrapped, "_max_episode_steps", None) or getattr(unwrapped, "max_steps", None)
        self.max_cycles: int | None = int(limit) if isinstance(limit, int | np.integer) else None
        self.metadata = {"name": env_id, "render_modes": []}

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    def _obs(self, obs: Any) -> dict[str, np.ndarray]:
        return {
            a: np.asarray(o, dtype=self._obs_spaces[a].dtype)
            for a, o in zip(self.possible_agents, obs, strict=True)
        }

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, _ = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return self._obs(obs), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() after the episode ended; call reset()")
        joint = tuple(int(actions[a]) for a in self.possible_agents)
        obs, rewards, done, truncated, _ = self.env.step(joint)
        if done and self._cut_by_time_limit():
            done, truncated = False, True
        agents = list(self.agents)
        out_obs = self._obs(obs)
        team_rewards: list[float] = list(rewards)  # type: ignore[call-overload]  # one per agent
        out_rewards = {a: float(r) for a, r in zip(self.possible_agents, team_rewards, strict=True)}
        terminations = {a: bool(done) for a in agents}
        truncations = {a: bool(truncated) and not done for a in agents}
        if done or truncated:
            self.agents = []
        return out_obs, out_rewards, terminations, truncations, {a: {} for a in agents}

    def _cut_by_time_limit(self) -> bool:
        """Whether the episode the env just called done ended by its time limit, not by reaching a terminal
        state (see the module)."""
        env = self.env.unwrapped
        if self._package == "rware":
            return True
        field = getattr(env, "field", None)  # lbforaging: food levels on the grid
        return field is not None and float(np.sum(field)) > 0

    def render(self) -> None:
        return None

    def close(self) -> None:
        self.env.close()


def parallel_env(name: str, **kwargs: Any) -> GymTupleParallelEnv:
    """``lbf:<id>`` or ``rware:<id>`` as a ParallelEnv (ValueError naming the valid ids when unknown)."""
    prefix, _, env_id = name.partition(":")
    if prefix not in PACKAGES:
        raise ValueError(f"{name!r}: the prefix must be one of {sorted(PACKAGES)}")
    try:
        importlib.import_module(PACKAGES[prefix])
    except ImportError:
        raise ValueError(
            f"env {name!r} needs the package {PACKAGES[prefix]!r}: pip install {PACKAGES[prefix]}"
        ) from None
    ids = known_ids(prefix)
    if env_id not in ids:
        import difflib

        close = difflib.get_close_matches(env_id, ids, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(
            f"unknown {PACKAGES[prefix]} id {env_id!r}; {hint}e.g. {prefix}:{EXAMPLES[prefix]} "
            f"({len(ids)} ids)"
        )
    return GymTupleParallelEnv(env_id, PACKAGES[prefix], **kwargs)
