"""Turn-level groups (AT-GRPO) against per-task groups, at equal RL tokens, from the same base, over seeds.

For every seed: train the test-driven team (examples/test_driven.yaml, the main job: freeze-rotate over
coder, planner, tester, coder) with turn-level groups (``workflow.turn_group.size=K``: K candidates of
each trained turn from one history, ranked against each other, the best continuing), read how many tokens
its RL rollouts generated (the candidates included), then train the same config with per-task groups
(``workflow.turn_group.size=1``, GRPO over the G episodes of a task) from the same base and seed, with
``recipe.token_budget`` set to that number and every role's ``iterations_per_role`` multiplied by
``--scale``: by default, per role, the turn-level run's tokens over its tokens without the candidates
(``rollout/turn_group/candidate_tokens``) in that role's phases, so that each phase gets about the same
tokens in both arms. Every finished run is then evaluated greedily (benchmarks/greedy_eval.py on
``--greedy-n`` held-out tasks, with ``--per-role``; 0 skips it). Prints held-out success (sampled, and
greedy), and pass fraction, after SFT and after RL per seed with mean and sample standard deviation, and
writes ``<results-dir>/turn_groups.json``.

    .venv/bin/python benchmarks/turn_groups.py [--seeds 0 1 2] [--size 4] [--continues best] [--scale X]
        [--greedy-n 200] [--jobs 1] [--out-dir benchmarks/runs] [--results-dir benchmarks/results]
        [--set key=value ...]

``--set`` applies to both arms (their ``workflow.turn_group``, token budget and iterations are fixed).
Runs go to a fresh ``<out-dir>/turn_groups-<timestamp>-<pid>/`` (``turn_s<seed>``, ``task_s<seed>``, each
with a ``.log``). The per-task arm spends the budget in its own schedule order: with a budget reached
early, its last phases get fewer iterations than the turn-level arm's (each arm's tokens per phase are in
the JSON, ``phase_tokens``; the per-role scales in ``task_iterations_scale``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import learning_gain as lg  # noqa: E402  (job runner, run results, tables)
from teamrl.report.load import read_metrics  # noqa: E402

CONFIG = "examples/test_driven.yaml"
RUNS = (("turn", "turn"), ("task", "task"))  # (key, short name in the table headers)
COLUMNS = [
    (r, f, f"{short} {h}", ".3f")
    for r, short in RUNS
    for f, h in (("sft_solved", "SFT"), ("rl_solved", "RL"), ("gain_solved", "gain"))
] + [
    (r, f, f"{short} {h}", ".0f")
    for r, short in RUNS
    for f, h in (("rl_tokens", "tok"), ("rl_iterations", "it"))
]
GREEDY_COLUMNS = [
    (r, f"greedy_{f}", f"{short} {h}", ".3f")
    for r, short in RUNS
    for f, h in (("sft_solved", "SFT"), ("rl_solved", "RL"), ("gain_solved", "gain"))
]
OUTCOME_COLUMNS = [
    (r, f, f"{short} {h}", ".3f")
    for r, short in RUNS
    for f, h in (("sft_outcome", "SFT"), ("rl_outcome", "RL"), ("gain_outcome", "gain"))
]


def _turn_argv(run_dir: Path, seed: int, sets: list[str], size: int, continues: str) -> list[str]:
    fixed = [f"workflow.turn_group.size={size}", f"workflow.turn_group.continues={continues}"]
    return lg._train_argv(CONFIG, run_dir, seed, sets, lg.COMMON, fixed)


def role_scales(turn_dir: Path) -> dict[str, float]:
    """Per trained role of the turn-level run: its tokens over its tokens less the candidates', in that
    role's phases (phase names end in the role, ``round1/coder#2``)."""
    rows = read_metrics(turn_dir)
    sums: dict[str, list[float]] = {}
    for row in rows:
        if "rollout/tokens_per_episode" in row and "phase" in row:
            role = row["phase"].rsplit("/", 1)[-1].split("#")[0]
            total, candidates = (
                row["rollout/tokens_per_episode"],
                row.get("rollout/turn_group/candidate_tokens", 0.0),
            )
            acc = sums.setdefault(role, [0.0, 0.0])
            acc[0] += total
            acc[1] += total - candidates
    return {role: total / without for role, (total, without) in sums.items() if without > 0}


