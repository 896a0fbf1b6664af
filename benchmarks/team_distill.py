"""Distil a trained team's behaviour into a smaller base (issue 21, the LLM side of KD-MARL).

For every finished test-driven run given (the main job's runs, e.g. ``team_value.py``'s ``team_s<seed>``: the
teacher, on the embedded 0.9M base, SFT then RL):

1. the teacher plays ``--train-tasks`` training tasks x 2 episodes (sampled at its training temperature); the
   turns of the episodes it solved are its behaviour to distil, per role (rejection-sampled distillation);
2. a **smaller base** is built the way the embedded default is (same demonstrations, same pre-training;
   ``--hidden`` wide, ``--layers`` layers), and its roles' adapters get the main job's SFT on the scripted
   experts' demonstrations (``recipe.sft``): the student **without** a teacher (arm ``sft``);
3. from that SFT snapshot, every role's adapter is trained further, with the same SFT settings, on
   - the teacher's solved episodes (arm ``distilled``: sequence-level distillation, its sampled tokens),
   - the same turns with the teacher's next-token distributions as targets (arm ``distilled_kd``: token-level
     distillation, KL(teacher || student), ``HFPolicy.sft(..., teacher=...)``), or
   - as many more expert episodes (arm ``more_experts``: the control for "more data" against "the teacher's
     behaviour").

Teacher and student arms are evaluated on the same ``--heldout`` held-out tasks: 2 episodes each sampled at
the training temperature (seeded alike for all) and 1 greedy episode each (temperature 0). FLOPs per token:
``2 * in * out`` summed over the base's linear layers (the LM head included, the LoRA adapters merged or off),
the count a matrix product of one token's activations makes, as ``teamrl.marl.distill.mlp_flops`` counts.

    .venv/bin/python benchmarks/team_distill.py RUN_DIR [RUN_DIR ...] [--train-tasks 256] [--heldout 96]
        [--hidden 64] [--layers 2] [--work runs/team_distill] [--json benchmarks/results/team_distill.json]
        [--arms sft distilled distilled_kd more_experts] [--add-to EARLIER.json]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from teamrl.atomic import atomic_write_text  # noqa: E402

ARMS = ("sft", "distilled", "distilled_kd", "more_experts")


def flops_per_token(model: Any) -> int:
    """``2 * in * out`` over the model's linear layers, LoRA's own layers left out (see the module)."""
    from torch import nn

    return sum(
        2 * m.in_features * m.out_features
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and "lora_" not in name
    )


def solved_pairs(episodes: list[Any]) -> tuple[dict[str, list[tuple[str, str]]], int]:
    """Every turn of the solved episodes as (prompt, completion) per role, and how many episodes that is."""
    from teamrl.trainer.build import turn_pairs

    solved = [e for e in episodes if e.verifier.get("solved")]
    return turn_pairs(solved), len(solved)


def success(trainer: Any, tasks: list[Any]) -> dict[str, float]:
    """Held-out success: 2 sampled episodes per task (seeded alike for every arm), 1 greedy one."""
    for policy in trainer.policies.values():
        if hasattr(policy, "model"):
            policy.model.eval()
    sampled = trainer.rollout(tasks, 2, seed_key="distill-eval")
    seats = trainer.team.seats
    kept = dict(seats)
    for role, seat in kept.items():
        seats[role] = dataclasses.replace(seat, temperature=0.0)
    try:
        greedy = trainer.rollout(tasks, 1, seed_key="distill-greedy")
    finally:
        seats.update(kept)

    def rate(eps: list[Any]) -> float:
        return sum(bool(e.verifier.get("solved")) for e in eps) / len(eps)

    return {
        "sampled": rate(sampled),
        "greedy": rate(greedy),
        "tokens_per_episode": statistics.mean(e.num_generated_tokens for e in sampled),
    }


def measure(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from teamrl.trainer.trainer import Trainer, resume_config

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = resume_config(run_dir)
    cfg.run.progress = False
    teacher = Trainer(cfg, run_dir, resume=True, read_only=True)
    try:
        heldout = teacher.suite.fixed_set("heldout", args.heldout)
        collected = teacher.rollout(teacher.suite.fixed_set("train", args.train_tasks), 2, seed_key="distill")
        pairs, n_solved = solved_pairs(collected)
        base = next(p for p in teacher.policies.values() if hasattr(p, "base"))
        result: dict[str, Any] = {
            "run_dir": str(run_dir),
            "teacher": {
                **success(teacher, heldout),
                "flops_per_token": flops_per_token(base.base),
                "parameters": sum(p.numel() for n, p in base.base.named_parameters() if "lora_" not in n),
            },
            "teacher_episodes": {"played": len(collected), "solved": n_solved},
            "pairs": {role: len(p) for role, p in pairs.items()},
        }
        result.update(students(cfg, teacher, run_dir, pairs, n_solved, heldout, args))
    finally:
        teacher.close()
    result["wall_s"] = time.perf_counter() - t0
    return result


def students(
    cfg: Any,
    teacher: Any,
    run_dir: Path,
    pairs: dict[str, list[tuple[str, str]]],
    n_solved: int,
    heldout: list[Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The smaller base's arms (``args.arms``), each from the same SFT snapshot; the teacher's roles give
    ``distilled_kd`` its token distributions (KL on the same solved turns: the teacher's soft targets instead
    of its sampled tokens)."""
    from teamrl.policies.sft import SFTSettings
    from teamrl.trainer.build import demonstrations
    from teamrl.trainer.learner import ref_adapter
    from teamrl.trainer.trainer import Trainer

    small = copy.deepcopy(cfg)
    for policy in small.policies.values():
        if policy.kind == "embedded":
            policy.embedded.hidden_size = args.hidden
            policy.embedded.intermediate_size = round(args.hidden * 344 / 128)
            policy.embedded.num_layers = args.layers
    work = Path(args.work) / run_dir.name
    shutil.rmtree(work, ignore_errors=True)
    student = Trainer(small, work)
    out: dict[str, Any] = {}
    try:
        student.sft_roles()  # the main job's SFT on the experts' demonstrations; the snapshot in ref_adapter
        s = small.recipe.sft
        settings = SFTSettings(epochs=s.epochs, batch_size=s.batch_size, lr=s.lr, seed=small.run.seed)
        more = (
            demonstrations(small, n_solved, seed=small.run.seed + 7919) if "more_experts" in args.arms else {}
        )
        data = {"sft": {}, "distilled": pairs, "distilled_kd": pairs, "more_experts": more}
        roles = [r for r in small.role_order() if small.seat(r).adapter]
        some = student.policy_of(roles[0])
        out["student"] = {
            "flops_per_token": flops_per_token(some.base),
            "parameters": sum(p.numel() for n, p in some.base.named_parameters() if "lora_" not in n),
        }
        for arm in args.arms:
            for role in roles:
                policy = student.policy_of(role)
                # every arm starts from the SFT snapshot (the frozen reference adapter)
                policy.load_adapter_state_dict(role, policy.adapter_state_dict(ref_adapter(role)))
                if not data[arm].get(role):
                    continue
                source = None
                if arm == "distilled_kd":
                    seat = teacher.team.seats[role]
                    source = (teacher.policies[seat.policy], seat.adapter)
                policy.sft(role, data[arm][role], settings, progress=False, teacher=source)
            out[arm] = success(student, heldout)
            print(f"{run_dir.name} {arm}: {out[arm]}", flush=True)
    finally:
        student.close()
    return out


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from teamrl.marl.run import save_figure

    runs = data["runs"]
    present = [a for a in ARMS if all(a in r for r in runs)]
    arms = [("teacher", "teacher (0.9M, RL)"), *[(a, f"student: {a.replace('_', ' ')}") for a in present]]
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.8), sharey=True)
    for ax, mode in zip(axes, ("greedy", "sampled"), strict=True):
        for i, (arm, _label) in enumerate(arms):
            values = [r[arm][mode] for r in runs]
            m = statistics.mean(values)
            s = statistics.stdev(values) if len(values) > 1 else 0.0
            ax.bar(i, m, yerr=s, color=f"C{i}", alpha=0.8, capsize=4)
            ax.scatter([i] * len(values), values, color="k", s=12, zorder=3)
        ax.set_xticks(range(len(arms)), [label for _, label in arms], rotation=15, fontsize=8)
        ax.set_title(f"held-out success, {mode}")
    axes[0].set_ylabel(f"success ({len(runs)} seeds, dots: seeds)")
    ratio = data["summary"]["flops_ratio"]
    fig.suptitle(f"a trained team distilled into a base with {ratio:.1f}x fewer FLOPs per token", fontsize=10)
    save_figure(fig, path)  # laid out, written beside path and renamed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--train-tasks", type=int, default=256)
    parser.add_argument("--heldout", type=int, default=96)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--work", default="runs/team_distill", help="the students' run directories")
    parser.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "team_distill.json")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="the students to train")
    parser.add_argument(
        "--add-to",
        type=Path,
        metavar="JSON",
        help="add this run's student arms to an earlier record of the same runs (the other arms and the "
        "teacher's figures are kept from it) and write the joined record to --json",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    runs = [measure(r, args) for r in args.runs]
    measured = time.strftime("%Y-%m-%d")
    if args.add_to is not None:
        earlier = {r["run_dir"]: r for r in json.loads(args.add_to.read_text())["runs"]}
        missing = [r["run_dir"] for r in runs if r["run_dir"] not in earlier]
        if missing:
            raise SystemExit(f"--add-to: {args.add_to} has no record of {missing}")
        runs = [
            {
                **earlier[r["run_dir"]],
                **{a: r[a] for a in args.arms},
                "teacher_remeasured": r["teacher"],  # the teacher's figures stay the earlier record's
                "replaced": {a: earlier[r["run_dir"]][a] for a in args.arms if a in earlier[r["run_dir"]]},
            }
            for r in runs
        ]
        measured += f" (arms {', '.join(args.arms)}; the others from {args.add_to.name})"
    summary: dict[str, Any] = {
        "flops_ratio": runs[0]["teacher"]["flops_per_token"] / runs[0]["student"]["flops_per_token"]
    }
    for arm in ("teacher", *ARMS):
        if not all(arm in r for r in runs):
            continue
        for mode in ("greedy", "sampled"):
            values = [r[arm][mode] for r in runs]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            summary[f"{arm}/{mode}"] = [statistics.mean(values), sd]
            kept = [r[arm][mode] / r["teacher"][mode] for r in runs if r["teacher"][mode] > 0]
            if arm != "teacher" and kept:
                summary[f"{arm}_kept/{mode}"] = [
                    statistics.mean(kept),
                    statistics.stdev(kept) if len(kept) > 1 else 0.0,
                ]
    data = {
        "measured": measured,
        "machine": "2-core CPU, one torch thread",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "runs"},
        "wall_s": time.perf_counter() - start,
        "summary": summary,
        "runs": runs,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(data, indent=1))
    plot(data, args.json.with_suffix(".png"))
    for key, value in summary.items():
        print(key, value)


if __name__ == "__main__":
    main()
