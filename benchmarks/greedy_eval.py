"""Held-out success of finished runs, after SFT and after RL, with greedy decoding: no sampling noise.

The trainer's evaluations sample at the training temperature (0.7), so two evaluations of the same
policy differ by a few points; an SFT-vs-RL difference of that size cannot be read. This script
re-evaluates a run's two policies on the same held-out tasks with temperature 0 (every role picks
its most likely token), one episode per task: the RL policy is the run's final adapters, the SFT
policy is the frozen snapshot every trained role keeps as its KL reference (``ref_<role>``).
Differences are paired per task: it reports how many tasks only one of the two solves.

With ``--per-role`` it also measures what each trained role's RL turns change: the RL team plays again
with that one role back on its SFT snapshot (the others keep their RL adapters), and the tasks whose
outcome (hidden-test pass fraction) or success differ from the RL team's are counted (greedy decoding
makes every difference the role's doing, not sampling noise).

For a programming workflow it also reports the share of tasks whose first code version is already right
(the rest of the solved share is what the revisions add). With ``--expert ROLE`` the workflow's scripted
expert (the author of the demonstrations) speaks for ROLE in both teams: what the other roles, after SFT
and after RL, make of a perfect teammate (the Planner's headroom, say).

With ``--transfer K`` it measures instead where RL's gain goes: the SFT and RL policies play three task sets,
greedily (one episode each) and sampled (K episodes each at the roles' temperatures), and it reports success
and pass@K on each: the training tasks the run's RL iterations played (drawn again from their seeds), as many
training tasks it never played, and the held-out tasks. A gain on the first set alone is learned per task.

    .venv/bin/python benchmarks/greedy_eval.py RUN_DIR [RUN_DIR ...] [--n 300] [--per-role] [--json out.json]
    .venv/bin/python benchmarks/greedy_eval.py RUN_DIR --n 200 --expert planner
    .venv/bin/python benchmarks/greedy_eval.py RUN_DIR --n 200 --transfer 8 --json transfer.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def greedy_eval(
    run_dir: Path, n_tasks: int, per_role: bool = False, transfer: int = 0, expert: str | None = None
) -> dict[str, Any]:
    import torch

    from teamrl.trainer.trainer import Trainer, resume_config

    torch.set_num_threads(1)
    cfg = resume_config(run_dir)
    cfg.tasks.heldout_size = n_tasks
    cfg.run.eval_samples = 1
    cfg.run.progress = False
    trainer = Trainer(cfg, run_dir, resume=True, read_only=True)
    try:
        if transfer:
            return _transfer(trainer, run_dir, n_tasks, transfer)
        return _greedy(trainer, run_dir, n_tasks, per_role, expert)
    finally:
        trainer.close()


# an episode as (solved, outcome, first code version passed: None where it has no code versions)
Played = tuple[bool, float, bool | None]


def _play(trainer: Any, tasks: list[Any], episodes_per_task: int) -> list[list[Played]]:
    """Each task's episodes as (solved, outcome, first version right), in the tasks' order, played by the
    team as seated. The first version's figure comes from the programming workflows' per-version hidden
    pass fractions (``verifier["code_pass"]``); None where an episode has none."""
    for policy in trainer.policies.values():
        if hasattr(policy, "model"):
            policy.model.eval()
    by_task: dict[str, list[Played]] = {}
    for e in trainer.rollout(tasks, episodes_per_task):
        versions = e.verifier.get("code_pass")
        first = bool(versions[0] == 1.0) if isinstance(versions, list) and versions else None
        by_task.setdefault(e.task_id, []).append((bool(e.verifier.get("solved")), float(e.outcome), first))
    return [by_task[t.task_id] for t in tasks]


def _first_version(played: list[Played]) -> float | None:
    """The share of episodes whose first code version passes every hidden test (None: no code versions)."""
    firsts = [f for _, _, f in played if f is not None]
    return sum(firsts) / len(played) if len(firsts) == len(played) and played else None


def _trained_roles(cfg: Any) -> list[str]:
    """The roles with an adapter of their own: those RL trained, each with its SFT snapshot kept."""
    return [r for r in cfg.workflow.order if cfg.workflow.roles[r].adapter]


def _greedy(
    trainer: Any, run_dir: Path, n_tasks: int, per_role: bool = False, expert: str | None = None
) -> dict[str, Any]:
    import random

    from teamrl.trainer.build import workflow_experts
    from teamrl.trainer.learner import ref_adapter

    cfg = trainer.cfg
    seats = trainer.team.seats  # Seat is frozen: replace the seats
    for role, seat in list(seats.items()):
        seats[role] = dataclasses.replace(seat, temperature=0.0)

    def experts() -> dict[str, Any]:
        """The workflow's scripted experts, drawing afresh (the same draws for each team)."""
        return workflow_experts(trainer.workflow, random.Random(0))

    if expert is not None and expert not in experts():
        raise SystemExit(f"--expert {expert}: the workflow's experts are {sorted(experts())}")
    tasks = trainer.suite.fixed_set("heldout", n_tasks)

    def play() -> list[Played]:
        """(solved, outcome, first version right) of each task's greedy episode."""
        if expert is not None:  # the scripted expert speaks for this role
            seats[expert] = experts()[expert]
        return [episodes[0] for episodes in _play(trainer, tasks, 1)]

    rl_played = play()
    after_rl = [s for s, _, _ in rl_played]
    trained = [r for r in _trained_roles(cfg) if r != expert]
    swaps: dict[str, Any] = {}
    if per_role:
        for role in trained:  # this role alone back on its SFT snapshot
            own = seats[role]
            seats[role] = dataclasses.replace(own, adapter=ref_adapter(role))
            swapped = play()
            seats[role] = own
            swaps[role] = {
                "outcome_changed": sum(a[1] != b[1] for a, b in zip(rl_played, swapped, strict=True)),
                "solved_only_rl": sum(a[0] and not b[0] for a, b in zip(rl_played, swapped, strict=True)),
                "solved_only_sft_turns": sum(
                    b[0] and not a[0] for a, b in zip(rl_played, swapped, strict=True)
                ),
            }
    for role in trained:  # the SFT policy: each trained role's frozen reference snapshot
        seats[role] = dataclasses.replace(seats[role], adapter=ref_adapter(role))
    sft_played = play()
    after_sft = [s for s, _, _ in sft_played]
    only_rl = sum(r and not s for r, s in zip(after_rl, after_sft, strict=True))
    only_sft = sum(s and not r for r, s in zip(after_rl, after_sft, strict=True))
    return {
        "run_dir": str(run_dir),
        "tasks": len(tasks),
        **({"expert": expert} if expert else {}),
        "sft_solved": sum(after_sft) / len(tasks),
        "rl_solved": sum(after_rl) / len(tasks),
        "gain": (sum(after_rl) - sum(after_sft)) / len(tasks),
        "only_rl": only_rl,
        "only_sft": only_sft,
        # the share of tasks whose first code version is already right (programming workflows): what the
        # revisions add is the rest of the solved share
        "sft_first_version": _first_version(sft_played),
        "rl_first_version": _first_version(rl_played),
        **({"per_role": swaps} if per_role else {}),
    }


