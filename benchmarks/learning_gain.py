"""Learning gain of the main job over seeds, against the Coder alone at the same RL token count.

For every seed: train the main job (examples/pipeline_freeze_rotate.yaml: four roles, freeze-rotate),
read how many tokens its RL rollouts generated, then train the single-agent baseline
(examples/single_coder.yaml) from the same base model, with the same seed and
``recipe.token_budget`` set to that number, so both spend the same generation compute on RL.
Prints held-out success (and pass fraction) after SFT
and after RL per seed, with mean and sample standard deviation, sampled (the runs' own evaluations, at
the training temperature) and greedy (``--greedy-n`` held-out tasks at temperature 0, by
benchmarks/greedy_eval.py on each finished run; 0 skips it), and writes
``<results-dir>/learning_gain.json`` and ``<results-dir>/learning_gain.png``.

    .venv/bin/python benchmarks/learning_gain.py [--seeds 0 1 2] [--jobs 2] [--out-dir benchmarks/runs]
        [--results-dir benchmarks/results] [--set key=value ...]

``--set`` applies to team and baseline runs alike (e.g. a smaller model for a smoke run). Every
invocation puts its runs in a fresh ``<out-dir>/<timestamp>/`` (run dirs ``team_s<seed>`` and
``single_coder_s<seed>``, each with its output in a ``.log`` next to it), so re-running never collides
with earlier runs and keeps them for inspection. Before any training the team's embedded base model is
built once into the shared cache; every run after that (the baselines load it as an ``hf`` checkpoint)
only reads it. Each run uses one torch
thread; ``--jobs`` runs go at once, and a seed's baseline starts only after its team run finished.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
TEAM_CONFIG = "examples/pipeline_freeze_rotate.yaml"
SINGLE_CONFIG = "examples/single_coder.yaml"
COMMON = ["run.threads=1", "run.progress=false"]  # one torch thread per run; logs without progress bars
# The baseline runs until the token budget stops it; this only bounds a runaway run.
BASELINE_MAX_ITERATIONS = 1000


class RunFailed(RuntimeError):
    """A subprocess exited with an error; the message names the run and its log."""


@dataclass
class Job:
    """One subprocess. ``argv`` is called at start time: a baseline's budget is known only then."""

    name: str
    argv: Callable[[], list[str]]
    log: Path
    deps: tuple[str, ...] = ()
    run_dir: Path | None = None  # a training run (its held-out results go into the progress line)
    command: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def run_jobs(jobs: list[Job], parallel: int) -> None:
    """Run ``jobs`` as subprocesses, at most ``parallel`` at once, each after its ``deps`` finished;
    among ready jobs the earlier in the list starts first. If one fails, the others are killed and
    :class:`RunFailed` is raised."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # logs fill as the run goes, for `tail -f`
    env.setdefault("OMP_NUM_THREADS", "1")
    pending, done = list(jobs), set()
    running: dict[subprocess.Popen[bytes], tuple[Job, float, IO[bytes]]] = {}
    try:
        while pending or running:
            for job in [j for j in pending if done.issuperset(j.deps)][: parallel - len(running)]:
                pending.remove(job)
                job.command = job.argv()
                job.log.parent.mkdir(parents=True, exist_ok=True)
                log = job.log.open("wb")
                proc = subprocess.Popen(job.command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
                running[proc] = (job, time.perf_counter(), log)
                print(f"started  {job.name} (log: {job.log})", flush=True)
            time.sleep(0.5)
            for proc in [p for p in running if p.poll() is not None]:
                job, start, log = running.pop(proc)
                log.close()
                job.wall_s = time.perf_counter() - start
                if proc.returncode != 0:
                    tail = "".join(job.log.read_text(errors="replace").splitlines(keepends=True)[-15:])
                    raise RunFailed(
                        f"{job.name} failed (exit code {proc.returncode}); log: {job.log}\n"
                        f"last lines of the log:\n{tail}"
                    )
                done.add(job.name)
                print(f"finished {job.name} in {job.wall_s / 60:.1f} min{_held_out_note(job)}", flush=True)
    finally:
        for proc, (_, _, log) in running.items():
            proc.kill()
            proc.wait()
            log.close()


def children_cpu_s() -> float:
    """CPU time (user + sys) of this process's finished children so far: around :func:`run_jobs`, the
    runs' CPU time."""
    t = os.times()
    return t.children_user + t.children_system


