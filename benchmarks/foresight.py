"""Does the Coder foresee its execution report, and does imagining before handing over pay? (issue 21)

For every finished test-driven run given (the main job's runs, e.g. ``team_value.py``'s ``team_s<seed>``):

1. the trained team plays ``--train-tasks`` training tasks x 2 episodes (sampled, T as in training); each
   episode's first code version is a row: the Coder's final hidden state under its adapter
   (``teamrl.workflows.foresight.turn_features``) and what then happened: the brief's examples all pass on
   it (the report that ends the loop) and the Tester's tests all pass on it;
2. one logistic-regression probe per outcome is fitted on those rows (``HiddenStateProbe``);
3. ``--heldout`` held-out tasks x 2 episodes are played twice with the same sampling seeds: as trained, and
   with ``workflow.imagine`` (the Coder writes another first version while the examples probe expects
   failure, ``--tries`` versions at most, and keeps the one it expects most of). On the first arm the
   probes' accuracy and AUC are measured against the base rate (always guessing the commoner outcome); the
   two arms give held-out success and generated tokens per solved task (the versions not kept included).

Greedy decoding is left out: a greedy Coder writes the same version again.

    .venv/bin/python benchmarks/foresight.py RUN_DIR [RUN_DIR ...] [--train-tasks 256] [--heldout 96]
        [--tries 3] [--threshold 0.5] [--json benchmarks/results/foresight.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

OUTCOMES = ("examples_pass", "tester_tests_pass")


def first_versions(episodes: list[Any], coder: str) -> tuple[list[Any], dict[str, list[bool]]]:
    """Each episode's first code turn, and what then happened to it (rows without a report are left out)."""
    turns, labels = [], {k: [] for k in OUTCOMES}
    for e in episodes:
        examples = e.verifier.get("examples_on_versions")
        tests = e.verifier.get("tests_on_versions")
        if not examples or not tests or not e.turns_of(coder):
            continue
        turns.append(e.turns_of(coder)[0])
        labels["examples_pass"].append(all(examples[0]))
        labels["tester_tests_pass"].append(all(tests[0]))
    return turns, labels


def auc(scores: list[float], labels: list[bool]) -> float:
    """Probability that a positive outranks a negative (ties count half): the judge calibration's AUC."""
    from teamrl.world.judge import auc as pairwise_auc

    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    return pairwise_auc(pos, [s for s, y in zip(scores, labels, strict=True) if not y])


def arm_stats(episodes: list[Any]) -> dict[str, Any]:
    solved = [bool(e.verifier.get("solved")) for e in episodes]
    extra = [int(e.verifier.get("foresight", {}).get("extra_tokens", 0)) for e in episodes]
    tokens = sum(e.num_generated_tokens for e in episodes)  # the versions set aside included
    tries = [len(e.verifier["foresight"]["predicted"]) for e in episodes if "foresight" in e.verifier]
    first_examples = [
        all(e.verifier["examples_on_versions"][0]) for e in episodes if e.verifier.get("examples_on_versions")
    ]
    first_hidden = [e.verifier["code_pass"][0] == 1.0 for e in episodes if e.verifier.get("code_pass")]
    return {
        "episodes": len(episodes),
        "success": sum(solved) / len(episodes),
        "first_version_examples_pass": sum(first_examples) / max(1, len(first_examples)),
        "first_version_solves": sum(first_hidden) / max(1, len(first_hidden)),
        "tokens": tokens,
        "tokens_per_solved": tokens / max(1, sum(solved)),
        "extra_tokens": sum(extra),
        "versions_per_episode": statistics.fmean(tries) if tries else 1.0,
        "rewritten": sum(t > 1 for t in tries),
        "solved": solved,
    }


