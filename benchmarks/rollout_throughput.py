"""Rollout throughput: the async engine (64 concurrent episodes, each policy batching the pending
requests of every live episode) against a naive loop that plays episodes one by one and roles one
by one, the shape of the seed's ``rollout_multi_agent`` (every generation is a batch of one).

Both use the same team (embedded default, four roles with their LoRA adapters), the same tasks,
the same workflow and the same sandbox verification, in the same process. Prints tokens/s of both
and their ratio, and writes benchmarks/results/rollout_throughput.json.

    .venv/bin/python benchmarks/rollout_throughput.py [--episodes 64] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from teamrl.config import load_config
from teamrl.engine.engine import Engine
from teamrl.trainer.build import build_policies, build_sandbox, build_suite, build_team
from teamrl.workflows.pipeline import pipeline


def measure(cfg, policies, sandbox, tasks, max_concurrency: int) -> dict[str, float]:
    engine = Engine(policies, max_concurrency=max_concurrency)
    team = build_team(cfg, engine, cfg.algorithm.temperature)
    torch.manual_seed(0)
    start = time.perf_counter()
    episodes = engine.run([lambda t=t: pipeline(team, t, cfg.workflow, sandbox) for t in tasks])
    wall = time.perf_counter() - start
    tokens = sum(e.num_generated_tokens for e in episodes)
    return {
        "episodes": len(episodes),
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "mean_batch": engine.stats.mean_batch,
        "solved": sum(bool(e.verifier.get("solved")) for e in episodes) / len(episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout_throughput.json"))
    args = parser.parse_args()
    cfg = load_config(overrides=args.set)
    torch.set_num_threads(cfg.run.threads)
    policies = build_policies(cfg, progress=False)
    sandbox = build_sandbox(cfg)
    tasks = build_suite(cfg).fixed_set("train", args.episodes)
    measure(cfg, policies, sandbox, tasks[:4], max_concurrency=4)  # warm-up: first calls are slower
    engine = measure(cfg, policies, sandbox, tasks, max_concurrency=args.episodes)
    naive = measure(cfg, policies, sandbox, tasks, max_concurrency=1)
    ratio = engine["tokens_per_s"] / naive["tokens_per_s"]
    print(f"{'':22}{'episodes':>9}{'tokens':>9}{'wall s':>9}{'tokens/s':>10}{'mean batch':>12}")
    for name, r in (("naive loop", naive), (f"engine ({args.episodes} conc.)", engine)):
        print(
            f"{name:22}{r['episodes']:>9}{r['tokens']:>9}{r['wall_s']:>9.1f}{r['tokens_per_s']:>10.0f}{r['mean_batch']:>12.1f}"
        )
    print(f"speed-up: {ratio:.1f}x (target >= 4x)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"engine": engine, "naive": naive, "ratio": ratio, "threads": cfg.run.threads}, indent=2)
    )


if __name__ == "__main__":
    main()
