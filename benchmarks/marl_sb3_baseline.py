"""External baseline for the classic-MARL benchmarks: SB3 PPO through SuperSuit (IPPO, one policy shared by
the agents) on mpe2 simple_spread_v3, plus a random and a hand-written heuristic reference. No teamrl code.

Units. One *env step* is one step of one environment copy, i.e. one joint step of all 3 agents. SuperSuit
turns every agent of every copy into one SB3 "env", so SB3's timesteps are *agent-steps* = 3 x env steps.
``train_sb3_ippo`` takes env steps and reports both. SB3 finishes the rollout it is in, so the steps actually
trained are rounded up to a multiple of ``n_steps * n_envs * 3`` agent-steps and are reported as measured.

Evaluation: ``episodes`` episodes of simple_spread_v3 (N=3, local_ratio=0.5, max_cycles=25, discrete
actions) on mpe2's parallel_env, episode ``k`` reset with seed ``seed + k``; the return of an episode is the
undiscounted sum of the rewards of all 3 agents; mean and (population) std over episodes.

    .venv/bin/python benchmarks/marl_sb3_baseline.py refs [--episodes 50] [--seed 10000]
    .venv/bin/python benchmarks/marl_sb3_baseline.py train --env-steps 166667 333334 [--seed 0]
        [--threads 1] [--n-envs 8] [--ppo n_steps=2048 batch_size=64] [--json PATH] [--save PATH]
        [--load PATH]

``train`` evaluates the policy each time training passes one of the ``--env-steps`` budgets (one run, the
budgets are checkpoints of it; evaluation time is left out of the training time) and rewrites ``--json``
after every checkpoint. ``--load`` continues from a model saved with ``--save`` (its steps count on; seeds
are offset by them). The optimizer state goes with the model.

    from benchmarks.marl_sb3_baseline import train_sb3_ippo, eval_random, eval_heuristic
    train_sb3_ippo(env_steps=33_334, seed=0)  # -> dict, see its docstring
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import stable_baselines3 as sb3
import supersuit as ss
import torch
from mpe2 import simple_spread_v3
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecEnv

N_AGENTS = 3
ENV_KWARGS: dict[str, Any] = {
    "N": N_AGENTS,
    "local_ratio": 0.5,
    "max_cycles": 25,
    "continuous_actions": False,
}
EVAL_SEED = 10_000  # evaluation episodes use seeds EVAL_SEED, EVAL_SEED + 1, ...: apart from training seeds
# The book sets learning_rate=3e-4 and n_steps=2048, which are SB3's PPO defaults; everything else is default.
BOOK_PPO: dict[str, Any] = {"learning_rate": 3e-4, "n_steps": 2048}
# Action ids of mpe2's discrete MPE actions: [no_action, move_left, move_right, move_down, move_up].
_MOVES = np.array([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])

Policy = Callable[[dict[str, np.ndarray]], dict[str, int]]


# ---------------------------------------------------------------------------------------------- evaluation
def evaluate(policy: Policy, episodes: int = 50, seed: int = EVAL_SEED) -> dict[str, float]:
    """Play ``policy`` (observations -> actions, by agent) on simple_spread; return summed over agents."""
    env = simple_spread_v3.parallel_env(**ENV_KWARGS)
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        total = 0.0
        while env.agents:
            obs, rewards, _, _, _ = env.step(policy(obs))
            total += float(sum(rewards.values()))
        returns.append(total)
    env.close()
    return {
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "episodes": episodes,
    }


def eval_random(episodes: int = 50, seed: int = EVAL_SEED) -> dict[str, float]:
    """Uniformly random actions (own generator seeded with ``seed``)."""
    rng = np.random.default_rng(seed)
    return evaluate(lambda obs: {a: int(rng.integers(5)) for a in obs}, episodes, seed)


def _assignment(agents: np.ndarray, landmarks: np.ndarray) -> tuple[int, ...]:
    """Landmark index per agent minimising the summed squared agent-landmark distances (brute force)."""
    dist2 = np.sum((agents[:, None, :] - landmarks[None, :, :]) ** 2, axis=-1)
    n = len(agents)
    return min(itertools.permutations(range(n)), key=lambda p: sum(dist2[i, p[i]] for i in range(n)))


def heuristic_action(index: int, obs: np.ndarray, n: int = N_AGENTS) -> int:
    """Action of agent ``index`` from its own observation only.

    Layout (mpe2 simple_spread): ``[vel(2), pos(2), landmark_rel(2n), other_agent_rel(2(n-1)), comm]``, others
    in agent order without self. The agent rebuilds every agent's position relative to itself, solves the
    assignment (all agents solve the same one, so they pick distinct landmarks) and takes the move that puts
    its position two steps ahead closest to its landmark. Physics (dt=0.1, damping 0.25, accel 5): the next
    position is ``pos + 0.1 vel`` whatever the action, then ``vel' = 0.75 vel + 0.5 move`` moves it by
    ``0.1 vel'``. (Aiming the coasting stop point, ``0.4 vel'``, instead brakes too early: about -27.)
    """
    vel = obs[0:2]
    landmarks = obs[4 : 4 + 2 * n].reshape(n, 2)
    others = obs[4 + 2 * n : 4 + 2 * n + 2 * (n - 1)].reshape(n - 1, 2)
    agents = np.insert(others, index, np.zeros(2), axis=0)
    target = landmarks[_assignment(agents, landmarks)[index]]
    ahead = 0.1 * vel + 0.1 * (0.75 * vel + 0.5 * _MOVES)
    return int(np.argmin(np.linalg.norm(target - ahead, axis=1)))


def heuristic_policy(obs: dict[str, np.ndarray]) -> dict[str, int]:
    """``heuristic_action`` for every agent (agent ``agent_i`` has index i)."""
    return {a: heuristic_action(int(a.split("_")[-1]), o) for a, o in obs.items()}


def eval_heuristic(episodes: int = 50, seed: int = EVAL_SEED) -> dict[str, float]:
    """Assignment heuristic: each agent heads for its own landmark (see ``heuristic_action``)."""
    return evaluate(heuristic_policy, episodes, seed)


def eval_sb3(model: PPO, episodes: int = 50, seed: int = EVAL_SEED) -> dict[str, float]:
    """The shared SB3 policy, deterministic (argmax), applied to each agent's observation."""

    def policy(obs: dict[str, np.ndarray]) -> dict[str, int]:
        names = list(obs)
        actions, _ = model.predict(np.stack([obs[a] for a in names]), deterministic=True)
        return {a: int(x) for a, x in zip(names, actions, strict=True)}

    return evaluate(policy, episodes, seed)


