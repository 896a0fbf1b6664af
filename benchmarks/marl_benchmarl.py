"""teamrl's MAPPO side by side with BenchMARL's on VMAS tasks both run (issue 23): return at equal environment
steps and training throughput, measured in one run.

BenchMARL trains with its own MAPPO defaults (its ``base_experiment`` and ``mappo`` configs, the task's own
config), teamrl with ``teamrl marl train --algo mappo``'s defaults and ``TEAMRL`` below, on the same task
settings (BenchMARL's task yaml: balance 4 agents, package mass 5; navigation 3 agents, no shared reward;
100-step episodes, continuous actions) for the same number of environment steps (one step of one copy;
BenchMARL's "frames"), one torch thread, one training at a time. Both policies are then evaluated the same
way, by one function below that only uses VMAS: ``EPISODES`` copies made with ``EVAL_SEED``, one 100-step
episode each, deterministic actions; the figure is BenchMARL's ``episode_reward_mean``: the episode return
per agent, averaged over agents and episodes.

BenchMARL pins its own torchrl and tensordict, so it lives in a virtual environment of its own (with this
repository's torch: ``pip install torch==2.13.0 benchmarl==1.5.2 vmas``); the script runs each side as a
subprocess, BenchMARL's with ``--benchmarl-python``::

    .venv/bin/python benchmarks/marl_benchmarl.py --benchmarl-python /path/to/benchmarl-venv/bin/python \\
        --tasks balance navigation --seeds 0 1 2 --frames 120000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EVAL_SEED = 12345
EPISODES = 100
MAX_STEPS = 100
# BenchMARL's task settings (benchmarl/conf/task/vmas/<task>.yaml, version 1.5.2), given to both sides: the
# three VMAS tasks of BenchMARL's own paper
TASKS: dict[str, dict[str, Any]] = {
    "balance": {"n_agents": 4, "random_package_pos_on_line": True, "package_mass": 5},
    "navigation": {
        "n_agents": 3,
        "collisions": True,
        "agents_with_same_goal": 1,
        "split_goals": False,
        "observe_all_goals": False,
        "shared_rew": False,
        "lidar_range": 0.35,
        "agent_radius": 0.1,
    },
    "sampling": {
        "n_agents": 3,
        "shared_rew": False,
        "n_gaussians": 3,
        "lidar_range": 0.2,
        "cov": 0.05,
        "collisions": True,
        "spawn_same_pos": False,
    },
}


# teamrl's MAPPO settings for these tasks, over its defaults: BenchMARL's width and activation (MLP 256 x 256,
# tanh) and twice the epochs. Chosen on seed 0 of both tasks at 120k steps among six probes (docs/results/
# marl.md); with the defaults (64 x 64 relu, 5 epochs) teamrl ends behind BenchMARL on both tasks.
TEAMRL = {"hidden": [256, 256], "activation": "tanh", "epochs": 10}


def evaluate(task: str, act: Any) -> list[float]:
    """``act(obs)``: the list of per-agent observations ``[EPISODES, obs_dim]`` -> the list of per-agent
    actions. One episode per copy; rewards after a copy's episode ended are not counted. Returns each
    episode's return per agent (averaged over the agents)."""
    import torch
    import vmas

    env = vmas.make_env(
        task,
        num_envs=EPISODES,
        device="cpu",
        continuous_actions=True,
        max_steps=MAX_STEPS,
        seed=EVAL_SEED,
        terminated_truncated=True,
        clamp_actions=True,  # as BenchMARL's own VMAS envs (teamrl clips to the action space likewise)
        **TASKS[task],
    )
    obs = env.reset(seed=EVAL_SEED)
    totals = torch.zeros(EPISODES, len(env.agents))
    alive = torch.ones(EPISODES, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(MAX_STEPS):
            obs, rewards, terminated, truncated, _ = env.step(act(obs))
            totals += torch.stack([r.reshape(EPISODES) for r in rewards], 1) * alive[:, None]
            alive &= ~(terminated.reshape(EPISODES) | truncated.reshape(EPISODES))
            if not alive.any():
                break
    return totals.mean(1).tolist()


def run_benchmarl(task: str, seed: int, frames: int) -> dict[str, Any]:
    import torch
    from benchmarl.algorithms import MappoConfig
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    torch.set_num_threads(1)
    config = ExperimentConfig.get_from_yaml()
    per_batch = config.on_policy_collected_frames_per_batch
    config.max_n_frames = -(-frames // per_batch) * per_batch
    config.loggers, config.render, config.create_json = [], False, False
    config.evaluation = False  # evaluated below, like teamrl's policy
    config.checkpoint_interval, config.checkpoint_at_end = 0, False
    with tempfile.TemporaryDirectory() as tmp:
        config.save_folder = tmp
        experiment = Experiment(
            task=getattr(VmasTask, task.upper()).get_from_yaml(),
            algorithm_config=MappoConfig.get_from_yaml(),
            model_config=MlpConfig.get_from_yaml(),
            critic_model_config=MlpConfig.get_from_yaml(),
            seed=seed,
            config=config,
        )
        wall0, cpu0 = time.perf_counter(), time.process_time()
        experiment.run()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        policy = experiment.policy

        def act(obs: list[torch.Tensor]) -> list[torch.Tensor]:
            td = TensorDict(
                {"agents": TensorDict({"observation": torch.stack(obs, 1)}, [EPISODES, len(obs)])}
            )
            td.batch_size = [EPISODES]
            with set_exploration_type(ExplorationType.DETERMINISTIC):
                actions = policy(td).get(("agents", "action"))
            return list(actions.unbind(1))

        returns = evaluate(task, act)
    return _row(experiment.total_frames, wall, cpu, returns)


def run_teamrl(task: str, seed: int, frames: int) -> dict[str, Any]:
    import numpy as np
    import torch

    from teamrl.marl.core import VecStep
    from teamrl.marl.run import RunContext
    from teamrl.marl.train import make_env_factory, resolve

    env_keys = {
        f"env.{k}": v for k, v in {**TASKS[task], "continuous_actions": True, "max_steps": MAX_STEPS}.items()
    }
    module, cfg, env_kwargs = resolve("mappo", f"vmas:{task}", {"seed": seed, **TEAMRL, **env_keys})
    per_update = cfg.num_envs * cfg.rollout_steps  # whole updates, never more steps than BenchMARL's
    frames = max(per_update, frames // per_update * per_update)
    cfg.total_env_steps = frames
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run = RunContext(
            Path(tmp),
            make_env_factory(f"vmas:{task}", env_kwargs),
            frames,
            show_progress=False,
            tensorboard=False,
        )
        wall0, cpu0 = time.perf_counter(), time.process_time()
        module.train(cfg, run)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        checkpoint = torch.load(Path(tmp) / "checkpoint.pt", weights_only=False)
    actor = module.make_actor(checkpoint, deterministic=True)
    names = list(checkpoint["agents"])

    def act(obs: list[torch.Tensor]) -> list[torch.Tensor]:
        o = {a: x.numpy().astype(np.float32) for a, x in zip(names, obs, strict=True)}
        zeros = np.zeros(EPISODES, bool)
        actions = actor(VecStep(o, np.concatenate(list(o.values()), 1), {}, zeros, zeros))
        return [torch.as_tensor(np.asarray(actions[a]), dtype=torch.float32) for a in names]

    return _row(int(checkpoint["env_steps"]), wall, cpu, evaluate(task, act))


def _row(frames: int, wall: float, cpu: float, returns: list[float]) -> dict[str, Any]:
    mean = sum(returns) / len(returns)
    return {"frames": frames, "wall_s": wall, "cpu_s": cpu, "return": mean, "returns": returns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarl-python", help="the python of a virtual environment with benchmarl")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=120_000)
    parser.add_argument(
        "--libraries", nargs="+", default=["benchmarl", "teamrl"], choices=["benchmarl", "teamrl"]
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "marl_benchmarl.json"))
    parser.add_argument("--worker", choices=["benchmarl", "teamrl"], help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = run_benchmarl if args.worker == "benchmarl" else run_teamrl
        print(json.dumps(run(args.task, args.seed, args.frames)))
        return
    if "benchmarl" in args.libraries and not args.benchmarl_python:
        parser.error("--benchmarl-python is required (BenchMARL runs in a virtual environment of its own)")
    pythons = {"benchmarl": args.benchmarl_python, "teamrl": sys.executable}
    pythons = {lib: python for lib, python in pythons.items() if lib in args.libraries}
    rows = []
    for task in args.tasks:
        for seed in args.seeds:
            for lib, python in pythons.items():  # one at a time: the throughputs are comparable
                cmd = [python, __file__, "--worker", lib, "--task", task, "--seed", str(seed)]
                out = subprocess.run(
                    [*cmd, "--frames", str(args.frames)], capture_output=True, text=True, check=False
                )
                if out.returncode != 0:
                    sys.exit(f"{lib} on {task}, seed {seed} failed:\n{out.stderr[-3000:]}")
                row = {
                    "library": lib,
                    "task": task,
                    "seed": seed,
                    **json.loads(out.stdout.strip().splitlines()[-1]),
                }
                row["frames_per_s"] = row["frames"] / row["wall_s"]
                rows.append(row)
                print(
                    f"{task:11} seed {seed} {lib:9} {row['frames']:>9,} frames  {row['wall_s']:7.1f} s  "
                    f"{row['frames_per_s']:8.0f} frames/s  return {row['return']:8.3f}",
                    flush=True,
                )
    summary = summarize_rows(rows)
    for key, row in summary.items():
        print(
            f"{key:20} return {row['mean']:8.3f} +- {row['std_over_runs']:.3f} over seeds, "
            f"IQM {row['iqm']:.3f} [{row['iqm_ci'][0]:.3f}, {row['iqm_ci'][1]:.3f}]  "
            f"{row['frames_per_cpu_s']:7.0f} frames per CPU-s",
            flush=True,
        )
    record = {
        "frames": args.frames,
        "episodes": EPISODES,
        "teamrl_settings": TEAMRL,
        "summary": summary,
        "rows": rows,
    }
    from teamrl.atomic import atomic_write_text

    atomic_write_text(Path(args.out), json.dumps(record, indent=1))


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task and library (``"<task>/<library>"``): the seeds' returns (``run_means``), their mean and
    IQM with 95% bootstrap intervals over seeds and episodes (rliable's protocol, ``teamrl.marl.stats``),
    and the throughput (frames per CPU-second and per wall-second, over all seeds)."""
    from teamrl.marl.stats import summarize

    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(f"{row['task']}/{row['library']}", []).append(row)
    out = {}
    for key, runs in groups.items():
        out[key] = {
            "seeds": [r["seed"] for r in runs],
            **summarize([r["returns"] for r in runs]),
            "frames_per_cpu_s": sum(r["frames"] for r in runs) / sum(r["cpu_s"] for r in runs),
            "frames_per_s": sum(r["frames"] for r in runs) / sum(r["wall_s"] for r in runs),
        }
    return out


if __name__ == "__main__":
    main()
