"""Where a trained policy fails on Level-Based Foraging (issue 23): its final policy plays a fixed set of
episodes with sampled actions (EPyMARL's protocol), and the episodes that end with food left are counted,
with those where nothing on the grid changed over the episode's last ``--still`` steps (full sight: the
first agent's observation the same at every one of them), the sign of agents that wait where they are.

    .venv/bin/python benchmarks/marl_lbf_failures.py RUN_DIR [RUN_DIR ...] --episodes 300 --out failures.json

A run directory is a ``teamrl marl train`` run (``config.yaml`` and ``checkpoint.pt``); LBF normalises the
team's return so that collecting all food is 1, so "food left" is a return below 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

COPIES = 20  # environment copies stepped at once
SEED = 12345  # the episodes (teamrl's evaluation seed) and the actions' samples


def failures(run_dir: Path, episodes: int = 300, still: int = 20) -> dict[str, Any]:
    """Play ``episodes`` episodes of the run's final policy, actions sampled (torch seeded), on its env; the
    first ``episodes // COPIES`` of every copy are counted (more for the first ``episodes % COPIES``), so
    short episodes are not over-counted."""
    import torch

    from teamrl.marl.envs import make_vec_env
    from teamrl.marl.registry import algorithm
    from teamrl.marl.train import read_run

    resolved, ckpt_path = read_run(run_dir, FileNotFoundError)
    module, _ = algorithm(resolved["algorithm"])
    torch.set_num_threads(1)
    actor = module.make_actor(torch.load(ckpt_path, weights_only=False), deterministic=False)
    copies = min(COPIES, episodes)
    env = make_vec_env(resolved["env"], copies, SEED, **resolved.get("env_kwargs", {}))
    quota = np.full(copies, episodes // copies)
    quota[: episodes % copies] += 1
    counted = np.zeros(copies, dtype=int)
    first = env.agents[0]
    seen: list[list[np.ndarray]] = [[] for _ in range(copies)]
    running = np.zeros(copies)
    returns, frozen = [], []
    try:
        with torch.random.fork_rng():
            torch.manual_seed(SEED)
            step = env.reset(seed=SEED)
            while (counted < quota).any():
                for i in range(copies):
                    seen[i].append(step.obs[first][i].copy())
                step = env.step(actor(step))
                running += sum(step.rewards[a] for a in env.agents)
                for i in np.flatnonzero(step.done):
                    if counted[i] < quota[i]:
                        last = seen[i][-still:]
                        returns.append(float(running[i]))
                        frozen.append(len(last) == still and all(np.array_equal(o, last[0]) for o in last))
                        counted[i] += 1
                    running[i], seen[i] = 0.0, []
    finally:
        env.close()
    left = np.array(returns) < 1 - 1e-6
    return {
        "run_dir": str(run_dir),
        "episodes": len(returns),
        "return_mean": float(np.mean(returns)),
        "food_left": int(left.sum()),
        "food_left_and_still": int((left & np.array(frozen)).sum()),
        "still_steps": still,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="teamrl marl train run directories")
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--still", type=int, default=20, help="steps without change that count as waiting")
    parser.add_argument("--out", type=Path, help="a JSON record of the counts")
    args = parser.parse_args()
    rows = []
    for run in args.runs:
        try:
            row = failures(run, args.episodes, args.still)
        except FileNotFoundError as exc:
            sys.exit(str(exc))
        print(
            f"{run}: {row['food_left']} of {row['episodes']} episodes end with food left, "
            f"{row['food_left_and_still']} of them with nothing moving over the last {args.still} steps "
            f"(return {row['return_mean']:.3f})",
            flush=True,
        )
        rows.append(row)
    if args.out:
        from teamrl.atomic import atomic_write_text

        atomic_write_text(args.out, json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