def _held_out_note(job: Job) -> str:
    if job.run_dir is None:
        return ""
    r = run_result(job.run_dir)
    return f": held-out success {r['sft_solved']:.3f} after SFT -> {r['rl_solved']:.3f} after RL"


def rl_token_counts(run_dir: Path) -> tuple[int, int, int]:
    """(tokens generated by all RL rollouts, RL iterations, tokens of the last iteration)."""
    from teamrl.report.load import read_metrics

    rows = read_metrics(run_dir)
    totals = [int(r["perf/rl_tokens_total"]) for r in rows if "perf/rl_tokens_total" in r]
    if not totals:
        return 0, 0, 0
    return totals[-1], len(totals), totals[-1] - (totals[-2] if len(totals) > 1 else 0)


def run_result(run_dir: Path) -> dict[str, Any]:
    evals = {e["label"]: e for e in json.loads((run_dir / "summary.json").read_text())["evals"]}
    sft = evals["after_sft"]
    rl = evals.get("after_rl", sft)  # a run without RL phases (zero budget): RL changed nothing
    tokens, iterations, last = rl_token_counts(run_dir)
    greedy: dict[str, Any] = {}
    if (run_dir / GREEDY_FILE).exists():
        (g,) = json.loads((run_dir / GREEDY_FILE).read_text())["runs"]
        greedy = {
            "greedy_sft_solved": g["sft_solved"],
            "greedy_rl_solved": g["rl_solved"],
            "greedy_gain_solved": g["gain"],
            "greedy_tasks": g["tasks"],
            "greedy_only_rl": g["only_rl"],
            "greedy_only_sft": g["only_sft"],
        }
        if "per_role" in g:  # greedy_eval.py --per-role: what each role's RL turns changed
            greedy["per_role"] = g["per_role"]
    return {
        **greedy,
        "run_dir": str(run_dir),
        "sft_solved": sft["eval/solved"],
        "rl_solved": rl["eval/solved"],
        "gain_solved": rl["eval/solved"] - sft["eval/solved"],
        "sft_outcome": sft["eval/outcome"],
        "rl_outcome": rl["eval/outcome"],
        "gain_outcome": rl["eval/outcome"] - sft["eval/outcome"],
        "rl_tokens": tokens,
        "rl_iterations": iterations,
        "last_iteration_tokens": last,
    }


