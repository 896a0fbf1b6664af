"""Memory written by an LLM seat, trained in the outer loop, against the rules at equal capacity (issue 19).

Per seed, ``teamrl train examples/collaborate_archivist.yaml`` (the proposer, an archivist and a summariser
on one embedded base; SFT, then freeze-rotate proposer / archivist / proposer / archivist: the inner and
the outer loop alternating in one run). Then the run's trained proposer plays the run's held-out sessions
(``tasks.heldout_size`` streamers x ``run.eval_samples`` at T = 0.7, the trainer's own evaluation, seeded
alike) once per memory, the capacity unchanged (4 notes):

- ``archivist_rl``: the archivist as the outer loop left it; ``archivist_sft``: the same seat on its SFT
  snapshot (what the outer loop changed); both sampled at the team's temperature, 0.7 (the archivist
  samples at 1.5 in training, to explore; ``archivist_rl@1.5`` and ``archivist_sft@1.5``: both at 1.5);
- ``summariser``: the summarise-everything baseline, an LLM seat on the same base that reads each episode
  and rewrites the whole memory (SFT only);
- the rules: ``recency`` (what the archivist was taught to imitate), ``fifo``, ``learned`` (the numpy
  scorer of benchmarks/memory_benchmark.py, examples/memory_scorer.json), ``keep_all`` (unbounded) and
  ``none``.

Each arm reports held-out acceptance (all 10 episodes, and those after the drift at episode 6), the share
of malformed seat replies, and the share of the final memory that is small talk (notes stating no taste).

    .venv/bin/python benchmarks/memory_seats.py --seeds 0 1 2 --jobs 2
    .venv/bin/python benchmarks/memory_seats.py --collect benchmarks/runs/memory_seats-<time>-<pid>

(results: benchmarks/results/memory_seats.json and .png)
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import learning_gain as lg  # noqa: E402  (job runner)
from benchmarks.seeded_batch import batch_parser, run_batch  # noqa: E402
from teamrl.atomic import atomic_write_text  # noqa: E402

CONFIG = "examples/collaborate_archivist.yaml"
ARMS = ("archivist_rl", "archivist_sft", "summariser", "recency", "fifo", "learned", "keep_all", "none")
EXPLORING = ("archivist_rl@1.5", "archivist_sft@1.5")  # the archivist at its training temperature
MEASURE_FILE = "memory_seats.json"
SCORER = REPO / "examples" / "memory_scorer.json"


def _arm_config(run_dir: Path, arm: str) -> Any:
    from teamrl.trainer.trainer import resume_config

    cfg = resume_config(run_dir)
    cfg.run.progress = False
    policy = "archivist" if arm.startswith("archivist") else arm
    if policy == "learned":  # (each assignment is validated: the scorer first)
        cfg.workflow.memory.scorer = str(SCORER)
    cfg.workflow.memory.policy = policy
    # every seat at the team's temperature (0.7), unless the arm names the archivist's (@1.5)
    cfg.workflow.roles["archivist"].temperature = float(arm.split("@")[1]) if "@" in arm else None
    return cfg


def measure(run_dir: Path) -> dict[str, Any]:
    """Every arm on the run's held-out sessions; written to ``run_dir/memory_seats.json``."""
    import torch

    from teamrl.trainer.learner import ref_adapter
    from teamrl.trainer.trainer import Trainer, summarize

    torch.set_num_threads(1)
    out: dict[str, Any] = {"run_dir": str(run_dir)}
    for arm in (*ARMS, *EXPLORING):
        trainer = Trainer(_arm_config(run_dir, arm), run_dir, resume=True, read_only=True)
        try:
            if arm.startswith("archivist_sft"):
                seat = trainer.team.seats["archivist"]
                trainer.team.seats["archivist"] = dataclasses.replace(seat, adapter=ref_adapter("archivist"))
            cfg = trainer.cfg
            tasks = trainer.suite.fixed_set("heldout", cfg.tasks.heldout_size)
            torch.manual_seed(cfg.run.seed + 12345)  # as Trainer.evaluate: the run's own evaluation
            for policy in trainer.policies.values():
                policy.model.eval()  # type: ignore[attr-defined]
            episodes = trainer.rollout(tasks, cfg.run.eval_samples, seed_key="eval")
            result = summarize(episodes, "eval/", trainer.workflow)
        finally:
            trainer.close()
        finals: list[list[str]] = [list(e.verifier.get("memory_final", [])) for e in episodes]  # type: ignore[call-overload]
        notes = sum(len(f) for f in finals)
        small = sum(1 for f in finals for n in f if n.startswith("said:"))
        out[arm] = {
            "acceptance": result["eval/outcome"],
            "after_drift": result.get("eval/acceptance_after_drift"),
            "invalid_share": result.get("eval/memory_invalid_share", 0.0),
            "small_talk_share": small / notes if notes else 0.0,
            "memory_size": notes / max(len(finals), 1),
        }
        print(f"{run_dir.name} {arm}: {out[arm]}", flush=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    out["evals"] = {e["label"]: e["eval/outcome"] for e in summary["evals"]}
    atomic_write_text(run_dir / MEASURE_FILE, json.dumps(out, indent=1))
    return out


def plan(seeds: list[int], sets: list[str], batch: Path) -> list[lg.Job]:
    """The base, then per seed its run and its measurement; in a batch directory given again, the runs
    already finished (summary.json) and measured (memory_seats.json) are not redone."""
    jobs = [lg.Job("build", partial(lg._build_argv, CONFIG, sets), batch / "build.log")]
    for seed in seeds:
        run = batch / f"archivist_s{seed}"
        if (run / MEASURE_FILE).exists():
            continue
        deps: tuple[str, ...] = ("build",)
        if not (run / "summary.json").exists():
            train = partial(lg._train_argv, CONFIG, run, seed, sets, lg.COMMON, [])
            jobs.append(lg.Job(run.name, train, run.with_suffix(".log"), ("build",)))
            deps = (run.name,)
        measure_argv = [sys.executable, str(Path(__file__).resolve()), "--measure", str(run)]
        log = batch / f"measure_{run.name}.log"
        jobs.append(lg.Job(f"measure_{run.name}", partial(list, measure_argv), log, deps))
    return jobs


def collect(batch: Path) -> dict[str, Any]:
    runs = [json.loads(p.read_text()) for p in sorted(batch.glob(f"archivist_s*/{MEASURE_FILE}"))]
    summary: dict[str, Any] = {}
    for arm in (*ARMS, *EXPLORING):
        summary[arm] = {}
        for key in ("acceptance", "after_drift", "invalid_share", "small_talk_share"):
            values = [float(r[arm][key]) for r in runs if r[arm].get(key) is not None]
            if values:
                std = statistics.stdev(values) if len(values) > 1 else 0.0
                summary[arm][key] = [statistics.mean(values), std]
    for label in ("after_sft", "after_rl"):
        values = [r["evals"][label] for r in runs if label in r["evals"]]
        if values:
            summary[f"run_{label}"] = [
                statistics.mean(values),
                statistics.stdev(values) if len(values) > 1 else 0.0,
            ]
    for suffix in ("", "@1.5"):
        lift = [
            r[f"archivist_rl{suffix}"]["acceptance"] - r[f"archivist_sft{suffix}"]["acceptance"] for r in runs
        ]
        summary[f"outer_loop_lift{suffix}"] = lift
    return {"summary": summary, "runs": runs}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["summary"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.6))
    for panel, key, title in ((0, "acceptance", "all 10 episodes"), (1, "after_drift", "after the drift")):
        means = [s[a][key][0] for a in ARMS]
        stds = [s[a][key][1] for a in ARMS]
        colors = ["C3" if a.startswith(("archivist", "summariser")) else "C0" for a in ARMS]
        ax[panel].bar(range(len(ARMS)), means, yerr=stds, color=colors, capsize=3)
        for run in result["runs"]:
            ax[panel].plot(range(len(ARMS)), [run[a][key] for a in ARMS], "k.", ms=3)
        ax[panel].axhline(0.25, color="grey", lw=0.8, ls=":")
        ax[panel].set_xticks(range(len(ARMS)), [a.replace("_", "\n") for a in ARMS], fontsize=8)
        ax[panel].set_title(f"held-out acceptance, {title}")
    ax[0].set_ylabel("acceptance (chance 0.25)")
    fig.suptitle(
        f"the same trained proposer, each memory at 4 notes ({len(result['runs'])} seeds; red: LLM seats)"
    )
    lg.save_figure(fig, path, 110)


def main(argv: list[str] | None = None) -> int:
    parser = batch_parser(__doc__ or "", "memory_seats")
    parser.add_argument("--measure", type=Path, help="measure one finished run (what each seed's job does)")
    args = parser.parse_args(argv)
    if args.measure:
        measure(args.measure)
        return 0
    result = run_batch(args, "memory_seats", CONFIG, plan, collect)
    if result is None:
        return 1
    lg.write_results(args.results, args.name, result, lambda p: plot(result, p))
    for arm in (*ARMS, *EXPLORING):
        row = result["summary"][arm]
        cells = "  ".join(f"{k} {m:.3f} +- {sd:.3f}" for k, (m, sd) in row.items())
        print(f"{arm:14s} {cells}")
    for suffix in ("", "@1.5"):
        lift = result["summary"][f"outer_loop_lift{suffix}"]
        print(f"outer loop lift per seed{suffix}:", [round(x, 3) for x in lift])
    return 0


if __name__ == "__main__":
    sys.exit(main())
