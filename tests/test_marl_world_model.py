"""Model-based pieces (issue 21): on a toy system with known dynamics the world model's loss falls and it
predicts the next step; the teammate model learns a scripted teammate and asks for a refresh when the
teammate changes; imagined rollouts never touch the environment's step counter."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from teamrl.marl.core import VecStep
from teamrl.marl.world_model import TeammateModel, WorldModel, collect, imagine

torch.set_num_threads(1)
MOVES = np.array([[0.0, 0.0], [0.1, 0.0], [-0.1, 0.0], [0.0, 0.1], [0.0, -0.1]])


class Walkers:
    """Two agents on a plane with known dynamics: each moves by ``MOVES[action]``; an agent observes its own
    position then the other's; its reward is minus its distance to the origin. Episodes of 20 steps."""

    agents = ["a", "b"]
    state_dim = 4
    max_steps = 20

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.num_envs = num_envs
        self.observation_spaces = {a: spaces.Box(-5, 5, (4,), np.float32) for a in self.agents}
        self.action_spaces = {a: spaces.Discrete(5) for a in self.agents}
        self.rng = np.random.default_rng(seed)
        self.real_steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        a, b = self.pos[:, 0], self.pos[:, 1]
        return {
            "a": np.concatenate([a, b], 1).astype(np.float32),
            "b": np.concatenate([b, a], 1).astype(np.float32),
        }

    def reset(self, seed: int | None = None) -> VecStep:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.pos = self.rng.uniform(-1, 1, (self.num_envs, 2, 2))
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        obs = self._obs()
        zeros = np.zeros(self.num_envs, bool)
        return VecStep(
            obs,
            np.concatenate([obs["a"]], 1),
            {a: np.zeros(self.num_envs, np.float32) for a in self.agents},
            zeros,
            zeros.copy(),
        )

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        self.real_steps += 1
        for j, a in enumerate(self.agents):
            self.pos[:, j] += MOVES[np.asarray(actions[a])]
        rewards = {
            a: -np.linalg.norm(self.pos[:, j], axis=1).astype(np.float32) for j, a in enumerate(self.agents)
        }
        self.t += 1
        done = self.t >= self.max_steps
        final = self._obs() if done.any() else None
        if done.any():
            self.pos[done] = self.rng.uniform(-1, 1, (int(done.sum()), 2, 2))
            self.t[done] = 0
        obs = self._obs()
        return VecStep(obs, obs["a"].copy(), rewards, np.zeros(self.num_envs, bool), done, final_obs=final)

    def close(self) -> None:
        pass


def _random(step: VecStep) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(int(abs(step.obs["a"].sum()) * 1e6) % 2**32)
    return {a: rng.integers(5, size=len(o)) for a, o in step.obs.items()}


def test_the_world_model_learns_known_dynamics() -> None:
    torch.manual_seed(0)
    env = Walkers(32)
    train, test = collect(env, _random, 60, seed=1), collect(Walkers(32), _random, 20, seed=2)
    assert len(train) == 32 * 60 and train.done.sum() == 32 * 3
    # an ended episode's next observation is where it ended (one move away), not the reset position
    assert np.abs(train.next_obs[train.done] - train.obs[train.done]).max() <= 0.1 + 1e-5
    model = WorldModel(2, 4, 5, hidden=[64, 64], members=2)
    before = model.error(test)
    curve = model.fit(train, epochs=25, batch_size=128)
    assert curve[-1] < curve[0] / 10
    assert model.error(test) < before / 10
    # one step predicted on fresh states: positions move by the action's displacement
    obs, actions = torch.from_numpy(test.obs[:64]), torch.from_numpy(test.actions[:64])
    nxt, rewards = model.step(obs, actions, torch.Generator().manual_seed(0))
    truth = torch.from_numpy(test.next_obs[:64])
    assert (nxt - truth).abs().mean() < 0.02
    assert (rewards - torch.from_numpy(test.rewards[:64])).abs().mean() < 0.1


def test_the_teammate_model_tracks_a_teammate_that_changes() -> None:
    """b heads for the origin along x while a plays at random: from a's observation (which shows b's
    position) its model learns b's action; when b starts heading away it asks for a refresh."""

    def scripted(towards: bool):  # noqa: ANN202
        def act(step: VecStep) -> dict[str, np.ndarray]:
            bx = step.obs["b"][:, 0]
            home = np.where(bx > 0, 2, 1) if towards else np.where(bx > 0, 1, 2)
            return {"a": _random(step)["a"], "b": home}

        return act

    torch.manual_seed(0)
    model = TeammateModel(2, 4, 5, hidden=[64, 64])
    data = collect(Walkers(32), scripted(True), 40, seed=3)
    model.fit(data, epochs=40)
    fresh = collect(Walkers(32), scripted(True), 10, seed=4)
    pred_b = model.logits(0, torch.from_numpy(fresh.obs[:, 0])).argmax(-1)[:, 0]
    assert float((pred_b == torch.from_numpy(fresh.actions[:, 1])).float().mean()) > 0.9
    assert not model.needs_refresh(fresh)
    changed = collect(Walkers(32), scripted(False), 10, seed=5)
    assert model.needs_refresh(changed)
    model.fit(collect(Walkers(32), scripted(False), 40, seed=6), epochs=40)
    assert not model.needs_refresh(changed)


def test_imagined_rollouts_never_touch_the_environment() -> None:
    torch.manual_seed(0)
    env = Walkers(16)
    data = collect(env, _random, 30, seed=1)
    steps_before = env.real_steps
    model = WorldModel(2, 4, 5, hidden=[32], members=2)
    model.fit(data, epochs=3)
    start = torch.from_numpy(data.obs[:16])
    dream = imagine(model, _random, env.agents, start, horizon=5)
    assert env.real_steps == steps_before == 30  # the real-step counter did not move
    assert dream.steps == 5 * 16 and dream.obs.shape == (6, 16, 2, 4) and dream.rewards.shape == (5, 16, 2)
    assert torch.equal(dream.obs[0], start)