def _set_args(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def _build_argv(config: str, sets: list[str]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--build-base", config, *_set_args(sets)]


def _train_argv(
    config: str, run_dir: Path, seed: int, sets: list[str], defaults: list[str], fixed: list[str]
) -> list[str]:
    """``teamrl train`` of ``config`` into ``run_dir``. The user's ``sets`` may change ``defaults``,
    not ``fixed`` (what the comparison relies on) nor the seed and run directory."""
    from teamrl.config import applicable_overrides

    run = [f"run.seed={seed}", f"run.out_dir={run_dir.parent}", f"run.name={run_dir.name}"]
    # one list of --set for the team and its control: each run takes what its recipe reads
    overrides = applicable_overrides(REPO / config, [*defaults, *sets, *run, *fixed])
    return [sys.executable, "-m", "teamrl.cli", "train", config, *_set_args(overrides)]


def _team_argv(run_dir: Path, seed: int, sets: list[str]) -> list[str]:
    return _train_argv(TEAM_CONFIG, run_dir, seed, sets, COMMON, [])


def _team_base_path(sets: list[str], team_config: str = TEAM_CONFIG) -> str:
    """Where the team's embedded base lives: the baseline starts from the very same weights."""
    return _base_path(tuple(sets), team_config)


@functools.cache
def _base_path(sets: tuple[str, ...], team_config: str) -> str:
    """:func:`_team_base_path`, computed once per batch: the path is a hash of the base's demonstrations,
    which take seconds to play, and every control of every seed asks for it."""
    from teamrl.config import load_config
    from teamrl.trainer.build import embedded_checkpoint_path

    cfg = load_config(REPO / team_config, list(sets), check_options=False)
    return str(embedded_checkpoint_path(cfg, cfg.policies["default"]))


def _baseline_argv(
    run_dir: Path,
    seed: int,
    sets: list[str],
    team_dir: Path,
    config: str = SINGLE_CONFIG,
    team_config: str = TEAM_CONFIG,
    fixed: tuple[str, ...] = (),
) -> list[str]:
    """The single agent (``config``, by default the Coder alone, plus the ``fixed`` overrides) on the
    base model of ``team_config``, doing RL until it generated as many tokens as the team run in
    ``team_dir``."""
    tokens = rl_token_counts(team_dir)[0]
    # No RL tokens in the team run: the equal-compute baseline does no RL either (without a budget it
    # would instead run BASELINE_MAX_ITERATIONS iterations).
    budget = [f"recipe.token_budget={tokens}"] if tokens else ["recipe.roles=[]"]
    defaults = [*COMMON, f"recipe.iterations={BASELINE_MAX_ITERATIONS}"]
    same_base = ["policies.default.kind=hf", f"policies.default.path={_team_base_path(sets, team_config)}"]
    return _train_argv(config, run_dir, seed, sets, defaults, [*fixed, *budget, *same_base])


def _greedy_argv(run_dir: Path, n_tasks: int, per_role: bool = False) -> list[str]:
    """benchmarks/greedy_eval.py on ``run_dir`` (``--per-role``: also what each role's RL turns change)."""
    script = Path(__file__).resolve().with_name("greedy_eval.py")
    argv = [
        sys.executable,
        str(script),
        str(run_dir),
        "--n",
        str(n_tasks),
        "--json",
        str(run_dir / GREEDY_FILE),
    ]
    return [*argv, "--per-role"] if per_role else argv


GREEDY_FILE = "greedy_eval.json"


def plan_jobs(seeds: list[int], sets: list[str], batch_dir: Path, greedy_n: int = 0) -> list[Job]:
    """Base builds first, then every seed's team run, then the baselines (each after its team run), then
    with ``greedy_n`` a greedy evaluation of each run (after it)."""
    jobs = [Job("build_team", partial(_build_argv, TEAM_CONFIG, sets), batch_dir / "build_team.log")]
    for seed in seeds:
        team = batch_dir / f"team_s{seed}"
        jobs.append(
            Job(
                team.name,
                partial(_team_argv, team, seed, sets),
                team.with_suffix(".log"),
                ("build_team",),
                team,
            )
        )
    for seed in seeds:
        team, single = batch_dir / f"team_s{seed}", batch_dir / f"single_coder_s{seed}"
        deps = (team.name,)
        argv = partial(_baseline_argv, single, seed, sets, team)
        jobs.append(Job(single.name, argv, single.with_suffix(".log"), deps, single))
    if greedy_n > 0:
        for seed in seeds:
            for run in (batch_dir / f"team_s{seed}", batch_dir / f"single_coder_s{seed}"):
                log = run.with_name(f"greedy_{run.name}.log")
                jobs.append(Job(f"greedy_{run.name}", partial(_greedy_argv, run, greedy_n), log, (run.name,)))
    return jobs


def build_base(config: str, sets: list[str]) -> None:
    """Build (or find in the cache) every embedded base model ``config`` uses; train nothing."""
    import torch

    from teamrl.config import load_config
    from teamrl.trainer.build import embedded_checkpoint

    torch.set_num_threads(1)
    cfg = load_config(REPO / config, sets, check_options=False)
    for pcfg in cfg.policies.values():
        if pcfg.kind == "embedded":
            print(f"embedded base: {embedded_checkpoint(cfg, pcfg, progress=False)}")


# -- reporting ------------------------------------------------------------------------------------------
RUNS = (("team", "team"), ("single_coder", "coder"))  # (key, short name in table headers)
SUCCESS_COLUMNS = [
    (r, f, f"{short} {h}", ".3f")
    for r, short in RUNS
    for f, h in (("sft_solved", "SFT"), ("rl_solved", "RL"), ("gain_solved", "gain"))
] + [
    ("team", "rl_tokens", "team tok", ".0f"),
    ("single_coder", "rl_tokens", "coder tok", ".0f"),
    ("team", "wall_min", "team min", ".1f"),
]
OUTCOME_COLUMNS = [
    (r, f, f"{short} {h}", ".3f")
    for r, short in RUNS
    for f, h in (("sft_outcome", "SFT"), ("rl_outcome", "RL"), ("gain_outcome", "gain"))
]
GREEDY_COLUMNS = [
    (r, f, f"{short} {h}", ".3f")
    for r, short in RUNS
    for f, h in (("greedy_sft_solved", "SFT"), ("greedy_rl_solved", "RL"), ("greedy_gain_solved", "gain"))
]


def mean_std(values: list[float]) -> dict[str, float | None]:
    """Mean and sample standard deviation (n-1; None for a single value)."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None}


def has_greedy(per_seed: list[dict[str, Any]]) -> bool:
    return all("greedy_rl_solved" in s[r] for s in per_seed for r, _ in RUNS)


def aggregate(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    columns = SUCCESS_COLUMNS + OUTCOME_COLUMNS + (GREEDY_COLUMNS if has_greedy(per_seed) else [])
    fields = dict.fromkeys((r, f) for r, f, _, _ in columns)
    out = {f"{r}.{f}": mean_std([s[r][f] for s in per_seed]) for r, f in fields}
    out["team_minus_coder.rl_solved"] = mean_std(
        [s["team"]["rl_solved"] - s["single_coder"]["rl_solved"] for s in per_seed]
    )
    if has_greedy(per_seed):
        out["team_minus_coder.greedy_rl_solved"] = mean_std(
            [s["team"]["greedy_rl_solved"] - s["single_coder"]["greedy_rl_solved"] for s in per_seed]
        )
    return out


def format_table(
    title: str,
    columns: list[tuple[str, str, str, str]],
    per_seed: list[dict[str, Any]],
    agg: dict[str, dict[str, float | None]],
) -> str:
    width = max(10, *(len(h) + 2 for _, _, h, _ in columns))
    lines = [title, f"{'':8}" + "".join(f"{h:>{width}}" for _, _, h, _ in columns)]
    for s in per_seed:
        cells = "".join(f"{s[r][f]:>{width}{fmt}}" for r, f, _, fmt in columns)
        lines.append(f"{'seed ' + str(s['seed']):8}{cells}")
    for stat in ("mean", "std"):
        cells = [agg[f"{r}.{f}"][stat] for r, f, _, _ in columns]
        lines.append(
            f"{stat:8}"
            + "".join(
                f"{'n/a':>{width}}" if v is None else f"{v:>{width}{fmt}}"
                for v, (_, _, _, fmt) in zip(cells, columns, strict=True)
            )
        )
    return "\n".join(lines)


def verdicts(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for metric in ("solved", "outcome", *(("greedy_solved",) if has_greedy(per_seed) else ())):
        rl, sft, gain = (f"rl_{metric}", f"sft_{metric}", f"gain_{metric}")
        if metric == "greedy_solved":
            rl, sft, gain = "greedy_rl_solved", "greedy_sft_solved", "greedy_gain_solved"
        wins = sum(s["team"][rl] > s["team"][sft] for s in per_seed)
        out[metric] = {
            "seeds_improved": wins,
            "every_seed": wins == len(per_seed),
            "on_average": (agg[f"team.{gain}"]["mean"] or 0.0) > 0,
        }
    return out


def _pm(stat: dict[str, float | None]) -> str:
    std = "n/a" if stat["std"] is None else f"{stat['std']:.3f}"
    return f"{stat['mean']:+.3f} (std {std})"


def format_verdicts(
    per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]], v: dict[str, Any]
) -> str:
    n = len(per_seed)
    yes = {True: "yes", False: "no"}
    lines = []
    names = [("solved", "success", "gain_solved"), ("outcome", "pass fraction", "gain_outcome")]
    if "greedy_solved" in v:
        names.append(("greedy_solved", "success, greedy", "greedy_gain_solved"))
    for metric, name, gain in names:
        m = v[metric]
        lines.append(
            f"team RL > SFT held-out {name}: on every seed {yes[m['every_seed']]} "
            f"({m['seeds_improved']}/{n}), on average {yes[m['on_average']]} "
            f"(gain {_pm(agg[f'team.{gain}'])})"
        )
    lines.append(f"team minus single coder, success after RL: {_pm(agg['team_minus_coder.rl_solved'])}")
    if "team_minus_coder.greedy_rl_solved" in agg:
        lines.append(f"  greedy: {_pm(agg['team_minus_coder.greedy_rl_solved'])}")
    budget_missed = [s["seed"] for s in per_seed if not s["single_coder"]["budget_reached"]]
    if budget_missed:
        lines.append(f"warning: seeds {budget_missed}: the baseline stopped before spending its token budget")
    return "\n".join(lines)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


SFT_RL = {"sft_solved": ("after SFT", "tab:blue"), "rl_solved": ("after RL", "tab:orange")}


def sft_rl_bars(
    ax: Any, groups: list[tuple[dict[str, Any], dict[str, list[float]]]], width: float = 0.36
) -> None:
    """Grouped bars of held-out success after SFT and after RL on ``ax``: for each group (stats, seeds),
    bars of ``stats[key]``'s mean +- std and a dot per value of ``seeds[key]``, for both keys of SFT_RL."""
    for g, (stats, seeds) in enumerate(groups):
        for b, (f, (label, color)) in enumerate(SFT_RL.items()):
            x = g + (b - 0.5) * width
            stat = stats[f]
            ax.bar(
                x,
                stat["mean"],
                width,
                yerr=stat["std"] or 0.0,
                capsize=4,
                color=color,
                alpha=0.8,
                ecolor="dimgray",
                label=label if g == 0 else None,
            )
            # spread the dots across the bar so that they do not hide behind the error bar
            n = len(seeds[f])
            dots_x = [x + width * 0.6 * ((i + 0.5) / n - 0.5) for i in range(n)] if n > 1 else [x]
            ax.scatter(
                dots_x, seeds[f], color="black", s=14, zorder=3, label="seeds" if g == b == 0 else None
            )


def plot(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]], path: Path) -> None:
    """Grouped bars of held-out success (SFT, RL) for team and single coder; dots are seeds."""
    labels = {"team": "team (planner, coder, reviewer, tester)", "single_coder": "coder alone"}
    panels(per_seed, agg, [r for r, _ in RUNS], labels, has_greedy(per_seed), path, "")


