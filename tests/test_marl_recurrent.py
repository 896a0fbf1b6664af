"""Recurrent (GRU) IPPO / MAPPO (issue 23): a memory game only a recurrent policy can win, the state reset
at episode ends in training and in evaluation, and the feed-forward path unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from teamrl.marl import ppo
from teamrl.marl.core import VecStep
from teamrl.marl.evaluate import evaluate
from teamrl.marl.run import RunContext

torch.set_num_threads(1)


class Recall:
    """Two agents; an episode is ``gap + 2`` steps. At the first step each agent sees a cue (one of 3,
    one-hot), then only a blank with a clock; at the last step it earns 1 for playing its cue. Without
    memory the best is chance, 1/3 per agent."""

    n = 3

    def __init__(self, num_envs: int, seed: int, gap: int = 1) -> None:
        self.num_envs, self.gap = num_envs, gap
        self.agents = ["a0", "a1"]
        self.observation_spaces = {a: spaces.Box(0, 1, (self.n + 1,), np.float32) for a in self.agents}
        self.action_spaces: dict[str, spaces.Space] = {a: spaces.Discrete(self.n) for a in self.agents}
        self.state_dim = 2 * (self.n + 1)
        self.max_steps = gap + 2
        self.rng = np.random.default_rng(seed)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.cue = {a: np.zeros(num_envs, dtype=np.int64) for a in self.agents}

    def _obs(self) -> dict[str, np.ndarray]:
        out = {}
        for a in self.agents:
            o = np.zeros((self.num_envs, self.n + 1), np.float32)
            first = self.t == 0
            o[np.flatnonzero(first), self.cue[a][first]] = 1.0
            o[:, self.n] = self.t / self.max_steps
            out[a] = o
        return out

    def _draw(self, rows: np.ndarray) -> None:
        for a in self.agents:
            self.cue[a][rows] = self.rng.integers(0, self.n, rows.size)
        self.t[rows] = 0

    def _step(self, rewards: dict[str, np.ndarray], done: np.ndarray) -> VecStep:
        obs = self._obs()
        state = np.concatenate([obs[a] for a in self.agents], axis=1)
        return VecStep(obs, state, rewards, done, np.zeros_like(done))

    def reset(self, seed: int | None = None) -> VecStep:
        self._draw(np.arange(self.num_envs))
        return self._step(
            {a: np.zeros(self.num_envs, np.float32) for a in self.agents}, np.zeros(self.num_envs, bool)
        )

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        last = self.t == self.max_steps - 1
        rewards = {
            a: (last & (np.asarray(actions[a]) == self.cue[a])).astype(np.float32) for a in self.agents
        }
        self.t += 1
        self._draw(np.flatnonzero(last))
        return self._step(rewards, last)

    def close(self) -> None:
        pass


def _train(recurrent: bool, centralised: bool = True) -> dict:
    cfg = ppo.Config(
        total_env_steps=64 * 12 * 50,
        num_envs=64,
        rollout_steps=12,
        recurrent=recurrent,
        centralised_critic=centralised,
        parameter_sharing="shared",
        hidden=[32],
        lr=3e-3,
        epochs=4,
        minibatches=2,
        ent_coef=0.01,
        anneal_lr=False,
    )
    run = RunContext(
        None, lambda n, s: Recall(n, s), cfg.total_env_steps, show_progress=False, tensorboard=False
    )
    return ppo.train(cfg, run)


def test_only_a_recurrent_policy_remembers_the_cue() -> None:
    """Chance is 2/3 per episode (two agents, 1/3 each); the GRU policy is near 2, the MLP near chance."""
    gru = evaluate(ppo.make_actor(_train(True)["checkpoint"]), Recall(32, 9), episodes=64)
    mlp = evaluate(ppo.make_actor(_train(False)["checkpoint"]), Recall(32, 9), episodes=64)
    assert gru["return/mean"] > 1.7
    assert mlp["return/mean"] < 1.1


def test_the_evaluation_state_is_reset_where_an_episode_ends() -> None:
    """A recurrent actor's state after one episode does not leak into the next: the actions of a copy in
    its second episode equal those of a fresh actor that starts there."""
    checkpoint = _train(True, centralised=False)["checkpoint"]
    env = Recall(4, 3)
    step = env.reset()
    carried = ppo.make_actor(checkpoint)
    for _ in range(env.max_steps):  # one whole episode
        step = env.step(carried(step))
    assert step.done.all()
    fresh = ppo.make_actor(checkpoint)
    for _ in range(env.max_steps):
        a, b = carried(step), fresh(step)
        for agent in a:
            np.testing.assert_array_equal(a[agent], b[agent])
        step = env.step(a)


def test_recurrent_and_entity_actor_are_refused_together() -> None:
    with pytest.raises(ValueError, match="recurrent and entity_actor"):
        ppo.Config(recurrent=True, entity_actor=True)
    with pytest.raises(ValueError, match="may not exceed num_envs"):
        ppo.Config(recurrent=True, num_envs=2, minibatches=4)


def test_a_recurrent_run_trains_evaluates_and_resumes(tmp_path) -> None:  # noqa: ANN001
    from teamrl.marl.train import evaluate_run, resume_run, train

    overrides = {
        "total_env_steps": 400,
        "num_envs": 8,
        "hidden": [16],
        "epochs": 1,
        "recurrent": True,
        "entity_actor": False,
    }
    summary = train(
        "mappo", "simple_spread", overrides, tmp_path / "r", episodes=8, show_progress=False, eval_every=0
    )
    assert evaluate_run(tmp_path / "r", episodes=8)["return/mean"] == pytest.approx(
        summary["eval"]["return/mean"]
    )
    again = resume_run(tmp_path / "r", {"total_env_steps": 800}, episodes=8, show_progress=False)
    assert again["train"]["env_steps"] == 800
