"""What the objective weights make emerge in the town (issue 20): MAPPO agents trained on the weighted
reward of ``teamrl.world.town`` under several weightings, over seeds, against scripted and random agents.

For every weighting and seed: train MAPPO (one network shared by the agents) on
``teamrl.world.town:parallel_env`` with those weights (``--env-steps`` env steps), then play ``--episodes``
held-out episodes (town seeds 10000+, the same for every policy) with the deterministic policy and read
what emerged from the world state: conversations and distinct partners per agent, the entropy of who talks
to whom, the share of agents that reached the gathering (the shared goal: only agent 0 knows its place, the
news spreads by talk), got their object (private) and, of the two who want the one book, got it
(conflict). Prints mean +- std over seeds and writes ``<results-dir>/world.json`` and ``world.png``.

    .venv/bin/python benchmarks/world_benchmark.py [--seeds 0 1 2] [--env-steps 300000] [--jobs 2]
        [--weights goal=1,social=0,coherence=0 goal=1,social=0.3,coherence=0]
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

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from teamrl.atomic import atomic_write_text  # noqa: E402
from teamrl.marl.core import VecStep  # noqa: E402
from teamrl.world.timeline import plot_timeline, timeline_rows  # noqa: E402
from teamrl.world.town import TownParallelEnv, action_table, encode, scripted_action  # noqa: E402

ENV = "teamrl.world.town:parallel_env"
STATS = (
    "conversations_per_agent",
    "partners_per_agent",
    "talk_entropy",
    "shared_achieved",
    "know_party",
    "private_achieved",
    "book_achieved",
    "invalid_per_agent",
    "plausibility",
)
EVAL_SEED = 10_000


def parse_weights(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        out[key.strip()] = float(value)
    return out


def play(policy: Any, episodes: int, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``policy(VecStep) -> {agent: [B] actions}`` (or None: scripted agents) on ``episodes`` towns, all at
    once; the mean of each emergence statistic, and the first town's day (``timeline``: its rows)."""
    envs = [TownParallelEnv(**env_kwargs) for _ in range(episodes)]
    obs = [env.reset(seed=EVAL_SEED + i)[0] for i, env in enumerate(envs)]
    agents = envs[0].possible_agents
    table = action_table(agents)
    rng = np.random.default_rng(0)
    finished: list[dict[str, float]] = []
    done = np.zeros(episodes, bool)
    while len(finished) < episodes:
        if policy is not None:
            batch = {a: np.stack([o[a] for o in obs]) for a in agents}
            state = np.concatenate([batch[a] for a in agents], axis=1)
            zeros = np.zeros(episodes, bool)
            step = VecStep(
                batch, state, {a: np.zeros(episodes, np.float32) for a in agents}, zeros, zeros.copy()
            )
            actions = policy(step)
        for i, env in enumerate(envs):
            if done[i]:
                continue
            if policy is None:
                chosen = {a: encode(scripted_action(env.town, a, rng), a, agents, table) for a in agents}
            else:
                chosen = {a: int(actions[a][i]) for a in agents}
            o, _, _, trunc, infos = env.step(chosen)
            if any(trunc.values()):
                finished.append(infos[agents[0]]["episode"])
                done[i] = True
            else:
                obs[i] = o
    out: dict[str, Any] = {k: float(np.mean([f[k] for f in finished])) for k in STATS}
    out["timeline"] = timeline_rows(envs[0].town)
    return out


def random_policy(n_actions: int, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)

    def act(step: VecStep) -> dict[str, np.ndarray]:
        return {a: rng.integers(n_actions, size=len(o)) for a, o in step.obs.items()}

    return act


