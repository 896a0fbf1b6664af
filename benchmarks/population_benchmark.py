"""Recipe population against plain self-play on the debate, over seeds.

For every seed: train ``examples/debate_population.yaml`` twice from the same base model and SFT'd
adapter, once with ``recipe.population.sampling`` ``uniform`` (the other debater seats play snapshots
drawn from debater_0's pool) and once with ``latest`` (they play the current debater_0: plain
self-play). Both runs probe their snapshots' diversity at every snapshot and evaluate held-out accuracy
every ``run.eval_every`` iterations. Prints, per condition, held-out accuracy after SFT and after RL and
the final diversity (mean and sample std over seeds), and writes ``<results-dir>/population.json`` and
``<results-dir>/population.png`` (accuracy and diversity over training, mean and spread).

    .venv/bin/python benchmarks/population_benchmark.py [--seeds 0 1 2] [--jobs 1]
        [--out-dir benchmarks/runs] [--results-dir benchmarks/results] [--set key=value ...]

``--set`` applies to both conditions (e.g. fewer iterations for a smoke run). Every invocation puts its
runs in a fresh ``<out-dir>/population-<timestamp>/``, each run's output in a ``.log`` next to it. With
``--jobs 1`` each run's CPU time (user + sys) is measured too.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.learning_gain import (  # noqa: E402
    Job,
    RunFailed,
    _set_args,
    _write_atomic,
    mean_std,
    run_jobs,
    save_figure,
    seeds_parser,
)
from teamrl.report.load import read_metrics  # noqa: E402

CONFIG = "examples/debate_population.yaml"
CONDITIONS = {"population": "uniform", "self_play": "latest"}  # condition -> recipe.population.sampling
# ~3-4 CPU-minutes a run with the base cached: 12 iterations, held-out accuracy after 5, 10 and 12
DEFAULTS = ["run.threads=1", "run.progress=false", "recipe.iterations=12", "run.eval_every=5"]
LEARNER = "debater_0"
DIVERSITY = ("distinct_answers", "distinct_texts", "distinct_2")


def _argv(run_dir: Path, seed: int, sampling: str, sets: list[str]) -> list[str]:
    fixed = [
        f"recipe.population.sampling={sampling}",
        f"run.seed={seed}",
        f"run.out_dir={run_dir.parent}",
        f"run.name={run_dir.name}",
    ]
    return [sys.executable, "-m", "teamrl.cli", "train", CONFIG, *_set_args([*DEFAULTS, *sets, *fixed])]


def run_curves(run_dir: Path) -> dict[str, Any]:
    """A finished run's held-out accuracy and pool diversity by step, its Elo and its final figures."""
    rows = read_metrics(run_dir)
    accuracy = {int(r["step"]): r["eval/solved"] for r in rows if "eval/solved" in r}
    diversity = {
        name: {
            int(r["step"]): r[f"population/diversity/{LEARNER}/{name}"]
            for r in rows
            if f"population/diversity/{LEARNER}/{name}" in r
        }
        for name in DIVERSITY
    }
    table = json.loads((run_dir / "population" / "table.json").read_text())
    last = max(accuracy)
    return {
        "run_dir": str(run_dir),
        "accuracy": accuracy,
        "diversity": diversity,
        "sft_accuracy": accuracy[0],
        "rl_accuracy": accuracy[last],
        "gain": accuracy[last] - accuracy[0],
        **{f"final_{name}": curve[max(curve)] for name, curve in diversity.items() if curve},
        "elo": table["elo"].get(LEARNER),
        "games": sum(r["games"] for r in table["results"][LEARNER].values()),
        "win_rate": (
            sum(r["wins"] + 0.5 * r["draws"] for r in table["results"][LEARNER].values())
            / max(sum(r["games"] for r in table["results"][LEARNER].values()), 1)
        ),
    }


FIELDS = ("sft_accuracy", "rl_accuracy", "gain", *(f"final_{n}" for n in DIVERSITY), "win_rate")


def aggregate(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, float | None]]]:
    return {
        cond: {f: mean_std([r[f] for r in rs]) for f in FIELDS if all(f in r for r in rs)}
        for cond, rs in runs.items()
    }


def _pm(stat: dict[str, float | None]) -> str:
    return f"{stat['mean']:.3f}" + (f" +- {stat['std']:.3f}" if stat["std"] is not None else "")


def format_table(agg: dict[str, dict[str, dict[str, float | None]]], seeds: int) -> str:
    lines = [
        f"mean +- sample std over {seeds} seed(s); accuracy: held-out verdicts (debater_0 in every seat)"
    ]
    lines.append(f"{'condition':<12} " + " ".join(f"{f:>17}" for f in FIELDS))
    for cond, stats in agg.items():
        lines.append(f"{cond:<12} " + " ".join(f"{_pm(stats[f]) if f in stats else '-':>17}" for f in FIELDS))
    return "\n".join(lines)


