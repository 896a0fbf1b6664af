"""The shared driver of the benchmarks that train one run per seed into a batch directory, then read them
(``town_llm.py``, ``memory_seats.py``): the command-line options, the batch's jobs, the result's record."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import learning_gain as lg

Plan = Callable[[list[int], list[str], Path], list[lg.Job]]


def batch_parser(description: str, stem: str) -> argparse.ArgumentParser:
    """``--seeds``, ``--jobs`` (2), ``--set``, ``--collect``, ``--batch``, ``--results`` and ``--name``."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], help="config override for every run")
    parser.add_argument("--collect", type=Path, help="report the finished runs of a batch directory")
    parser.add_argument("--batch", type=Path, help="go on with a batch directory: what is missing is run")
    parser.add_argument("--results", type=Path, default=lg.REPO / "benchmarks" / "results")
    parser.add_argument("--name", default=stem, help="the results' file stem")
    return parser


def run_batch(
    args: argparse.Namespace, stem: str, config: str, plan: Plan, collect: Callable[[Path], dict[str, Any]]
) -> dict[str, Any] | None:
    """Run what the batch still misses (unless ``--collect``), then ``collect`` it; the result with the
    measurement's record (date, machine, config, overrides, wall and CPU time), or None (said on stderr)."""
    start, cpu0 = time.perf_counter(), lg.children_cpu_s()
    batch = args.collect
    if batch is None:
        stamp = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        batch = args.batch or lg.REPO / "benchmarks" / "runs" / stamp
        try:
            lg.run_jobs(plan(args.seeds, args.set, batch), args.jobs)
        except lg.RunFailed as exc:
            print(exc, file=sys.stderr)
            return None
    result = collect(batch)
    if not result["runs"]:
        print(f"no finished run in {batch}", file=sys.stderr)
        return None
    return result | {
        "measured": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()}-core CPU, one torch thread per run, {args.jobs} runs at a time",
        "config": config,
        "sets": args.set,
        "batch_dir": str(batch),
        "wall_s": time.perf_counter() - start,
        "cpu_s": lg.children_cpu_s() - cpu0,
    }
