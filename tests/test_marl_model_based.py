"""Model-based PPO (issue 21, teamrl/marl/imagination.py): imagined steps are learned from but never counted
as real steps; the world model trains online; the config nests; envs the model cannot imagine are refused
with a clear error; the models travel in checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from teamrl.config import ConfigError
from teamrl.marl import ppo
from teamrl.marl.imagination import Imagination, ModelConfig, _Ring, check_env
from teamrl.marl.run import RunContext
from teamrl.marl.train import resolve
from teamrl.marl.world_model import Transitions, WorldModel, collect
from tests.test_marl_world_model import Walkers, _random

torch.set_num_threads(1)


class JointWalkers(Walkers):
    """Walkers whose global state is both agents' observations (what MAPPO's imagined steps need)."""

    state_dim = 8

    def reset(self, seed: int | None = None):  # noqa: ANN201
        return self._joint(super().reset(seed))

    def step(self, actions):  # noqa: ANN001, ANN201
        return self._joint(super().step(actions))

    def _joint(self, step):  # noqa: ANN001, ANN202
        step.state = np.concatenate([step.obs["a"], step.obs["b"]], 1)
        if step.final_obs is not None:
            step.final_state = np.concatenate([step.final_obs["a"], step.final_obs["b"]], 1)
        return step


def _train(env_cls, total: int, **cfg):  # noqa: ANN001, ANN003, ANN202
    envs = []

    def make(num_envs: int, seed: int):  # noqa: ANN202
        envs.append(env_cls(num_envs, seed))
        return envs[-1]

    run = RunContext(None, make, total, show_progress=False, tensorboard=False)
    config = ppo.Config(total_env_steps=total, num_envs=16, rollout_steps=10, epochs=2, **cfg)
    result = ppo.train(config, run)
    return result, run, envs[0]


def test_imagined_steps_are_counted_apart_from_the_real_steps() -> None:
    model = {"horizon": 4, "ratio": 2.0, "warmup": 320, "fit_steps": 5, "hidden": [32], "members": 2}
    _, run, env = _train(JointWalkers, 1600, centralised_critic=True, model=model)
    real = env.real_steps * env.num_envs  # the env's own count of copy-steps
    assert real == 1600 == run.history[-1]["step"]
    # warm-up: the first rollout trains the model only; once 320 real steps are done, each update also
    # learns from 2 x 160 imagined steps (80 branches of 4): 9 updates
    imagined = [row["model/imagined_steps"] for row in run.history]
    assert imagined[:2] == [0.0, 320.0] and imagined[-1] == 9 * 320
    assert all(np.isfinite(row["model/error"]) for row in run.history[1:])
    assert "model/teammate_accuracy" in run.history[-1]


def test_model_free_runs_are_unchanged_by_the_option() -> None:
    """model: null takes no branch of the imagination code: same seed, same updates, same weights."""
    a, _, _ = _train(Walkers, 640, seed=3)
    b, _, _ = _train(Walkers, 640, seed=3, model=None)
    for x, y in zip(a["checkpoint"]["actors"], b["checkpoint"]["actors"], strict=True):
        assert all(torch.equal(x[k], y[k]) for k in x)


def test_the_world_model_trains_online_while_the_data_grows() -> None:
    torch.manual_seed(0)
    model = WorldModel(2, 4, 5, hidden=[64, 64], members=2)
    ring = _Ring(2000)
    losses = []
    for part in range(6):
        data = collect(Walkers(32), _random, 10, seed=part)
        model.observe(data)
        ring.add(data)
        losses.append(model.train_steps(ring.view(), 60, batch_size=128, seed=part))
    assert losses[-1] < losses[0] / 5
    test = collect(Walkers(32), _random, 10, seed=99)
    assert model.error(test) < 0.05


def test_the_replay_keeps_the_newest_transitions() -> None:
    def chunk(start: int, n: int) -> Transitions:
        v = np.arange(start, start + n, dtype=np.float32)
        return Transitions(v[:, None, None], v[:, None].astype(np.int64), v[:, None, None], v[:, None], v > 0)

    ring = _Ring(5)
    ring.add(chunk(0, 3))
    assert sorted(ring.view().actions[:, 0]) == [0, 1, 2]
    ring.add(chunk(3, 4))
    assert sorted(ring.view().actions[:, 0]) == [2, 3, 4, 5, 6]
    ring.add(chunk(7, 12))  # more than it holds: the end of it
    assert sorted(ring.view().actions[:, 0]) == [14, 15, 16, 17, 18]


def test_envs_the_model_cannot_imagine_are_refused() -> None:
    with pytest.raises(ValueError, match="concatenation of the agents' observations"):
        check_env(Walkers(2), centralised_critic=True)  # its state is agent a's observation only
    check_env(Walkers(2), centralised_critic=False)  # IPPO needs no state

    class Continuous(JointWalkers):
        def __init__(self, num_envs: int, seed: int = 0) -> None:
            super().__init__(num_envs, seed)
            self.action_spaces = {a: spaces.Box(-1, 1, (2,), np.float32) for a in self.agents}

    with pytest.raises(ValueError, match="discrete actions"):
        check_env(Continuous(2), centralised_critic=True)
    with pytest.raises(ValueError, match="recurrent and model"):
        ppo.Config(recurrent=True, model={})


def test_model_settings_nest_under_set_and_bad_ones_are_one_line() -> None:
    _, cfg, _ = resolve("mappo", "simple_spread", {"model.horizon": 3, "model.ratio": 0.5})
    assert cfg.model == ModelConfig(horizon=3, ratio=0.5)  # type: ignore[attr-defined]
    _, cfg, _ = resolve("mappo", "simple_spread", {"model": {"horizon": 2}, "model.members": 4})
    assert (cfg.model.horizon, cfg.model.members) == (2, 4)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="model.horizon") as err:
        resolve("mappo", "simple_spread", {"model.horizon": 0})
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="discrete actions"):
        resolve("mappo", "simple_spread", {"model.horizon": 3, "env.continuous_actions": True})


def test_the_models_travel_in_the_checkpoint() -> None:
    model = {"warmup": 0, "fit_steps": 3, "hidden": [16], "members": 2}
    result, _, env = _train(JointWalkers, 320, centralised_critic=True, model=model)
    saved = result["checkpoint"]["world_model"]
    assert saved["fits"] == 2 and "teammates" in saved
    fresh = Imagination(ModelConfig(**model), env, seed=1)
    fresh.load_state_dict(saved)
    for k, v in saved["model"].items():
        assert torch.equal(fresh.model.state_dict()[k], v)


def test_a_model_based_run_resumes_with_its_models(tmp_path) -> None:  # noqa: ANN001
    """Resumed from its checkpoint, a model-based run keeps its world model (it goes on fitting from it) and
    counts real steps on from the checkpoint's."""
    from teamrl.marl.train import resume_run, train

    sets = {"num_envs": 8, "rollout_steps": 25, "hidden": [16], "epochs": 1, "checkpoint_every": 400}
    model = {"warmup": 0, "fit_steps": 2, "hidden": [16], "members": 2, "horizon": 2}
    train(
        "mappo",
        "simple_spread",
        {**sets, "total_env_steps": 400, "model": model},
        tmp_path / "r",
        episodes=4,
        show_progress=False,
        eval_every=0,
    )
    first = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)["world_model"]
    summary = resume_run(tmp_path / "r", overrides={"total_env_steps": 800}, episodes=4, show_progress=False)
    assert summary["train"]["env_steps"] == 800
    after = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)["world_model"]
    assert (first["fits"], after["fits"]) == (2, 4)  # two rollouts before, two after: it went on fitting


