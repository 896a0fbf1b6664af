"""Classic MARL on simple_spread: teamrl's MAPPO against the repaired SB3 + SuperSuit IPPO, in one run.

Environment: simple_spread, N=3 agents, 25 steps per episode, local_ratio 0.5, discrete actions. Return:
the undiscounted episode return summed over the 3 agents, mean over 1,000 evaluation episodes (deterministic
policies). One *env step* is one joint step of one copy; agent-steps = 3 x env steps.

``speed``: training throughput (agent-steps per second, env steps and updates included, evaluation and
set-up left out) of SB3 PPO + SuperSuit on mpe2, of teamrl MAPPO on the same mpe2 environment through the
generic PettingZoo adaptor, and of teamrl MAPPO on the batched simple_spread (step-for-step equal to mpe2,
see tests/test_marl_envs.py), all with one torch thread, one after the other in this process. Also reports
throughput per CPU-second of the process, which is steadier when other jobs share the machine.

``learning``: MAPPO over seeds at its budget (``--env-steps``, 3M, the preset's) and at the budget of the
SB3 comparison (``--sb3-steps``, 720k), SB3 IPPO at that budget (read from the runs of ``marl_sb3_baseline.py
train``, about 20 min per seed, or trained here with ``--retrain-sb3``), IPPO / QMIX / MADDPG on
simple_spread, a random policy and the assignment heuristic. ``--jobs`` runs that many trainings at once (each
uses one torch thread, in its own process).

    .venv/bin/python benchmarks/marl_benchmark.py speed [--env-steps 50000]
    .venv/bin/python benchmarks/marl_benchmark.py learning [--seeds 0 1 2] [--env-steps 2200000]
        [--sb3-steps 720000] [--sb3-seeds 0 1 2] [--retrain-sb3] [--jobs 2] [--only mappo ...]
    .venv/bin/python benchmarks/marl_benchmark.py baselines

Every teamrl-side policy (random, the heuristic, each trained run) is evaluated on one episode set (the
batched simple_spread, 1,000 copies reset with seed 12345, one episode each); tables give the mean +- std over
seeds and, from every seed's episode returns, the interquartile mean and the mean with 95% bootstrap
intervals (teamrl.marl.stats: seeds, then episodes, resampled; the rliable protocol), and each trained
policy's paired difference from the heuristic on the same episodes (mean, 95% bootstrap interval).

Results go to benchmarks/results/marl_speed.json and marl_learning.json (+ .png).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results"

from benchmarks.marl_sb3_baseline import heuristic_action, train_sb3_ippo  # noqa: E402
from teamrl.marl.evaluate import evaluate, random_actor  # noqa: E402
from teamrl.marl.stats import summarize  # noqa: E402
from teamrl.marl.train import EVAL_SEED, make_env_factory, resolve  # noqa: E402

N_AGENTS = 3
DEFINITION = (
    "simple_spread N=3, max_cycles 25, local_ratio 0.5, discrete actions; return = undiscounted episode "
    "return summed over the 3 agents, mean over the episode set (episode_set) of the deterministic policy"
)


def train_teamrl(algo: str, env: str, env_steps: int, seed: int, extra: dict[str, Any] | None = None) -> dict:
    """Train in-process (a temporary run directory); time the training alone (wall and CPU); evaluate."""
    from teamrl.marl.run import RunContext

    overrides = {"total_env_steps": env_steps, "seed": seed, **(extra or {})}
    module, cfg, env_kwargs = resolve(algo, env, overrides)
    torch.set_num_threads(1)
    make_env = make_env_factory(env, env_kwargs)
    with tempfile.TemporaryDirectory() as tmp:
        run = RunContext(Path(tmp), make_env, cfg.total_env_steps, show_progress=False, tensorboard=False)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        result = module.train(cfg, run)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        checkpoint = torch.load(Path(tmp) / "checkpoint.pt", weights_only=False)
    steps = int(checkpoint.get("env_steps", result.get("env_steps", env_steps)))
    out = {
        "algo": algo,
        "env": env,
        "seed": seed,
        "env_steps": steps,
        "agent_steps": steps * N_AGENTS,
        "wall_s": wall,
        "cpu_s": cpu,
        "agent_steps_per_s": steps * N_AGENTS / wall,
        "agent_steps_per_cpu_s": steps * N_AGENTS / cpu,
    }
    ev = evaluate_on_episode_set(lambda env: module.make_actor(checkpoint, deterministic=True))
    out.update(return_mean=ev["return/mean"], return_std=ev["return/std"], returns=ev["returns"])
    return out


# The simple_spread preset until 2026-12-07 (128 copies, the critic on the raw observation, 5 epochs, lr
# 1e-3, gamma 0.95): the settings the speed, model-based and distillation figures were measured with, pinned
# so that those figures stay reproducible now that the preset trains 32 copies, a critic on the actor's
# encoder, 3 epochs at lr 2e-3, gamma 0.85.
SPREAD_UNTIL_2026_12_07 = {"num_envs": 128, "shared_encoder": False, "epochs": 5, "lr": 1e-3, "gamma": 0.95}

# The episode set every teamrl-side policy is evaluated on: batched simple_spread, EVAL_SEED. 1,000 episodes
# (50 until 2026-12-07): returns vary by +-11 from episode to episode, and a paired difference between two
# policies over 50 episodes has a standard error of about 0.8, as large as the gaps the table compares (on
# 50 episodes from seed 10000 a MAPPO run was 1.5 above the heuristic, on seed 12345's 50 it was 0.2 below;
# over 5,000 episodes it equals the heuristic within 0.1). Over 1,000 the error is about 0.2.
EPISODES = 1000


def evaluate_on_episode_set(actor_for: Any) -> dict[str, Any]:
    """The actor ``actor_for(env)`` on THE episode set of this benchmark: the batched simple_spread (step for
    step mpe2's), ``EPISODES`` copies reset with ``EVAL_SEED``, one episode each. Random, the heuristic and
    every trained policy play these same episodes."""
    env = make_env_factory("simple_spread", {})(EPISODES, EVAL_SEED)
    try:
        return evaluate(actor_for(env), env, EPISODES, seed=EVAL_SEED)
    finally:
        env.close()


def heuristic_actor(step: Any) -> dict[str, Any]:
    """The assignment heuristic (``marl_sb3_baseline.heuristic_action``: own observation only), every copy."""
    import numpy as np

    return {
        a: np.array([heuristic_action(int(a.split("_")[-1]), row) for row in obs], dtype=np.int64)
        for a, obs in step.obs.items()
    }


def eval_baselines() -> dict[str, dict[str, Any]]:
    """Random actions and the assignment heuristic on the benchmark's episode set."""
    out = {}
    actors = {"random": lambda env: random_actor(env, seed=0), "heuristic": lambda env: heuristic_actor}
    for name, actor_for in actors.items():
        ev = evaluate_on_episode_set(actor_for)
        out[name] = {
            "return_mean": ev["return/mean"],
            "return_std": ev["return/std"],
            "episodes": EPISODES,
            "returns": ev["returns"],
            **summarize([ev["returns"]]),
        }
    return out


def cmd_speed(args: argparse.Namespace) -> None:
    rows = {
        "sb3_ippo_supersuit_mpe2": train_sb3_ippo(args.env_steps, seed=0, threads=1),
        "teamrl_mappo_mpe2": train_teamrl(
            "mappo", "mpe2:simple_spread_v3", args.env_steps, 0, SPREAD_UNTIL_2026_12_07
        ),
        "teamrl_mappo_batched": train_teamrl(
            "mappo", "simple_spread", args.env_steps, 0, SPREAD_UNTIL_2026_12_07
        ),
    }
    base = rows["sb3_ippo_supersuit_mpe2"]
    print(f"{'':28}{'env steps':>10}{'wall s':>9}{'agent-steps/s':>15}{'per CPU-s':>11}{'x SB3':>7}")
    for name, r in rows.items():
        ratio = r["agent_steps_per_s"] / base["agent_steps_per_s"]
        r["ratio_vs_sb3"] = ratio
        r["ratio_vs_sb3_cpu"] = r["agent_steps_per_cpu_s"] / base["agent_steps_per_cpu_s"]
        print(
            f"{name:28}{r['env_steps']:>10}{r['wall_s']:>9.1f}{r['agent_steps_per_s']:>15.0f}"
            f"{r['agent_steps_per_cpu_s']:>11.0f}{ratio:>7.1f}"
        )
    slim = {k: {kk: v for kk, v in r.items() if kk != "checkpoints"} for k, r in rows.items()}
    _write(RESULTS / "marl_speed.json", {"env_steps_requested": args.env_steps, "threads": 1, "runs": slim})


def _mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _sb3_at(budget: int, seeds: list[int], retrain: bool) -> list[dict[str, Any]]:
    """SB3 IPPO evaluated at ``budget`` env steps, per seed: trained here (``retrain``) or read from the
    ``marl_sb3_learning_s<seed>.json`` runs of ``benchmarks/marl_sb3_baseline.py train`` (about 20 min
    per seed at 720k env steps on this machine), taking the checkpoint whose env steps are closest."""
    if retrain:
        return [train_sb3_ippo(budget, seed=s, threads=1) for s in seeds]
    rows = []
    for seed in seeds:
        path = RESULTS / f"marl_sb3_learning_s{seed}.json"
        if not path.is_file():
            print(f"no {path.name}: run benchmarks/marl_sb3_baseline.py train --seed {seed} ...", flush=True)
            continue
        data = json.loads(path.read_text())
        curve = data.get("curve") or data.get("checkpoints") or []
        best = min(curve, key=lambda c: abs(c["env_steps"] - budget))
        rows.append({"seed": seed, "source": path.name, **best})
    return rows


# The host's speed drifts: on 2026-12-07 the same 300k-step training, alone, took 40.7 CPU-s at one hour and
# 49.7 at the next. A fixed reference job, timed alone before and after the runs, says how fast it was then.
CALIBRATION = ("mappo", "simple_spread", 200_000, 0)


def calibrate() -> float:
    """CPU seconds of the reference job's training (the preset's MAPPO, 200k env steps, seed 0, alone)."""
    return float(train_teamrl(*CALIBRATION)["cpu_s"])


def cmd_learning(args: argparse.Namespace) -> None:
    """Every finished run is written to ``marl_learning.json`` at once (kept there when it exists and
    ``--only`` reruns other algorithms), so an interrupted benchmark keeps what it measured."""
    path = RESULTS / "marl_learning.json"
    res: dict[str, Any] = json.loads(path.read_text()) if args.only and path.is_file() else {}
    before = calibrate() if args.calibrate else None
    res.update(env_steps=args.env_steps, seeds=args.seeds, definition=DEFINITION)
    res.update(eval_baselines())
    res["episode_set"] = EPISODE_SET
    runs: list[tuple[str, str, int, list[int]]] = [
        ("mappo", "simple_spread", args.env_steps, args.seeds),
        ("mappo_at_sb3_budget", "simple_spread", args.sb3_steps, args.seeds),
        ("ippo", "simple_spread", args.env_steps, args.other_seeds),
        ("qmix", "simple_spread", args.qmix_steps, args.other_seeds),
        ("maddpg", "simple_spread", args.maddpg_steps, args.other_seeds),
    ]
    jobs = [(name, env, steps, s) for name, env, steps, seeds in runs for s in seeds]
    jobs = [j for j in jobs if not args.only or j[0] in args.only]
    for name in {j[0] for j in jobs}:
        res[name] = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            pool.submit(train_teamrl, name.split("_at_")[0], env, steps, s): name
            for name, env, steps, s in jobs
        }
        for future in concurrent.futures.as_completed(futures):
            name, r = futures[future], future.result()
            res[name] = sorted([*res[name], r], key=lambda row: row["seed"])
            print(f"{name} seed {r['seed']}: {r['return_mean']:.1f} ({r['wall_s']:.0f} s)", flush=True)
            _write(path, res)
    res.pop("calibration", None)  # a kept record's calibration timed other runs
    if before is not None:
        after = calibrate()
        algo, env, steps, seed = CALIBRATION
        res["calibration"] = {
            "job": f"the preset's {algo} on {env}, {steps} env steps, seed {seed}, alone",
            "cpu_s_before": before,
            "cpu_s_after": after,
        }
        print(f"the reference job before / after the runs: {before:.1f} / {after:.1f} CPU-s")
    res["sb3_ippo"] = _sb3_at(args.sb3_steps, args.sb3_seeds, args.retrain_sb3)
    summarize_runs(res)
    print_table(res)
    _write(path, res)
    _plot(res, RESULTS / "marl_learning.png")


