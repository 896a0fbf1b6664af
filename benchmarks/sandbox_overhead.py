"""Sandbox overhead per check: one program judged on its calls (the pipeline's unit of work), one at a
time, against the bare cost of starting the same interpreter (``python -I -S -B -c pass``) measured
in the same run. Prints the median and 90th percentile milliseconds per check for each isolation
level, the ratio to the bare start, and writes benchmarks/results/sandbox_overhead.json.

    .venv/bin/python benchmarks/sandbox_overhead.py [--checks 60] [--calls 5]

A check is a fresh program each time (the judge caches identical ones) with ``--calls`` calls of a
small function, as a generated task's hidden tests are; a HumanEval-style check costs about twice
as much (its check function is replayed in a second process).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from teamrl.tasks.sandbox import Sandbox, SandboxUnavailableError, judge_sync, parse_assert


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": 1000 * statistics.median(ordered),
        "p90_ms": 1000 * ordered[int(0.9 * (len(ordered) - 1))],
        "min_ms": 1000 * ordered[0],
    }


def bare_start(n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-B", "-c", "pass"], check=True)
        samples.append(time.perf_counter() - start)
    return samples


def checks(sandbox: Sandbox, n: int, calls: int) -> list[float]:
    tests = [parse_assert(f"assert f({i}) == {3 * i + 1}", "f") for i in range(calls)]
    samples = []
    for i in range(n + 3):
        code = f"def f(x):\n    return 3 * x + 1  # program {i} {time.time_ns()}\n"
        start = time.perf_counter()
        judged = judge_sync(sandbox, code, "f", tests)
        elapsed = time.perf_counter() - start
        if judged.passed != [True] * calls:
            raise RuntimeError(f"a correct program failed: {judged}")
        if i >= 3:  # the first runs warm the interpreter's files into the page cache
            samples.append(elapsed)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=60)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sandbox_overhead.json"))
    args = parser.parse_args()
    bare = _percentiles(bare_start(args.checks))
    result = {"checks": args.checks, "calls_per_check": args.calls, "bare_python_start": bare}
    result["load_average_1min"] = os.getloadavg()[0]
    print(f"{'':26}{'median ms':>10}{'p90 ms':>9}{'x bare start':>14}")
    print(f"{'bare interpreter start':26}{bare['median_ms']:10.1f}{bare['p90_ms']:9.1f}{1.0:14.2f}")
    for isolation in ("bwrap", "rlimits"):
        try:
            sandbox = Sandbox(isolation=isolation)
        except SandboxUnavailableError as exc:
            print(f"{isolation}: unavailable ({exc})")
            continue
        figures = _percentiles(checks(sandbox, args.checks, args.calls))
        figures["ratio_to_bare_start"] = figures["median_ms"] / bare["median_ms"]
        result[isolation] = figures
        label = f"check, {isolation}"
        print(
            f"{label:26}{figures['median_ms']:10.1f}{figures['p90_ms']:9.1f}{figures['ratio_to_bare_start']:14.2f}"
        )
    print(f"(load average {result['load_average_1min']:.2f} on {os.cpu_count()} cores)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
