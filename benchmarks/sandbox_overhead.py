"""Sandbox overhead per check: one program judged on its calls (the pipeline's unit of work), one at a
time, against the bare cost of starting the same interpreter (``python -I -S -B -c pass``) measured
in the same run. Prints the median and 90th percentile milliseconds per check for each isolation
level (and for the trusted runner the demonstrations use, teamrl/tasks/sandbox/trusted.py), the ratio to
the bare start, and writes benchmarks/results/sandbox_overhead.json.

    .venv/bin/python benchmarks/sandbox_overhead.py [--checks 60] [--calls 5] [--demonstrations 1500]

``--demonstrations N`` also plays the main job's N demonstration episodes (``examples/test_driven.yaml``)
with the experts' code in the trusted runner and in the sandbox, one after the other in this run, checks
that both give the same (prompt, completion) pairs, and records both wall times and their ratio.

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
from teamrl.tasks.sandbox.calls import SandboxLike, clear_cache
from teamrl.tasks.sandbox.trusted import TrustedRunner

REPO = Path(__file__).resolve().parent.parent


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


def checks(sandbox: SandboxLike, n: int, calls: int) -> list[float]:
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


def demonstrations_both_ways(n_episodes: int) -> dict[str, float | int | bool]:
    """The main job's demonstrations with the experts' code trusted, then sandboxed: wall seconds each."""
    from teamrl.config import load_config
    from teamrl.trainer.build import demonstrations

    config = REPO / "examples" / "test_driven.yaml"
    result: dict[str, float | int | bool] = {"episodes": n_episodes}
    pairs = {}
    for label, trusted in (("trusted", True), ("sandboxed", False)):
        cfg = load_config(config, [f"sandbox.trust_demonstrations={str(trusted).lower()}"])
        clear_cache()  # each way judges every program itself, none from the other's cached judgements
        start = time.perf_counter()
        pairs[label] = demonstrations(cfg, n_episodes, seed=7919)
        result[f"{label}_s"] = time.perf_counter() - start
    result["same_pairs"] = pairs["trusted"] == pairs["sandboxed"]
    if not result["same_pairs"]:
        raise RuntimeError("the trusted runner's demonstrations differ from the sandbox's")
    result["speedup"] = float(result["sandboxed_s"]) / float(result["trusted_s"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=60)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument(
        "--demonstrations", type=int, default=0, metavar="N", help="also time N demonstration episodes"
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sandbox_overhead.json"))
    args = parser.parse_args()
    bare = _percentiles(bare_start(args.checks))
    result = {"checks": args.checks, "calls_per_check": args.calls, "bare_python_start": bare}
    result["load_average_1min"] = os.getloadavg()[0]
    print(f"{'':26}{'median ms':>10}{'p90 ms':>9}{'x bare start':>14}")
    print(f"{'bare interpreter start':26}{bare['median_ms']:10.1f}{bare['p90_ms']:9.1f}{1.0:14.2f}")
    for isolation in ("bwrap", "rlimits", "trusted"):
        try:
            sandbox: SandboxLike = TrustedRunner() if isolation == "trusted" else Sandbox(isolation=isolation)
        except SandboxUnavailableError as exc:
            print(f"{isolation}: unavailable ({exc})")
            continue
        figures = _percentiles(checks(sandbox, args.checks, args.calls))
        if isinstance(sandbox, TrustedRunner):
            sandbox.close()
        figures["ratio_to_bare_start"] = figures["median_ms"] / bare["median_ms"]
        result[isolation] = figures
        label = f"check, {isolation}"
        print(
            f"{label:26}{figures['median_ms']:10.1f}{figures['p90_ms']:9.1f}{figures['ratio_to_bare_start']:14.2f}"
        )
    if args.demonstrations:
        demos = result["demonstrations"] = demonstrations_both_ways(args.demonstrations)
        print(
            f"{demos['episodes']} demonstration episodes: trusted {demos['trusted_s']:.1f} s, sandboxed "
            f"{demos['sandboxed_s']:.1f} s ({demos['speedup']:.2f}x), the same pairs: {demos['same_pairs']}"
        )
    print(f"(load average {result['load_average_1min']:.2f} on {os.cpu_count()} cores)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