EPISODE_SET = (
    f"batched simple_spread (equal to mpe2 step for step), {EPISODES} copies reset with seed {EVAL_SEED}, "
    "one episode each: random, the heuristic and every teamrl policy play the same episodes; SB3 IPPO is "
    "evaluated by marl_sb3_baseline.py on mpe2 seeds 10000-10049 (another set, of 50)"
)
TRAINED = ("mappo", "mappo_at_sb3_budget", "sb3_ippo", "ippo", "qmix", "maddpg")


def summarize_runs(res: dict[str, Any]) -> None:
    """``<name>_summary`` per trained algorithm: mean +- std over seeds, and, where every seed kept its
    episodes' returns, the IQM and mean of all seeds' episodes with 95% bootstrap intervals (runs, then
    episodes, resampled: teamrl.marl.stats), and, where those are the heuristic's episodes (as many, the
    same set), ``vs_heuristic``: the mean paired difference, episode by episode, with its interval."""
    heuristic = (res.get("heuristic") or {}).get("returns")
    for name in TRAINED:
        if not res.get(name):
            continue
        m, s = _mean_std([r["return_mean"] for r in res[name]])
        summary: dict[str, Any] = {
            "mean": m,
            "std": s,
            "n": len(res[name]),
            "env_steps": res[name][0]["env_steps"],
        }
        if all(r.get("returns") for r in res[name]):
            full = summarize([r["returns"] for r in res[name]])
            summary.update({k: full[k] for k in ("iqm", "iqm_ci", "mean_ci", "episodes")})
            if heuristic and all(len(r["returns"]) == len(heuristic) for r in res[name]):
                paired = summarize(
                    [[a - b for a, b in zip(r["returns"], heuristic, strict=True)] for r in res[name]]
                )
                summary["vs_heuristic"] = {"mean": paired["mean"], "mean_ci": paired["mean_ci"]}
        res[f"{name}_summary"] = summary


