"""Proposer vs Solver over seeds: the solver's accuracy on a fixed held-out set and the proposals'
difficulty during training.

For every seed: train ``examples/self_play_proposer_solver.yaml`` with ``run.eval_every`` set, so that
every few RL iterations an evaluation measures the solver alone on the suite's **fixed** held-out
problems (``eval/selfplay/solver_heldout_accuracy``) and the difficulty of the proposer's problems
in the solver's own terms (``eval/selfplay/reference_solver_rate``: the solver as it started attempts
each valid proposal; its failure rate is the difficulty the verdict goes by) and by proxies
(``eval/selfplay/difficulty/...``: operations, largest operand, depth, answer digits, means over the
valid proposals). Prints the curves (mean and sample std over seeds at each evaluated step), says
whether the solver's held-out accuracy rose while the difficulty rose, and writes
``<results-dir>/self_play_benchmark.json`` and ``<results-dir>/self_play_benchmark.png``.

    .venv/bin/python benchmarks/self_play_benchmark.py [--seeds 0 1 2] [--jobs 1]
        [--out-dir benchmarks/runs] [--results-dir benchmarks/results] [--set key=value ...]
        [--collect BATCH_DIR]

Variants of the game are compared by running the benchmark once per variant (``--set``, each with its
own ``--results-dir``), then drawing their curves together::

    .venv/bin/python benchmarks/self_play_benchmark.py compare LABEL=RESULT.json [LABEL=RESULT.json ...]
        [--out benchmarks/results/self_play_variants]

which prints each variant's change (first evaluation -> last, and from its lowest operations point
to the last) and writes ``<out>.json`` and ``<out>.png``.

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
from teamrl.report.load import read_metrics  # noqa: E402

CONFIG = "examples/self_play_proposer_solver.yaml"
NAME = "proposer_solver"
# twice the example's 48 iterations, evaluated after SFT (step 0) and every 16 iterations
DEFAULTS = [*lg.COMMON, "recipe.iterations=96", "run.eval_every=16"]
ACCURACY = "eval/selfplay/solver_heldout_accuracy"
DIFFICULTY = ("operations", "max_operand", "depth", "answer_digits")
# the proposals' difficulty for the solver as it started (its snapshot before RL): the share of its
# attempts that fail, 1 - eval/selfplay/reference_solver_rate; unlike the proxies it is measured in the
# solver's own terms, and unlike solver_rate it does not fall because the solver learns
REFERENCE = "reference_failure"
CURVES = {
    "heldout_accuracy": ACCURACY,
    "valid_rate": "eval/selfplay/valid_rate",
    "solver_rate": "eval/selfplay/solver_rate",
    "reference_solver_rate": "eval/selfplay/reference_solver_rate",
    **{f"difficulty/{d}": f"eval/selfplay/difficulty/{d}" for d in DIFFICULTY},
}


def run_curves(run_dir: Path) -> dict[str, Any]:
    """A finished run's evaluated figures by RL step (the final evaluation repeats the last step's),
    and the rollouts' proposal difficulty at every iteration."""
    evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    curves = {
        name: {int(e["step"]): float(e[key]) for e in evals if key in e} for name, key in CURVES.items()
    }
    curves[f"difficulty/{REFERENCE}"] = {step: 1.0 - r for step, r in curves["reference_solver_rate"].items()}
    rows = read_metrics(run_dir)
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


def change_during(curve: dict[int, float]) -> float | None:
    """The mean of the evaluations after the first, minus the first (None with fewer than two points):
    where the curve sat during training, less noisy than its last point alone."""
    if len(curve) < 2:
        return None
    first = min(curve)
    later = [v for step, v in curve.items() if step != first]
    return sum(later) / len(later) - curve[first]


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
        during = [change_during(c) for c in per_run]
        out[name] = {
            "steps": steps,
            "mean": means,
            "std": stds if len(runs) > 1 else None,
            "change_per_seed": changes,
            "during_per_seed": during,
            "during": lg.mean_std([c for c in during if c is not None])
            if any(c is not None for c in during)
            else None,
            "change": lg.mean_std([c for c in changes if c is not None])
            if any(c is not None for c in changes)
            else None,
        }
    return out


def difficulty_measure(summary: dict[str, Any]) -> str:
    """The difficulty the verdict goes by: the starting solver's failure rate where every run measured it
    (``workflow.reference_samples``), else the proposals' operations."""
    ref = summary.get(f"difficulty/{REFERENCE}")
    complete = ref is not None and all(c is not None for c in ref["change_per_seed"])
    return REFERENCE if complete else "operations"


