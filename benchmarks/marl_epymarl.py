"""teamrl side by side with EPyMARL on Level-Based Foraging, or the multi-robot warehouse (``--task rware``)
(issue 23): the return at equal environment steps, each library evaluated by its own test protocol with the
same settings (LBF: 100 episodes every 50,000 steps; actor-critic methods sample their actions, value methods
act greedily), and the training throughput per CPU-second, measured in one run.

EPyMARL is not a pip package: give its checkout (``--epymarl-dir``, github.com/uoe-agents/epymarl) and a
python with its requirements (``--epymarl-python``: sacred, pyyaml, gymnasium, lbforaging and a torch; this
repository's torch 2.13.0 does). EPyMARL trains with its own configs (``src/config/algs/<algo>.yaml``,
``src/config/envs/gymma.yaml``), teamrl with ``teamrl marl train``'s defaults (QMIX with rewards standardised,
as EPyMARL's ``qmix.yaml``; MAPPO's agents learning from the team's reward, EPyMARL's common reward); the
same task, the same episodes (50 steps on LBF, 500 on RWARE), the same number of environment steps
(EPyMARL's ``t_max`` is that plus one test interval, as its own 20.05M is, so that its last test falls at the
budget). The return is the episode's reward summed over the agents (EPyMARL's common reward, ``sum``).
EPyMARL imports SMAClite at start-up; where its python has none, an empty stand-in is put on its path
(SMAClite is not used here)::

    .venv/bin/python benchmarks/marl_epymarl.py --epymarl-dir /path/to/epymarl \\
        --epymarl-python /path/to/epymarl-venv/bin/python --algos mappo --seeds 0 1 2 --jobs 3
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Task:
    """A task both libraries run: its ids on each side and the test protocol used for both."""

    title: str
    teamrl_env: str  # teamrl's env name
    epymarl_key: str  # EPyMARL's env_args.key (gymma); also the folder of its sacred records
    time_limit: int  # steps per episode on both sides (the package's default; EPyMARL's env_args.time_limit)
    test_interval: int  # EPyMARL's test_interval; teamrl's --eval-every
    test_episodes: int  # EPyMARL's test_nepisode; teamrl's --eval-episodes
    level: float  # the summary's "steps to reach" level


TASKS = {
    # 8x8 grid, 2 agents, 3 food; EPyMARL's test protocol for gymma (100 episodes every 50,000 steps)
    "lbf": Task(
        "Level-Based Foraging Foraging-8x8-2p-3f-v3 (1: all food collected)",
        "lbf:Foraging-8x8-2p-3f-v3",
        "lbforaging:Foraging-8x8-2p-3f-v3",
        50,
        50_000,
        100,
        0.8,
    ),
    # the multi-robot warehouse, tiny, 2 robots (return: shelves delivered per episode); its episodes are 10x
    # LBF's, so fewer, sparser tests (20 episodes every 100,000 steps: 10% of the steps, as LBF's 100 x 50)
    "rware": Task(
        "Multi-robot warehouse rware-tiny-2ag-v2 (shelves delivered)",
        "rware:rware-tiny-2ag-v2",
        "rware:rware-tiny-2ag-v2",
        500,
        100_000,
        20,
        1.0,
    ),
}
ALGOS = {  # teamrl's algorithm -> (EPyMARL's config, teamrl's overrides, teamrl samples its evaluations)
    # team_reward: every agent learns from the team's summed reward, as EPyMARL's agents do (its default
    # common_reward with reward_scalarisation "sum"); teamrl's PPO learns from each agent's own by default
    "mappo": ("mappo", {"team_reward": True}, True),
    "qmix": ("qmix", {"standardise_rewards": True}, False),
}
OUT_NAMES = {"lbf": "marl_epymarl.json", "rware": "marl_epymarl_rware.json"}


def plot_title(t: Task) -> str:
    return f"{t.title}, {t.time_limit}-step episodes: each library's test return ({t.test_episodes} episodes)"


def record_task(record: dict[str, Any]) -> str:
    """A record's task (records written before RWARE was added name LBF's id there)."""
    return record["task"] if record["task"] in TASKS else "lbf"


STUB = '"""An empty stand-in: EPyMARL imports smaclite at start-up; SMAClite is not used here."""\n'


def epymarl_command(python: str, algo: str, seed: int, env_steps: int, task: str = "lbf") -> list[str]:
    """EPyMARL's command line for one training (run in its checkout)."""
    t = TASKS[task]
    return [
        python,
        "src/main.py",
        f"--config={ALGOS[algo][0]}",
        "--env-config=gymma",
        "with",
        f"env_args.key={t.epymarl_key}",
        f"env_args.time_limit={t.time_limit}",
        f"t_max={env_steps + t.test_interval}",
        f"test_interval={t.test_interval}",
        f"test_nepisode={t.test_episodes}",
        f"seed={seed}",
        "save_model=False",
        "use_tensorboard=False",
    ]