def rl_played_tasks(trainer: Any, run_dir: Path) -> list[Any]:
    """The distinct training tasks of the run's RL iterations, in order: iteration ``s`` (logged as step
    ``s + 1`` in ``metrics.jsonl``) drew its tasks from its seed."""
    from teamrl.report.load import read_metrics
    from teamrl.trainer.overlap import iteration_tasks

    steps = sorted({int(row["step"]) - 1 for row in read_metrics(run_dir) if "phase" in row})
    tasks: dict[str, Any] = {}
    for step in steps:
        for task in iteration_tasks(trainer.cfg, trainer.suite, step):
            tasks.setdefault(task.task_id, task)
    return list(tasks.values())


def _transfer(trainer: Any, run_dir: Path, n_tasks: int, samples: int) -> dict[str, Any]:
    import random

    from teamrl.trainer.learner import ref_adapter

    played = rl_played_tasks(trainer, run_dir)
    if not played:
        raise SystemExit(f"{run_dir} logged no RL iteration: nothing to compare")
    seen = {t.task_id for t in played}
    draw = trainer.suite.sample("train", n_tasks + len(played), random.Random("teamrl-transfer"))
    sets = {
        "played_in_rl": played,
        "train_not_played": [t for t in draw if t.task_id not in seen][:n_tasks],
        "heldout": trainer.suite.fixed_set("heldout", n_tasks),
    }
    seats = trainer.team.seats
    rl_seats = dict(seats)
    trained = _trained_roles(trainer.cfg)
    result: dict[str, Any] = {"run_dir": str(run_dir), "samples": samples}
    for name, tasks in sets.items():
        row: dict[str, Any] = {"tasks": len(tasks)}
        for label in ("sft", "rl"):
            for greedy in (True, False):
                for role in trained:
                    seat = rl_seats[role]
                    if label == "sft":
                        seat = dataclasses.replace(seat, adapter=ref_adapter(role))
                    seats[role] = dataclasses.replace(seat, temperature=0.0) if greedy else seat
                solved = [[s for s, _, _ in eps] for eps in _play(trainer, tasks, 1 if greedy else samples)]
                if greedy:
                    row[f"{label}_greedy"] = sum(s[0] for s in solved) / len(tasks)
                else:
                    row[f"{label}_sampled"] = sum(sum(s) / len(s) for s in solved) / len(tasks)
                    row[f"{label}_pass_at_k"] = sum(any(s) for s in solved) / len(tasks)
        result[name] = row
    for role in trained:
        seats[role] = rl_seats[role]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--n", type=int, default=300, help="held-out tasks (one greedy episode each)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--per-role",
        action="store_true",
        help="also count, per trained role, tasks whose outcome changes with that role on its SFT snapshot",
    )
    parser.add_argument(
        "--expert",
        metavar="ROLE",
        help="seat the workflow's scripted expert (the demonstrations' author) in ROLE in both teams: what "
        "the other roles make of a perfect teammate",
    )
    parser.add_argument(
        "--transfer",
        type=int,
        default=0,
        metavar="K",
        help="instead: success greedy and over K samples on the tasks RL played, unplayed training tasks "
        "and held-out tasks, after SFT and after RL",
    )
    args = parser.parse_args()
    rows = []
    for run_dir in args.run_dirs:
        r = greedy_eval(run_dir, args.n, args.per_role, args.transfer, args.expert)
        rows.append(r)
        if args.transfer:
            for name in ("played_in_rl", "train_not_played", "heldout"):
                c = r[name]
                print(
                    f"{run_dir.name:20} {name:17} ({c['tasks']:3} tasks) greedy SFT {c['sft_greedy']:.3f} -> "
                    f"RL {c['rl_greedy']:.3f}  sampled {c['sft_sampled']:.3f} -> {c['rl_sampled']:.3f}  "
                    f"pass@{args.transfer} {c['sft_pass_at_k']:.3f} -> {c['rl_pass_at_k']:.3f}",
                    flush=True,
                )
            _write(args.json, args.n, rows)
            continue
        print(
            f"{run_dir.name:20} SFT {r['sft_solved']:.3f}  RL {r['rl_solved']:.3f}  gain {r['gain']:+.3f}"
            f"  (tasks solved only after RL {r['only_rl']}, only after SFT {r['only_sft']})",
            flush=True,
        )
        if r["sft_first_version"] is not None:
            print(
                f"  first code version right: SFT {r['sft_first_version']:.3f}"
                f"  RL {r['rl_first_version']:.3f}",
                flush=True,
            )
        for role, c in r.get("per_role", {}).items():
            print(
                f"  {role:12} RL turns change {c['outcome_changed']} outcomes: solved only with them "
                f"{c['solved_only_rl']}, only with the SFT snapshot's {c['solved_only_sft_turns']}",
                flush=True,
            )
        _write(args.json, args.n, rows)


def _write(path: Path | None, n_tasks: int, rows: list[dict[str, Any]]) -> None:
    if path is not None:
        from teamrl.atomic import atomic_write_text

        atomic_write_text(path, json.dumps({"n_tasks": n_tasks, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