def _mean_curve(curves: list[dict[int, float]]) -> tuple[list[int], list[float], list[float]]:
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    means, stds = [], []
    for s in steps:
        stat = mean_std([c[s] for c in curves])
        means.append(stat["mean"] or 0.0)
        stds.append(stat["std"] or 0.0)
    return steps, means, stds


def plot(runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Held-out accuracy and pool diversity (distinct texts, distinct answers) over training: the mean
    over seeds with a band of one sample std, one colour per condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("held-out accuracy", lambda r: r["accuracy"]),
        ("distinct texts across the pool", lambda r: r["diversity"]["distinct_texts"]),
        ("distinct answers across the pool", lambda r: r["diversity"]["distinct_answers"]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.8))
    for ax, (title, curve) in zip(axes, panels, strict=True):
        for (cond, rs), color in zip(runs.items(), ("tab:blue", "tab:orange"), strict=False):
            steps, means, stds = _mean_curve([curve(r) for r in rs])
            ax.plot(steps, means, marker="o", color=color, label=f"{cond} ({len(rs)} seed(s))")
            ax.fill_between(
                steps,
                [m - s for m, s in zip(means, stds, strict=True)],
                [m + s for m, s in zip(means, stds, strict=True)],
                color=color,
                alpha=0.2,
            )
        ax.set_title(title)
        ax.set_xlabel("RL iteration")
    axes[0].legend()
    save_figure(fig, path, dpi=110)


def build_parser() -> argparse.ArgumentParser:
    return seeds_parser(__doc__.split("\n\n")[0], "override for both")


def collect(batch_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The finished runs (those with a summary.json) of a batch directory, by condition."""
    runs: dict[str, list[dict[str, Any]]] = {cond: [] for cond in CONDITIONS}
    for run_dir in sorted(batch_dir.iterdir()):
        cond, _, seed = run_dir.name.rpartition("_s")
        if cond in runs and (run_dir / "summary.json").exists():
            runs[cond].append({"seed": int(seed), **run_curves(run_dir)})
    return runs


def report(runs: dict[str, list[dict[str, Any]]], result: dict[str, Any], results_dir: Path) -> None:
    agg = aggregate(runs)
    print(format_table(agg, max(len(rs) for rs in runs.values())))
    result = {**result, "aggregate": agg, "runs": runs}
    _write_atomic(results_dir / "population.json", json.dumps(result, indent=2).encode())
    plot(runs, results_dir / "population.png")
    print(f"wrote {results_dir / 'population.json'} and {results_dir / 'population.png'}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.collect is not None:
        runs = collect(args.collect)
        if not all(runs.values()):
            print(
                f"population_benchmark: {args.collect} lacks a finished run of each condition",
                file=sys.stderr,
            )
            return 1
        report(runs, {"config": CONFIG, "batch_dir": str(args.collect)}, args.results_dir)
        return 0
    if args.jobs < 1 or len(set(args.seeds)) != len(args.seeds):
        print("population_benchmark: --jobs must be >= 1 and --seeds distinct", file=sys.stderr)
        return 2
    batch_dir = args.out_dir.resolve() / f"population-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    jobs = [
        Job(
            name=f"{cond}_s{seed}",
            argv=lambda d=batch_dir / f"{cond}_s{seed}", s=seed, m=sampling: _argv(d, s, m, args.set),
            log=batch_dir / f"{cond}_s{seed}.log",
        )
        for seed in args.seeds
        for cond, sampling in CONDITIONS.items()
    ]
    print(f"{len(jobs)} runs, {args.jobs} at once, in {batch_dir}", flush=True)
    cpu: dict[str, float] = {}
    try:
        if args.jobs == 1:  # one at a time: each run's CPU time is what the children used meanwhile
            for job in jobs:
                before = os.times()
                run_jobs([job], 1)
                after = os.times()
                cpu[job.name] = (after.children_user - before.children_user) + (
                    after.children_system - before.children_system
                )
        else:
            run_jobs(jobs, args.jobs)
    except RunFailed as exc:
        print(f"population_benchmark: {exc}", file=sys.stderr)
        return 1
    runs: dict[str, list[dict[str, Any]]] = {cond: [] for cond in CONDITIONS}
    for job in jobs:
        cond = job.name.rsplit("_s", 1)[0]
        runs[cond].append(
            {
                "seed": int(job.name.rsplit("_s", 1)[1]),
                **run_curves(batch_dir / job.name),
                "wall_min": job.wall_s / 60,
                **({"cpu_min": cpu[job.name] / 60} if job.name in cpu else {}),
                "command": shlex.join(job.command),
            }
        )
    report(
        runs,
        {"config": CONFIG, "defaults": DEFAULTS, "sets": args.set, "batch_dir": str(batch_dir)},
        args.results_dir,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