# ------------------------------------------------------------------------------------------------ training
def make_sb3_env(n_envs: int, seed: int) -> VecEnv:
    """``n_envs`` simple_spread copies as one SB3 VecEnv of ``3 * n_envs`` agent-envs; copy i gets seed+i."""
    env = ss.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env(**ENV_KWARGS))
    env = ss.concat_vec_envs_v1(env, n_envs, num_cpus=1, base_class="stable_baselines3")
    # ConcatVecEnv has no seed() (gymnasium 1.x), which SB3's seeding calls: seed the copies with one reset.
    env.venv.reset(seed=seed)
    return env


class _Checkpoints(BaseCallback):
    """Evaluates when training has passed each budget (after that rollout's update); keeps its time apart."""

    def __init__(
        self,
        budgets: Sequence[int],
        start: int,
        episodes: int,
        eval_seed: int,
        on_checkpoint: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        super().__init__()
        self.start = start  # agent-steps trained before this run (a loaded model's)
        self.pending = sorted(budgets)  # in agent-steps
        self.episodes, self.eval_seed = episodes, eval_seed
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        self.on_checkpoint = on_checkpoint
        self.eval_s = self.eval_cpu_s = 0.0
        self.collect_s = self.collect_cpu_s = 0.0  # inside rollouts (env steps + policy forward), no updates
        self._rollout_t0 = self._rollout_cpu0 = 0.0
        self.results: list[dict[str, Any]] = []

    def train_s(self) -> float:
        """Wall seconds since the start spent outside evaluation."""
        return time.perf_counter() - self.t0 - self.eval_s

    def train_cpu_s(self) -> float:
        """CPU seconds of this process since the start spent outside evaluation."""
        return time.process_time() - self.cpu0 - self.eval_cpu_s

    def check(self) -> None:
        """Evaluate every pending budget already reached."""
        while self.pending and self.pending[0] <= self.model.num_timesteps:
            budget = self.pending.pop(0)
            steps, wall, cpu = self.model.num_timesteps - self.start, self.train_s(), self.train_cpu_s()
            t, c = time.perf_counter(), time.process_time()
            ev = eval_sb3(self.model, self.episodes, self.eval_seed)
            self.eval_s += time.perf_counter() - t
            self.eval_cpu_s += time.process_time() - c
            total = self.model.num_timesteps
            row = {
                "env_steps_budget": budget // N_AGENTS,
                "env_steps": total // N_AGENTS,
                "agent_steps": total,
                "train_wall_s": wall,
                "agent_steps_per_s": steps / wall if wall > 0 else 0.0,
                "train_cpu_s": cpu,
                **ev,
            }
            self.results.append(row)
            if self.on_checkpoint is not None:
                self.on_checkpoint(row)

    def _on_rollout_start(self) -> None:
        self.check()
        self._rollout_t0, self._rollout_cpu0 = time.perf_counter(), time.process_time()

    def _on_rollout_end(self) -> None:
        self.collect_s += time.perf_counter() - self._rollout_t0
        self.collect_cpu_s += time.process_time() - self._rollout_cpu0

    def _on_step(self) -> bool:
        return True


def train_sb3_ippo(
    env_steps: int,
    seed: int,
    n_envs: int = 8,
    threads: int = 1,
    *,
    checkpoints: Sequence[int] = (),
    eval_episodes: int = 50,
    eval_seed: int = EVAL_SEED,
    load: str | None = None,
    save: str | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    **ppo_kwargs: Any,
) -> dict:
    """Train SB3 PPO (MlpPolicy shared by the agents) for ``env_steps`` env steps, then evaluate it.

    ``ppo_kwargs`` override the book's settings (``BOOK_PPO``, otherwise SB3 defaults). ``checkpoints``:
    further env-step budgets at which the policy is also evaluated during the run. Returns ``env_steps`` and
    ``agent_steps`` actually trained (this call only, rounded up to whole rollouts), ``wall_s`` (training
    incl. env steps and updates, without evaluation and setup), ``agent_steps_per_s``, ``env_steps_per_s``,
    ``cpu_s`` and ``agent_steps_per_cpu_s`` (the same on this process's CPU time: steadier on a shared CPU),
    ``collect_wall_s``/``collect_cpu_s`` (the part spent collecting rollouts; the rest is PPO updates),
    the final evaluation (``return_mean``, ``return_std``), ``checkpoints`` (one dict each) and the settings.
    """
    torch.set_num_threads(threads)
    load_start = os.getloadavg()[0]  # the CPU may be shared: the 1-minute load average, before and after
    set_random_seed(seed)
    env = make_sb3_env(n_envs, seed)
    kwargs = {**BOOK_PPO, **ppo_kwargs}
    if load is not None:
        model = PPO.load(load, env=env, **kwargs)
        # a continued run must not replay the first run's episodes: offset the seeds by the steps done
        set_random_seed(seed + model.num_timesteps)
        env.venv.reset(seed=seed + model.num_timesteps)
    else:
        model = PPO("MlpPolicy", env, verbose=0, **kwargs)
    start_steps = model.num_timesteps
    budgets = [start_steps + N_AGENTS * b for b in checkpoints if b <= env_steps]
    cb = _Checkpoints(budgets, start_steps, eval_episodes, eval_seed, on_checkpoint)
    model.learn(total_timesteps=N_AGENTS * env_steps, callback=cb, reset_num_timesteps=load is None)
    wall, cpu = cb.train_s(), cb.train_cpu_s()
    cb.check()  # the budgets passed in the last rollout (all budgets are <= env_steps, so none is left)
    steps = model.num_timesteps - start_steps
    last = cb.results[-1] if cb.results else {}
    if last.get("agent_steps") == model.num_timesteps:  # the last checkpoint evaluated this very policy
        final = {k: last[k] for k in ("return_mean", "return_std", "episodes")}
    else:
        final = eval_sb3(model, eval_episodes, eval_seed)
    if save is not None:
        model.save(save)
    env.close()
    settings = {
        k: getattr(model, k)
        for k in (
            "n_steps",
            "batch_size",
            "n_epochs",
            "gamma",
            "gae_lambda",
            "ent_coef",
            "vf_coef",
            "max_grad_norm",
        )
    }
    settings["learning_rate"] = model.learning_rate
    settings["clip_range"] = model.clip_range(1.0)
    settings["net_arch"] = str(model.policy.net_arch)
    return {
        "algo": "sb3_ppo_supersuit_shared",
        "seed": seed,
        "n_envs": n_envs,
        "threads": threads,
        "env_steps_requested": env_steps,
        "env_steps": steps // N_AGENTS,
        "agent_steps": steps,
        "total_agent_steps": model.num_timesteps,
        "wall_s": wall,
        "agent_steps_per_s": steps / wall,
        "env_steps_per_s": steps / N_AGENTS / wall,
        "cpu_s": cpu,
        "agent_steps_per_cpu_s": steps / cpu,
        "collect_wall_s": cb.collect_s,
        "collect_cpu_s": cb.collect_cpu_s,
        "updates": steps // (model.n_steps * env.num_envs),
        **final,
        "eval_episodes": eval_episodes,
        "eval_seed": eval_seed,
        "checkpoints": cb.results,
        "ppo": settings,
        "env": dict(ENV_KWARGS),
        "loaded_from": load,
        "loadavg_1min": [load_start, os.getloadavg()[0]],
        "cpus": os.cpu_count(),
        "versions": {"torch": torch.__version__, "sb3": sb3.__version__, "supersuit": ss.__version__},
    }


def _parse_ppo(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs, values as Python literals."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = ast.literal_eval(value)
    return out


def main() -> None:
    """``refs``: random and heuristic scores. ``train``: one SB3 run with checkpoints, written to JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    refs = sub.add_parser("refs", help="random and heuristic returns")
    refs.add_argument("--episodes", type=int, default=50)
    refs.add_argument("--seed", type=int, default=EVAL_SEED)
    refs.add_argument("--json", type=Path)
    tr = sub.add_parser("train", help="train SB3 IPPO, evaluating at each --env-steps budget")
    tr.add_argument("--env-steps", type=int, nargs="+", required=True, help="budgets in env (joint) steps")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--threads", type=int, default=1)
    tr.add_argument("--n-envs", type=int, default=8)
    tr.add_argument("--episodes", type=int, default=50)
    tr.add_argument("--ppo", nargs="*", default=[], help="PPO overrides, key=value")
    tr.add_argument("--json", type=Path)
    tr.add_argument("--save")
    tr.add_argument("--load")
    args = parser.parse_args()
    torch.set_num_threads(1)

    def dump(obj: dict[str, Any]) -> None:
        print(json.dumps(obj, indent=1), flush=True)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(obj, indent=1) + "\n")

    if args.cmd == "refs":
        dump(
            {
                "random": eval_random(args.episodes, args.seed),
                "heuristic": eval_heuristic(args.episodes, args.seed),
                "env": ENV_KWARGS,
                "eval_seed": args.seed,
            }
        )
        return
    partial: dict[str, Any] = {"status": "running", "seed": args.seed, "checkpoints": []}

    def on_checkpoint(row: dict[str, Any]) -> None:
        partial["checkpoints"].append(row)
        dump(partial)

    res = train_sb3_ippo(
        max(args.env_steps),
        args.seed,
        args.n_envs,
        args.threads,
        checkpoints=args.env_steps,
        eval_episodes=args.episodes,
        load=args.load,
        save=args.save,
        on_checkpoint=on_checkpoint,
        **_parse_ppo(args.ppo),
    )
    dump({"status": "done", **res})


if __name__ == "__main__":
    main()
