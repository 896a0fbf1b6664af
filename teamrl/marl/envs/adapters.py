"""Adaptors from PettingZoo environments to the :class:`~teamrl.marl.core.VecMultiAgentEnv` contract.

* :class:`PettingZooVecEnv` runs ``B`` copies of any PettingZoo ``ParallelEnv`` in a Python loop (the
  generic, slow path; the batched MPE in :mod:`teamrl.marl.envs.mpe` is the fast one).
* :class:`TurnBasedVecEnv` turns a turn-based AEC game (connect four, tic-tac-toe, ...) into simultaneous
  moves: every agent acts every step, the agent not on turn can only play the extra "pass" action.

Observations are flattened to float32 vectors (``gymnasium.spaces.flatten``); Dict observations with an
``action_mask`` (PettingZoo classic games) are split into the ``observation`` part and
``VecStep.action_masks``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from teamrl.marl.core import VecStep


def _is_masked(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Dict) and "action_mask" in space.spaces and "observation" in space.spaces


def _flat_box(space: spaces.Space) -> spaces.Box:
    flat = cast(spaces.Box, spaces.flatten_space(space))  # a Box for any space but Graph / Sequence
    return spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)


def _flatten(space: spaces.Space, x: Any) -> np.ndarray:
    if isinstance(space, spaces.Box):
        return np.asarray(x, dtype=np.float32).reshape(-1)
    return np.asarray(spaces.flatten(space, x), dtype=np.float32)


def _seeds(seed: int | None, n: int) -> list[int | None]:
    return [None] * n if seed is None else [seed + i for i in range(n)]


class PettingZooVecEnv:
    """``num_envs`` copies of any PettingZoo ``ParallelEnv`` (built by ``env_fn``) in lock step.

    * agent order = ``possible_agents`` of the first copy; an agent absent from a step's output (dead)
      gets a zero observation, zero reward, and only action 0 allowed in its mask (its action is ignored);
      an all-False ``action_mask`` (an agent that cannot act now) also becomes "only action 0";
    * ``state`` = the env's ``state()`` when it has a ``state_space``, else all observations concatenated;
    * a ``Discrete(n, start=k)`` action space is offered as ``Discrete(n)`` (action ``i`` plays ``k + i``);
    * a copy's episode ends when it has no live agent left (or every live agent is done); it is then
      reset: ``terminated`` if some agent terminated at the last step, else ``truncated``;
    * ``reset(seed)`` resets copy ``i`` with ``seed + i`` (later auto-resets continue each copy's RNG).
    """

    def __init__(self, env_fn: Callable[[], Any], num_envs: int, seed: int | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.envs = [env_fn() for _ in range(num_envs)]
        self.num_envs = num_envs
        first = self.envs[0]
        self.agents: list[str] = list(first.possible_agents)
        self._seed = seed
        # the record (infos[agent]["record"]) of the first episode to end since reset(): what an env says
        # about an episode beyond numbers (the town's day), saved by the final evaluation for the report
        self.first_record: dict[str, Any] | None = None
        raw_spaces = {a: first.observation_space(a) for a in self.agents}
        self._masked = {a: _is_masked(s) for a, s in raw_spaces.items()}
        self._obs_src = {a: s["observation"] if self._masked[a] else s for a, s in raw_spaces.items()}
        self.observation_spaces = {a: _flat_box(s) for a, s in self._obs_src.items()}
        self._env_action_spaces = {a: first.action_space(a) for a in self.agents}
        self.action_spaces: dict[str, spaces.Space] = {  # Discrete(n, start=k) is played as 0..n-1
            a: spaces.Discrete(int(s.n)) if isinstance(s, spaces.Discrete) and s.start != 0 else s
            for a, s in self._env_action_spaces.items()
        }
        self._has_masks = any(self._masked.values())
        self._use_env_state = isinstance(getattr(first, "state_space", None), spaces.Space)
        if self._use_env_state:
            self.state_dim = spaces.flatdim(first.state_space)
        else:
            self.state_dim = sum(s.shape[0] for s in self.observation_spaces.values())
        max_cycles = getattr(getattr(first, "unwrapped", first), "max_cycles", None)
        self.max_steps: int | None = int(max_cycles) if isinstance(max_cycles, int) else None
        B = num_envs
        self._obs = {a: np.zeros((B, s.shape[0]), np.float32) for a, s in self.observation_spaces.items()}
        self._masks = {a: np.zeros((B, self._n_actions(a)), bool) for a in self.agents if self._masked[a]}
        self._state = np.zeros((B, self.state_dim), np.float32)

    def _n_actions(self, agent: str) -> int:
        return int(cast(spaces.Discrete, self.action_spaces[agent]).n)  # masked agents act discretely

    # ----- per-copy bookkeeping -----
    def _store(self, b: int, obs: dict[str, Any]) -> None:
        """Write copy ``b``'s observations (zeros for absent agents), masks and state."""
        for a in self.agents:
            if a in obs:
                o = obs[a]
                if self._masked[a]:
                    mask = self._masks[a][b]
                    mask[:] = np.asarray(o["action_mask"], dtype=bool)
                    if not mask.any():  # cannot act now (e.g. not on turn): its action is ignored
                        mask[0] = True
                    o = o["observation"]
                self._obs[a][b] = _flatten(self._obs_src[a], o)
            else:
                self._obs[a][b] = 0.0
                if self._masked[a]:
                    self._masks[a][b] = False
                    self._masks[a][b, 0] = True
        if self._use_env_state:
            self._state[b] = np.asarray(self.envs[b].state(), dtype=np.float32).reshape(-1)
        else:
            self._state[b] = np.concatenate([self._obs[a][b] for a in self.agents])

    def _snapshot(self) -> VecStep:
        return VecStep(
            obs={a: o.copy() for a, o in self._obs.items()},
            state=self._state.copy(),
            rewards={a: np.zeros(self.num_envs, np.float32) for a in self.agents},
            terminated=np.zeros(self.num_envs, bool),
            truncated=np.zeros(self.num_envs, bool),
            action_masks={a: m.copy() for a, m in self._masks.items()} if self._has_masks else None,
        )

    # ----- contract -----
    def reset(self, seed: int | None = None) -> VecStep:
        self.first_record = None
        if seed is None:
            seed, self._seed = self._seed, None  # the constructor's seed is used once
        for b, (env, s) in enumerate(zip(self.envs, _seeds(seed, self.num_envs), strict=True)):
            obs, _ = env.reset(seed=s)
            self._store(b, obs)
        return self._snapshot()

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        B = self.num_envs
        rewards = {a: np.zeros(B, np.float32) for a in self.agents}
        terminated, truncated = np.zeros(B, bool), np.zeros(B, bool)
        final_obs: dict[str, np.ndarray] | None = None
        final_state: np.ndarray | None = None
        ended: list[dict[str, float]] = []  # the numeric infos[agent]["episode"] of episodes that ended
        for b, env in enumerate(self.envs):
            live = list(env.agents)
            acts = {a: self._env_action(a, actions[a][b]) for a in live}
            obs, rew, term, trunc, infos = env.step(acts)
            for a, r in rew.items():
                if a in rewards:
                    rewards[a][b] = r
            self._store(b, obs)
            done = not env.agents or all(term.get(a, False) or trunc.get(a, False) for a in env.agents)
            if not done:
                continue
            terminated[b] = any(bool(term.get(a, False)) for a in live)
            truncated[b] = not terminated[b]
            summary = episode_summary(infos)
            if summary:
                ended.append(summary)
            if self.first_record is None:
                self.first_record = episode_record(infos)
            if final_obs is None:
                final_obs = {a: np.zeros_like(o) for a, o in self._obs.items()}
                final_state = np.zeros_like(self._state)
            for a in self.agents:
                final_obs[a][b] = self._obs[a][b]
            final_state[b] = self._state[b]  # type: ignore[index]  # set together with final_obs
            obs, _ = env.reset()
            self._store(b, obs)
        step = self._snapshot()
        step.rewards, step.terminated, step.truncated = rewards, terminated, truncated
        step.final_obs, step.final_state = final_obs, final_state
        if ended:
            step.info = {"episode": ended}
        return step

    def _env_action(self, agent: str, action: Any) -> Any:
        space = self._env_action_spaces[agent]
        if isinstance(space, spaces.Discrete):
            return int(action) + int(space.start)
        return np.asarray(action, dtype=space.dtype)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def episode_summary(infos: Any) -> dict[str, float]:
    """The numbers an env reports about a finished episode in ``infos[agent]["episode"]`` (the first agent
    that has them): what ``teamrl marl train`` logs as ``env/<key>`` curves (the town's objectives, say)."""
    for info in (infos or {}).values():
        stats = info.get("episode") if isinstance(info, dict) else None
        if isinstance(stats, dict):
            return {
                str(k): float(v)
                for k, v in stats.items()
                if isinstance(v, int | float | np.number) and not isinstance(v, bool) and np.isfinite(v)
            }
    return {}


def episode_record(infos: Any) -> dict[str, Any] | None:
    """A finished episode's record (``infos[agent]["record"]``, the first agent that has one: a dict with
    a ``kind`` and JSON ``data``, e.g. the town's day, ``kind: town_day``), for ``teamrl report`` to draw;
    None when the env reports none."""
    for info in (infos or {}).values():
        record = info.get("record") if isinstance(info, dict) else None
        if isinstance(record, dict) and isinstance(record.get("kind"), str) and "data" in record:
            return record
    return None


class TurnBasedVecEnv:
    """``num_envs`` copies of a turn-based PettingZoo AEC game, played as simultaneous moves.

    Each agent's action space is the game's ``Discrete(n)`` plus one "pass" action ``n``. At every step
    the agent on turn must play a legal move (its game ``action_mask``, pass disallowed) and every other
    agent must pass (its mask allows only ``n``); an action outside the mask raises ``ValueError``.
    Rewards are the AEC ``rewards`` after the move (connect four: +1 / -1 at a win, 0 otherwise); the
    game ends when every agent is terminated or truncated, and the copy is reset. ``state`` is all
    agents' observations concatenated (unless the game implements ``state()``).
    """

    max_steps: int | None = None

    def __init__(self, env_fn: Callable[[], Any], num_envs: int, seed: int | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.envs = [env_fn() for _ in range(num_envs)]
        self.num_envs = num_envs
        first = self.envs[0]
        self.agents: list[str] = list(first.possible_agents)
        self._seed = seed
        raw_spaces = {a: first.observation_space(a) for a in self.agents}
        self._masked = {a: _is_masked(s) for a, s in raw_spaces.items()}
        self._obs_src = {a: s["observation"] if self._masked[a] else s for a, s in raw_spaces.items()}
        self.observation_spaces = {a: _flat_box(s) for a, s in self._obs_src.items()}
        self._n_moves = {a: int(first.action_space(a).n) for a in self.agents}
        self.action_spaces: dict[str, spaces.Space] = {
            a: spaces.Discrete(n + 1) for a, n in self._n_moves.items()
        }
        self.pass_action = {a: n for a, n in self._n_moves.items()}
        self._use_env_state = isinstance(getattr(first, "state_space", None), spaces.Space)
        if self._use_env_state:
            self.state_dim = spaces.flatdim(first.state_space)
        else:
            self.state_dim = sum(s.shape[0] for s in self.observation_spaces.values())
        B = num_envs
        self._obs = {a: np.zeros((B, s.shape[0]), np.float32) for a, s in self.observation_spaces.items()}
        self._masks = {a: np.zeros((B, n + 1), bool) for a, n in self._n_moves.items()}
        self._state = np.zeros((B, self.state_dim), np.float32)

    def _store(self, b: int) -> None:
        env = self.envs[b]
        on_turn = env.agent_selection
        for a in self.agents:
            o = env.observe(a)
            mask = self._masks[a][b]
            mask[:] = False
            if a == on_turn:
                if self._masked[a]:
                    mask[:-1] = np.asarray(o["action_mask"], dtype=bool)
                else:
                    mask[:-1] = True
            else:
                mask[-1] = True
            if self._masked[a]:
                o = o["observation"]
            self._obs[a][b] = _flatten(self._obs_src[a], o)
        if self._use_env_state:
            self._state[b] = np.asarray(env.state(), dtype=np.float32).reshape(-1)
        else:
            self._state[b] = np.concatenate([self._obs[a][b] for a in self.agents])

    def _snapshot(self) -> VecStep:
        return VecStep(
            obs={a: o.copy() for a, o in self._obs.items()},
            state=self._state.copy(),
            rewards={a: np.zeros(self.num_envs, np.float32) for a in self.agents},
            terminated=np.zeros(self.num_envs, bool),
            truncated=np.zeros(self.num_envs, bool),
            action_masks={a: m.copy() for a, m in self._masks.items()},
        )

    def on_turn(self) -> list[str]:
        """The agent to move in each copy."""
        return [env.agent_selection for env in self.envs]

    def reset(self, seed: int | None = None) -> VecStep:
        if seed is None:
            seed, self._seed = self._seed, None
        for b, (env, s) in enumerate(zip(self.envs, _seeds(seed, self.num_envs), strict=True)):
            env.reset(seed=s)
            self._store(b)
        return self._snapshot()

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        B = self.num_envs
        acts = {a: np.asarray(actions[a]).astype(np.int64).reshape(B) for a in self.agents}
        for a in self.agents:  # every action must be allowed by the current masks
            n = self._n_moves[a] + 1
            if acts[a].min() < 0 or acts[a].max() >= n:
                raise ValueError(f"action of {a} out of range [0, {n})")
            if not self._masks[a][np.arange(B), acts[a]].all():
                bad = int(np.flatnonzero(~self._masks[a][np.arange(B), acts[a]])[0])
                raise ValueError(f"illegal action {acts[a][bad]} for {a} in copy {bad} (see action_masks)")
        rewards = {a: np.zeros(B, np.float32) for a in self.agents}
        terminated, truncated = np.zeros(B, bool), np.zeros(B, bool)
        final_obs: dict[str, np.ndarray] | None = None
        final_state: np.ndarray | None = None
        for b, env in enumerate(self.envs):
            env.step(int(acts[env.agent_selection][b]))
            for a in self.agents:
                rewards[a][b] = env.rewards.get(a, 0.0)
            self._store(b)
            finished = [env.terminations.get(a, True) or env.truncations.get(a, True) for a in self.agents]
            if not env.agents or all(finished):
                terminated[b] = any(env.terminations.get(a, False) for a in self.agents)
                truncated[b] = not terminated[b]
                if final_obs is None:
                    final_obs = {a: np.zeros_like(o) for a, o in self._obs.items()}
                    final_state = np.zeros_like(self._state)
                for a in self.agents:
                    final_obs[a][b] = self._obs[a][b]
                final_state[b] = self._state[b]  # type: ignore[index]  # set together with final_obs
                env.reset()
                self._store(b)
        step = self._snapshot()
        step.rewards, step.terminated, step.truncated = rewards, terminated, truncated
        step.final_obs, step.final_state = final_obs, final_state
        return step

    def close(self) -> None:
        for env in self.envs:
            env.close()
