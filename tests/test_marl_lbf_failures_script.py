"""benchmarks/marl_lbf_failures.py: a trained LBF run's sampled policy replayed on a fixed set of episodes,
the episodes with food left counted, and those where nothing moved at the end; the same counts twice."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import load_script

bench = load_script("marl_lbf_failures")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("lbforaging")
    from teamrl.marl.train import train

    run = tmp_path_factory.mktemp("lbf") / "run"
    overrides = {"total_env_steps": 800, "num_envs": 32, "seed": 0}
    train("mappo", "lbf:Foraging-8x8-2p-3f-v3", overrides, run, episodes=2, show_progress=False)
    return run


def test_counts_are_consistent_and_repeat(run_dir: Path) -> None:
    first = bench.failures(run_dir, episodes=25, still=5)
    assert first["episodes"] == 25 and 0 <= first["food_left_and_still"] <= first["food_left"] <= 25
    assert 0.0 <= first["return_mean"] <= 1.0
    assert bench.failures(run_dir, episodes=25, still=5) == first  # seeded: the same episodes and samples


def test_agents_that_never_move_are_counted_as_waiting(run_dir: Path, monkeypatch) -> None:  # noqa: ANN001
    import teamrl.marl.ppo as ppo

    def stand_still(checkpoint, deterministic=True):  # noqa: ANN001, ANN202, ARG001
        return lambda step: {a: np.zeros(len(step.done), dtype=np.int64) for a in step.obs}  # NONE

    monkeypatch.setattr(ppo, "make_actor", stand_still)
    idle = bench.failures(run_dir, episodes=20, still=5)
    # nobody moves or loads: no food is ever collected and the grid never changes
    assert idle == {**idle, "episodes": 20, "food_left": 20, "food_left_and_still": 20, "return_mean": 0.0}


def test_a_missing_run_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setattr(sys, "argv", ["marl_lbf_failures.py", str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match="config.yaml not found"):
        bench.main()
