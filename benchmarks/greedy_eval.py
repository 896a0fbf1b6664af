"""Held-out success of finished runs, after SFT and after RL, with greedy decoding: no sampling noise.

The trainer's evaluations sample at the training temperature (0.7), so two evaluations of the same
policy differ by a few points; an SFT-vs-RL difference of that size cannot be read. This script
re-evaluates a run's two policies on the same held-out tasks with temperature 0 (every role picks
its most likely token), one episode per task: the RL policy is the run's final adapters, the SFT
policy is the frozen snapshot every trained role keeps as its KL reference (``ref_<role>``).
Differences are paired per task: it reports how many tasks only one of the two solves.

    .venv/bin/python benchmarks/greedy_eval.py RUN_DIR [RUN_DIR ...] [--n 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def greedy_eval(run_dir: Path, n_tasks: int) -> dict[str, Any]:
    import torch

    from teamrl.trainer.trainer import Trainer, resume_config

    torch.set_num_threads(1)
    cfg = resume_config(run_dir)
    cfg.tasks.heldout_size = n_tasks
    cfg.run.eval_samples = 1
    cfg.run.progress = False
    trainer = Trainer(cfg, run_dir, resume=True, read_only=True)
    try:
        return _greedy(trainer, run_dir, n_tasks)
    finally:
        trainer.close()


def _greedy(trainer: Any, run_dir: Path, n_tasks: int) -> dict[str, Any]:
    from teamrl.trainer.learner import ref_adapter

    cfg = trainer.cfg
    seats = trainer.team.seats  # Seat is frozen: replace the seats
    for role, seat in list(seats.items()):
        seats[role] = dataclasses.replace(seat, temperature=0.0)
    tasks = trainer.suite.fixed_set("heldout", n_tasks)

    def solved_per_task() -> list[bool]:
        for policy in trainer.policies.values():
            if hasattr(policy, "model"):
                policy.model.eval()
        episodes = trainer.rollout(tasks, 1)
        by_task = {e.task_id: bool(e.verifier.get("solved")) for e in episodes}
        return [by_task[t.task_id] for t in tasks]

    after_rl = solved_per_task()
    trained = [r for r in cfg.workflow.order if cfg.workflow.roles[r].adapter]
    for role in trained:  # the SFT policy: each trained role's frozen reference snapshot
        seats[role] = dataclasses.replace(seats[role], adapter=ref_adapter(role))
    after_sft = solved_per_task()
    only_rl = sum(r and not s for r, s in zip(after_rl, after_sft, strict=True))
    only_sft = sum(s and not r for r, s in zip(after_rl, after_sft, strict=True))
    return {
        "run_dir": str(run_dir),
        "tasks": len(tasks),
        "sft_solved": sum(after_sft) / len(tasks),
        "rl_solved": sum(after_rl) / len(tasks),
        "gain": (sum(after_rl) - sum(after_sft)) / len(tasks),
        "only_rl": only_rl,
        "only_sft": only_sft,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--n", type=int, default=300, help="held-out tasks (one greedy episode each)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for run_dir in args.run_dirs:
        r = greedy_eval(run_dir, args.n)
        rows.append(r)
        print(
            f"{run_dir.name:20} SFT {r['sft_solved']:.3f}  RL {r['rl_solved']:.3f}  gain {r['gain']:+.3f}"
            f"  (tasks solved only after RL {r['only_rl']}, only after SFT {r['only_sft']})",
            flush=True,
        )
        if args.json is not None:
            from teamrl.atomic import atomic_write_text

            atomic_write_text(args.json, json.dumps({"n_tasks": args.n, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