def train_one(weights: dict[str, float], seed: int, env_steps: int, episodes: int) -> dict[str, Any]:
    import torch

    from teamrl.marl import ppo
    from teamrl.marl.run import RunContext
    from teamrl.marl.train import make_env_factory, resolve

    env_kwargs = {f"{k}_weight": v for k, v in weights.items()}
    overrides = {
        "total_env_steps": env_steps,
        "seed": seed,
        "num_envs": 32,
        "rollout_steps": 24,
        "parameter_sharing": "shared",
        "ent_coef": 0.01,
        **{f"env.{k}": v for k, v in env_kwargs.items()},
    }
    module, cfg, kwargs = resolve("mappo", ENV, overrides)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run = RunContext(
            Path(tmp),
            make_env_factory(ENV, kwargs),
            cfg.total_env_steps,
            show_progress=False,
            tensorboard=False,
        )
        t0 = time.perf_counter()
        result = module.train(cfg, run)
        wall = time.perf_counter() - t0
        run.close()
    actor = ppo.make_actor(result["checkpoint"], deterministic=True)
    return {
        "weights": weights,
        "seed": seed,
        "env_steps": env_steps,
        "wall_s": wall,
        **play(actor, episodes, env_kwargs),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--env-steps", type=int, default=300_000)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument(
        "--weights",
        nargs="+",
        default=["goal=1,social=0,coherence=0", "goal=1,social=0.3,coherence=0"],
        help="weightings to compare (goal=,social=,coherence=)",
    )
    p.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args(argv)
    weightings = [parse_weights(w) for w in args.weights]
    start = time.time()
    baselines = {
        "scripted": play(None, args.episodes, {}),
        "random": play(
            random_policy(len(action_table(TownParallelEnv().possible_agents))), args.episodes, {}
        ),
    }
    runs: list[dict[str, Any]] = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(train_one, w, s, args.env_steps, args.episodes)
            for w in weightings
            for s in args.seeds
        ]
        for future in concurrent.futures.as_completed(futures):
            r = future.result()
            runs.append(r)
            print(
                f"{r['weights']} seed {r['seed']}: conversations {r['conversations_per_agent']:.2f}, "
                f"shared {r['shared_achieved']:.2f} ({r['wall_s']:.0f} s)",
                flush=True,
            )
    summary = []
    for w in weightings:
        rows = [r for r in runs if r["weights"] == w]
        agg = {}
        for k in STATS:
            values = [r[k] for r in rows]
            agg[k] = {
                "mean": statistics.mean(values),
                "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            }
        summary.append({"weights": w, "seeds": sorted(r["seed"] for r in rows), "stats": agg})
    result = {
        "env": ENV,
        "env_steps": args.env_steps,
        "episodes": args.episodes,
        "algorithm": "mappo, one network shared by the agents",
        "baselines": baselines,
        "weightings": summary,
        "runs": sorted(runs, key=lambda r: (json.dumps(r["weights"]), r["seed"])),
        "wall_min": (time.time() - start) / 60,
    }
    print(f"\n{'':34}" + "".join(f"{k[:14]:>16}" for k in STATS))
    for name, b in baselines.items():
        print(f"{name:34}" + "".join(f"{b[k]:>16.2f}" for k in STATS))
    for row in summary:
        label = ",".join(f"{k}={v:g}" for k, v in row["weights"].items())
        print(
            f"{label:34}"
            + "".join(f"{row['stats'][k]['mean']:>10.2f} +-{row['stats'][k]['std']:4.2f}" for k in STATS)
        )
    args.results_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.results_dir / "world.json", json.dumps(result, indent=1))
    plot(result, args.results_dir / "world.png")
    # the first held-out town's day, for the scripted agents and each weighting (its first seed)
    first = min(args.seeds)
    days = [("scripted agents", baselines["scripted"]["timeline"])]
    for row in summary:
        label = ", ".join(f"{k} {v:g}" for k, v in row["weights"].items() if v)
        run = next(r for r in runs if r["weights"] == row["weights"] and r["seed"] == first)
        days.append((f"MAPPO, {label} (seed {first})", run["timeline"]))
    for i, (title, rows) in enumerate(days):
        plot_timeline(rows, args.results_dir / f"world_timeline_{i}.png", title=f"town {EVAL_SEED}: {title}")
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["conversations_per_agent", "shared_achieved", "private_achieved", "book_achieved"]
    labels = [
        ",".join(f"{k}={v:g}" for k, v in w["weights"].items() if k != "goal") for w in result["weightings"]
    ]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.2))
    for ax, key in zip(axes, keys, strict=True):
        means = [w["stats"][key]["mean"] for w in result["weightings"]]
        stds = [w["stats"][key]["std"] for w in result["weightings"]]
        ax.bar(
            labels,
            means,
            yerr=stds,
            capsize=3,
            color=["tab:blue", "tab:orange", "tab:green", "tab:red"][: len(means)],
        )
        ax.axhline(result["baselines"]["scripted"][key], ls="--", color="k", lw=0.8, label="scripted")
        ax.set_title(key.replace("_", " "), fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"town, MAPPO at {result['env_steps']:,} env steps; mean +- std over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
