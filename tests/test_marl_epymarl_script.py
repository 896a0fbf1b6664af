"""benchmarks/marl_epymarl.py: EPyMARL's side run against a stand-in checkout (its command line, the SMAClite
stand-in, its sacred record read, its CPU time with its workers'), teamrl's side trained for one update, the
summary and the driver's refusals. EPyMARL itself is not a pip package and is not installed here."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from bench_scripts import load_script

bench = load_script("marl_epymarl")

# A stand-in for EPyMARL's src/main.py: imports smaclite as EPyMARL does, burns CPU in a worker process it
# waits for (as EPyMARL's environment workers), writes sacred's record of a test curve, says its run id.
FAKE_MAIN = textwrap.dedent(
    """
    import json, multiprocessing, os, sys, time
    import smaclite  # noqa: F401  (EPyMARL imports it at start-up)

    def burn():
        x = 0
        for i in range(10_000_000):
            x += i * i

    if __name__ == "__main__":
        args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("--"))
        with open("calls.txt", "a") as f:
            f.write(args["seed"] + " ")
        if os.environ.get("FAKE_FAIL") in ("all", args["seed"]):
            print("Traceback: something broke in EPyMARL")
            sys.exit(1)
        if os.environ.get("FAKE_HANG"):  # a worker that runs until it is stopped
            hang = multiprocessing.Process(target=time.sleep, args=(600,))
            hang.start()
            with open("worker.pid", "w") as f:
                f.write(str(hang.pid))
            hang.join()
        p = multiprocessing.Process(target=burn)
        p.start()
        p.join()
        t_max, seed = int(args["t_max"]), int(args["seed"])
        steps = list(range(500, t_max + 1, int(args["test_interval"])))
        info = {
            "test_return_mean_T": steps,
            "test_return_mean": [
                {"py/object": "numpy.float64", "dtype": "float64", "value": min(1.0, t / t_max + seed / 10)}
                for t in steps
            ],
        }
        run = os.path.join("results", "sacred", "mappo", args["env_args.key"], "7")
        os.makedirs(run, exist_ok=True)
        json.dump(info, open(os.path.join(run, "info.json"), "w"))
        json.dump(args, open(os.path.join(run, "config.json"), "w"))
        print('INFO - pymarl - Started run with ID "7"')
    """
)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text(FAKE_MAIN)
    return tmp_path


def test_epymarl_side_reads_its_sacred_curve_and_counts_its_workers_cpu(checkout: Path) -> None:
    row = bench.run_epymarl(checkout, sys.executable, "mappo", 1, 200_000)
    # its t_max is the budget plus one test interval, so that its last test falls at the budget
    config = json.loads((Path(row["sacred_run"]) / "config.json").read_text())
    assert config["t_max"] == str(200_000 + bench.TASKS["lbf"].test_interval) and config["seed"] == "1"
    assert config["env_args.key"] == bench.TASKS["lbf"].epymarl_key
    assert config["env_args.time_limit"] == str(bench.TASKS["lbf"].time_limit)
    assert config["test_nepisode"] == str(bench.TASKS["lbf"].test_episodes)
    assert row["env_steps"] == 250_000
    assert [t for t, _ in row["curve"]] == [500, 50_500, 100_500, 150_500, 200_500]
    assert row["curve"][-1][1] == pytest.approx(200_500 / 250_000 + 0.1)
    assert bench.at_budget(row["curve"], 200_000) == (200_500, pytest.approx(200_500 / 250_000 + 0.1))
    # the worker process's CPU time is counted (it burns far more than the interpreter's start-up)
    assert row["cpu_s"] > 0.4 and row["wall_s"] > 0


def test_rware_runs_both_sides_on_the_warehouse_with_its_own_protocol(
    checkout: Path, tmp_path: Path, monkeypatch, capsys
) -> None:  # noqa: ANN001
    t = bench.TASKS["rware"]
    row = bench.run_epymarl(checkout, sys.executable, "mappo", 0, 200_000, "rware")
    config = json.loads((Path(row["sacred_run"]) / "config.json").read_text())
    assert config["env_args.key"] == "rware:rware-tiny-2ag-v2" and config["env_args.time_limit"] == "500"
    assert config["t_max"] == str(200_000 + t.test_interval) and config["test_nepisode"] == str(
        t.test_episodes
    )
    assert Path(row["sacred_run"]).parent.name == "rware:rware-tiny-2ag-v2"
    # teamrl's side: the worker trains on the same env with the same test protocol
    seen = {}

    def fake_train(algo, env, overrides, run_dir, **kw):  # noqa: ANN001, ANN202
        seen.update(algo=algo, env=env, overrides=overrides, **kw)
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 100, "eval/return/mean": 0.5}) + "\n")
        return {"eval_sampled": {"env_steps": 100, "returns": [0.5]}}

    import teamrl.marl.train

    monkeypatch.setattr(teamrl.marl.train, "train", fake_train)
    bench.worker("mappo", 3, 100, tmp_path / "run", ["num_envs=16"], "rware")
    assert seen["env"] == "rware:rware-tiny-2ag-v2" and seen["eval_every"] == t.test_interval
    assert seen["eval_episodes"] == t.test_episodes and seen["eval_sampled"] is True
    assert seen["overrides"] == {"total_env_steps": 100, "seed": 3, "team_reward": True, "num_envs": 16}
    assert json.loads(capsys.readouterr().out)["curve"] == [[100, 0.5]]
    assert "--task" in (cmd := bench.teamrl_command("mappo", 3, 100, tmp_path, None, "rware"))
    assert cmd[cmd.index("--task") + 1] == "rware"
    # its rows are not mixed with LBF's in a shared work directory
    lbf_row = {"library": "epymarl", "algo": "mappo", "seed": 0, "env_steps_asked": 100}
    rware_row = {**lbf_row, "task": "rware"}
    assert bench.reusable([lbf_row, rware_row], 100, [], "rware") == [rware_row]
    assert bench.reusable([lbf_row, rware_row], 100, []) == [lbf_row]
    assert bench.teamrl_run_dir(tmp_path, "mappo", 0, [], "rware") != bench.teamrl_run_dir(
        tmp_path, "mappo", 0, []
    )


def test_a_failing_epymarl_run_is_reported_with_its_output(checkout: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("FAKE_FAIL", "all")
    with pytest.raises(
        RuntimeError, match="EPyMARL mappo seed 0 failed .exit 1.:\nTraceback: something broke"
    ):
        bench.run_epymarl(checkout, sys.executable, "mappo", 0, 100_000)


def test_teamrl_side_trains_evaluates_by_sampling_and_records_its_curve(tmp_path: Path) -> None:
    pytest.importorskip("lbforaging")
    leftover = bench.teamrl_run_dir(tmp_path, "mappo", 0, [])
    leftover.mkdir()  # an attempt that did not finish
    (leftover / "metrics.jsonl").write_text("{}\n")
    row = bench.run_teamrl("mappo", 0, 3200, tmp_path)  # one update of 128 copies x 25 steps
    assert row["env_steps"] == 3200 and row["cpu_s"] > 0 and row["run_dir"] == str(leftover)
    # EPyMARL's agents learn from the team's summed reward (its common reward): so do teamrl's here
    assert row["teamrl_overrides"] == {"team_reward": True}
    assert yaml.safe_load((leftover / "config.yaml").read_text())["config"]["team_reward"] is True
    assert len(row["returns"]) == bench.TASKS["lbf"].test_episodes
    assert [t for t, _ in row["curve"]] == [3200]  # the curve's last point is the final policy's, sampled
    assert row["curve"][-1][1] == pytest.approx(sum(row["returns"]) / len(row["returns"]))
    run = Path(row["run_dir"])
    assert json.loads((run / "eval_sampled.json").read_text())["policy"] == "sampled"
    # with settings of its own: given to the training, recorded, in a directory of its own
    other = bench.run_teamrl("mappo", 0, 3200, tmp_path, ["num_envs=64"])
    assert other["env_steps"] == 3200 and other["teamrl_sets"] == ["num_envs=64"]
    assert other["run_dir"] != row["run_dir"] and run.is_dir()
    config = yaml.safe_load((Path(other["run_dir"]) / "config.yaml").read_text())["config"]
    assert config["num_envs"] == 64 and config["total_env_steps"] == 3200


def test_a_rerun_reuses_only_rows_of_the_same_budget_and_settings() -> None:
    base = {"algo": "mappo", "seed": 0, "env_steps_asked": 1000}
    epymarl = {**base, "library": "epymarl"}
    teamrl = {**base, "library": "teamrl", "teamrl_sets": [], "teamrl_overrides": {"team_reward": True}}
    probe = {**teamrl, "teamrl_sets": ["num_envs=16"]}
    before = {**base, "library": "teamrl", "teamrl_sets": []}  # trained before the script's overrides
    rows = [epymarl, teamrl, probe, before, {**teamrl, "env_steps_asked": 2000}]
    assert bench.reusable(rows, 1000, []) == [epymarl, teamrl]
    assert bench.reusable(rows, 1000, ["num_envs=16"]) == [epymarl, probe]
    assert bench.reusable(rows, 2000, []) == [rows[-1]]


def test_summary_compares_at_the_budget() -> None:
    def row(lib: str, seed: int, curve: list[list[float]]) -> dict:
        return {
            "library": lib,
            "algo": "mappo",
            "seed": seed,
            "curve": curve,
            "env_steps": 1000,
            "cpu_s": 10.0,
            "wall_s": 20.0,
        }

    rows = [
        row("epymarl", 0, [[0, 0.1], [500, 0.5], [1000, 0.7]]),
        row("epymarl", 1, [[0, 0.1], [500, 0.8], [1000, 0.9]]),
        row("teamrl", 0, [[480, 0.9], [960, 1.0]]),
    ]
    s = bench.summarize_rows(rows, 1000)
    assert s["mappo/epymarl"]["return_at_budget"] == [0.7, 0.9] and s["mappo/epymarl"]["at_step"] == [
        1000,
        1000,
    ]
    assert s["mappo/epymarl"]["mean"] == pytest.approx(0.8)
    assert s["mappo/epymarl"]["std_over_runs"] == pytest.approx(0.1)
    assert s["mappo/epymarl"]["steps_to_0.8"] == [None, 500]
    assert s["mappo/epymarl"]["second_half_mean"] == pytest.approx((0.6 + 0.85) / 2)
    assert s["mappo/teamrl"]["return_at_budget"] == [1.0] and s["mappo/teamrl"]["steps_to_0.8"] == [480]
    assert s["mappo/epymarl"]["env_steps_per_cpu_s"] == pytest.approx(100.0)
    assert s["mappo/teamrl"]["env_steps_per_s"] == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "--epymarl-dir and --epymarl-python are required"),
        (["--epymarl-dir", "NOWHERE", "--epymarl-python", "python"], "is not a checkout of EPyMARL"),
    ],
)
def test_the_driver_needs_an_epymarl_checkout(argv, expected, tmp_path, capsys) -> None:  # noqa: ANN001
    argv = [str(tmp_path / "nowhere") if a == "NOWHERE" else a for a in argv]
    old, sys.argv = sys.argv, ["marl_epymarl.py", *argv]
    try:
        with pytest.raises(SystemExit):
            bench.main()
    finally:
        sys.argv = old
    assert expected in capsys.readouterr().err


def test_a_failed_training_loses_none_of_the_others_and_a_rerun_trains_only_what_is_missing(
    checkout: Path, tmp_path: Path, monkeypatch, capsys
) -> None:  # noqa: ANN001
    work, out = tmp_path / "work", tmp_path / "record.json"
    handler = signal.getsignal(signal.SIGINT)  # pytest's, or SIG_IGN where it runs in the background
    argv = ["marl_epymarl.py", "--epymarl-dir", str(checkout), "--epymarl-python", sys.executable]
    argv += ["--libraries", "epymarl", "--seeds", "0", "1", "--env-steps", "100000", "--jobs", "2"]
    argv += ["--work-dir", str(work), "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("FAKE_FAIL", "1")
    with pytest.raises(SystemExit, match="1 training.s. failed .epymarl mappo seed 1.; the others are in"):
        bench.main()
    record = json.loads(out.read_text())
    assert [r["seed"] for r in record["rows"]] == [0] and [r["seed"] for r in record["failed"]] == [1]
    assert "something broke" in record["failed"][0]["error"]
    assert [json.loads(line)["seed"] for line in (work / "rows.jsonl").read_text().splitlines()] == [0]
    monkeypatch.delenv("FAKE_FAIL")
    bench.main()  # the same command again: only seed 1 is trained
    assert sorted((checkout / "calls.txt").read_text().split()) == ["0", "1", "1"]
    record = json.loads(out.read_text())
    assert sorted(r["seed"] for r in record["rows"]) == [0, 1] and record["failed"] == []
    assert record["summary"]["mappo/epymarl"]["seeds"] == [0, 1]
    assert signal.getsignal(signal.SIGINT) == handler  # the caller's handler left as it was
    assert out.with_suffix(".png").stat().st_size > 10_000  # the curves, drawn
    # one figure from several records
    monkeypatch.setattr(
        sys, "argv", ["marl_epymarl.py", "--plot-from", str(out), str(out), "--out", str(work / "f.json")]
    )
    bench.main()
    assert (work / "f.png").stat().st_size > 10_000 and not (work / "f.json").exists()
    monkeypatch.setattr(sys, "argv", argv)
    # a different budget is another measurement: nothing of the first is reused
    monkeypatch.setattr(sys, "argv", [*argv[:-6], "--env-steps", "150000", *argv[-4:]])
    bench.main()
    assert len((checkout / "calls.txt").read_text().split()) == 5


def test_stopping_the_driver_stops_its_trainings_and_their_workers(checkout: Path, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    cmd = [
        sys.executable,
        str(bench.__file__),
        "--epymarl-dir",
        str(checkout),
        "--epymarl-python",
        sys.executable,
    ]
    cmd += ["--libraries", "epymarl", "--seeds", "0", "--work-dir", str(tmp_path / "w")]
    cmd += ["--out", str(tmp_path / "r.json")]
    driver = subprocess.Popen(cmd, env={**os.environ, "FAKE_HANG": "1"}, stderr=subprocess.DEVNULL)
    pid_file = checkout / "worker.pid"
    for _ in range(300):
        if pid_file.is_file() and pid_file.read_text():
            break
        time.sleep(0.1)
    worker = int(pid_file.read_text())

    def alive(pid: int) -> bool:  # a zombie left for an init that does not reap counts as gone
        try:
            return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return False

    try:
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=30) == 128 + signal.SIGTERM
        for _ in range(100):  # the training's worker process is gone too
            if not alive(worker):
                break
            time.sleep(0.1)
        assert not alive(worker), "the training's worker outlived the driver"
    finally:
        if alive(worker):
            os.kill(worker, signal.SIGKILL)
    assert not (tmp_path / "r.json").exists()