def scaled_iterations(sets: list[str], scale: float | dict[str, float]) -> list[str]:
    """``recipe.iterations_per_role.<role>`` overrides: the config's (with ``sets``) times ``scale`` (one
    number, or per role: a role it does not name keeps its iterations)."""
    from teamrl.config import load_config

    cfg = load_config(REPO / CONFIG, sets, check_options=False)
    per_role = cfg.recipe.iterations_per_role

    def times(role: str | None, n: int) -> int:
        factor = scale if isinstance(scale, float | int) else scale.get(role or "", 1.0)
        return max(1, round(n * factor))

    if isinstance(per_role, int):
        mean = scale if isinstance(scale, float | int) else sum(scale.values()) / max(len(scale), 1)
        return [f"recipe.iterations_per_role={max(1, round(per_role * mean))}"]
    return [f"recipe.iterations_per_role.{r}={times(r, n)}" for r, n in per_role.items()]


def _task_argv(run_dir: Path, seed: int, sets: list[str], turn_dir: Path, scale: float | None) -> list[str]:
    """Per-task groups until they generated as many RL tokens as the turn-level run in ``turn_dir``, with
    the iterations per role scaled (``scale``, or None: :func:`role_scales`)."""
    tokens = lg.rl_token_counts(turn_dir)[0]
    budget = [f"recipe.token_budget={tokens}"] if tokens else ["recipe.roles=[]"]
    scales = role_scales(turn_dir) if scale is None else scale
    fixed = ["workflow.turn_group.size=1", *scaled_iterations(sets, scales), *budget]
    return lg._train_argv(CONFIG, run_dir, seed, sets, lg.COMMON, fixed)


def plan_jobs(
    seeds: list[int],
    sets: list[str],
    batch_dir: Path,
    size: int,
    continues: str,
    scale: float | None,
    greedy_n: int = 0,
) -> list[lg.Job]:
    """The base build, every seed's turn-level run, then each seed's per-task run after it; with
    ``greedy_n``, a greedy evaluation of each run after it."""
    jobs = [lg.Job("build", partial(lg._build_argv, CONFIG, sets), batch_dir / "build.log")]
    for seed in seeds:
        turn = batch_dir / f"turn_s{seed}"
        argv = partial(_turn_argv, turn, seed, sets, size, continues)
        jobs.append(lg.Job(turn.name, argv, turn.with_suffix(".log"), ("build",), turn))
    for seed in seeds:
        turn, task = batch_dir / f"turn_s{seed}", batch_dir / f"task_s{seed}"
        argv = partial(_task_argv, task, seed, sets, turn, scale)
        jobs.append(lg.Job(task.name, argv, task.with_suffix(".log"), (turn.name,), task))
    if greedy_n > 0:
        for seed in seeds:
            for key, _ in RUNS:
                run = batch_dir / f"{key}_s{seed}"
                argv = partial(lg._greedy_argv, run, greedy_n, True)
                jobs.append(
                    lg.Job(f"greedy_{run.name}", argv, run.with_name(f"greedy_{run.name}.log"), (run.name,))
                )
    return jobs


def phase_tokens(run_dir: Path) -> dict[str, int]:
    """RL tokens generated in each phase of a run (phase name -> tokens), in schedule order."""
    rows = read_metrics(run_dir)
    out: dict[str, int] = {}
    before = 0
    for row in rows:
        if "perf/rl_tokens_total" in row:
            total = int(row["perf/rl_tokens_total"])
            out[row["phase"]] = out.get(row["phase"], 0) + total - before
            before = total
    return out


def collect(batch_dir: Path, seeds: list[int]) -> list[dict[str, Any]]:
    per_seed = []
    for seed in seeds:
        arms = {}
        for key, _ in RUNS:
            run = batch_dir / f"{key}_s{seed}"
            if not (run / "summary.json").exists():
                break
            arms[key] = {**lg.run_result(run), "phase_tokens": phase_tokens(run)}
        if len(arms) == len(RUNS):
            arms["task"]["budget_reached"] = arms["task"]["rl_tokens"] >= arms["turn"]["rl_tokens"]
            per_seed.append({"seed": seed, **arms})
    return per_seed


