"""benchmarks/marl_benchmark.py: the episode set every teamrl-side policy plays, and the paired comparison
with the heuristic in its summaries."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")  # the benchmark's SB3 side; installed by scripts/setup.sh

from bench_scripts import load_script  # noqa: E402

bench = load_script("marl_benchmark")


def test_every_policy_plays_the_same_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "EPISODES", 6)
    a = bench.evaluate_on_episode_set(lambda env: bench.heuristic_actor)
    b = bench.evaluate_on_episode_set(lambda env: bench.heuristic_actor)
    assert len(a["returns"]) == 6 and a["returns"] == b["returns"]  # one episode per copy, the same starts
    assert a["episode_length"] == 25
    monkeypatch.setattr(bench, "EPISODES", 12)
    assert len(bench.evaluate_on_episode_set(lambda env: bench.heuristic_actor)["returns"]) == 12


def _run(seed: int, returns: list[float]) -> dict:
    return {"seed": seed, "return_mean": float(np.mean(returns)), "env_steps": 100, "returns": returns}


def test_summaries_pair_each_run_with_the_heuristic_episode_by_episode(capsys: pytest.CaptureFixture) -> None:
    rng = np.random.default_rng(0)
    heuristic = list(rng.normal(-22, 10, 40))
    # the policy is the heuristic plus 0.5 on every episode and noise: the paired mean is near +0.5 with a
    # tight interval, while the unpaired spread of either (about 10) would swamp it
    runs = [[h + 0.5 + float(rng.normal(0, 0.2)) for h in heuristic] for _ in range(3)]
    res = {
        "random": {"return_mean": -80.0},
        "heuristic": {"return_mean": float(np.mean(heuristic)), "returns": heuristic},
        "mappo": [_run(s, r) for s, r in enumerate(runs)],
        "ippo": [_run(0, heuristic[:20])],  # another episode set: no paired comparison
    }
    bench.summarize_runs(res)
    paired = res["mappo_summary"]["vs_heuristic"]
    diffs = [a - b for r in runs for a, b in zip(r, heuristic, strict=True)]
    assert paired["mean"] == pytest.approx(np.mean(diffs))
    low, high = paired["mean_ci"]
    assert 0.3 < low < paired["mean"] < high < 0.7
    assert "vs_heuristic" not in res["ippo_summary"]
    bench.print_table(res)
    out = capsys.readouterr().out
    assert "- heuristic, paired" in out and f"{paired['mean']:+.2f}" in out


def test_the_reference_job_reports_the_training_cpu_of_a_fixed_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration times the same job every time (so two records compare the machine, not the job) and
    reports its training CPU, not its wall time."""
    asked = []

    def fake_train(*job: object) -> dict:
        asked.append(job)
        return {"cpu_s": 12.5, "wall_s": 99.0}

    monkeypatch.setattr(bench, "train_teamrl", fake_train)
    assert bench.calibrate() == 12.5 and bench.calibrate() == 12.5
    assert asked == [bench.CALIBRATION, bench.CALIBRATION] and bench.CALIBRATION[:2] == (
        "mappo",
        "simple_spread",
    )