def print_table(res: dict[str, Any]) -> None:
    def ci(low_high: list[float] | None) -> str:
        return "-" if not low_high else f"[{low_high[0]:.1f}, {low_high[1]:.1f}]"

    def paired(d: dict[str, Any] | None) -> str:
        return "-" if not d else f"{d['mean']:+.2f} [{d['mean_ci'][0]:+.2f}, {d['mean_ci'][1]:+.2f}]"

    print(
        f"\n{'':20}{'env steps':>10}{'mean +- std over seeds':>26}{'IQM':>8}"
        f"{'IQM 95% CI':>16}{'mean 95% CI':>16}{'- heuristic, paired':>26}"
    )
    for name in ("random", "heuristic"):
        r = res[name]
        print(
            f"{name:20}{'-':>10}{r['return_mean']:>17.1f}{'':9}{r.get('iqm', float('nan')):>8.1f}"
            f"{ci(r.get('iqm_ci')):>16}{ci(r.get('mean_ci')):>16}"
        )
    for name in TRAINED:
        if f"{name}_summary" not in res:
            continue
        r = res[f"{name}_summary"]
        print(
            f"{name:20}{r['env_steps']:>10}{r['mean']:>17.1f} +- {r['std']:<4.1f}{'':2}"
            f"{r.get('iqm', float('nan')):>8.1f}{ci(r.get('iqm_ci')):>16}{ci(r.get('mean_ci')):>16}"
            f"{paired(r.get('vs_heuristic')):>26}"
        )