def has_greedy(per_seed: list[dict[str, Any]]) -> bool:
    return all("greedy_rl_solved" in s[r] for s in per_seed for r, _ in RUNS)


def aggregate(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    columns = COLUMNS + OUTCOME_COLUMNS + (GREEDY_COLUMNS if has_greedy(per_seed) else [])
    fields = dict.fromkeys((r, f) for r, f, _, _ in columns)
    out = {f"{r}.{f}": lg.mean_std([float(s[r][f]) for s in per_seed]) for r, f in fields}
    diffs = ["rl_solved", "gain_solved"] + (
        ["greedy_rl_solved", "greedy_gain_solved"] if has_greedy(per_seed) else []
    )
    for f in diffs:
        out[f"turn_minus_task.{f}"] = lg.mean_std([s["turn"][f] - s["task"][f] for s in per_seed])
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = lg.seeds_parser(__doc__.split("\n\n")[0], "config override for both arms")
    parser.add_argument("--size", type=int, default=4, help="K, the turn-level group size (default 4)")
    parser.add_argument("--continues", choices=["best", "random"], default="best")
    parser.add_argument(
        "--greedy-n", type=int, default=200, help="held-out tasks of each run's greedy evaluation (0: none)"
    )
    parser.add_argument(
        "--scale",
        type=float,
        help="per-task arm's iterations per role times this (default: measured per role)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.size < 2 or args.jobs < 1 or len(set(args.seeds)) != len(args.seeds):
        print("turn_groups: --size must be >= 2, --jobs >= 1 and --seeds distinct", file=sys.stderr)
        return 2
    scale = args.scale
    extra: dict[str, Any] = {}
    if args.collect is not None:
        batch_dir = args.collect.resolve()
    else:
        batch_dir = args.out_dir.resolve() / f"turn_groups-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        jobs = plan_jobs(args.seeds, args.set, batch_dir, args.size, args.continues, scale, args.greedy_n)
        print(f"{len(args.seeds)} seed(s), K = {args.size}, runs in {batch_dir}", flush=True)
        start, cpu0 = time.perf_counter(), lg.children_cpu_s()
        try:
            lg.run_jobs(jobs, args.jobs)
        except lg.RunFailed as exc:
            print(f"turn_groups: {exc}", file=sys.stderr)
            return 1
        extra = {
            "total_wall_min": (time.perf_counter() - start) / 60,
            "total_cpu_min": (lg.children_cpu_s() - cpu0) / 60,
            "runs_wall_min": {j.name: j.wall_s / 60 for j in jobs},
            "commands": {j.name: shlex.join(j.command) for j in jobs},
        }
    per_seed = collect(batch_dir, args.seeds)
    if not per_seed:
        print(f"turn_groups: {batch_dir} holds no finished pair of runs", file=sys.stderr)
        return 1
    agg = aggregate(per_seed)
    print()
    print(
        lg.format_table(
            "held-out success (turn: turn-level groups; task: per-task groups)", COLUMNS, per_seed, agg
        )
    )
    if has_greedy(per_seed):
        print()
        print(lg.format_table("held-out success, greedy", GREEDY_COLUMNS, per_seed, agg))
    print()
    print(lg.format_table("held-out pass fraction", OUTCOME_COLUMNS, per_seed, agg))
    d = agg["turn_minus_task.rl_solved"]
    print(f"\nturn - task, held-out success after RL: {lg._pm(d)}")
    if has_greedy(per_seed):
        greedy = lg._pm(agg["turn_minus_task.greedy_rl_solved"])
        print(f"turn - task, greedy held-out success after RL: {greedy}")
    result = {
        "config": CONFIG,
        "seeds": args.seeds,
        "sets": args.set,
        "size": args.size,
        "continues": args.continues,
        "task_iterations_scale": scale
        if scale is not None
        else {f"s{s['seed']}": role_scales(batch_dir / f"turn_s{s['seed']}") for s in per_seed},
        "batch_dir": str(batch_dir),
        **extra,
        "per_seed": per_seed,
        "aggregate": agg,
    }
    path = args.results_dir.resolve() / "turn_groups.json"
    lg._write_atomic(path, (json.dumps(result, indent=2) + "\n").encode())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
