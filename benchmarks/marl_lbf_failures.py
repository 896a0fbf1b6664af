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
    """Play ``episodes`` episodes of the run's final policy, actions sampled (torch seeded), on its env,
    counted as ``teamrl.marl.evaluate.evaluate`` counts them (the first episodes of every copy, fixed before
    play, so short episodes are not over-counted); each copy's observations are watched on the way."""
    import torch

    from teamrl.marl.envs import make_vec_env
    from teamrl.marl.evaluate import evaluate
    from teamrl.marl.registry import algorithm
    from teamrl.marl.train import read_run

    resolved, ckpt_path = read_run(run_dir, FileNotFoundError)
    module, _ = algorithm(resolved["algorithm"])
    torch.set_num_threads(1)
    actor = module.make_actor(torch.load(ckpt_path, weights_only=False), deterministic=False)
    copies = min(COPIES, episodes)
    env = make_vec_env(resolved["env"], copies, SEED, **resolved.get("env_kwargs", {}))
    first = env.agents[0]
    seen: list[list[np.ndarray]] = [[] for _ in range(copies)]  # the episode under way, per copy
    waited: list[list[bool]] = [[] for _ in range(copies)]  # per copy, its ended episodes in order

    def waiting(obs: list[np.ndarray]) -> bool:
        last = obs[-still:]
        return len(last) == still and all(np.array_equal(o, last[0]) for o in last)

    def watched(step: Any) -> dict[str, np.ndarray]:
        for i in np.flatnonzero(step.done):  # the copy's episode ended on the last step
            waited[i].append(waiting(seen[i]))
            seen[i] = []
        for i in range(copies):
            seen[i].append(step.obs[first][i].copy())
        return actor(step)

    try:
        with torch.random.fork_rng():
            torch.manual_seed(SEED)
            result = evaluate(watched, env, episodes, seed=SEED)
    finally:
        env.close()
    # evaluate's returns are copy by copy, each copy's first episodes (one more for the first copies); an
    # episode that ended on the last step was not seen ending by the actor
    quota = [episodes // copies + (i < episodes % copies) for i in range(copies)]
    for i in range(copies):
        if len(waited[i]) < quota[i]:
            waited[i].append(waiting(seen[i]))
    frozen = np.array([w for i in range(copies) for w in waited[i][: quota[i]]])
    left = np.array(result["returns"]) < 1 - 1e-6
    return {
        "run_dir": str(run_dir),
        "episodes": len(left),
        "return_mean": result["return/mean"],
        "food_left": int(left.sum()),
        "food_left_and_still": int((left & frozen).sum()),
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
