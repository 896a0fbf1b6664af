"""``teamrl marl train --env module:factory``: a user's own PettingZoo ParallelEnv (tests/user_envs.py,
the example of docs/marl.md) trains, evaluates and learns through the CLI; every broken factory stops
with one line, exit code 2 and no run directory."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

pytest.importorskip("pettingzoo")

import user_envs  # noqa: E402  (tests/ is on sys.path, as for the other helper modules)
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

from teamrl.cli import main  # noqa: E402
from teamrl.marl.envs import make_vec_env  # noqa: E402
from teamrl.marl.evaluate import evaluate, random_actor  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "marl.md"
ENV = "user_envs:make_env"
# a budget on which IPPO and MAPPO learn TargetGrid (about 2 s each on one core)
LEARN = [
    "total_env_steps=8000",
    "num_envs=16",
    "rollout_steps=10",
    "hidden=[32]",
    "lr=3e-3",
    "anneal_lr=false",
]
TINY = ["total_env_steps=160", "num_envs=4", "rollout_steps=10", "hidden=[8]", "epochs=1"]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _train_args(
    env: str, out: Path, sets: list[str], algo: str = "ippo", name: str | None = "r"
) -> list[str]:
    args = ["marl", "train", "--algo", algo, "--env", env, "--out", str(out), "--episodes", "8"]
    args += ["--name", name] if name else []
    for s in sets:
        args += ["--set", s]
    return args


def _docs_example() -> str:
    section = DOCS.read_text().split("## Bring your own PettingZoo environment", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the section has one python block: the example"
    return blocks[0]


# ------------------------------------------------------------------------------- the env is genuine
def test_docs_example_is_the_test_env():
    src = (Path(__file__).parent / "user_envs.py").read_text()
    region = src.split("# --- docs/marl.md example begins ---\n")[1].split("# --- docs/marl.md example ends")[
        0
    ]
    assert _docs_example().strip() == region.strip()


def test_pettingzoo_api_and_seed_tests_pass():
    parallel_api_test(user_envs.make_env(), num_cycles=100)
    parallel_seed_test(user_envs.make_env)


def test_seeding_follows_the_named_env_rules():
    """Copy i's first reset is reset(seed=seed + i); the constructor's seed is used once, later resets
    continue each copy's generator; an explicit reset(seed) starts over."""
    env = make_vec_env(ENV, 3, seed=7)
    first = env.reset()
    for i in range(3):
        obs, _ = user_envs.make_env().reset(seed=7 + i)
        for j, a in enumerate(env.agents):
            np.testing.assert_allclose(first.obs[a][i], obs[a])
            np.testing.assert_allclose(first.state[i, 4 * j : 4 * j + 4], obs[a])
    again = make_vec_env(ENV, 3, seed=7).reset()
    np.testing.assert_array_equal(again.state, first.state)
    assert not np.array_equal(env.reset().state, first.state)  # the seed was used once
    np.testing.assert_array_equal(env.reset(seed=7).state, first.state)
    assert env.max_steps == 10 and env.state_dim == 8


def test_discrete_actions_with_a_start_are_played_shifted():
    env = make_vec_env("user_envs:make_shifted", 2, seed=0)
    assert all(s.n == 5 and s.start == 0 for s in env.action_spaces.values())
    env.reset()
    env.step({a: np.array([0, 4]) for a in env.agents})
    assert env.envs[0].played[-1] == {"walker_0": 10, "walker_1": 10}
    assert env.envs[1].played[-1] == {"walker_0": 14, "walker_1": 14}


# ---------------------------------------------------------------------------------- train and eval
@pytest.mark.parametrize("algo", ["ippo", "mappo"])
def test_cli_trains_a_module_env_which_learns_and_evals(tmp_path, capsys, algo):
    assert main(_train_args(ENV, tmp_path, LEARN, algo)) == 0
    run = tmp_path / "r"
    for name in ("config.yaml", "metrics.jsonl", "checkpoint.pt", "learning_curve.png", "eval.json"):
        assert (run / name).is_file(), name
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["env"] == ENV and resolved["algorithm"] == algo
    assert f"{algo} on {ENV}" in capsys.readouterr().out

    assert main(["marl", "eval", str(run), "--episodes", "100"]) == 0
    assert "100 episodes" in capsys.readouterr().out
    import json

    trained = json.loads((run / "eval.json").read_text())["return/mean"]
    env = make_vec_env(ENV, 50, seed=12345)
    rand = evaluate(random_actor(env), env, 100)["return/mean"]
    assert np.isfinite(trained) and 0.5 < rand < 2.5  # random walkers seldom stand on the target
    # seeds 0-3 reach 4.2-7.6 (IPPO) and 6.0-7.6 (MAPPO) on this budget, random 1.4
    assert trained > rand + 2.0, (trained, rand)


def test_file_path_from_the_docs_block_is_stored_absolute(tmp_path, monkeypatch, capsys):
    """The docs' example saved as a file trains as ``dir/file.py:make_env`` (with an env argument),
    evaluates from another directory, and a moved file is a clean error at eval."""
    work = tmp_path / "work"
    (work / "envs").mkdir(parents=True)
    (work / "envs" / "target_grid.py").write_text(_docs_example())
    monkeypatch.chdir(work)
    assert (
        main(_train_args("envs/target_grid.py:make_env", Path("runs"), [*TINY, "env.size=3"], name=None)) == 0
    )
    (run,) = (work / "runs").iterdir()
    assert run.name.startswith("ippo__target_grid.make_env__s0__")
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["env"] == f"{work / 'envs' / 'target_grid.py'}:make_env"
    assert resolved["env_kwargs"] == {"size": 3}

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["marl", "eval", str(run), "--episodes", "4"]) == 0
    (work / "envs" / "target_grid.py").rename(work / "envs" / "moved.py")
    assert main(["marl", "eval", str(run), "--episodes", "4"]) == 2
    err = capsys.readouterr().err
    assert "target_grid.py not found" in err and "Traceback" not in err


