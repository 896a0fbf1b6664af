"""benchmarks/marl_benchmarl.py: the evaluation both libraries' policies go through, and teamrl's side of a
run (BenchMARL's side needs its own virtual environment and is not installed here)."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("vmas")

import torch  # noqa: E402
from bench_scripts import load_script  # noqa: E402

bench = load_script("marl_benchmarl")


@pytest.fixture(autouse=True)
def _quiet_and_small(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    monkeypatch.setattr(bench, "EPISODES", 12)  # the benchmark's 100 x 100 steps, shrunk for the suite
    monkeypatch.setattr(bench, "MAX_STEPS", 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_the_evaluation_is_one_fixed_episode_per_copy_and_tells_policies_apart() -> None:
    calls = []

    def still(obs: list[torch.Tensor]) -> list[torch.Tensor]:
        calls.append(len(obs[0]))
        return [torch.zeros(len(o), 2) for o in obs]

    first = bench.evaluate("navigation", still)
    assert calls == [bench.EPISODES] * bench.MAX_STEPS  # every copy plays one whole episode
    assert bench.evaluate("navigation", still) == first  # the same episodes every time

    def east(obs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.tensor([[1.0, 0.0]]).expand(len(o), 2) for o in obs]

    assert len(first) == bench.EPISODES
    assert bench.evaluate("navigation", east) != pytest.approx(first, abs=1e-3)


def test_teamrl_side_trains_no_more_steps_than_asked_and_is_evaluated() -> None:
    row = bench.run_teamrl("balance", 0, 5000)
    assert row["frames"] == 3200  # whole updates of 128 copies x 25 steps, never more than BenchMARL's
    assert row["wall_s"] > 0 and row["cpu_s"] > 0
    assert len(row["returns"]) == bench.EPISODES and torch.isfinite(torch.tensor(row["returns"])).all()
    assert row["return"] == pytest.approx(sum(row["returns"]) / bench.EPISODES)


def test_the_driver_needs_benchmarl_s_python(capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    argv, sys.argv = sys.argv, ["marl_benchmarl.py", "--tasks", "balance"]
    try:
        with pytest.raises(SystemExit) as exc:
            bench.main()
    finally:
        sys.argv = argv
    assert exc.value.code == 2 and "--benchmarl-python is required" in capsys.readouterr().err


def test_the_summary_pools_each_library_s_seeds_and_its_throughput() -> None:
    def row(lib: str, seed: int, returns: list[float], cpu: float) -> dict:
        mean = sum(returns) / len(returns)
        return {
            "library": lib,
            "task": "balance",
            "seed": seed,
            "frames": 100,
            "wall_s": 2 * cpu,
            "cpu_s": cpu,
            "return": mean,
            "returns": returns,
        }

    rows = [
        row("teamrl", 0, [1.0, 3.0], 1.0),
        row("benchmarl", 0, [0.0, 0.0], 5.0),
        row("teamrl", 1, [5.0, 7.0], 3.0),
    ]
    summary = bench.summarize_rows(rows)
    assert set(summary) == {"balance/teamrl", "balance/benchmarl"}
    ours = summary["balance/teamrl"]
    assert ours["seeds"] == [0, 1] and ours["run_means"] == [2.0, 6.0] and ours["mean"] == 4.0
    assert ours["frames_per_cpu_s"] == 200 / 4.0 and ours["frames_per_s"] == 200 / 8.0
    assert ours["iqm_ci"][0] <= ours["iqm"] <= ours["iqm_ci"][1] and ours["episodes"] == 4
    assert summary["balance/benchmarl"]["std_over_runs"] == 0.0  # one seed


def test_one_run_of_the_driver_writes_rows_and_summary(tmp_path, monkeypatch) -> None:
    import json
    import sys

    out = tmp_path / "r.json"
    argv = [
        "marl_benchmarl.py",
        "--libraries",
        "teamrl",
        "--tasks",
        "balance",
        "--seeds",
        "0",
        "--frames",
        "3200",
        "--out",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", argv)

    class Done:
        returncode, stderr = 0, ""
        stdout = json.dumps(bench._row(3200, 1.0, 0.5, [1.0, 2.0]))

    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: Done())
    bench.main()
    record = json.loads(out.read_text())
    assert [r["library"] for r in record["rows"]] == ["teamrl"]
    assert record["summary"]["balance/teamrl"]["mean"] == 1.5