def measure(run_dir: Path, n_train: int, n_heldout: int, tries: int, threshold: float) -> dict[str, Any]:
    import torch

    from teamrl.trainer.trainer import Trainer, resume_config
    from teamrl.workflows.foresight import HiddenStateProbe, foresight, turn_features

    torch.set_num_threads(1)
    cfg = resume_config(run_dir)
    cfg.run.progress = False
    trainer = Trainer(cfg, run_dir, resume=True, read_only=True)
    t0 = time.perf_counter()
    try:
        for policy in trainer.policies.values():
            if hasattr(policy, "model"):
                policy.model.eval()
        coder = trainer.workflow.settings.code_roles()[0]
        seat = trainer.team.seats[coder]
        policy = trainer.policies[seat.policy]
        train_eps = trainer.rollout(trainer.suite.fixed_set("train", n_train), 2, seed_key="foresight-train")
        turns, labels = first_versions(train_eps, coder)
        x = turn_features(policy, seat.adapter, turns)
        probes = {k: HiddenStateProbe.fit(x, labels[k]) for k in OUTCOMES}

        heldout = trainer.suite.fixed_set("heldout", n_heldout)
        plain = trainer.rollout(heldout, 2, seed_key="foresight-heldout")
        h_turns, h_labels = first_versions(plain, coder)
        hx = turn_features(policy, seat.adapter, h_turns)
        prediction: dict[str, Any] = {}
        for k in OUTCOMES:
            p = probes[k].predict(hx).tolist()
            y = h_labels[k]
            rate = sum(y) / len(y)
            prediction[k] = {
                "rows_train": len(labels[k]),
                "rows_heldout": len(y),
                "positive_rate": rate,
                "base_rate_accuracy": max(rate, 1 - rate),
                "accuracy": sum((pi > 0.5) == yi for pi, yi in zip(p, y, strict=True)) / len(y),
                "auc": auc(p, y),
                "train_accuracy": float(
                    ((probes[k].predict(x) > 0.5) == torch.tensor(labels[k])).float().mean()
                ),
            }
        trainer.team.foresight[coder] = foresight(policy, seat.adapter, probes["examples_pass"])
        settings = trainer.workflow.settings
        trainer.workflow.settings = settings.model_copy(
            update={"imagine": True, "imagine_tries": tries, "imagine_threshold": threshold}
        )
        imagined = trainer.rollout(heldout, 2, seed_key="foresight-heldout")
        trainer.workflow.settings = settings
        off, on = arm_stats(plain), arm_stats(imagined)
        both = list(zip(off.pop("solved"), on.pop("solved"), strict=True))
        return {
            "run_dir": str(run_dir),
            "coder": coder,
            "prediction": prediction,
            "plain": off,
            "imagine": on,
            "solved_only_with_imagine": sum(b and not a for a, b in both),
            "solved_only_without": sum(a and not b for a, b in both),
            "wall_s": time.perf_counter() - t0,
        }
    finally:
        trainer.close()


def plot(data: dict[str, Any], path: Path) -> None:
    """Per seed: the examples probe's held-out accuracy against the base rate; success and tokens per solved
    task without and with imagine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = data["runs"]
    names = [Path(r["run_dir"]).name for r in runs]
    xs = range(len(runs))
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    panels = [
        (
            "probe: first version passes the examples",
            "accuracy",
            [
                ("base rate", [r["prediction"]["examples_pass"]["base_rate_accuracy"] for r in runs]),
                ("probe", [r["prediction"]["examples_pass"]["accuracy"] for r in runs]),
            ],
        ),
        (
            "held-out success (T = 0.7)",
            "success",
            [
                ("as trained", [r["plain"]["success"] for r in runs]),
                ("imagine", [r["imagine"]["success"] for r in runs]),
            ],
        ),
        (
            "generated tokens per solved task",
            "tokens",
            [
                ("as trained", [r["plain"]["tokens_per_solved"] for r in runs]),
                ("imagine", [r["imagine"]["tokens_per_solved"] for r in runs]),
            ],
        ),
    ]
    for ax, (title, ylabel, bars) in zip(axes, panels, strict=True):
        for k, (label, values) in enumerate(bars):
            ax.bar([x + 0.38 * k for x in xs], values, width=0.38, label=label)
        ax.set_xticks([x + 0.19 for x in xs], names, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(f"the Coder's teammate model; imagine: up to {data['tries']} first versions", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _ms(xs: list[float]) -> str:
    return f"{statistics.fmean(xs):.3f} +- {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--train-tasks", type=int, default=256)
    ap.add_argument("--heldout", type=int, default=96)
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "foresight.json")
    args = ap.parse_args()
    from teamrl.atomic import atomic_write_text

    rows = []
    for run_dir in args.run_dirs:
        r = measure(run_dir, args.train_tasks, args.heldout, args.tries, args.threshold)
        rows.append(r)
        pe, off, on = r["prediction"]["examples_pass"], r["plain"], r["imagine"]
        print(
            f"{run_dir.name}: examples probe accuracy {pe['accuracy']:.3f} (base rate "
            f"{pe['base_rate_accuracy']:.3f}, AUC {pe['auc']:.3f}); success {off['success']:.3f} -> "
            f"{on['success']:.3f}; tokens per solved {off['tokens_per_solved']:.0f} -> "
            f"{on['tokens_per_solved']:.0f} ({r['wall_s']:.0f} s)",
            flush=True,
        )
        summary: dict[str, Any] = {}
        for k in OUTCOMES:
            summary[k] = {
                m: _ms([x["prediction"][k][m] for x in rows])
                for m in ("accuracy", "base_rate_accuracy", "auc", "positive_rate")
            }
        for arm in ("plain", "imagine"):
            summary[arm] = {
                m: _ms([x[arm][m] for x in rows])
                for m in (
                    "success",
                    "tokens_per_solved",
                    "first_version_examples_pass",
                    "first_version_solves",
                )
            }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            args.json,
            json.dumps(
                {
                    "train_tasks": args.train_tasks,
                    "heldout_tasks": args.heldout,
                    "tries": args.tries,
                    "threshold": args.threshold,
                    "runs": rows,
                    "summary": summary,
                },
                indent=1,
            ),
        )
    print(json.dumps(summary, indent=1))
    plot(json.loads(args.json.read_text()), args.json.with_suffix(".png"))


if __name__ == "__main__":
    main()