def test_module_in_the_current_directory_is_found(tmp_path, monkeypatch):
    """``teamrl`` run as a console script has no current directory on sys.path; module paths still
    find a package there, as ``python -m`` would."""
    pkg = tmp_path / "my_user_pkg_8d1"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "envs.py").write_text(_docs_example())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for mod in ("my_user_pkg_8d1", "my_user_pkg_8d1.envs"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    assert main(_train_args("my_user_pkg_8d1.envs:make_env", tmp_path / "runs", TINY)) == 0
    assert (tmp_path / "runs" / "r" / "eval.json").is_file()


def test_spaces_the_algorithms_can_use_are_accepted():
    from teamrl.marl.train import resolve

    resolve("ippo", "user_envs:make_heterogeneous")  # per_group: each pair of spaces its own networks
    resolve("qmix", "user_envs:make_heterogeneous")
    resolve("mappo", "user_envs:make_continuous")
    resolve("maddpg", "user_envs:make_continuous")
    resolve("qmix", "user_envs:make_no_length", {"max_episode_steps": 10})


# ----------------------------------------------------------------------------------------- errors
ERRORS = [
    ("no_such_module_7f3:make_env", [], "ippo", "module 'no_such_module_7f3' not found"),
    ("user_envs:make_en", [], "ippo", "'user_envs' has no attribute 'make_en'; did you mean 'make_env'"),
    ("user_envs:not_a_factory", [], "ippo", "'not_a_factory' is 42 (type int), not callable"),
    ("user_envs:make_broken", [], "ippo", "the factory raised RuntimeError: the simulator is not installed"),
    (ENV, ["env.sise=3"], "ippo", "the factory raised TypeError: make_env() got an unexpected keyword"),
    ("user_envs:make_aec", [], "ippo", "returned an AECEnv (pettingzoo.utils.wrappers.order_enforcing"),
    ("user_envs:make_aec", [], "ippo", "wrap it with pettingzoo.utils.conversions.aec_to_parallel"),
    ("user_envs:make_gym", [], "ippo", "returned a single-agent gymnasium Env"),
    ("user_envs:make_dict", [], "ippo", "(type builtins.dict), not a PettingZoo ParallelEnv"),
    ("user_envs:make_singleton", [], "ippo", "the factory returned the same env object twice"),
    (
        "user_envs:make_sequence_obs",
        [],
        "ippo",
        "Sequence(Discrete(3), stack=False) of agent 'walker_0' cannot",
    ),
    (
        "user_envs:make_wrong_obs",
        [],
        "ippo",
        "observation of agent 'walker_0' (an array of shape (3,)) does not",
    ),
    ("user_envs:make_multidiscrete", [], "mappo", "mappo needs Discrete or 1-D float Box actions"),
    ("user_envs:make_continuous", [], "qmix", "qmix needs Discrete actions"),
    (
        "user_envs:make_continuous",
        [],
        "vdn",
        "supported action spaces: ippo/mappo: Discrete or 1-D float Box",
    ),
    ("user_envs:make_unbounded", [], "maddpg", "maddpg needs Discrete or bounded 1-D float Box actions"),
    ("user_envs:make_no_length", [], "qmix", "no integer max_cycles attribute; set it, or --set max_episode"),
    (
        "user_envs:make_heterogeneous",
        ["parameter_sharing=shared"],
        "ippo",
        "'shared' needs every agent to have the same observation and action spaces",
    ),
    ("no_such_dir/env.py:make_env", [], "ippo", "no_such_dir/env.py not found"),
    ("user_envs.py", [], "ippo", "a file needs its factory: path/to/file.py:factory"),
    ("user_envs:", [], "ippo", "an import path is package.module:factory or path/to/file.py:factory"),
]


@pytest.mark.parametrize(("env", "sets", "algo", "expected"), ERRORS)
def test_a_broken_env_is_one_clean_line_before_any_run_dir(tmp_path, capsys, env, sets, algo, expected):
    out = tmp_path / "runs"
    assert main(_train_args(env, out, [*TINY[:1], *sets], algo)) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert err.startswith("teamrl: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_what_an_env_reports_about_an_episode_becomes_env_curves() -> None:
    from teamrl.marl.envs.adapters import episode_summary
    from teamrl.marl.run import info_metrics

    infos = {
        "a": {"other": 1},
        "b": {"episode": {"talks": 3, "goal": 0.5, "won": True, "name": "x", "bad": float("nan")}},
    }
    assert episode_summary(infos) == {"talks": 3.0, "goal": 0.5}  # numbers only; flags, text, NaN left out
    assert episode_summary({"a": {"episode": "done"}}) == {} and episode_summary(None) == {}
    ended = [{"talks": 3.0, "goal": 0.5}, {"talks": 5.0}]
    assert info_metrics(ended) == {"env/goal": 0.5, "env/talks": 4.0} and ended == []
