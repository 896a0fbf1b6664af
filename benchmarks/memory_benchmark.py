"""Memory policies at equal capacity on held-out collaborators whose taste drifts (issue 19).

For every seed (a population of simulated streamers, ``teamrl.memory.collaborator``): learn the memory
scorer by RL in the outer loop on train collaborators (``teamrl.memory.learn.train_scorer``), then play
``--n`` held-out collaborators for ``--rounds`` episodes each with every policy (none, FIFO, recency,
tally, keep-everything, learned) at the same capacity, the task policy being the note reader
(``reader_choice``), and the same held-out streamers for all. Taste drifts at round ``--drift-at``
(``sudden``: the genres' weights turn over at once; ``gradual``: over ``--drift-span`` rounds).

Prints, per policy, acceptance overall, before the drift (the 10 rounds before it), just after it (the 10
rounds from it: recovery) and at the end (the rest), mean +- std over seeds, and the memory's mean size;
writes ``<results-dir>/memory.json`` and ``memory.png`` (acceptance per round, mean over seeds and
collaborators, smoothed over 5 rounds).

    .venv/bin/python benchmarks/memory_benchmark.py [--seeds 0 1 2] [--drift sudden|gradual]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from teamrl.atomic import atomic_write_text  # noqa: E402
from teamrl.memory.learn import evaluate_policy, scorer_json, train_scorer  # noqa: E402
from teamrl.memory.policies import POLICIES  # noqa: E402
from teamrl.memory.store import Capacity  # noqa: E402


def windows(drift_at: int, rounds: int) -> dict[str, slice]:
    return {
        "all": slice(0, rounds),
        "before drift": slice(max(0, drift_at - 10), drift_at),
        "after drift": slice(drift_at, min(rounds, drift_at + 10)),
        "end": slice(min(rounds, drift_at + 10), rounds),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--n", type=int, default=200, help="held-out collaborators per seed")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--drift", choices=["none", "sudden", "gradual"], default="sudden")
    p.add_argument("--drift-at", type=int, default=20)
    p.add_argument("--drift-span", type=int, default=10)
    p.add_argument("--entries", type=int, default=4, help="memory capacity in notes (every bounded policy)")
    p.add_argument("--tokens", type=int, default=None, help="memory capacity in words")
    p.add_argument("--iterations", type=int, default=80, help="outer-loop iterations")
    p.add_argument("--batch", type=int, default=32, help="train collaborators per outer-loop iteration")
    p.add_argument("--horizon", type=int, default=5, help="episodes a memory decision is rewarded over")
    p.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--name", default="memory", help="file name of the record (json, png)")
    args = p.parse_args(argv)
    capacity = Capacity(args.entries, args.tokens)
    collab = {"drift": args.drift, "drift_at": args.drift_at, "drift_span": args.drift_span}
    cut = windows(args.drift_at, args.rounds)
    start = time.time()
    curves: dict[str, list[list[float]]] = {name: [] for name in POLICIES}
    per_seed: list[dict[str, Any]] = []
    for seed in args.seeds:
        t0 = time.time()
        scorer, log = train_scorer(
            seed, capacity, args.iterations, args.batch, args.rounds, args.horizon, **collab
        )
        row: dict[str, Any] = {
            "seed": seed,
            "train_min": (time.time() - t0) / 60,
            "scorer": scorer_json(scorer),
            "train_curve": [round(x.acceptance, 4) for x in log],
            "policies": {},
        }
        for name in POLICIES:
            acc = evaluate_policy(name, seed, capacity, args.n, args.rounds, scorer, **collab)
            curves[name].append(acc.mean(axis=0).tolist())
            row["policies"][name] = {w: float(acc[:, s].mean()) for w, s in cut.items()}
        per_seed.append(row)
        print(
            f"seed {seed}: outer loop {row['train_min']:.1f} min; "
            + ", ".join(f"{n} {row['policies'][n]['all']:.3f}" for n in POLICIES)
        )
    summary = {
        name: {
            w: {
                "mean": float(np.mean([r["policies"][name][w] for r in per_seed])),
                "std": float(np.std([r["policies"][name][w] for r in per_seed], ddof=1))
                if len(per_seed) > 1
                else 0.0,
            }
            for w in cut
        }
        for name in POLICIES
    }
    print(f"\n{'policy':10s}" + "".join(f"{w:>20s}" for w in cut))
    for name in POLICIES:
        print(
            f"{name:10s}"
            + "".join(f"{summary[name][w]['mean']:>13.3f} +- {summary[name][w]['std']:.3f}" for w in cut)
        )
    learned = summary["learned"]
    verdicts = {
        "learned_beats_fifo_all_seeds": all(
            r["policies"]["learned"]["all"] > r["policies"]["fifo"]["all"] for r in per_seed
        ),
        "learned_beats_recency_all_seeds": all(
            r["policies"]["learned"]["all"] > r["policies"]["recency"]["all"] for r in per_seed
        ),
        "learned_recovers_faster_than_keep_all_all_seeds": all(
            r["policies"]["learned"]["after drift"] > r["policies"]["keep_all"]["after drift"]
            for r in per_seed
        ),
    }
    print("\n" + "\n".join(f"{k}: {v}" for k, v in verdicts.items()))
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "wall_min": (time.time() - start) / 60,
        "windows": {w: [s.start, s.stop] for w, s in cut.items()},
        "summary": summary,
        "per_seed": per_seed,
        "curves_mean": {n: np.mean(c, axis=0).tolist() for n, c in curves.items()},
        "verdicts": verdicts,
        "learned_after_drift_minus_keep_all": learned["after drift"]["mean"]
        - summary["keep_all"]["after drift"]["mean"],
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.results_dir / f"{args.name}.json", json.dumps(record, indent=1))
    plot(record, args.results_dir / f"{args.name}.png", args.drift_at)
    return record


def plot(record: dict[str, Any], path: Path, drift_at: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, curve in record["curves_mean"].items():
        c = np.convolve(curve, np.ones(5) / 5, mode="valid")
        ax.plot(np.arange(len(c)) + 2, c, label=name, lw=2.2 if name == "learned" else 1.2)
    ax.axvline(drift_at, color="grey", ls="--", lw=1)
    ax.text(drift_at + 0.3, ax.get_ylim()[0] + 0.01, "taste drifts", color="grey")
    ax.set_xlabel("episode with the collaborator")
    ax.set_ylabel("acceptance (5-episode mean)")
    seeds = len(record["per_seed"])
    ax.set_title(f"memory at {record['args']['entries']} notes, held-out collaborators, {seeds} seeds")
    ax.legend(fontsize=8, ncol=3)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


if __name__ == "__main__":
    main()