def test_simple_tag_predators_and_prey_are_imagined_with_their_own_networks() -> None:
    """simple_tag (the issue's second MPE scenario): two groups (3 predators, 1 prey) with their own actors;
    the world model predicts all four agents' observations and rewards, MAPPO learns from imagined branches
    of it, and the teammate model is scored on every agent."""
    from teamrl.marl.envs import make_vec_env

    model = {"horizon": 3, "ratio": 1.0, "warmup": 400, "fit_steps": 5, "hidden": [32], "members": 2}
    run = RunContext(
        None, lambda n, s: make_vec_env("simple_tag", n, s), 1600, show_progress=False, tensorboard=False
    )
    config = ppo.Config(
        total_env_steps=1600, num_envs=16, rollout_steps=25, epochs=1, centralised_critic=True
    )
    config = config.model_copy(update={"model": ModelConfig(**model), "parameter_sharing": "per_group"})
    result = ppo.train(config, run)
    assert [len(g["agents"]) for g in result["checkpoint"]["groups"]] == [3, 1]
    assert run.history[-1]["step"] == 1600  # imagined steps are not real ones
    assert run.history[-1]["model/imagined_steps"] > 0
    assert all(np.isfinite(row["model/error"]) for row in run.history[1:])
    assert 0.0 <= run.history[-1]["model/teammate_accuracy"] <= 1.0