def panels(
    per_seed: list[dict[str, Any]],
    agg: dict[str, dict[str, float | None]],
    runs: list[str],
    labels: dict[str, str],
    greedy: bool,
    path: Path,
    fontsize: str | int,
) -> None:
    """A sampled panel (and a greedy one) of :func:`sft_rl_bars` over ``runs`` (keys of ``agg``
    ``<run>.[greedy_]sft_solved`` / ``rl_solved`` and of each seed), labelled by ``labels``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [("sampled (T = 0.7)", "")] + ([("greedy", "greedy_")] if greedy else [])
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False, sharey=True)
    for ax, (name, prefix) in zip(axes[0], names, strict=True):
        groups = [
            (
                {f: agg[f"{run}.{prefix}{f}"] for f in SFT_RL},
                {f: [s[run][prefix + f] for s in per_seed] for f in SFT_RL},
            )
            for run in runs
        ]
        sft_rl_bars(ax, groups)
        ax.set_xticks(range(len(runs)), [labels[r] for r in runs])
        size = {"fontsize": fontsize} if fontsize else {}  # "": matplotlib's default
        ax.set_title(f"{name}: mean ± std over {len(per_seed)} seed(s)", **size)
        ax.legend()
    axes[0][0].set_ylabel("held-out success (equal RL tokens)")
    save_figure(fig, path, dpi=120)


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    """Write a matplotlib figure as a PNG, atomically, and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    _write_atomic(path, buf.getvalue())


