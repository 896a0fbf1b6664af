"""Batched Multi-Agent Particle Environments (MPE) in numpy.

``B`` copies of one MPE scenario are simulated at once with array operations (no Python loop over
copies); the physics, observations and rewards follow mpe2 1.1 (``simple_spread_v3``,
``simple_tag_v3``, ``simple_adversary_v3``; discrete actions, or continuous ones as an option), which
the tests check step by step
against mpe2 itself. The world state is float64; observations, state and rewards are returned as
float32, like mpe2.

Physics of one step (``dt`` = 0.1, damping 0.25, mass 1), for every agent:

* action force: discrete action ``0..4`` = none / -x / +x / -y / +y, times the agent's ``accel``
  (5 when the scenario gives none); with ``continuous_actions=True`` an action is 5 numbers in [0, 1]
  (clipped) and the force is ``(a[2] - a[1], a[4] - a[3]) * accel``, as in mpe2;
* contact force between every pair of colliding entities, ``contact_force * (p_a - p_b) / d *
  softplus(-(d - r_a - r_b) / margin) * margin`` (landmarks push agents but never move);
* ``p += v dt``; ``v = v (1 - damping) + F dt``; ``|v|`` clipped to ``max_speed`` if the agent has one.

Agents come first in the entity order and landmarks are immovable in all three scenarios, so positions
are kept as ``agent_pos [B, A, 2]`` and ``landmark_pos [B, L, 2]``.

:class:`BatchedMPEParallelEnv` is a PettingZoo ``ParallelEnv`` over one copy, for PettingZoo tooling.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from teamrl.marl.core import VecStep

DIM_P = 2
DIM_C = 2  # communication channel width of the three scenarios (silent agents: zeros)
N_ACTIONS = 5
# discrete action -> unit force direction: no-op, left, right, down, up (mpe2's order)
ACTION_DIRECTIONS = np.array([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])


def _norm(x: np.ndarray) -> np.ndarray:
    """Euclidean norm over the last axis, written like mpe2 (sqrt of summed squares)."""
    return np.sqrt(np.square(x).sum(axis=-1))


def _flat(x: np.ndarray) -> np.ndarray:
    """``[B, A, n, 2]`` -> ``[B, A, 2n]`` (also for ``n = 0``)."""
    return x.reshape(*x.shape[:2], x.shape[2] * x.shape[3])


@functools.lru_cache(maxsize=32)
def _others(n: int) -> np.ndarray:
    """``[n, n-1]`` index table: row ``i`` lists every index but ``i``, in order."""
    return np.array([[j for j in range(n) if j != i] for i in range(n)], dtype=np.int64).reshape(n, n - 1)


class BatchedMPE:
    """Base class: ``num_envs`` copies of an MPE world with ``A`` movable agents and ``L`` fixed landmarks.

    Subclasses set the per-agent constants in ``__init__`` (before calling :meth:`_setup`) and implement
    :meth:`_sample_initial`, :meth:`_observe` and :meth:`_rewards`.
    """

    name: str = "mpe"
    dt = 0.1
    damping = 0.25
    contact_force = 1e2
    contact_margin = 1e-3

    # set by subclasses
    agents: list[str]
    agent_size: np.ndarray  # [A]
    agent_accel: np.ndarray  # [A]
    agent_max_speed: np.ndarray  # [A], inf = no limit
    agent_collide: np.ndarray  # [A] bool
    landmark_size: np.ndarray  # [L]
    landmark_collide: np.ndarray  # [L] bool

    def _setup(self, num_envs: int, max_cycles: int, seed: int | None, continuous_actions: bool) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.max_steps: int | None = int(max_cycles)
        self.n_agents = len(self.agents)
        self.n_landmarks = len(self.landmark_size)
        self._rng = np.random.default_rng(seed)
        self.continuous_actions = bool(continuous_actions)
        B, A, L = self.num_envs, self.n_agents, self.n_landmarks
        self.agent_pos = np.zeros((B, A, DIM_P))
        self.agent_vel = np.zeros((B, A, DIM_P))
        self.landmark_pos = np.zeros((B, L, DIM_P))
        self.t = np.zeros(B, dtype=np.int64)
        self._rel_cache: tuple[np.ndarray, np.ndarray] | None = None  # cleared whenever positions change
        # colliding entities: their indices among agents / landmarks and the pair radii
        self._coll_agents = np.flatnonzero(self.agent_collide)
        self._coll_landmarks = np.flatnonzero(self.landmark_collide)
        sizes = np.concatenate([self.agent_size[self._coll_agents], self.landmark_size[self._coll_landmarks]])
        n_ca = len(self._coll_agents)
        self._pair_radius = sizes[:n_ca, None] + sizes[None, :]  # [Ca, C]
        self._not_self = ~np.eye(n_ca, len(sizes), dtype=bool)  # [Ca, C]
        self._not_self_agents = ~np.eye(self.n_agents, dtype=bool)
        self._speed_limited = bool(np.isfinite(self.agent_max_speed).any())
        # spaces, from one observation of a zero world
        obs = self._observe()
        self.observation_spaces: dict[str, spaces.Box] = {
            a: spaces.Box(-np.inf, np.inf, shape=(obs[a].shape[1],), dtype=np.float32) for a in self.agents
        }
        if self.continuous_actions:
            self.action_spaces: dict[str, spaces.Space] = {
                a: spaces.Box(0.0, 1.0, shape=(N_ACTIONS,), dtype=np.float32) for a in self.agents
            }
        else:
            self.action_spaces = {a: spaces.Discrete(N_ACTIONS) for a in self.agents}
        self.state_dim = sum(s.shape[0] for s in self.observation_spaces.values())

    # ----- scenario hooks -----
    def _sample_initial(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        """Initial ``agent_pos [n, A, 2]``, ``landmark_pos [n, L, 2]`` (+ scenario extras) for ``n`` copies,
        drawn in mpe2's order so that ``n == 1`` with a fresh seed reproduces mpe2's ``reset(seed)``."""
        raise NotImplementedError

    def _observe(self) -> dict[str, np.ndarray]:
        """agent -> ``[B, obs_dim]`` float64 observation of the current world."""
        raise NotImplementedError

    def _rewards(self) -> dict[str, np.ndarray]:
        """agent -> ``[B]`` float64 reward of the current (post-step) world."""
        raise NotImplementedError

    def _load_extra(self, index: int, world: Any) -> None:
        """Copy scenario-specific state (e.g. the goal landmark) from an mpe2 world into copy ``index``."""

    def _set_extra(self, idx: np.ndarray, init: dict[str, np.ndarray]) -> None:
        """Store scenario extras of :meth:`_sample_initial` for the copies ``idx``."""

    # ----- contract -----
    def reset(self, seed: int | None = None) -> VecStep:
        """Reset every copy; a seed makes the whole run (including later auto-resets) deterministic."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._reset_copies(np.arange(self.num_envs))
        obs = self._observe()
        zeros = np.zeros(self.num_envs, dtype=np.float32)
        no = np.zeros(self.num_envs, dtype=bool)
        return VecStep(
            obs=self._as_f32(obs),
            state=self._state(obs),
            rewards={a: zeros.copy() for a in self.agents},
            terminated=no,
            truncated=no.copy(),
        )

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        """Advance every copy one step; copies whose episode ended are reset (see :class:`VecStep`)."""
        self._advance(actions)
        rewards = {a: r.astype(np.float32) for a, r in self._rewards().items()}
        obs = self._observe()
        truncated = self.t >= cast(int, self.max_steps)  # always set (int | None for VecMultiAgentEnv)
        terminated = np.zeros(self.num_envs, dtype=bool)
        final_obs = final_state = None
        if truncated.any():
            final_obs, final_state = self._as_f32(obs), self._state(obs)
            self._reset_copies(np.flatnonzero(truncated))
            obs = self._observe()
        return VecStep(
            obs=self._as_f32(obs),
            state=self._state(obs),
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            final_state=final_state,
        )

    def close(self) -> None:
        pass

    # ----- simulation -----
    def _reset_copies(self, idx: np.ndarray) -> None:
        init = self._sample_initial(self._rng, len(idx))
        self.agent_pos[idx] = init["agent_pos"]
        self.agent_vel[idx] = 0.0
        self.landmark_pos[idx] = init["landmark_pos"]
        self.t[idx] = 0
        self._set_extra(idx, init)
        self._rel_cache = None

    def _action_force(self, actions: dict[str, np.ndarray]) -> np.ndarray:
        if self.continuous_actions:  # [none, -x, +x, -y, +y] in [0, 1] (clipped), in float32 like mpe2
            shape = (self.num_envs, N_ACTIONS)
            acts = np.stack([np.asarray(actions[a], np.float32).reshape(shape) for a in self.agents], axis=1)
            acts = np.clip(acts, np.float32(0), np.float32(1))
            u = np.stack([acts[..., 2] - acts[..., 1], acts[..., 4] - acts[..., 3]], axis=-1)
            return u.astype(np.float64) * self.agent_accel[None, :, None]
        acts = np.stack([np.asarray(actions[a]).reshape(self.num_envs) for a in self.agents], axis=1)
        if acts.dtype.kind not in "iu":
            if not np.all(acts == np.round(acts)):
                raise ValueError("MPE actions must be integers in [0, 5)")
            acts = acts.astype(np.int64)
        if acts.min() < 0 or acts.max() >= N_ACTIONS:
            raise ValueError(f"MPE actions must be in [0, {N_ACTIONS}), got {acts.min()}..{acts.max()}")
        return ACTION_DIRECTIONS[acts] * self.agent_accel[None, :, None]  # [B, A, 2]

    def _contact_force(self) -> np.ndarray:
        """Sum of pairwise contact forces on each agent, ``[B, A, 2]`` (zero for non-colliders)."""
        force = np.zeros_like(self.agent_pos)
        ca = self._coll_agents
        if len(ca) == 0:
            return force
        pos = np.concatenate([self.agent_pos[:, ca], self.landmark_pos[:, self._coll_landmarks]], axis=1)
        delta = pos[:, : len(ca), None, :] - pos[:, None, :, :]  # [B, Ca, C, 2]: p_a - p_b
        dist = _norm(delta)
        dist = np.where(self._not_self, dist, 1.0)  # the self pair is masked out below
        k = self.contact_margin
        penetration = np.logaddexp(0.0, -(dist - self._pair_radius) / k) * k
        scale = np.where(self._not_self, self.contact_force * penetration / dist, 0.0)
        force[:, ca] = (delta * scale[..., None]).sum(axis=2)
        return force

    def _advance(self, actions: dict[str, np.ndarray]) -> None:
        """One physics step of every copy (forces from the positions before the step)."""
        force = self._action_force(actions) + self._contact_force()
        self.agent_pos += self.agent_vel * self.dt
        self.agent_vel = self.agent_vel * (1 - self.damping) + force * self.dt
        if self._speed_limited:
            speed = _norm(self.agent_vel)[..., None]
            limit = self.agent_max_speed[None, :, None]
            too_fast = speed > limit
            self.agent_vel = np.where(
                too_fast, self.agent_vel / np.where(too_fast, speed, 1.0) * limit, self.agent_vel
            )
        self.t += 1
        self._rel_cache = None

    # ----- helpers -----
    def _as_f32(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {a: o.astype(np.float32) for a, o in obs.items()}

    def _state(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """mpe2's ``state()``: every agent's observation, concatenated in agent order."""
        return np.concatenate([obs[a] for a in self.agents], axis=1).astype(np.float32)

    def _relative(self) -> tuple[np.ndarray, np.ndarray]:
        """``lm_rel [B, A, L, 2]`` = landmark - agent and ``ag_rel [B, A, A, 2]`` = other - agent
        (computed once per world state: rewards and observations share them)."""
        if self._rel_cache is None:
            lm_rel = self.landmark_pos[:, None, :, :] - self.agent_pos[:, :, None, :]
            ag_rel = self.agent_pos[:, None, :, :] - self.agent_pos[:, :, None, :]
            self._rel_cache = (lm_rel, ag_rel)
        return self._rel_cache

    def _other_rel(self, ag_rel: np.ndarray) -> np.ndarray:
        """Positions of the other agents relative to each agent, ``[B, A, (A-1)*2]``, mpe2's order."""
        others = _others(self.n_agents)
        rows = np.arange(self.n_agents)[:, None]
        return _flat(ag_rel[:, rows, others])

    # ----- agreement with mpe2 -----
    def set_state_from_mpe2(self, index: int, env: Any) -> None:
        """Load the world of an mpe2 env (AEC or parallel, same scenario and sizes) into copy ``index``."""
        raw = env.unwrapped
        world = raw.world
        names = [a.name for a in world.agents]
        if names != self.agents or len(world.landmarks) != self.n_landmarks:
            raise ValueError(
                f"mpe2 world {names} with {len(world.landmarks)} landmarks does not match this env"
            )
        for j, agent in enumerate(world.agents):
            self.agent_pos[index, j] = agent.state.p_pos
            self.agent_vel[index, j] = agent.state.p_vel
        for j, landmark in enumerate(world.landmarks):
            self.landmark_pos[index, j] = landmark.state.p_pos
        self.t[index] = getattr(raw, "steps", 0)
        self._load_extra(index, world)
        self._rel_cache = None

    def observe_copy(self, index: int) -> dict[str, np.ndarray]:
        """float32 observations of copy ``index`` (for comparisons and the ParallelEnv view)."""
        return {a: o[index].astype(np.float32) for a, o in self._observe().items()}


class SimpleSpread(BatchedMPE):
    """N agents cover N landmarks: shared reward ``-sum_l min_a |a - l|``, local ``-1`` per agent collision;
    reward = ``(1 - local_ratio) * shared + local_ratio * local``. Observation (4 + 4N + 2(N-1)):
    own velocity, own position, landmarks and other agents relative to it, zero comm of the others."""

    name = "simple_spread"

    def __init__(
        self,
        num_envs: int = 1,
        N: int = 3,
        local_ratio: float = 0.5,
        max_cycles: int = 25,
        continuous_actions: bool = False,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError("local_ratio is a proportion: it must be in [0, 1]")
        self.N = int(N)
        self.local_ratio = float(local_ratio)
        self.agents = [f"agent_{i}" for i in range(N)]
        self.agent_size = np.full(N, 0.15)
        self.agent_accel = np.full(N, 5.0)
        self.agent_max_speed = np.full(N, np.inf)
        self.agent_collide = np.ones(N, dtype=bool)
        self.landmark_size = np.full(N, 0.05)
        self.landmark_collide = np.zeros(N, dtype=bool)
        self._setup(num_envs, max_cycles, seed, continuous_actions)
        # the landmarks are interchangeable: slots (start, count, width) of the observation that an
        # order-invariant actor (teamrl.marl.ppo's ``entity_actor``) may treat as a set
        self.entity_slots = {a: (4, N, DIM_P) for a in self.agents}

    def _sample_initial(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        return {
            "agent_pos": rng.uniform(-1, 1, (n, self.n_agents, DIM_P)),
            "landmark_pos": rng.uniform(-1, 1, (n, self.n_landmarks, DIM_P)),
        }

    def _observe(self) -> dict[str, np.ndarray]:
        B, A = self.num_envs, self.n_agents
        lm_rel, ag_rel = self._relative()
        obs = np.concatenate(
            [
                self.agent_vel,
                self.agent_pos,
                _flat(lm_rel),
                self._other_rel(ag_rel),
                np.zeros((B, A, (A - 1) * DIM_C)),
            ],
            axis=2,
        )
        return {a: obs[:, i] for i, a in enumerate(self.agents)}

    def _rewards(self) -> dict[str, np.ndarray]:
        lm_rel, ag_rel = self._relative()
        shared = -_norm(lm_rel).min(axis=1).sum(axis=1)  # [B]
        collide = (_norm(ag_rel) < 2 * self.agent_size[0]) & self._not_self_agents
        local = -collide.sum(axis=2).astype(np.float64)  # [B, A]
        rew = shared[:, None] * (1 - self.local_ratio) + local * self.local_ratio
        return {a: rew[:, i] for i, a in enumerate(self.agents)}


class SimpleTag(BatchedMPE):
    """Predator-prey: slower adversaries (size 0.075, accel 3, max speed 1) chase faster good agents (0.05,
    4, 1.3) around ``num_obstacles`` fixed obstacles (0.2). Every adversary gets +10 per (prey, adversary)
    contact; a prey gets -10 per adversary touching it and a penalty for leaving ``[-0.9, 0.9]^2``.
    Observation: own velocity and position, obstacles and other agents relative to it, the velocities of
    the other good agents."""

    name = "simple_tag"

    def __init__(
        self,
        num_envs: int = 1,
        num_good: int = 1,
        num_adversaries: int = 3,
        num_obstacles: int = 2,
        max_cycles: int = 25,
        continuous_actions: bool = False,
        seed: int | None = None,
    ) -> None:
        self.num_good, self.num_adversaries = int(num_good), int(num_adversaries)
        is_adv = np.arange(num_adversaries + num_good) < num_adversaries
        self.agents = [f"adversary_{i}" for i in range(num_adversaries)]
        self.agents += [f"agent_{i}" for i in range(num_good)]
        self.agent_size = np.where(is_adv, 0.075, 0.05)
        self.agent_accel = np.where(is_adv, 3.0, 4.0)
        self.agent_max_speed = np.where(is_adv, 1.0, 1.3)
        self.agent_collide = np.ones(len(is_adv), dtype=bool)
        self.landmark_size = np.full(num_obstacles, 0.2)
        self.landmark_collide = np.ones(num_obstacles, dtype=bool)
        self._setup(num_envs, max_cycles, seed, continuous_actions)

    def _sample_initial(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        return {
            "agent_pos": rng.uniform(-1, 1, (n, self.n_agents, DIM_P)),
            "landmark_pos": rng.uniform(-0.9, 0.9, (n, self.n_landmarks, DIM_P)),
        }

    def _observe(self) -> dict[str, np.ndarray]:
        B, nA, G = self.num_envs, self.num_adversaries, self.num_good
        lm_rel, ag_rel = self._relative()
        common = np.concatenate(
            [self.agent_vel, self.agent_pos, _flat(lm_rel), self._other_rel(ag_rel)], axis=2
        )
        good_vel = self.agent_vel[:, nA:]  # [B, G, 2]
        adv_obs = np.concatenate(
            [common[:, :nA], np.broadcast_to(good_vel.reshape(B, 1, G * DIM_P), (B, nA, G * DIM_P))], axis=2
        )
        other_good_vel = _flat(good_vel[:, _others(G)])
        good_obs = np.concatenate([common[:, nA:], other_good_vel], axis=2)
        obs = {a: adv_obs[:, i] for i, a in enumerate(self.agents[:nA])}
        obs.update({a: good_obs[:, i] for i, a in enumerate(self.agents[nA:])})
        return obs

    @staticmethod
    def _boundary_penalty(x: np.ndarray) -> np.ndarray:
        """mpe2's penalty on a prey coordinate ``|x|``: 0 below 0.9, linear to 1, then exp (<= 10)."""
        exp_part = np.minimum(np.exp(2 * np.minimum(x, 3.0) - 2), 10.0)
        return np.where(x < 0.9, 0.0, np.where(x < 1.0, (x - 0.9) * 10, exp_part))

    def _rewards(self) -> dict[str, np.ndarray]:
        nA = self.num_adversaries
        good_pos = self.agent_pos[:, nA:]
        delta = self.agent_pos[:, :nA, None, :] - good_pos[:, None, :, :]  # [B, nA, G, 2]
        caught = _norm(delta) < (self.agent_size[:nA, None] + self.agent_size[None, nA:])
        adv_rew = 10.0 * caught.sum(axis=(1, 2)).astype(np.float64)  # [B]
        good_rew = -10.0 * caught.sum(axis=1) - self._boundary_penalty(np.abs(good_pos)).sum(axis=2)
        rew = {a: adv_rew for a in self.agents[:nA]}
        rew.update({a: good_rew[:, i] for i, a in enumerate(self.agents[nA:])})
        return rew


class SimpleAdversary(BatchedMPE):
    """One adversary and ``N`` good agents, ``N`` landmarks, one of them the goal (known to the good agents
    only). Adversary reward ``-|adv - goal|``; good reward ``|adv - goal| - min_good |good - goal|``. No
    collisions. Good observation: goal, landmarks, other agents relative to self; the adversary's lacks the
    goal."""

    name = "simple_adversary"

    def __init__(
        self,
        num_envs: int = 1,
        N: int = 2,
        max_cycles: int = 25,
        continuous_actions: bool = False,
        seed: int | None = None,
    ) -> None:
        self.N = int(N)
        A = N + 1
        self.agents = ["adversary_0"] + [f"agent_{i}" for i in range(N)]
        self.agent_size = np.full(A, 0.15)
        self.agent_accel = np.full(A, 5.0)
        self.agent_max_speed = np.full(A, np.inf)
        self.agent_collide = np.zeros(A, dtype=bool)
        self.landmark_size = np.full(N, 0.08)
        self.landmark_collide = np.zeros(N, dtype=bool)
        self.goal = np.zeros(num_envs, dtype=np.int64)  # goal landmark index per copy
        self._setup(num_envs, max_cycles, seed, continuous_actions)

    def _sample_initial(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        goal = rng.integers(self.n_landmarks, size=n)
        return {
            "goal": goal,
            "agent_pos": rng.uniform(-1, 1, (n, self.n_agents, DIM_P)),
            "landmark_pos": rng.uniform(-1, 1, (n, self.n_landmarks, DIM_P)),
        }

    def _set_extra(self, idx: np.ndarray, init: dict[str, np.ndarray]) -> None:
        self.goal[idx] = init["goal"]

    def _load_extra(self, index: int, world: Any) -> None:
        self.goal[index] = next(j for j, lm in enumerate(world.landmarks) if lm is world.agents[0].goal_a)

    def _goal_pos(self) -> np.ndarray:
        return self.landmark_pos[np.arange(self.num_envs), self.goal]  # [B, 2]

    def _observe(self) -> dict[str, np.ndarray]:
        lm_rel, ag_rel = self._relative()
        common = np.concatenate([_flat(lm_rel), self._other_rel(ag_rel)], axis=2)
        goal_rel = self._goal_pos()[:, None, :] - self.agent_pos  # [B, A, 2]
        obs = {self.agents[0]: common[:, 0]}
        obs.update(
            {
                a: np.concatenate([goal_rel[:, i], common[:, i]], axis=1)
                for i, a in enumerate(self.agents)
                if i > 0
            }
        )
        return obs

    def _rewards(self) -> dict[str, np.ndarray]:
        d_goal = _norm(self.agent_pos - self._goal_pos()[:, None, :])  # [B, A]
        good = d_goal[:, 0] - d_goal[:, 1:].min(axis=1)
        rew = {self.agents[0]: -d_goal[:, 0]}
        rew.update({a: good for a in self.agents[1:]})
        return rew


SCENARIOS: dict[str, Callable[..., BatchedMPE]] = {
    "simple_spread": SimpleSpread,
    "simple_tag": SimpleTag,
    "simple_adversary": SimpleAdversary,
}


class BatchedMPEParallelEnv(ParallelEnv):
    """PettingZoo ``ParallelEnv`` over one copy of a batched scenario (no auto-reset: after the last step
    ``agents`` is empty, as PettingZoo expects). ``reset(seed)`` draws the same world as mpe2's
    ``reset(seed)`` for the same scenario arguments."""

    metadata = {"render_modes": [], "is_parallelizable": True, "name": "batched_mpe"}

    def __init__(
        self, scenario: str = "simple_spread", render_mode: str | None = None, **kwargs: Any
    ) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
        if render_mode is not None:
            raise ValueError("BatchedMPEParallelEnv does not render")
        self.render_mode = None
        self.env = SCENARIOS[scenario](num_envs=1, **kwargs)
        self.metadata = {**self.metadata, "name": f"batched_{scenario}"}
        self.possible_agents = list(self.env.agents)
        self.agents: list[str] = []
        self.max_cycles = cast(int, self.env.max_steps)  # a batched scenario always has one
        self.state_space = spaces.Box(-np.inf, np.inf, shape=(self.env.state_dim,), dtype=np.float32)

    def observation_space(self, agent: str) -> spaces.Space:
        return self.env.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.env.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self.env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        self._steps = 0
        return self.env.observe_copy(0), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() after the episode ended; call reset()")
        if self.env.continuous_actions:
            acts = {a: np.asarray(actions.get(a, np.zeros(N_ACTIONS)))[None] for a in self.possible_agents}
        else:
            acts = {a: np.array([int(actions.get(a, 0))]) for a in self.possible_agents}
        self.env._advance(acts)
        self._steps += 1
        obs = self.env.observe_copy(0)
        rewards = {a: float(r[0]) for a, r in self.env._rewards().items()}
        truncated = self._steps >= self.max_cycles
        terms = {a: False for a in self.agents}
        truncs = {a: truncated for a in self.agents}
        infos: dict[str, dict] = {a: {} for a in self.agents}
        if truncated:
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def state(self) -> np.ndarray:
        return self.env._state(self.env._observe())[0]

    def close(self) -> None:
        pass


def parallel_env(scenario: str = "simple_spread", **kwargs: Any) -> BatchedMPEParallelEnv:
    """PettingZoo ParallelEnv view of one batched scenario (``kwargs`` as the scenario's)."""
    return BatchedMPEParallelEnv(scenario, **kwargs)
