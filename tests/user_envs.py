"""Users' own PettingZoo envs for tests/test_marl_user_env.py: the example of docs/marl.md ("Bring your
own PettingZoo environment", between the markers below: the test checks the two are the same text), then
factories that break each rule ``teamrl marl train --env module:factory`` checks."""

from __future__ import annotations

# --- docs/marl.md example begins ---
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]])  # stay, right, left, up, down


class TargetGrid(ParallelEnv):
    """Two walkers on a size x size grid; every step each one earns the fraction of walkers that stand
    on the target cell (a shared, cooperative reward). Observation: own cell and the target's, in [0, 1]."""

    metadata = {"name": "target_grid_v0"}

    def __init__(self, size: int = 4, max_cycles: int = 10):
        self.size, self.max_cycles = size, max_cycles  # max_cycles: the episode length teamrl reads
        self.possible_agents = ["walker_0", "walker_1"]
        self.agents = []
        self._obs_space = spaces.Box(0.0, 1.0, (4,), np.float32)
        self._act_space = spaces.Discrete(len(MOVES))
        self.rng = np.random.default_rng()

    def observation_space(self, agent):
        return self._obs_space  # the same object every time

    def action_space(self, agent):
        return self._act_space

    def _observe(self):
        scale = self.size - 1
        return {a: np.concatenate([self.pos[a], self.target]).astype(np.float32) / scale for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        self.target = self.rng.integers(0, self.size, 2)
        self.pos = {a: self.rng.integers(0, self.size, 2) for a in self.agents}
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        for a, move in actions.items():
            self.pos[a] = np.clip(self.pos[a] + MOVES[move], 0, self.size - 1)
        on_target = np.mean([np.array_equal(self.pos[a], self.target) for a in self.agents])
        self.t += 1
        done = self.t >= self.max_cycles
        obs = self._observe()
        rewards = {a: float(on_target) for a in self.agents}
        terminations = {a: False for a in self.agents}
        truncations = {a: done for a in self.agents}
        infos = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


def make_env(size: int = 4, max_cycles: int = 10) -> TargetGrid:
    return TargetGrid(size=size, max_cycles=max_cycles)


# --- docs/marl.md example ends ---

# ------------------------------------------------------------------------------- factories that fail
not_a_factory = 42


def make_broken(size: int = 4) -> TargetGrid:
    raise RuntimeError("the simulator is not installed")


def make_aec() -> object:
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(TargetGrid())


def make_gym() -> object:
    import gymnasium

    return gymnasium.make("CartPole-v1")


def make_dict() -> object:
    return {"walker_0": TargetGrid()}


class _Spaces(TargetGrid):
    """TargetGrid with other spaces; actions are mapped back to moves where they can be."""

    obs: dict[str, spaces.Space] = {}
    act: dict[str, spaces.Space] = {}

    def observation_space(self, agent):
        return self.obs.get(agent, self._obs_space)

    def action_space(self, agent):
        return self.act.get(agent, self._act_space)

    def _observe(self):
        out = super()._observe()
        for a in out:
            if a in self.obs:
                out[a] = self.obs[a].sample()
        return out

    def step(self, actions):
        return super().step({a: int(np.asarray(m).reshape(-1)[0] > 0) for a, m in actions.items()})


class _ContinuousActions(_Spaces):
    act = {a: spaces.Box(-1.0, 1.0, (2,), np.float32) for a in ("walker_0", "walker_1")}


class _UnboundedActions(_Spaces):
    act = {a: spaces.Box(-np.inf, np.inf, (2,), np.float32) for a in ("walker_0", "walker_1")}


class _MultiDiscreteActions(_Spaces):
    act = {"walker_1": spaces.MultiDiscrete([3, 3])}


class _SequenceObs(_Spaces):
    obs = {"walker_0": spaces.Sequence(spaces.Discrete(3))}


class _Heterogeneous(_Spaces):
    obs = {"walker_1": spaces.Box(0.0, 1.0, (6,), np.float32)}


def make_continuous() -> TargetGrid:
    return _ContinuousActions()


def make_unbounded() -> TargetGrid:
    return _UnboundedActions()


def make_multidiscrete() -> TargetGrid:
    return _MultiDiscreteActions()


def make_sequence_obs() -> TargetGrid:
    return _SequenceObs()


def make_heterogeneous() -> TargetGrid:
    return _Heterogeneous()


def make_no_length() -> TargetGrid:
    return TargetGrid(max_cycles=10.0)  # a float: not an episode length teamrl reads (QMIX needs one)


class _WrongObs(TargetGrid):
    def _observe(self):
        return {a: np.zeros(3, np.float32) for a in self.agents}


def make_wrong_obs() -> TargetGrid:
    return _WrongObs()


_SINGLETON = TargetGrid()


def make_singleton() -> TargetGrid:
    return _SINGLETON


class _ShiftedActions(TargetGrid):
    """Actions Discrete(5, start=10): action 10 + i is move i."""

    def __init__(self):
        super().__init__()
        self._act_space = spaces.Discrete(len(MOVES), start=10)
        self.played: list[dict] = []

    def step(self, actions):
        self.played.append(dict(actions))
        return super().step({a: m - 10 for a, m in actions.items()})


def make_shifted() -> TargetGrid:
    return _ShiftedActions()
