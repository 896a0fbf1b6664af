"""VMAS scenarios as batched teamrl.marl envs (``vmas:<scenario>``; issue 23): PettingZoo's API and seed
tests on one copy, agreement with VMAS's own env, auto-reset with the last observation kept, the time
limit as a truncation, and a run through ``teamrl marl train``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("vmas")

import torch  # noqa: E402
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

from teamrl.marl.envs import list_envs, make_vec_env  # noqa: E402
from teamrl.marl.envs.vmas_env import make_parallel_env  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():  # noqa: ANN202
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("scenario", ["balance", "navigation"])
def test_one_copy_passes_the_pettingzoo_api_and_seed_tests(scenario: str) -> None:
    parallel_api_test(make_parallel_env(scenario, max_steps=15), num_cycles=40)
    parallel_seed_test(lambda: make_parallel_env(scenario, max_steps=15))


def test_the_batch_is_vmas_s_own() -> None:
    """Same seed, same actions: the observations and rewards of VMAS's env, every agent, every copy."""
    import vmas

    raw = vmas.make_env("balance", num_envs=3, device="cpu", continuous_actions=False, max_steps=50, seed=4)
    raw_obs = raw.reset(seed=4)
    mine = make_vec_env("vmas:balance", 3, seed=4, max_steps=50)
    step = mine.reset()
    rng = np.random.default_rng(0)
    for _ in range(8):
        for j, agent in enumerate(mine.agents):
            np.testing.assert_allclose(step.obs[agent], raw_obs[j].numpy(), rtol=0, atol=1e-6)
        actions = {a: rng.integers(int(mine.action_spaces[a].n), size=3) for a in mine.agents}  # type: ignore[attr-defined]
        raw_obs, raw_rewards, _, _ = raw.step([torch.as_tensor(actions[a]) for a in mine.agents])
        step = mine.step(actions)
        for j, agent in enumerate(mine.agents):
            np.testing.assert_allclose(step.rewards[agent], raw_rewards[j].numpy(), rtol=0, atol=1e-6)


def test_copies_that_end_are_reset_and_their_last_observation_kept() -> None:
    env = make_vec_env("vmas:navigation", 4, seed=0, max_steps=3)
    step = env.reset()
    actions = {a: np.ones(4, dtype=np.int64) for a in env.agents}
    for _ in range(2):
        step = env.step(actions)
        assert not step.done.any() and step.final_obs is None
    step = env.step(actions)
    assert step.truncated.all() and not step.terminated.any()  # the time limit: a truncation
    assert step.final_obs is not None and step.final_state is not None
    agent = env.agents[0]
    assert not np.allclose(step.final_obs[agent], step.obs[agent])  # the fresh episode starts elsewhere
    for _ in range(2):
        step = env.step(actions)
        assert not step.done.any()  # the step counter started again
    assert env.step(actions).truncated.all()


def test_names_are_listed_and_an_unknown_scenario_is_one_line() -> None:
    assert "vmas:balance" in list_envs()
    with pytest.raises(ValueError, match="did you mean balance"):
        make_vec_env("vmas:balanse", 2, 0)


def test_teamrl_marl_train_runs_on_a_vmas_scenario(tmp_path, capsys) -> None:  # noqa: ANN001
    from teamrl.cli import main

    args = [
        "marl",
        "train",
        "--algo",
        "mappo",
        "--env",
        "vmas:balance",
        "--out",
        str(tmp_path),
        "--name",
        "r",
    ]
    sets = ["total_env_steps=400", "num_envs=8", "hidden=[16]", "env.max_steps=25"]
    for s in sets:
        args += ["--set", s]
    assert main([*args, "--episodes", "8"]) == 0
    assert "mappo on vmas:balance" in capsys.readouterr().out