def teamrl_command(
    algo: str, seed: int, env_steps: int, run_dir: Path, sets: list[str] | None = None, task: str = "lbf"
) -> list[str]:
    return [
        sys.executable,
        __file__,
        "--worker",
        "--task",
        task,
        "--algo",
        algo,
        "--seed",
        str(seed),
        "--env-steps",
        str(env_steps),
        "--run-dir",
        str(run_dir),
        *(a for item in sets or [] for a in ("--teamrl-set", item)),
    ]


RUNNING: set[int] = set()  # process groups of the trainings under way (stopped with this script)
RUNNING_LOCK = threading.Lock()


def timed(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` in a process group of its own; its output, exit status, wall time and CPU time (user +
    system, of the process and of every process it waited for: EPyMARL's environment workers included)."""
    with tempfile.TemporaryFile("w+") as out:
        wall0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        with RUNNING_LOCK:
            RUNNING.add(proc.pid)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            with RUNNING_LOCK:
                RUNNING.discard(proc.pid)
        wall = time.perf_counter() - wall0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    return {"rc": proc.returncode, "out": text, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def sacred_value(v: Any) -> float:
    """A number from sacred's info.json (numpy scalars are stored as ``{"py/object": ..., "value": x}``)."""
    return float(v["value"] if isinstance(v, dict) else v)


@functools.cache
def has_smaclite(python: str) -> bool:
    """Whether EPyMARL's python imports smaclite (asked once per batch, not once per training)."""
    return subprocess.run([python, "-c", "import smaclite"], capture_output=True, check=False).returncode == 0


def run_epymarl(
    epymarl_dir: Path, python: str, algo: str, seed: int, env_steps: int, task: str = "lbf"
) -> dict[str, Any]:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as stub:
        if not has_smaclite(python):
            (Path(stub) / "smaclite.py").write_text(STUB)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (stub, env.get("PYTHONPATH")) if p)
        res = timed(epymarl_command(python, algo, seed, env_steps, task), cwd=epymarl_dir, env=env)
    found = re.findall(r'Started run with ID "(\d+)"', res["out"])
    if res["rc"] != 0 or not found:
        raise RuntimeError(f"EPyMARL {algo} seed {seed} failed (exit {res['rc']}):\n{res['out'][-3000:]}")
    run_dir = epymarl_dir / "results" / "sacred" / ALGOS[algo][0] / TASKS[task].epymarl_key / found[-1]
    info = json.loads((run_dir / "info.json").read_text())
    curve = [
        [int(t), sacred_value(v)]
        for t, v in zip(info["test_return_mean_T"], info["test_return_mean"], strict=True)
    ]
    return {
        "env_steps": env_steps + TASKS[task].test_interval,
        "curve": curve,
        "sacred_run": str(run_dir),
        **{k: res[k] for k in ("wall_s", "cpu_s")},
    }


def worker(
    algo: str, seed: int, env_steps: int, run_dir: Path, sets: list[str] | None = None, task: str = "lbf"
) -> None:
    """One teamrl training in this process (``teamrl marl train``'s code path, ``sets`` as its ``--set``);
    prints its row."""
    from teamrl.marl.train import parse_sets, train
    from teamrl.report.load import read_metrics

    overrides = {"total_env_steps": env_steps, "seed": seed, **ALGOS[algo][1], **parse_sets(sets or [])}
    sampled, t = ALGOS[algo][2], TASKS[task]
    summary = train(
        algo,
        t.teamrl_env,
        overrides,
        run_dir,
        episodes=t.test_episodes,
        show_progress=False,
        eval_every=t.test_interval,
        eval_episodes=t.test_episodes,
        eval_sampled=sampled,
    )
    final = summary["eval_sampled" if sampled else "eval"]
    rows = read_metrics(run_dir)
    curve = [[r["step"], r["eval/return/mean"]] for r in rows if "eval/return/mean" in r]
    print(json.dumps({"env_steps": final["env_steps"], "curve": curve, "returns": final["returns"]}))


def teamrl_run_dir(work: Path, algo: str, seed: int, sets: list[str], task: str = "lbf") -> Path:
    """Where teamrl's training keeps its run: runs with other settings (the script's overrides and the
    caller's ``sets``) keep directories of their own."""
    settings = [*(f"{k}={v}" for k, v in ALGOS[algo][1].items()), *sets]
    tag = "_" + hashlib.sha1("\n".join(settings).encode()).hexdigest()[:8] if settings else ""
    return work / f"teamrl_{'' if task == 'lbf' else task + '_'}{algo}_s{seed}{tag}"


def run_teamrl(
    algo: str, seed: int, env_steps: int, work: Path, sets: list[str] | None = None, task: str = "lbf"
) -> dict[str, Any]:
    sets = list(sets or [])
    run_dir = teamrl_run_dir(work, algo, seed, sets, task)
    if run_dir.exists():  # an attempt that did not finish (a finished one is in rows.jsonl and not rerun)
        shutil.rmtree(run_dir)
    res = timed(teamrl_command(algo, seed, env_steps, run_dir, sets, task))
    if res["rc"] != 0:
        raise RuntimeError(f"teamrl {algo} seed {seed} failed (exit {res['rc']}):\n{res['out'][-3000:]}")
    row = json.loads(res["out"].strip().splitlines()[-1])
    return {
        **row,
        "run_dir": str(run_dir),
        "teamrl_sets": sets,
        "teamrl_overrides": ALGOS[algo][1],
        **{k: res[k] for k in ("wall_s", "cpu_s")},
    }


def reusable(
    rows: list[dict[str, Any]], env_steps: int, sets: list[str], task: str = "lbf"
) -> list[dict[str, Any]]:
    """The finished trainings of ``rows.jsonl`` that this command would train again: the same task and budget
    and, for teamrl's, the same settings (the caller's and the script's overrides: a row trained before the
    script changed its defaults is not reused)."""
    return [
        r
        for r in rows
        if r.get("env_steps_asked") == env_steps
        and r.get("task", "lbf") == task
        and (
            r["library"] != "teamrl"
            or (r.get("teamrl_sets", []) == sets and r.get("teamrl_overrides", {}) == ALGOS[r["algo"]][1])
        )
    ]


def at_budget(curve: list[list[float]], env_steps: int) -> tuple[int, float]:
    """The curve's point nearest the budget: (its step, its return)."""
    step, value = min(curve, key=lambda p: abs(p[0] - env_steps))
    return int(step), float(value)


def steps_to(curve: list[list[float]], level: float) -> int | None:
    """The first step at which the curve reaches ``level`` (None: never)."""
    return next((int(t) for t, v in curve if v >= level), None)


def summarize_rows(
    rows: list[dict[str, Any]], env_steps: int, level: float = 0.8
) -> dict[str, dict[str, Any]]:
    """Per algorithm and library (``"<algo>/<library>"``): each seed's return at the budget (the test
    nearest it) with its mean and std over seeds, the steps each seed's curve took to reach ``level`` (LBF's
    0.8 of 1: all food collected), the mean over each seed's tests at or past half the budget, and the
    throughput."""
    import statistics

    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(f"{row['algo']}/{row['library']}", []).append(row)
    out = {}
    for key, runs in groups.items():
        finals = [at_budget(r["curve"], env_steps) for r in runs]
        late = [statistics.fmean(v for t, v in r["curve"] if t >= env_steps // 2) for r in runs]
        out[key] = {
            "seeds": [r["seed"] for r in runs],
            "return_at_budget": [v for _, v in finals],
            "at_step": [t for t, _ in finals],
            "mean": statistics.fmean(v for _, v in finals),
            "std_over_runs": statistics.pstdev(v for _, v in finals),
            "second_half_mean": statistics.fmean(late),
            f"steps_to_{level:g}": [steps_to(r["curve"], level) for r in runs],
            "env_steps_per_cpu_s": sum(r["env_steps"] for r in runs) / sum(r["cpu_s"] for r in runs),
            "env_steps_per_s": sum(r["env_steps"] for r in runs) / sum(r["wall_s"] for r in runs),
        }
    return out


def label(row: dict[str, Any]) -> str:
    name = {"epymarl": "EPyMARL", "teamrl": "teamrl"}[row["library"]]
    sets = row.get("teamrl_sets") or []
    return f"{name} {row['algo'].upper()}" + (f" ({', '.join(sets)})" if sets else "")


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Each run's evaluation curve against environment steps and against the CPU time it took to get there
    (the run's CPU time spread evenly over its steps), one colour per library and setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    colours: dict[str, str] = {}
    for row in rows:
        name = label(row)
        first = name not in colours  # the legend names each library and setting once
        colour = colours.setdefault(name, f"C{len(colours)}")
        steps = [t for t, _ in row["curve"]]
        values = [v for _, v in row["curve"]]
        cpu_min_per_step = row["cpu_s"] / 60 / row["env_steps"]
        axes[0].plot([t / 1e6 for t in steps], values, color=colour, lw=1, label=name if first else None)
        axes[1].plot([t * cpu_min_per_step for t in steps], values, color=colour, lw=1)
    axes[0].set_xlabel("environment steps (millions)")
    axes[1].set_xlabel("CPU-minutes of training (the run's, spread evenly over its steps)")
    axes[0].set_ylabel("test return (the title says its unit)")
    axes[0].legend(fontsize=8, loc="lower right")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def stop_trainings(signum: int, _frame: Any) -> None:
    """SIGINT / SIGTERM: stop every training under way, its workers too (each runs in a process group of its
    own, out of reach of the terminal's Ctrl-C), then exit; finished trainings are in rows.jsonl already."""
    with RUNNING_LOCK:
        groups = list(RUNNING)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epymarl-dir", type=Path, help="a checkout of EPyMARL")
    parser.add_argument("--epymarl-python", help="the python of a virtual environment with EPyMARL's needs")
    parser.add_argument("--algos", nargs="+", default=["mappo"], choices=list(ALGOS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--env-steps", type=int, default=2_000_000)
    parser.add_argument(
        "--jobs", type=int, default=1, help="trainings at once (EPyMARL's first, then teamrl's)"
    )
    parser.add_argument(
        "--libraries", nargs="+", default=["epymarl", "teamrl"], choices=["epymarl", "teamrl"]
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="teamrl's run directories and every finished training's row (rows.jsonl): the same command with "
        "the same --work-dir trains only what is missing (default: a new temporary directory)",
    )
    parser.add_argument(
        "--task", default="lbf", choices=list(TASKS), help="lbf: LBF 8x8-2p-3f; rware: RWARE tiny-2ag"
    )
    parser.add_argument(
        "--out", help="the record (default: results/marl_epymarl.json, or marl_epymarl_rware.json for rware)"
    )
    parser.add_argument(
        "--teamrl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of teamrl's runs over its defaults, as `teamrl marl train --set` (recorded)",
    )
    parser.add_argument(
        "--plot-from",
        nargs="+",
        type=Path,
        metavar="RECORD",
        help="only draw the curves of these records (this script's --out files) in one figure: --out's .png",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--algo", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.algo, args.seed, args.env_steps, args.run_dir, args.teamrl_set, args.task)
        return
    out = Path(args.out or Path(__file__).parent / "results" / OUT_NAMES[args.task])
    if args.plot_from:
        records = [json.loads(rec.read_text()) for rec in args.plot_from]
        rows = [r for rec in records for r in rec["rows"]]
        plot(rows, out.with_suffix(".png"), plot_title(TASKS[record_task(records[0])]))
        return
    if "epymarl" in args.libraries:
        if not args.epymarl_dir or not args.epymarl_python:
            parser.error("--epymarl-dir and --epymarl-python are required (EPyMARL is not a pip package)")
        if not (args.epymarl_dir / "src" / "main.py").is_file():
            parser.error(f"{args.epymarl_dir} is not a checkout of EPyMARL (no src/main.py)")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="marl_epymarl-"))
    work.mkdir(parents=True, exist_ok=True)
    jobs = [(lib, algo, seed) for lib in args.libraries for algo in args.algos for seed in args.seeds]

    # each finished training is kept in the work directory at once: a run stopped half way (or one training
    # failing) loses nothing, and the same command with the same --work-dir trains only what is missing
    done_file = work / "rows.jsonl"
    done = [json.loads(line) for line in done_file.read_text().splitlines()] if done_file.is_file() else []
    done = reusable(done, args.env_steps, args.teamrl_set, args.task)
    have = {(r["library"], r["algo"], r["seed"]) for r in done}
    lock = threading.Lock()

    def one(job: tuple[str, str, int]) -> dict[str, Any]:
        lib, algo, seed = job
        try:
            if lib == "epymarl":
                row = run_epymarl(
                    args.epymarl_dir, args.epymarl_python, algo, seed, args.env_steps, args.task
                )
            else:
                row = run_teamrl(algo, seed, args.env_steps, work, args.teamrl_set, args.task)
        except RuntimeError as exc:
            print(exc, file=sys.stderr, flush=True)
            return {"library": lib, "algo": algo, "seed": seed, "error": str(exc)[-3000:]}
        row = {
            "library": lib,
            "algo": algo,
            "seed": seed,
            "task": args.task,
            "env_steps_asked": args.env_steps,
            **row,
        }
        t, v = at_budget(row["curve"], args.env_steps)
        print(
            f"{algo:6} seed {seed} {lib:8} {row['env_steps']:>10,} steps  {row['cpu_s'] / 60:6.1f} CPU-min  "
            f"{row['wall_s'] / 60:6.1f} min  return {v:.3f} at {t:,}",
            flush=True,
        )
        with lock, done_file.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return row

    before = {signum: signal.signal(signum, stop_trainings) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            new = list(pool.map(one, [job for job in jobs if job not in have]))
    finally:  # the caller's handlers back (main() may run inside another program: a test)
        for signum, handler in before.items():
            signal.signal(signum, handler)
    failed = [r for r in new if "error" in r]
    wanted = set(jobs)
    rows = [r for r in done if (r["library"], r["algo"], r["seed"]) in wanted] + [
        r for r in new if "error" not in r
    ]
    if not rows:
        sys.exit(f"every training failed; the first: {failed[0]['error']}")
    task = TASKS[args.task]
    summary = summarize_rows(rows, args.env_steps, task.level)
    for key, s in summary.items():
        reach = s[f"steps_to_{task.level:g}"]
        print(
            f"{key:16} return at {args.env_steps:,} steps {s['mean']:.3f} +- {s['std_over_runs']:.3f} over "
            f"seeds, second half {s['second_half_mean']:.3f}, steps to {task.level:g} {reach}, "
            f"{s['env_steps_per_cpu_s']:,.0f} steps per CPU-s",
            flush=True,
        )
    record = {
        "task": args.task,
        "teamrl_env": task.teamrl_env,
        "epymarl_key": task.epymarl_key,
        "time_limit": task.time_limit,
        "env_steps": args.env_steps,
        "test_interval": task.test_interval,
        "test_episodes": task.test_episodes,
        "jobs": args.jobs,
        "teamrl_sets": args.teamrl_set,
        "summary": summary,
        "rows": rows,
        "failed": failed,
    }
    from teamrl.atomic import atomic_write_text

    atomic_write_text(out, json.dumps(record, indent=1))
    plot(rows, out.with_suffix(".png"), plot_title(task))
    if failed:
        names = ", ".join(f"{r['library']} {r['algo']} seed {r['seed']}" for r in failed)
        sys.exit(f"{len(failed)} training(s) failed ({names}); the others are in {out}")


if __name__ == "__main__":
    main()