def cmd_baselines(args: argparse.Namespace) -> None:
    """Re-evaluate random and the heuristic on the episode set, keeping marl_learning.json's runs."""
    path = RESULTS / "marl_learning.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    res.update(eval_baselines())
    res["episode_set"] = EPISODE_SET
    summarize_runs(res)
    print_table(res)
    _write(path, res)
    _plot(res, RESULTS / "marl_learning.png")


def _plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [("random", "random", "grey")]
    for name, label, color in [
        ("sb3_ippo", "SB3 IPPO", "tab:orange"),
        ("mappo_at_sb3_budget", "MAPPO", "tab:red"),
        ("qmix", "QMIX", "tab:green"),
        ("maddpg", "MADDPG", "tab:purple"),
        ("ippo", "IPPO", "tab:blue"),
        ("mappo", "MAPPO", "tab:red"),
    ]:
        if f"{name}_summary" in res:
            steps = res[f"{name}_summary"]["env_steps"]
            bars.append((name, f"{label}\n{steps / 1e6:.2g}M steps", color))
    bars.append(("heuristic", "assignment\nheuristic", "grey"))
    means, errs = [], []
    for name, _, _ in bars:
        if name in ("random", "heuristic"):
            means.append(res[name]["return_mean"])
            errs.append(0.0)
        else:
            means.append(res[f"{name}_summary"]["mean"])
            errs.append(res[f"{name}_summary"]["std"])
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.bar([b[1] for b in bars], means, yerr=errs, capsize=3, color=[b[2] for b in bars])
    for i, m in enumerate(means):
        ax.text(i, m / 2, f"{m:.1f}", ha="center", color="white", fontsize=9)
    ax.set_ylabel("return, summed over 3 agents")
    ax.set_title(
        f"simple_spread N=3, 25 steps, local_ratio 0.5; {res.get('heuristic', {}).get('episodes', EPISODES)} "
        "eval episodes; mean +- std over seeds"
    )
    ax.axhline(-25, ls="--", color="k", lw=0.8)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _write(path: Path, data: dict[str, Any]) -> None:
    from teamrl.atomic import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1, default=float))
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("speed")
    p.add_argument("--env-steps", type=int, default=50_000)
    p.set_defaults(func=cmd_speed)
    p = sub.add_parser("learning")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--other-seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--sb3-seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--sb3-steps", type=int, default=720_000, help="budget of the MAPPO vs SB3 comparison")
    p.add_argument("--retrain-sb3", action="store_true", help="train SB3 here instead of reading its runs")
    p.add_argument("--env-steps", type=int, default=2_200_000, help="MAPPO and IPPO (the preset's budget)")
    p.add_argument("--jobs", type=int, default=1, help="trainings at once, one process each")
    p.add_argument("--qmix-steps", type=int, default=300_000)
    p.add_argument("--maddpg-steps", type=int, default=400_000)
    p.add_argument(
        "--only",
        nargs="+",
        choices=["mappo", "mappo_at_sb3_budget", "ippo", "qmix", "maddpg"],
        help="train only these; keep the other algorithms' runs from marl_learning.json",
    )
    p.add_argument(
        "--no-calibrate",
        dest="calibrate",
        action="store_false",
        help="skip the reference job that times the machine's speed before and after the runs",
    )
    p.set_defaults(func=cmd_learning)
    p = sub.add_parser("baselines", help="random and the heuristic on the episode set (seconds)")
    p.set_defaults(func=cmd_baselines)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
