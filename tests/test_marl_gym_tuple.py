"""Level-Based Foraging and the multi-robot warehouse as teamrl.marl envs (``lbf:<id>``, ``rware:<id>``;
issue 23): PettingZoo's API and seed tests, step-for-step agreement with the package's own env, time-limit
ends as truncations, and a run through ``teamrl marl train``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("lbforaging")
pytest.importorskip("rware")

import gymnasium  # noqa: E402
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

from teamrl.marl.envs import list_envs, make_vec_env  # noqa: E402
from teamrl.marl.envs.gym_tuple import parallel_env  # noqa: E402

ENVS = ["lbf:Foraging-8x8-2p-3f-v3", "lbf:Foraging-2s-8x8-3p-2f-coop-v3", "rware:rware-tiny-2ag-v2"]


@pytest.fixture(autouse=True)
def _quiet():  # noqa: ANN202 - the packages warn about their own spaces
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("name", ENVS)
def test_the_pettingzoo_api_and_seed_tests_pass(name: str) -> None:
    parallel_api_test(parallel_env(name), num_cycles=120)
    parallel_seed_test(lambda: parallel_env(name))


@pytest.mark.parametrize("name", ENVS)
def test_copies_play_the_package_env_step_for_step(name: str) -> None:
    """Copy i of the vectorised env, reset with seed + i, sees exactly what the package's env sees under
    the same seed and actions (observations and rewards, every agent)."""
    import importlib

    prefix, _, env_id = name.partition(":")
    importlib.import_module({"lbf": "lbforaging", "rware": "rware"}[prefix])
    raw = [gymnasium.make(env_id, disable_env_checker=True) for _ in range(2)]
    vec = make_vec_env(name, 2, seed=7)
    step = vec.reset(seed=7)
    raw_obs = [r.reset(seed=7 + i)[0] for i, r in enumerate(raw)]
    rng = np.random.default_rng(0)
    n_actions = int(vec.action_spaces["agent_0"].n)  # type: ignore[attr-defined]
    for _ in range(30):
        for i in range(2):
            for j, agent in enumerate(vec.agents):
                np.testing.assert_allclose(step.obs[agent][i], raw_obs[i][j], rtol=0, atol=0)
        actions = {a: rng.integers(n_actions, size=2) for a in vec.agents}
        step = vec.step(actions)
        for i, r in enumerate(raw):
            obs, rewards, done, _, _ = r.step(tuple(int(actions[a][i]) for a in vec.agents))
            for j, agent in enumerate(vec.agents):
                assert step.rewards[agent][i] == pytest.approx(float(rewards[j]))
            raw_obs[i] = r.reset()[0] if done else obs
            assert bool(step.done[i]) is bool(done)


def test_an_episode_cut_by_the_time_limit_is_a_truncation() -> None:
    """LBF: food left at the limit -> truncated (PPO bootstraps); all food loaded -> terminated. RWARE's
    episodes only end by their limits: always truncated."""
    env = parallel_env("lbf:Foraging-8x8-2p-3f-v3", max_episode_steps=3)
    env.reset(seed=0)
    for _ in range(3):
        _, _, term, trunc, _ = env.step({a: 0 for a in env.agents})  # no-ops: nothing is loaded
    assert all(trunc.values()) and not any(term.values()) and env.agents == []
    env.env.unwrapped.field[:] = 0  # the food is gone: the next end is a terminal state
    env.reset(seed=0)
    env.env.unwrapped.field[:] = 0
    _, _, term, trunc, _ = env.step({a: 0 for a in env.agents})
    assert all(term.values()) and not any(trunc.values())
    ware = parallel_env("rware:rware-tiny-2ag-v2", max_steps=2)
    ware.reset(seed=0)
    ware.step({a: 0 for a in ware.agents})
    _, _, term, trunc, _ = ware.step({a: 0 for a in ware.agents})
    assert all(trunc.values()) and not any(term.values())
    assert parallel_env("lbf:Foraging-8x8-2p-3f-v3").max_cycles == 50
    assert parallel_env("rware:rware-tiny-2ag-v2", max_steps=200).max_cycles == 200


def test_names_are_listed_and_a_wrong_id_is_one_line() -> None:
    assert {"lbf:Foraging-8x8-2p-3f-v3", "rware:rware-tiny-2ag-v2"} <= set(list_envs())
    with pytest.raises(ValueError, match=r"did you mean Foraging-8x8-2p-3f-v3"):
        make_vec_env("lbf:Foraging-8x8-2p-3f-v9", 2, 0)


@pytest.mark.parametrize(
    ("algo", "env"), [("mappo", "lbf:Foraging-5x5-2p-1f-v3"), ("qmix", "rware:rware-tiny-2ag-v2")]
)
def test_teamrl_marl_train_runs_on_them(tmp_path, capsys, algo: str, env: str) -> None:  # noqa: ANN001
    from teamrl.cli import main

    sets = ["total_env_steps=400", "num_envs=4", "env.max_steps=50"] if algo == "qmix" else []
    sets = sets or ["total_env_steps=400", "num_envs=8", "hidden=[16]"]
    args = [
        "marl",
        "train",
        "--algo",
        algo,
        "--env",
        env,
        "--out",
        str(tmp_path),
        "--name",
        "r",
        "--episodes",
        "4",
    ]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    assert f"{algo} on {env}" in capsys.readouterr().out
    assert (tmp_path / "r" / "eval.json").is_file()


def test_every_lbf_id_gets_the_team_reward_and_memory_by_default() -> None:
    from teamrl.config import ConfigError
    from teamrl.marl.train import resolve

    for algo in ("mappo", "ippo"):
        _, cfg, _ = resolve(algo, "lbf:Foraging-5x5-2p-1f-v3", {})
        assert cfg.team_reward is True and cfg.recurrent is True  # type: ignore[attr-defined]
    _, cfg, _ = resolve("mappo", "lbf:Foraging-5x5-2p-1f-v3", {"recurrent": False, "team_reward": False})
    assert cfg.team_reward is False and cfg.recurrent is False  # type: ignore[attr-defined]  # the user's say
    _, cfg, _ = resolve("mappo", "rware:rware-tiny-2ag-v2", {})
    assert cfg.recurrent is False  # type: ignore[attr-defined]  # another family: PPO's defaults
    # the preset's GRU gives way to the user's entity actor, which LBF cannot feed: refused before training
    with pytest.raises(ConfigError, match="entity_actor needs an env that declares entity_slots"):
        resolve("mappo", "lbf:Foraging-5x5-2p-1f-v3", {"entity_actor": True})


def test_an_env_preset_is_found_by_name_then_by_family() -> None:
    from types import SimpleNamespace

    from teamrl.marl.registry import env_preset

    module = SimpleNamespace(ENV_PRESETS={"lbf:": {"a": 1}, "lbf:Foraging-5x5-2p-1f-v3": {"a": 2}})
    assert env_preset(module, "lbf:Foraging-8x8-2p-3f-v3") == {"a": 1}  # type: ignore[arg-type]
    assert env_preset(module, "lbf:Foraging-5x5-2p-1f-v3") == {"a": 2}  # type: ignore[arg-type]
    assert env_preset(module, "my_pkg.envs:factory") == {}  # type: ignore[arg-type]
    assert env_preset(module, "simple_spread") == {}  # type: ignore[arg-type]
    assert env_preset(SimpleNamespace(), "lbf:x") == {}  # type: ignore[arg-type]  # a module without presets
    preset = env_preset(module, "lbf:x")  # type: ignore[arg-type]
    preset["a"] = 9  # a copy: the module's presets are left as they were
    assert module.ENV_PRESETS["lbf:"] == {"a": 1}
