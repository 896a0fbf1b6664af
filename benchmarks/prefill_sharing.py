"""What prefilling identical prompts once saves (issue 22): the main job's first turn, the Planner's prompt,
which is the same for the 8 episodes of a task's group, as one batch of 8 tasks x 8 samples at T = 0.7,
generated with ``HFPolicy.share_prefill`` on and off in alternation (same run, same process, one torch
thread; the mean of the middle 4 of 6 timings each).

    .venv/bin/python benchmarks/prefill_sharing.py [--reps 6] [--tasks 8] [--group 8]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from teamrl.config import load_config  # noqa: E402
from teamrl.policies.base import GenerationRequest  # noqa: E402
from teamrl.trainer.build import build_policy, build_suite  # noqa: E402
from teamrl.workflows.pipeline import prompt_for  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(REPO / "examples" / "test_driven.yaml", ["run.threads=1"])
    policy = build_policy(cfg, "default", progress=False)
    tasks = build_suite(cfg).sample("train", args.tasks, random.Random(0))
    prompts = [prompt_for("planner", "Plan the steps.", t, []) for t in tasks]
    requests = [GenerationRequest(q, None, 40, 0.7) for q in prompts for _ in range(args.group)]
    times: dict[bool, list[float]] = {True: [], False: []}
    for rep in range(args.reps):
        for share in (True, False) if rep % 2 == 0 else (False, True):
            policy.share_prefill = share  # type: ignore[union-attr]
            start = time.perf_counter()
            policy.generate(requests)
            times[share].append(time.perf_counter() - start)
    middle = {k: sorted(v)[1:-1] or v for k, v in times.items()}
    on, off = (sum(middle[k]) / len(middle[k]) for k in (True, False))
    print(
        f"{len(requests)} requests ({args.tasks} prompts x {args.group}): shared prefill {on:.2f} s, "
        f"each prompt alone {off:.2f} s: x{off / on:.2f}"
    )


if __name__ == "__main__":
    main()
