"""KD-MARL on simple_spread (issue 21): a centralised MAPPO teacher distilled into small decentralised
students, then fine-tuned by RL.

For every seed:

1. the **teacher**: the simple_spread MAPPO preset until 2026-12-07 (entity actor, shared, 128 copies, 4M env
   steps) with
   ``centralised_actor: true`` (its actor also reads the global state, every agent's observation) and a larger
   network (``--teacher-hidden``, default [128, 128]), trained by ``teamrl marl train``;
2. the **distilled student**: ``teamrl marl distill`` into one MLP (``--student``, default [32, 32]) on each
   agent's own observation only, DAgger-style (12 rounds of 64 copies x 50 steps);
3. the **fine-tuned student**: the same command's ``finetune_env_steps`` (``--finetune-steps``, default 1M):
   PPO from the distilled actors and the teacher's critics, ``finetune_lr`` 3e-4.

Teacher, both students and random play are evaluated on the same 50 episodes (the MARL benchmark's episode
set: the batched simple_spread, 50 copies reset with seed 12345, deterministic policies). Reported: returns,
the share of the teacher's gain over random play each student keeps, ``(student - random) / (teacher -
random)``, FLOPs per action (torch's FlopCounterMode on the actor's forward pass, ``teamrl.marl.distill``),
and the CPU time of each phase.

    .venv/bin/python benchmarks/distill.py [--seeds 0 1 2] [--jobs 2] [--work DIR] [--teacher-steps 4000000]
        [--finetune-steps 1000000] [--student 32 32] [--teacher-hidden 128 128] [--tag NAME]

A teacher run already in ``--work`` (``teacher_s{seed}`` with its eval.json) is reused; ``--merge A.json
B.json`` joins the seeds of records measured apart. Writes benchmarks/results/distill_central[_TAG].json and
.png.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results"

from benchmarks.marl_benchmark import SPREAD_UNTIL_2026_12_07  # noqa: E402
from teamrl.atomic import atomic_write_text  # noqa: E402


def one_seed(seed: int, args: dict[str, Any]) -> dict[str, Any]:
    """Teacher (trained or reused), distillation and fine-tuning of one seed, in this process."""
    import torch

    from teamrl.marl.distill import distill_run
    from teamrl.marl.train import train

    torch.set_num_threads(1)
    work = Path(args["work"])
    teacher_dir = work / f"teacher_s{seed}"
    teacher_cpu = None
    if not (teacher_dir / "eval.json").is_file():
        shutil.rmtree(teacher_dir, ignore_errors=True)
        overrides = {
            **SPREAD_UNTIL_2026_12_07,  # the settings its figures were measured with
            "seed": seed,
            "total_env_steps": args["teacher_steps"],
            "centralised_actor": True,
            "hidden": args["teacher_hidden"],
        }
        start = time.process_time()
        train("mappo", "simple_spread", overrides, teacher_dir, show_progress=False, eval_every=0)
        teacher_cpu = time.process_time() - start
    student_dir = work / f"student_s{seed}{args['suffix']}"
    shutil.rmtree(student_dir, ignore_errors=True)
    settings = {
        "hidden": args["student"],
        "rounds": 12,
        "seed": seed,
        "finetune_env_steps": args["finetune_steps"],
    }
    start = time.process_time()
    summary = distill_run(teacher_dir, student_dir, settings, episodes=50, show_progress=False)
    total_cpu = time.process_time() - start
    tune = summary.get("finetune", {})
    teacher_eval = json.loads((teacher_dir / "eval.json").read_text())
    return {
        "seed": seed,
        "returns": summary["returns"],
        "kept": {"distilled": summary["return_kept"], "finetuned": tune.get("return_kept")},
        "flops_per_action": summary["flops_per_action"],
        "flops_ratio": summary["flops_ratio"],
        "agreement": summary["history"][-1]["agreement"],
        # CPU seconds of this process (the teacher's: None when an earlier run's teacher was reused);
        # wall seconds as measured while the machine was shared
        "cpu_s": {"teacher": teacher_cpu, "distill_and_finetune": total_cpu},
        "wall_s": {"teacher": teacher_eval["train"]["wall_s"], "finetune": tune.get("seconds")},
        "teacher_eval": teacher_eval["return/mean"],
    }


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from teamrl.marl.run import save_figure

    rows = result["seeds"]
    arms = [
        ("teacher", "teacher (centralised)"),
        ("student", "distilled student"),
        ("finetuned", "fine-tuned"),
    ]
    arms = [(k, label) for k, label in arms if all(k in r["returns"] for r in rows)]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (key, label) in enumerate(arms):
        values = [r["returns"][key] for r in rows]
        m, s = mean_std(values)
        flops = rows[0]["flops_per_action"]["teacher" if key == "teacher" else "student"]
        ax.bar(i, m, yerr=s, color=f"C{i}", alpha=0.8, capsize=4, label=f"{label}: {flops:,.0f} FLOPs/action")
        ax.scatter([i] * len(values), values, color="k", s=12, zorder=3)
    random = statistics.mean(r["returns"]["random"] for r in rows)
    ax.axhline(random, color="grey", ls="--", lw=1, label=f"random play ({random:.1f})")
    ax.set_xticks(range(len(arms)), [label for _, label in arms])
    ax.set_ylabel("return (50 fixed episodes, higher is better)")
    ax.set_title(f"KD-MARL on simple_spread, {len(rows)} seeds (dots: seeds)")
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)  # laid out, written beside path and renamed


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sample std over seeds of each arm's return and of the share kept; the FLOPs ratio."""
    summary: dict[str, Any] = {}
    for key in ("teacher", "student", "finetuned", "random"):
        if all(key in r["returns"] for r in rows):
            summary[f"return/{key}"] = mean_std([r["returns"][key] for r in rows])
    for key in ("distilled", "finetuned"):
        if all(r["kept"][key] is not None for r in rows):
            summary[f"kept/{key}"] = mean_std([r["kept"][key] for r in rows])
    summary["flops_ratio"] = rows[0]["flops_ratio"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--work", default="runs/distill_benchmark", help="teacher and student run directories"
    )
    parser.add_argument("--teacher-steps", type=int, default=4_000_000)
    parser.add_argument("--teacher-hidden", type=int, nargs="+", default=[128, 128])
    parser.add_argument("--finetune-steps", type=int, default=1_000_000)
    parser.add_argument("--student", type=int, nargs="+", default=[32, 32])
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="run nothing: join the seeds of these records (runs of this script with the same settings, "
        "e.g. seeds measured apart) into one record",
    )
    a = parser.parse_args()
    args = {
        "work": a.work,
        "teacher_steps": a.teacher_steps,
        "teacher_hidden": a.teacher_hidden,
        "finetune_steps": a.finetune_steps,
        "student": a.student,
        "suffix": f"_{a.tag}" if a.tag else "",
    }
    start = time.perf_counter()
    if a.merge:
        parts = [json.loads(p.read_text()) for p in a.merge]
        keys = ("teacher_steps", "teacher_hidden", "finetune_steps", "student")
        if any(
            {k: p["settings"][k] for k in keys} != {k: parts[0]["settings"][k] for k in keys} for p in parts
        ):
            raise SystemExit("--merge: the records were measured with different settings")
        rows = sorted((r for p in parts for r in p["seeds"]), key=lambda r: r["seed"])
        args = {**parts[0]["settings"], "suffix": args["suffix"]}
        a.seeds = [r["seed"] for r in rows]
        measured, wall = parts[0]["measured"], sum(p["wall_s"] for p in parts)
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=a.jobs) as pool:
            rows = list(pool.map(one_seed, a.seeds, [args] * len(a.seeds)))
        measured, wall = time.strftime("%Y-%m-%d"), time.perf_counter() - start
    summary = summarize(rows)
    result = {
        "measured": measured,
        "machine": "2-core CPU, one torch thread per job",
        "settings": {**args, "seeds": a.seeds},
        "episode_set": "batched simple_spread, 50 copies reset with seed 12345, one episode each",
        "wall_s": wall,
        "summary": summary,
        "seeds": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "distill_central" + args["suffix"]
    atomic_write_text(RESULTS / f"{name}.json", json.dumps(result, indent=1))
    plot(result, RESULTS / f"{name}.png")
    for key, value in summary.items():
        print(key, value)


if __name__ == "__main__":
    main()
