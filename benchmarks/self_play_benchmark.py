"""Proposer vs Solver over seeds: the solver's accuracy on a fixed held-out set and the proposals'
difficulty during training.

For every seed: train ``examples/self_play_proposer_solver.yaml`` with ``run.eval_every`` set, so that
every few RL iterations an evaluation measures the solver alone on the suite's **fixed** held-out
problems (``eval/selfplay/solver_heldout_accuracy``) and the difficulty of the proposer's problems
(``eval/selfplay/difficulty/...``: operations, largest operand, depth, answer digits, means over the
valid proposals). Prints both curves (mean and sample std over seeds at each evaluated step), says
whether the solver's held-out accuracy rose while the difficulty rose, and writes
``<results-dir>/self_play_benchmark.json`` and ``<results-dir>/self_play_benchmark.png``.

    .venv/bin/python benchmarks/self_play_benchmark.py [--seeds 0 1 2] [--jobs 1]
        [--out-dir benchmarks/runs] [--results-dir benchmarks/results] [--set key=value ...]
        [--collect BATCH_DIR]

``--set`` applies to every run (e.g. ``recipe.iterations=16 --set run.eval_every=4``). Runs go to a
fresh ``<out-dir>/self_play_benchmark-<timestamp>-<pid>/`` (``proposer_solver_s<seed>``, each with a
``.log``);
``--collect`` trains nothing and reports the finished runs of such a directory.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import learning_gain as lg  # noqa: E402  (job runner, mean/std, figures)
from benchmarks.population_benchmark import _mean_curve  # noqa: E402

CONFIG = "examples/self_play_proposer_solver.yaml"
NAME = "proposer_solver"
# the example's 8 iterations, evaluated after SFT (step 0) and after iterations 2, 4, 6 and 8
DEFAULTS = [*lg.COMMON, "run.eval_every=2"]
ACCURACY = "eval/selfplay/solver_heldout_accuracy"
DIFFICULTY = ("operations", "max_operand", "depth", "answer_digits")
CURVES = {
    "heldout_accuracy": ACCURACY,
    "valid_rate": "eval/selfplay/valid_rate",
    "solver_rate": "eval/selfplay/solver_rate",
    **{f"difficulty/{d}": f"eval/selfplay/difficulty/{d}" for d in DIFFICULTY},
}


def run_curves(run_dir: Path) -> dict[str, Any]:
    """A finished run's evaluated figures by RL step (the final evaluation repeats the last step's),
    and the rollouts' proposal difficulty at every iteration."""
    evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    curves = {
        name: {int(e["step"]): float(e[key]) for e in evals if key in e} for name, key in CURVES.items()
    }
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rollout = {
        f"rollout_difficulty/{d}": {
            int(r["step"]): float(r[f"rollout/selfplay/difficulty/{d}"])
            for r in rows
            if f"rollout/selfplay/difficulty/{d}" in r
        }
        for d in DIFFICULTY
    }
    return {
        "run_dir": str(run_dir),
        "curves": {**curves, **rollout},
        "rl_tokens": lg.rl_token_counts(run_dir)[0],
    }


