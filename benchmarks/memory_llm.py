"""Does the LLM proposer use its memory? (issue 19)

For every finished ``collaborate`` run given (``teamrl train examples/collaborate.yaml ...``), the trained
proposer plays the run's held-out sessions (``tasks.heldout_size`` streamers x ``run.eval_samples``, the
trainer's own evaluation, seeded alike) once per memory policy, the capacity unchanged: the run's own
(``learned``, its scorer), ``fifo``, ``recency``, ``keep_all`` and ``none``; then the scripted note reader
(``reader_choice``, the SFT's expert) plays the same sessions with the run's memory: what reading the notes
perfectly gives. A proposer that uses its memory is above ``none``; one that does not is at chance (0.25
with 4 candidates).

    .venv/bin/python benchmarks/memory_llm.py RUN_DIR [RUN_DIR ...] [--json OUT.json]

(default OUT: benchmarks/results/memory_llm.json)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from teamrl.atomic import atomic_write_text  # noqa: E402

POLICIES = ("learned", "fifo", "recency", "keep_all", "none")


def measure(run_dir: Path) -> dict[str, Any]:
    import torch

    from teamrl.engine.team import Team
    from teamrl.trainer.build import build_suite, build_workflow, workflow_experts
    from teamrl.trainer.trainer import Trainer, resume_config

    torch.set_num_threads(1)
    out: dict[str, Any] = {"run_dir": str(run_dir)}
    own = resume_config(run_dir).workflow.memory.policy
    for policy in (own, *(p for p in POLICIES if p != own)):
        cfg = resume_config(run_dir)
        cfg.run.progress = False
        cfg.workflow.memory.policy = policy
        if policy != "learned":
            cfg.workflow.memory.scorer = None
        trainer = Trainer(cfg, run_dir, resume=True, read_only=True)
        try:
            result = trainer.evaluate(f"memory-{policy}")
        finally:
            trainer.close()
        out[policy] = {
            k.removeprefix("eval/"): result[k] for k in result if "acceptance" in k or k == "eval/outcome"
        }
        print(f"{run_dir.name} {policy}: {out[policy]}", flush=True)
    cfg = resume_config(run_dir)
    workflow = build_workflow(cfg, None)
    tasks = build_suite(cfg).fixed_set("heldout", cfg.tasks.heldout_size)
    team = Team(workflow_experts(workflow, random.Random(cfg.run.seed)))
    episodes = [asyncio.run(workflow.play(team, t)) for t in tasks for _ in range(cfg.run.eval_samples)]
    out["scripted_reader"] = {"outcome": statistics.mean(e.outcome for e in episodes)}
    out["memory_policy"] = own
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "memory_llm.json")
    args = parser.parse_args()
    start = time.perf_counter()
    runs = [measure(r) for r in args.runs]
    summary = {}
    for arm in (*POLICIES, "scripted_reader"):
        values = [r[arm]["outcome"] for r in runs]
        summary[arm] = [statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0]
    data = {
        "measured": time.strftime("%Y-%m-%d"),
        "machine": "2-core CPU, one torch thread",
        "wall_s": time.perf_counter() - start,
        "summary": summary,
        "runs": runs,
    }
    atomic_write_text(args.json, json.dumps(data, indent=1))
    for arm, (m, s) in summary.items():
        print(f"{arm:16s} {m:.3f} +- {s:.3f}")


if __name__ == "__main__":
    main()
