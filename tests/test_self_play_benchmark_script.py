"""benchmarks/self_play_benchmark.py: reading the evaluated curves, mean and spread over seeds, the
verdict and the report, on made-up run directories (nothing is trained)."""

import json
from pathlib import Path

import pytest
from bench_scripts import load_script

ACC = "eval/selfplay/solver_heldout_accuracy"
OPS = "eval/selfplay/difficulty/operations"
REF = "eval/selfplay/reference_solver_rate"


@pytest.fixture(scope="module")
def script():
    return load_script("self_play_benchmark")


def fake_run(
    run_dir: Path,
    accuracy: list[float],
    operations: list[float],
    every: int = 2,
    reference: list[float] | None = None,
) -> Path:
    """A finished run evaluated after SFT and every ``every`` iterations; the final evaluation repeats
    the last step, as the trainer's after_rl does. ``reference``: the starting solver's success rates."""
    run_dir.mkdir(parents=True)
    evals = [
        {"label": f"step{i * every}", "step": i * every, ACC: a, OPS: o, "eval/selfplay/valid_rate": 1.0}
        for i, (a, o) in enumerate(zip(accuracy, operations, strict=True))
    ]
    for e, r in zip(evals, reference or [], strict=False):
        e[REF] = r
    evals.append({**evals[-1], "label": "after_rl"})
    (run_dir / "summary.json").write_text(json.dumps({"evals": evals}))
    steps = (len(accuracy) - 1) * every
    rows = [
        {"step": s, "perf/rl_tokens_total": 100 * s, "rollout/selfplay/difficulty/operations": 1.0 + s / 10}
        for s in range(1, steps + 1)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_curves_mean_spread_and_change(script, tmp_path):
    a = script.run_curves(fake_run(tmp_path / "proposer_solver_s0", [0.10, 0.20, 0.30], [1.5, 1.8, 2.1]))
    assert a["curves"]["heldout_accuracy"] == {0: 0.10, 2: 0.20, 4: 0.30}
    assert a["curves"]["rollout_difficulty/operations"][4] == pytest.approx(1.4)
    assert a["rl_tokens"] == 400 and a["curves"]["solver_rate"] == {}
    b = script.run_curves(fake_run(tmp_path / "proposer_solver_s1", [0.10, 0.10, 0.20], [1.5, 1.2, 1.7]))
    summary = script.summarize([a, b])
    acc = summary["heldout_accuracy"]
    assert acc["steps"] == [0, 2, 4] and acc["mean"] == pytest.approx([0.10, 0.15, 0.25])
    assert acc["std"][0] == 0.0 and acc["std"][1] == pytest.approx(0.0707107)
    assert acc["change_per_seed"] == pytest.approx([0.2, 0.1]) and acc["change"]["mean"] == pytest.approx(
        0.15
    )
    assert "solver_rate" not in summary  # never measured: no curve rather than zeros
    v = script.verdict([a, b], summary)
    assert v == {
        "measured": True,
        "difficulty_by": "operations",  # the starting solver was not asked
        "accuracy_rises": True,
        "difficulty_rises": True,
        "both_rise": True,
        "seeds_both_rise": 2,
        "seeds_both_above_start": 1,  # seed 1's operations sat below 1.5 on average: (1.2 + 1.7) / 2
        "seeds": 2,
        "proxies_rise": {"operations": True},
    }


def test_verdict_says_no_when_difficulty_falls_and_not_measured_without_curves(script, tmp_path):
    runs = [script.run_curves(fake_run(tmp_path / "r", [0.1, 0.3], [2.0, 1.5]))]
    summary = script.summarize(runs)
    assert summary["heldout_accuracy"]["std"] is None  # one seed: no spread
    v = script.verdict(runs, summary)
    assert (
        v["accuracy_rises"] and not v["difficulty_rises"] and not v["both_rise"] and v["seeds_both_rise"] == 0
    )
    single = script.run_curves(fake_run(tmp_path / "one", [0.1], [2.0]))
    assert script.verdict([single], script.summarize([single])) == {"measured": False}


def test_collect_reports_finished_runs_and_writes_json_and_png(script, tmp_path, capsys):
    batch = tmp_path / "batch"
    fake_run(batch / "proposer_solver_s2", [0.10, 0.12, 0.08], [1.9, 1.7, 1.6])
    fake_run(batch / "proposer_solver_s10", [0.10, 0.14, 0.12], [1.9, 1.8, 1.7])
    (batch / "proposer_solver_s3").mkdir()  # unfinished: no summary.json
    res = tmp_path / "res"
    assert script.main(["--collect", str(batch), "--results-dir", str(res)]) == 0
    out = capsys.readouterr().out
    assert "proposals' difficulty (operations) rises: no" in out and "both on 0/2 seed(s)" in out
    result = json.loads((res / "self_play_benchmark.json").read_text())
    assert [r["seed"] for r in result["runs"]] == [2, 10]
    assert result["summary"]["difficulty/operations"]["mean"][-1] == pytest.approx(1.65)
    assert (res / "self_play_benchmark.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert script.main(["--collect", str(tmp_path / "empty_or_missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert script.main(["--collect", str(tmp_path / "empty")]) == 1
    assert "holds no finished run to report" in capsys.readouterr().err


def test_compare_variants_by_hand_and_from_the_command_line(script, tmp_path, capsys):
    results = {}
    for name, runs in {
        "plain": [([0.40, 0.35, 0.38], [2.0, 1.0, 1.5]), ([0.50, 0.45, 0.44], [2.0, 1.8, 1.6])],
        "penalty": [([0.40, 0.45, 0.50], [2.0, 2.2, 2.4]), ([0.50, 0.50, 0.55], [2.0, 1.9, 2.3])],
    }.items():
        batch = tmp_path / name
        for seed, (acc, ops) in enumerate(runs):
            fake_run(batch / f"proposer_solver_s{seed}", acc, ops)
        assert script.main(["--collect", str(batch), "--results-dir", str(tmp_path / f"res_{name}")]) == 0
        results[name] = tmp_path / f"res_{name}" / "self_play_benchmark.json"
    capsys.readouterr()
    # seed 0 of plain: easiest at step 2 (1.0 operations), then +0.5 operations and +0.03 accuracy
    assert script.after_lowest({0: 0.40, 2: 0.35, 4: 0.38}, {0: 2.0, 2: 1.0, 4: 1.5}) == pytest.approx(
        {"step": 2, "operations": 0.5, "accuracy": 0.03}
    )
    assert script.after_lowest({0: 0.5, 2: 0.4}, {0: 2.0, 2: 1.0}) is None  # easiest last: no "after"
    out = tmp_path / "cmp" / "variants"
    argv = ["compare", f"plain={results['plain']}", f"penalty={results['penalty']}", "--out", str(out)]
    assert script.main(argv) == 0
    table = json.loads(out.with_suffix(".json").read_text())["variants"]
    assert table["plain"]["accuracy_change"]["mean"] == pytest.approx((-0.02 - 0.06) / 2)
    assert table["plain"]["seeds_both_rise"] == 0 and table["penalty"]["seeds_both_rise"] == 2
    assert table["penalty"]["operations_change"]["mean"] == pytest.approx(0.35)
    assert table["plain"]["after_lowest_operations"]["mean"] == pytest.approx(0.5)  # seed 1: easiest last
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "penalty" in capsys.readouterr().out
    assert script.main(["compare", "nolabel.json"]) == 2


def test_with_the_starting_solvers_rate_the_verdict_goes_by_its_failures(script, tmp_path, capsys):
    """Fewer operations but problems the starting solver fails more often: harder by the measure that
    counts; a run that did not measure it leaves the verdict on operations."""
    batch = tmp_path / "batch"
    fake_run(batch / "proposer_solver_s0", [0.30, 0.40, 0.50], [2.0, 1.8, 1.5], reference=[0.6, 0.5, 0.4])
    fake_run(batch / "proposer_solver_s1", [0.30, 0.35, 0.45], [2.0, 1.9, 1.9], reference=[0.5, 0.5, 0.55])
    runs = script.collect(batch)
    assert runs[0]["curves"]["difficulty/reference_failure"] == pytest.approx({0: 0.4, 2: 0.5, 4: 0.6})
    summary = script.summarize(runs)
    assert summary["difficulty/reference_failure"]["change_per_seed"] == pytest.approx([0.2, -0.05])
    v = script.verdict(runs, summary)
    assert v["difficulty_by"] == "reference_failure" and v["difficulty_rises"] and v["seeds_both_rise"] == 1
    assert v["proxies_rise"] == {"operations": False, "reference_failure": True}
    # seed 1 ends harder nowhere but its last point: mean of later points 0.475 vs 0.5 at the start
    assert summary["difficulty/reference_failure"]["during_per_seed"] == pytest.approx([0.15, -0.025])
    assert v["seeds_both_above_start"] == 1
    res = tmp_path / "res"
    assert script.main(["--collect", str(batch), "--results-dir", str(res)]) == 0
    assert "proposals' difficulty (reference_failure) rises: yes" in capsys.readouterr().out
    table = script.compare({"ref": json.loads((res / "self_play_benchmark.json").read_text())})["ref"]
    assert table["difficulty_by"] == "reference_failure" and table["seeds_both_rise"] == 1
    assert table["reference_failure_change"]["mean"] == pytest.approx(0.075)
    fake_run(tmp_path / "old" / "proposer_solver_s0", [0.3, 0.4], [1.0, 2.0])  # measured before it existed
    mixed = script.collect(tmp_path / "old") + runs
    assert script.verdict(mixed, script.summarize(mixed))["difficulty_by"] == "operations"
    assert script.main(["--collect", str(tmp_path / "old"), "--results-dir", str(tmp_path / "res_old")]) == 0
    out = tmp_path / "cmp"
    new, old = res / "self_play_benchmark.json", tmp_path / "res_old" / "self_play_benchmark.json"
    assert script.main(["compare", f"ref={new}", f"old={old}", "--out", str(out)]) == 0
    table = json.loads(out.with_suffix(".json").read_text())["variants"]
    assert "difficulty/reference_failure" in table["ref"]["summary"]  # drawn for ref alone
    assert table["old"]["difficulty_by"] == "operations" and table["old"]["reference_failure_change"] is None
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