def verdict(runs: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """Did the solver's fixed-set accuracy rise while the proposals got harder (for the starting solver,
    else by operations), on average and on how many seeds?"""
    by = difficulty_measure(summary)
    acc, ops = summary.get("heldout_accuracy"), summary.get(f"difficulty/{by}")
    if acc is None or ops is None or acc["change"] is None or ops["change"] is None:
        return {"measured": False}
    both = sum(
        (a or 0.0) > 0 and (o or 0.0) > 0
        for a, o in zip(acc["change_per_seed"], ops["change_per_seed"], strict=True)
    )
    above = sum(  # both sat above their start during training (mean of the later evaluations)
        (a or 0.0) > 0 and (o or 0.0) > 0
        for a, o in zip(acc["during_per_seed"], ops["during_per_seed"], strict=True)
    )
    acc_up, ops_up = acc["change"]["mean"] > 0, ops["change"]["mean"] > 0
    proxies = {  # every difficulty proxy measured: does its mean over seeds rise?
        d: summary[f"difficulty/{d}"]["change"]["mean"] > 0
        for d in (*DIFFICULTY, REFERENCE)
        if summary.get(f"difficulty/{d}") is not None and summary[f"difficulty/{d}"]["change"] is not None
    }
    return {
        "measured": True,
        "difficulty_by": by,
        "accuracy_rises": acc_up,
        "difficulty_rises": ops_up,
        "both_rise": acc_up and ops_up,
        "seeds_both_rise": both,
        "seeds_both_above_start": above,
        "seeds": len(runs),
        "proxies_rise": proxies,
    }


def _cell(mean: float, std: float | None) -> str:
    return f"{mean:.3f}" + ("" if std is None else f" +- {std:.3f}")


def format_report(runs: list[dict[str, Any]], summary: dict[str, Any], v: dict[str, Any]) -> str:
    names = [
        n
        for n in (
            "heldout_accuracy",
            f"difficulty/{REFERENCE}",
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
            f"({v['difficulty_by']}) rises: {yes[v['difficulty_rises']]}; "
            f"both on average: {yes[v['both_rise']]}; "
            f"both on {v['seeds_both_rise']}/{v['seeds']} seed(s)"
        )
        acc, diff = summary["heldout_accuracy"], summary[f"difficulty/{v['difficulty_by']}"]
        lines.append(
            f"mean of the later evaluations minus the first: fixed set {lg._pm(acc['during'])}, "
            f"{v['difficulty_by']} {lg._pm(diff['during'])}; both above their start on "
            f"{v['seeds_both_above_start']}/{v['seeds']} seed(s)"
        )
        rises = ", ".join(f"{d} {yes[up]}" for d, up in v["proxies_rise"].items())
        lines.append(f"each difficulty proxy rises (mean over seeds): {rises}")
    return "\n".join(lines)


def plot(summary: dict[str, Any], seeds: int, path: Path) -> None:
    """The solver's fixed-set accuracy and the proposals' difficulty over training: mean over seeds with
    a band of one sample std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("heldout_accuracy", "solver, fixed held-out accuracy"),
        (f"difficulty/{REFERENCE}", "proposals: starting solver fails"),
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


def after_lowest(acc: dict[int, float], ops: dict[int, float]) -> dict[str, float] | None:
    """From the evaluation where the proposals were easiest (fewest operations) to the last: the change
    of operations and of the fixed-set accuracy (None if the easiest point is the last)."""
    low = min(ops, key=lambda step: (ops[step], step))
    last = max(ops)
    if low == last or low not in acc or last not in acc:
        return None
    return {"step": low, "operations": ops[last] - ops[low], "accuracy": acc[last] - acc[low]}


def _int_keys(curve: dict[str, float]) -> dict[int, float]:
    return {int(k): v for k, v in curve.items()}


def compare(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per variant (a finished benchmark's result): the fixed-set accuracy, operations, largest-number and
    starting-solver failure changes, first evaluation -> last and lowest-difficulty point -> last, per seed
    and as mean +- std."""
    out: dict[str, Any] = {}
    for label, result in variants.items():
        per_seed = []
        for run in result["runs"]:
            acc = _int_keys(run["curves"]["heldout_accuracy"])
            ops = _int_keys(run["curves"]["difficulty/operations"])
            largest = _int_keys(run["curves"].get("difficulty/max_operand", {}))
            fails = _int_keys(run["curves"].get(f"difficulty/{REFERENCE}", {}))
            per_seed.append(
                {
                    "seed": run["seed"],
                    "accuracy_first": acc[min(acc)],
                    "accuracy": change(acc),
                    "operations": change(ops),
                    "largest_number": change(largest),
                    REFERENCE: change(fails),
                    "after_lowest": after_lowest(acc, ops),
                }
            )
        tail = [p["after_lowest"] for p in per_seed if p["after_lowest"] is not None]
        largest_changes = [p["largest_number"] for p in per_seed]
        fail_changes = [p[REFERENCE] for p in per_seed]
        by = REFERENCE if all(c is not None for c in fail_changes) else "operations"
        out[label] = {
            "sets": result.get("sets", []),
            "accuracy_first": lg.mean_std([p["accuracy_first"] for p in per_seed]),
            "accuracy_change": lg.mean_std([p["accuracy"] for p in per_seed]),
            "operations_change": lg.mean_std([p["operations"] for p in per_seed]),
            "largest_number_change": lg.mean_std(largest_changes)
            if all(c is not None for c in largest_changes)
            else None,
            "reference_failure_change": lg.mean_std(fail_changes) if by == REFERENCE else None,
            "difficulty_by": by,
            "after_lowest_accuracy": lg.mean_std([t["accuracy"] for t in tail]) if tail else None,
            "after_lowest_operations": lg.mean_std([t["operations"] for t in tail]) if tail else None,
            "seeds_both_rise": sum(p["accuracy"] > 0 and p[by] > 0 for p in per_seed),
            "per_seed": per_seed,
            "summary": {
                k: result["summary"][k]
                for k in ("heldout_accuracy", f"difficulty/{REFERENCE}", "difficulty/operations")
                if k in result["summary"]
            },
        }
    return out


def format_compare(table: dict[str, Any]) -> str:
    w = max([28, *(len(label) + 2 for label in table)])
    lines = [
        f"{'variant':<{w}}{'fixed set first':>18}{'fixed set change':>22}{'operations change':>22}"
        f"{'both rise':>11}",
    ]
    for label, row in table.items():
        lines.append(
            f"{label:<{w}}{_cell(row['accuracy_first']['mean'], row['accuracy_first']['std']):>18}"
            f"{lg._pm(row['accuracy_change']):>22}{lg._pm(row['operations_change']):>22}"
            f"{row['seeds_both_rise']:>6}/{len(row['per_seed'])}"
        )
    for label, row in table.items():
        if row.get("largest_number_change") is not None:
            lines.append(f"  {label}: largest number {lg._pm(row['largest_number_change'])}")
        if row.get("reference_failure_change") is not None:
            lines.append(f"  {label}: starting solver fails {lg._pm(row['reference_failure_change'])}")
    lines.append("both rise: the fixed set and the difficulty (starting solver fails if measured, else ops)")
    lines.append("from each seed's easiest proposals (fewest operations) to the last evaluation:")
    for label, row in table.items():
        if row["after_lowest_accuracy"] is not None:
            lines.append(
                f"  {label}: operations {lg._pm(row['after_lowest_operations'])}, fixed set "
                f"{lg._pm(row['after_lowest_accuracy'])}"
            )
    return "\n".join(lines)


def plot_compare(table: dict[str, Any], path: Path) -> None:
    """Fixed-set accuracy, the starting solver's failures on the proposals (variants that measured it) and
    operations per proposal over training, one colour per variant (mean over seeds, band of one std)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("heldout_accuracy", "solver, fixed held-out accuracy"),
        (f"difficulty/{REFERENCE}", "proposals: starting solver fails"),
        ("difficulty/operations", "proposals: operations"),
    ]
    panels = [p for p in panels if any(p[0] in row["summary"] for row in table.values())]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.9))
    colors = plt.get_cmap("tab10").colors  # every variant drawn: colours cycle past ten
    for ax, (name, title) in zip(axes, panels, strict=True):
        for k, (label, row) in enumerate(table.items()):
            color = colors[k % len(colors)]
            if name not in row["summary"]:
                continue
            s = row["summary"][name]
            std = s["std"] or [0.0] * len(s["mean"])
            ax.plot(s["steps"], s["mean"], marker="o", ms=3, color=color, label=label)
            ax.fill_between(
                s["steps"],
                [m - d for m, d in zip(s["mean"], std, strict=True)],
                [m + d for m, d in zip(s["mean"], std, strict=True)],
                color=color,
                alpha=0.12,
            )
        ax.set_title(title)
        ax.set_xlabel("RL iteration (0: after SFT)")
    axes[0].legend(fontsize=7)
    lg.save_figure(fig, path, dpi=110)


def compare_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="self_play_benchmark.py compare", description=compare.__doc__)
    parser.add_argument("variants", nargs="+", help="LABEL=RESULT.json, a finished benchmark's result")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "self_play_variants")
    args = parser.parse_args(argv)
    variants: dict[str, dict[str, Any]] = {}
    for item in args.variants:
        label, sep, path = item.rpartition("=")  # a label may hold "=", a path seldom does
        if not sep or not Path(path).is_file():
            print(f"compare: {item!r} is not LABEL=RESULT.json with an existing file", file=sys.stderr)
            return 2
        variants[label] = json.loads(Path(path).read_text())
    table = compare(variants)
    print(format_compare(table))
    out = args.out.resolve()
    lg.write_results(out.parent, out.name, {"variants": table}, partial(plot_compare, table))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:])
    return lg.seeds_main(
        "self_play_benchmark", __doc__, "override for every run", plan_jobs, collect, report, argv
    )


if __name__ == "__main__":
    sys.exit(main())