# -- shared by the benchmarks that run seeds of configs (debate_benchmark, self_play_benchmark) ---------
def seeds_parser(description: str, set_help: str) -> argparse.ArgumentParser:
    """Options ``--seeds``, ``--jobs`` (default 1), ``--out-dir``, ``--results-dir``, ``--set`` and
    ``--collect BATCH_DIR``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each uses one torch thread)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "runs")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    parser.add_argument(
        "--collect",
        type=Path,
        metavar="BATCH_DIR",
        help="train nothing: report the finished runs of an earlier invocation's batch directory",
    )
    return parser


def seeds_main(
    prog: str,
    doc: str,
    set_help: str,
    plan: Callable[[list[int], list[str], Path], list[Job]],
    collect: Callable[[Path], list[dict[str, Any]]],
    report: Callable[[list[dict[str, Any]], dict[str, Any], Path], None],
    argv: list[str] | None = None,
) -> int:
    """The command line of a benchmark script (:func:`seeds_parser`, described by ``doc``'s first
    paragraph). With ``--collect``: ``report(collect(BATCH_DIR), ...)``. Else: run
    ``plan(seeds, sets, batch_dir)``'s jobs in a fresh ``<out-dir>/<prog>-<timestamp>-<pid>/``, then
    ``report(collect(batch_dir), ...)`` with the total wall and CPU time and each run's command and
    wall time recorded."""
    args = seeds_parser(doc.split("\n\n")[0], set_help).parse_args(argv)
    extra: dict[str, Any] = {}
    if args.collect is not None:
        if not args.collect.is_dir():
            print(f"{prog}: {args.collect} is not a directory", file=sys.stderr)
            return 2
        batch_dir = args.collect.resolve()
    else:
        if args.jobs < 1 or len(set(args.seeds)) != len(args.seeds):
            print(f"{prog}: --jobs must be >= 1 and --seeds distinct", file=sys.stderr)
            return 2
        batch_dir = args.out_dir.resolve() / f"{prog}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        jobs = plan(args.seeds, args.set, batch_dir)
        print(f"{len(args.seeds)} seed(s), {args.jobs} job(s) at once, runs in {batch_dir}", flush=True)
        start, cpu0 = time.perf_counter(), children_cpu_s()
        try:
            run_jobs(jobs, args.jobs)
        except RunFailed as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 1
        extra = {
            "seeds": args.seeds,
            "sets": args.set,
            "total_wall_min": (time.perf_counter() - start) / 60,
            "total_cpu_min": (children_cpu_s() - cpu0) / 60,  # every run's user + sys, base build included
            "runs_wall_min": {j.name: j.wall_s / 60 for j in jobs},
            "commands": {j.name: shlex.join(j.command) for j in jobs},
        }
        print()
    runs = collect(batch_dir)
    if not runs:
        print(f"{prog}: {batch_dir} holds no finished run to report", file=sys.stderr)
        return 1
    report(runs, {"batch_dir": str(batch_dir), **extra}, args.results_dir.resolve())
    return 0


def write_results(results_dir: Path, stem: str, result: dict[str, Any], draw: Callable[[Path], None]) -> None:
    """``<results_dir>/<stem>.json`` (``result``) and ``<stem>.png`` (``draw(path)``), atomically."""
    _write_atomic(results_dir / f"{stem}.json", (json.dumps(result, indent=2) + "\n").encode())
    draw(results_dir / f"{stem}.png")
    print(f"\nwrote {results_dir / (stem + '.json')} and {results_dir / (stem + '.png')}")


# -- main -----------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (each uses one torch thread)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "runs")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for team and baseline runs alike",
    )
    parser.add_argument(
        "--greedy-n",
        type=int,
        default=300,
        help="held-out tasks of the greedy re-evaluation of every run (0: none)",
    )
    parser.add_argument(
        "--build-base",
        metavar="CONFIG",
        help="only build (or find in the cache) the embedded base of CONFIG, then exit",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.build_base:
        build_base(args.build_base, args.set)
        return 0
    if args.jobs < 1 or len(set(args.seeds)) != len(args.seeds):
        print("learning_gain: --jobs must be >= 1 and --seeds distinct", file=sys.stderr)
        return 2
    batch_dir = args.out_dir.resolve() / time.strftime("%Y%m%d-%H%M%S")
    if batch_dir.exists():  # two invocations within one second
        batch_dir = batch_dir.with_name(f"{batch_dir.name}-{os.getpid()}")
    jobs = plan_jobs(args.seeds, args.set, batch_dir, args.greedy_n)
    print(f"{len(args.seeds)} seed(s), {args.jobs} job(s) at once, runs in {batch_dir}", flush=True)
    start = time.perf_counter()
    try:
        run_jobs(jobs, args.jobs)
    except RunFailed as exc:
        print(f"learning_gain: {exc}", file=sys.stderr)
        return 1
    by_name = {j.name: j for j in jobs}
    per_seed = []
    for seed in args.seeds:
        team, single = by_name[f"team_s{seed}"], by_name[f"single_coder_s{seed}"]
        t = {
            **run_result(batch_dir / team.name),
            "wall_min": team.wall_s / 60,
            "command": shlex.join(team.command),
        }
        c = {
            **run_result(batch_dir / single.name),
            "wall_min": single.wall_s / 60,
            "command": shlex.join(single.command),
            "token_budget": t["rl_tokens"],
        }
        c["budget_reached"] = c["rl_tokens"] >= t["rl_tokens"]
        per_seed.append({"seed": seed, "team": t, "single_coder": c})
    agg = aggregate(per_seed)
    v = verdicts(per_seed, agg)
    print()
    print(
        format_table(
            "held-out success (fraction of tasks whose code passes every hidden test)",
            SUCCESS_COLUMNS,
            per_seed,
            agg,
        )
    )
    print()
    print(
        format_table(
            "held-out pass fraction (mean fraction of hidden tests passed)", OUTCOME_COLUMNS, per_seed, agg
        )
    )
    if has_greedy(per_seed):
        print()
        title = f"held-out success, greedy decoding ({args.greedy_n} tasks, one episode each)"
        print(format_table(title, GREEDY_COLUMNS, per_seed, agg))
    print()
    print(format_verdicts(per_seed, agg, v))
    result = {
        "seeds": args.seeds,
        "sets": args.set,
        "team_config": TEAM_CONFIG,
        "baseline_config": SINGLE_CONFIG,
        "batch_dir": str(batch_dir),
        "total_wall_min": (time.perf_counter() - start) / 60,
        "commands": [shlex.join(j.command) for j in jobs],
        "per_seed": per_seed,
        "aggregate": agg,
        "team_rl_beats_sft": v,
    }
    results_dir = args.results_dir.resolve()
    _write_atomic(results_dir / "learning_gain.json", (json.dumps(result, indent=2) + "\n").encode())
    plot(per_seed, agg, results_dir / "learning_gain.png")
    print(f"\nwrote {results_dir / 'learning_gain.json'} and {results_dir / 'learning_gain.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