def change(curve: dict[int, float]) -> float | None:
    """Last evaluated value minus the first (None with fewer than two points)."""
    if len(curve) < 2:
        return None
    return curve[max(curve)] - curve[min(curve)]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per curve: mean and spread over seeds at each step shared by every run, and the change from the
    first evaluation (after SFT) to the last, per seed and as mean +- std."""
    out: dict[str, Any] = {}
    for name in runs[0]["curves"]:
        per_run = [r["curves"][name] for r in runs]
        if not all(per_run):
            continue
        steps, means, stds = _mean_curve(per_run)
        changes = [change(c) for c in per_run]
        out[name] = {
            "steps": steps,
            "mean": means,
            "std": stds if len(runs) > 1 else None,
            "change_per_seed": changes,
            "change": lg.mean_std([c for c in changes if c is not None])
            if any(c is not None for c in changes)
            else None,
        }
    return out


def verdict(runs: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """Did the solver's fixed-set accuracy rise while the proposals got harder (operations), on
    average and on how many seeds?"""
    acc, ops = summary.get("heldout_accuracy"), summary.get("difficulty/operations")
    if acc is None or ops is None or acc["change"] is None or ops["change"] is None:
        return {"measured": False}
    both = sum(
        (a or 0.0) > 0 and (o or 0.0) > 0
        for a, o in zip(acc["change_per_seed"], ops["change_per_seed"], strict=True)
    )
    acc_up, ops_up = acc["change"]["mean"] > 0, ops["change"]["mean"] > 0
    return {
        "measured": True,
        "accuracy_rises": acc_up,
        "difficulty_rises": ops_up,
        "both_rise": acc_up and ops_up,
        "seeds_both_rise": both,
        "seeds": len(runs),
    }


def _cell(mean: float, std: float | None) -> str:
    return f"{mean:.3f}" + ("" if std is None else f" +- {std:.3f}")


def format_report(runs: list[dict[str, Any]], summary: dict[str, Any], v: dict[str, Any]) -> str:
    names = [
        n
        for n in (
            "heldout_accuracy",
            "difficulty/operations",
            "difficulty/max_operand",
            "valid_rate",
            "solver_rate",
        )
        if n in summary
    ]
    steps = sorted(set.intersection(*(set(summary[n]["steps"]) for n in names))) if names else []
    width = 22
    lines = [
        f"held-out evaluations, mean +- sample std over {len(runs)} seed(s) (step 0: after SFT)",
        f"{'step':>6}" + "".join(f"{n.removeprefix('difficulty/'):>{width}}" for n in names),
    ]
    for step in steps:
        cells = []
        for n in names:
            i = summary[n]["steps"].index(step)
            std = summary[n]["std"][i] if summary[n]["std"] is not None else None
            cells.append(f"{_cell(summary[n]['mean'][i], std):>{width}}")
        lines.append(f"{step:>6}" + "".join(cells))
    for n in names:
        c = summary[n]["change"]
        if c is not None:
            per_seed = ", ".join("n/a" if x is None else f"{x:+.3f}" for x in summary[n]["change_per_seed"])
            lines.append(f"change first -> last, {n}: {lg._pm(c)}; per seed {per_seed}")
    if not v["measured"]:
        lines.append("verdict: not measured (fewer than two evaluations, or no valid proposal)")
    else:
        yes = {True: "yes", False: "no"}
        lines.append(
            f"solver's fixed-set accuracy rises: {yes[v['accuracy_rises']]}; proposals' difficulty "
            f"(operations) rises: {yes[v['difficulty_rises']]}; both on average: {yes[v['both_rise']]}; "
            f"both on {v['seeds_both_rise']}/{v['seeds']} seed(s)"
        )
    return "\n".join(lines)


def plot(summary: dict[str, Any], seeds: int, path: Path) -> None:
    """The solver's fixed-set accuracy and the proposals' difficulty over training: mean over seeds with
    a band of one sample std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("heldout_accuracy", "solver, fixed held-out accuracy"),
        ("difficulty/operations", "proposals: operations"),
        ("difficulty/max_operand", "proposals: largest number"),
    ]
    panels = [p for p in panels if p[0] in summary]
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.3 * max(len(panels), 1), 3.6), squeeze=False)
    for ax, (name, title) in zip(axes[0], panels, strict=False):
        s = summary[name]
        std = s["std"] or [0.0] * len(s["mean"])
        ax.plot(s["steps"], s["mean"], marker="o", color="tab:blue", label=f"mean of {seeds} seed(s)")
        ax.fill_between(
            s["steps"],
            [m - d for m, d in zip(s["mean"], std, strict=True)],
            [m + d for m, d in zip(s["mean"], std, strict=True)],
            color="tab:blue",
            alpha=0.2,
        )
        ax.set_title(title)
        ax.set_xlabel("RL iteration (0: after SFT)")
    axes[0][0].legend()
    lg.save_figure(fig, path, dpi=110)


def plan_jobs(seeds: list[int], sets: list[str], batch_dir: Path) -> list[lg.Job]:
    """The base build, then one run per seed."""
    jobs = [lg.Job("build", partial(lg._build_argv, CONFIG, sets), batch_dir / "build.log")]
    for seed in seeds:
        run_dir = batch_dir / f"{NAME}_s{seed}"
        argv = partial(lg._train_argv, CONFIG, run_dir, seed, sets, DEFAULTS, [])
        jobs.append(lg.Job(run_dir.name, argv, run_dir.with_suffix(".log"), ("build",)))
    return jobs


def collect(batch_dir: Path) -> list[dict[str, Any]]:
    """The finished runs (those with a summary.json) of a batch directory, by seed."""
    dirs = [d for d in batch_dir.glob(f"{NAME}_s*[0-9]") if (d / "summary.json").exists()]
    return [
        {"seed": int(d.name.removeprefix(f"{NAME}_s")), **run_curves(d)}
        for d in sorted(dirs, key=lambda d: int(d.name.removeprefix(f"{NAME}_s")))
    ]


def report(runs: list[dict[str, Any]], result: dict[str, Any], results_dir: Path) -> None:
    summary = summarize(runs)
    v = verdict(runs, summary)
    print(format_report(runs, summary, v))
    result = {
        **result,
        "config": CONFIG,
        "defaults": DEFAULTS,
        "summary": summary,
        "verdict": v,
        "runs": runs,
    }
    lg.write_results(results_dir, "self_play_benchmark", result, partial(plot, summary, len(runs)))


def main(argv: list[str] | None = None) -> int:
    return lg.seeds_main(
        "self_play_benchmark", __doc__, "override for every run", plan_jobs, collect, report, argv
    )


if __name__ == "__main__":
    sys.exit(main())
