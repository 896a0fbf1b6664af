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
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from teamrl.config import load_config
from teamrl.engine.engine import Engine
from teamrl.policies import GenerationRequest
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
        # requests that joined a policy's queue while one of its batches generated: what continuous
        # batching could have added to a running decode loop
        "queued_during_batches": sum(engine.stats.queued_during),
        "batches": engine.stats.batches,
        "solved": sum(bool(e.verifier.get("solved")) for e in episodes) / len(episodes),
    }


def ceiling(cfg, policies, sandbox, tasks, concurrency: int, repeats: int = 3) -> dict[str, float]:
    """The engine's own micro-batches replayed with plain batched generation: once as they ran (natural
    lengths: every row stops at EOS), once with every row forced to its ``max_new_tokens`` (EOS ignored),
    the ceiling the issue defines, and once with every row cut to one token (the prefill alone). Tokens/s
    of each, with the engine's.

    The forced replay spreads each prompt's prefill over ``max_new_tokens`` tokens; the work spreads it over
    its natural lengths, so no engine reaches the forced rate on this work. ``work_ceiling``: the natural
    tokens at the time a perfect continuous batcher would need, every prompt prefilled (the prefill
    replay's time) and every further token decoded at the forced replay's rate, with full batches
    throughout and nothing paid for joining them (its decode rate is measured at longer positions than the
    work's, which makes the bound a little lower than the truth)."""
    recorded: list[tuple[Any, list[GenerationRequest]]] = []
    originals = {name: p.generate for name, p in policies.items()}
    for name, policy in policies.items():

        def spy(requests, policy=policy, generate=originals[name]):
            recorded.append((policy, list(requests)))
            return generate(requests)

        policy.generate = spy
    try:
        engine = measure(cfg, policies, sandbox, tasks, max_concurrency=concurrency)
    finally:
        for name, policy in policies.items():
            policy.generate = originals[name]
    out = {"engine_tokens_per_s": engine["tokens_per_s"]}
    walls: dict[str, list[float]] = {}
    for _ in range(repeats):  # the replays in turn; each one's median wall
        for label, force, cut in (
            ("natural", False, False),
            ("forced", True, False),
            ("prefill", True, True),
        ):
            tokens, start = 0, time.perf_counter()
            for policy, requests in recorded:
                eos = policy._eos_ids
                if force:
                    policy._eos_ids = [-1]  # no token ends a row: every row decodes max_new_tokens
                if cut:
                    requests = [replace(r, max_new_tokens=1) for r in requests]
                try:
                    tokens += sum(len(g.completion_ids) for g in policy.generate(requests))
                finally:
                    policy._eos_ids = eos
            walls.setdefault(label, []).append(time.perf_counter() - start)
            out[f"{label}_tokens"] = tokens  # the last round's count, as before
    for label, label_walls in walls.items():
        wall = sorted(label_walls)[(len(label_walls) - 1) // 2]
        out[f"{label}_s"], out[f"{label}_tokens_per_s"] = wall, out[f"{label}_tokens"] / wall
    out["replay_walls_s"] = walls  # type: ignore[assignment]
    decode_rate = (out["forced_tokens"] - out["prefill_tokens"]) / (out["forced_s"] - out["prefill_s"])
    work_s = out["prefill_s"] + max(0, out["natural_tokens"] - out["prefill_tokens"]) / decode_rate
    out["forced_decode_tokens_per_s"], out["work_ceiling_s"] = decode_rate, work_s
    out["work_ceiling_tokens_per_s"] = out["natural_tokens"] / work_s
    out["prefill_share_of_work_ceiling"] = out["prefill_s"] / work_s
    for label in ("forced", "natural", "work_ceiling"):
        out[f"engine_over_{label}"] = out["engine_tokens_per_s"] / out[f"{label}_tokens_per_s"]
    return out


def _wall(r: dict[str, float]) -> float:
    return r["wall_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three arms (medians reported)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout_throughput.json"))
    args = parser.parse_args()
    cfg = load_config(overrides=args.set)
    torch.set_num_threads(cfg.run.threads)
    policies = build_policies(cfg, progress=False)
    sandbox = build_sandbox(cfg)
    tasks = build_suite(cfg).fixed_set("train", args.episodes)
    measure(cfg, policies, sandbox, tasks[:4], max_concurrency=4)  # warm-up: first calls are slower
    arms = {"engine": True, "unchunked": False, "naive": None}
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for _ in range(args.repeats):  # the arms in turn: drift of the machine's load hits all alike
        for arm, chunk in arms.items():
            for policy in policies.values():  # False: one left-padded prefill per micro-batch
                policy.chunk_prefill = chunk is not False
            concurrency = 1 if chunk is None else args.episodes
            runs[arm].append(measure(cfg, policies, sandbox, tasks, max_concurrency=concurrency))
    engine, unchunked, naive = (sorted(runs[a], key=_wall)[(len(runs[a]) - 1) // 2] for a in arms)  # medians
    ratio = engine["tokens_per_s"] / naive["tokens_per_s"]
    roof = ceiling(cfg, policies, sandbox, tasks, args.episodes, max(1, args.repeats))
    roof["engine_arm_over_work_ceiling"] = engine["tokens_per_s"] / roof["work_ceiling_tokens_per_s"]
    print(
        f"the engine's micro-batches replayed: natural lengths {roof['natural_tokens_per_s']:.0f} tokens/s, "
        f"forced to max_new_tokens {roof['forced_tokens_per_s']:.0f} tokens/s (the ceiling); the engine "
        f"{roof['engine_over_natural']:.2f} of the first, {roof['engine_over_forced']:.2f} of the ceiling"
    )
    print(
        f"prefill alone {roof['prefill_s']:.2f} s; the work's own ceiling (every prompt prefilled, every "
        f"further token at the forced decode rate {roof['forced_decode_tokens_per_s']:.0f} tokens/s): "
        f"{roof['work_ceiling_tokens_per_s']:.0f} tokens/s, the engine "
        f"{roof['engine_over_work_ceiling']:.2f} of it in the recording run, "
        f"{roof['engine_arm_over_work_ceiling']:.2f} in the engine arm's median"
    )
    print(f"{'':30}{'episodes':>9}{'tokens':>9}{'wall s':>9}{'tokens/s':>10}{'mean batch':>12}")
    rows = (
        ("naive loop", naive),
        (f"engine, unchunked prefill ({args.episodes})", unchunked),
        (f"engine ({args.episodes} conc.)", engine),
    )
    for name, r in rows:
        print(
            f"{name:30}{r['episodes']:>9}{r['tokens']:>9}{r['wall_s']:>9.1f}{r['tokens_per_s']:>10.0f}{r['mean_batch']:>12.1f}"
        )
    print(
        f"requests that arrived while a batch generated: {engine['queued_during_batches']} over the engine's "
        f"{engine['batches']} batches"
    )
    chunking = engine["tokens_per_s"] / unchunked["tokens_per_s"]
    print(f"speed-up: {ratio:.1f}x (target >= 5x); chunked prefill x{chunking:.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"engine": engine, "engine_unchunked_prefill": unchunked, "naive": naive, "ratio": ratio}
    result["walls_s"] = {arm: [r["wall_s"] for r in rs] for arm, rs in runs.items()}
    result["ceiling"] = roof
    out.write_text(
        json.dumps({**result, "chunked_prefill_gain": chunking, "threads": cfg.run.threads}, indent=2)
    )


if __name__ == "__main__":
    main()
