"""GPU check: train a three-role team (Planner -> Coder -> Tester, one LoRA adapter each on one ~0.5B
checkpoint) for a few iterations with vLLM generating the rollouts on one GPU, then print rollout
tokens/s, learner tokens/s and peak GPU memory. Run through benchmarks/gpu_check.sh:

    MODEL=/models/Qwen2.5-0.5B-Instruct ITERATIONS=3 bash benchmarks/gpu_check.sh [--set key=value ...]

MODEL is a checkpoint directory or a hub id (default Qwen/Qwen2.5-0.5B-Instruct, downloaded once where
a hub is reachable); the team is examples/gpu_vllm_team.yaml. Writes benchmarks/results/gpu_check.json.
Stops with a message (exit 2) where torch sees no CUDA GPU or vLLM is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch

from teamrl.config import ConfigError, load_config
from teamrl.policies.vllm_generation import VLLM_MISSING
from teamrl.report.load import read_metrics

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "gpu_vllm_team.yaml"
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def missing_requirement(needs_vllm: bool = True) -> str | None:
    """Why this machine cannot run the check, or None."""
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        return (
            f"no CUDA GPU is visible to torch {torch.__version__} (CUDA_VISIBLE_DEVICES={visible!r}): this "
            "check trains on one GPU; run it on a GPU machine set up as docs/scaling.md ('GPUs and vLLM') "
            "says"
        )
    if needs_vllm and importlib.util.find_spec("vllm") is None:
        return (
            VLLM_MISSING + " (or measure plain transformers generation: --set policies.default.generation=hf)"
        )
    return None


def summarize(rows: list[dict], wall_s: float) -> dict[str, float]:
    """Throughput over the RL iterations (evaluations and SFT left out) and GPU memory."""
    rl = [r for r in rows if "phase" in r]
    gaps = [v for r in rl for k, v in r.items() if k.endswith("/behaviour_logprob_gap")]
    free, total = torch.cuda.mem_get_info()
    return {
        "iterations": len(rl),
        "rollout_tokens": rl[-1]["perf/rl_tokens_total"],
        "rollout_tokens_per_s": rl[-1]["perf/rl_tokens_total"] / sum(r["perf/rollout_s"] for r in rl),
        "learner_tokens": sum(r["perf/learner_tokens"] for r in rl),
        "learner_tokens_per_s": sum(r["perf/learner_tokens"] for r in rl)
        / sum(r["perf/update_s"] for r in rl),
        "iteration_s": sum(r["perf/iteration_s"] for r in rl) / len(rl),
        "behaviour_logprob_gap": sum(gaps) / len(gaps) if gaps else float("nan"),
        # this process: the learner (and vLLM's engine when it runs in-process)
        "peak_gpu_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        # the whole device, vLLM's engine process included
        "gpu_memory_in_use_gib": (total - free) / 2**30,
        "gpu_memory_total_gib": total / 2**30,
        "wall_s": wall_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    parser.add_argument("--out-dir", default=str(ROOT / "runs" / "gpu_check"))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "gpu_check.json"))
    args = parser.parse_args(argv)
    problem = missing_requirement(needs_vllm="policies.default.generation=hf" not in args.set)
    if problem is not None:
        print(f"gpu_check: {problem}", file=sys.stderr)
        return 2
    from teamrl.trainer.trainer import Trainer

    model = os.environ.get("MODEL", DEFAULT_MODEL)
    overrides = [
        f"policies.default.path={model}",
        f"recipe.iterations={os.environ.get('ITERATIONS', '3')}",
        "run.progress=false",
        *args.set,
    ]
    try:
        cfg = load_config(CONFIG, overrides)
    except ConfigError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    run_dir = Path(args.out_dir) / time.strftime("%Y%m%d-%H%M%S")
    print(f"gpu_check: {model} on {torch.cuda.get_device_name(0)}, run directory {run_dir}", flush=True)
    start = time.perf_counter()
    trainer = Trainer(cfg, run_dir)
    torch.cuda.reset_peak_memory_stats()  # loading aside: the peak of SFT, rollouts and updates
    trainer.fit()
    rows = read_metrics(run_dir)
    result = {
        "model": model,
        "generation": cfg.policies["default"].generation,
        "gpu": torch.cuda.get_device_name(0),
        **summarize(rows, time.perf_counter() - start),
    }

    print(f"\n{'iteration':>9} {'rollout tok/s':>14} {'learner tok/s':>14} {'iteration s':>12}")
    for r in (r for r in rows if "phase" in r):
        speeds = f"{r['perf/rollout_tokens_per_s']:>14.0f} {r['perf/learner_tokens_per_s']:>14.0f}"
        print(f"{r['step']:>9} {speeds} {r['perf/iteration_s']:>12.1f}")
    print(
        f"\nrollout: {result['rollout_tokens_per_s']:.0f} generated tokens/s ({result['generation']}, "
        f"{result['rollout_tokens']} tokens); learner: {result['learner_tokens_per_s']:.0f} tokens/s "
        "(forward + backward, "
        f"{result['learner_tokens']:.0f} tokens)\n"
        f"peak GPU memory allocated by this process: {result['peak_gpu_memory_allocated_gib']:.2f} GiB; "
        f"in use on the device at the end (vLLM included): {result['gpu_memory_in_use_gib']:.1f} of "
        f"{result['gpu_memory_total_gib']:.0f} GiB\n"
        f"generator vs learner log-probs, mean |gap| per token: {result['behaviour_logprob_gap']:.4f}"
    )
    out = Path(args.results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
