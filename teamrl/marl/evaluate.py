"""Evaluate an actor for whole episodes on a vectorised env, with the return definition of run.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from teamrl.marl.core import VecMultiAgentEnv, VecStep

Actor = Callable[[VecStep], dict[str, np.ndarray]]


def evaluate(actor: Actor, env: VecMultiAgentEnv, episodes: int, seed: int = 12345) -> dict[str, Any]:
    """Play ``episodes`` episodes; returns mean/std of the return summed over agents, the per-agent means,
    the mean episode length and ``returns``, every counted episode's return (copy by copy, each copy's
    episodes in order: the same list, in the same order, for every policy evaluated on the same env and
    seed, so policies can be compared episode by episode and aggregated with ``teamrl.marl.stats``).

    Unbiased for envs whose episodes vary in length: the counted episodes are fixed before play, the
    first ``episodes // B`` of every copy (one more for the first ``episodes % B`` copies), not the first
    ``episodes`` to finish across copies, which would over-count short episodes. Copies that have played
    their share keep stepping (the env steps all copies at once) but are not counted."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes}: evaluate at least one episode")
    B = env.num_envs
    quota = np.full(B, episodes // B, dtype=np.int64)
    quota[: episodes % B] += 1
    counted = np.zeros(B, dtype=np.int64)
    step = env.reset(seed=seed)
    running = {a: np.zeros(B) for a in env.agents}
    length = np.zeros(B, dtype=np.int64)
    totals: list[float] = []
    by_copy: list[list[float]] = [[] for _ in range(B)]
    per_agent: dict[str, list[float]] = {a: [] for a in env.agents}
    lengths: list[int] = []
    while (counted < quota).any():
        step = env.step(actor(step))
        length += 1
        for a in env.agents:
            running[a] += step.rewards[a]
        for i in np.flatnonzero(step.done):
            if counted[i] < quota[i]:
                totals.append(float(sum(running[a][i] for a in env.agents)))
                by_copy[i].append(totals[-1])
                for a in env.agents:
                    per_agent[a].append(float(running[a][i]))
                lengths.append(int(length[i]))
                counted[i] += 1
            for a in env.agents:
                running[a][i] = 0.0
            length[i] = 0
    out: dict[str, Any] = {
        "return/mean": float(np.mean(totals)),
        "return/std": float(np.std(totals)),
        "episode_length": float(np.mean(lengths)),
        "episodes": float(len(totals)),
    }
    out.update({f"return/{a}": float(np.mean(v)) for a, v in per_agent.items()})
    out["returns"] = [r for copy in by_copy for r in copy]
    return out


def random_actor(env: VecMultiAgentEnv, seed: int = 0) -> Actor:
    """Uniform over allowed actions (respects action masks), for baselines and smoke tests."""
    rng = np.random.default_rng(seed)

    def act(step: VecStep) -> dict[str, np.ndarray]:
        out = {}
        for a in env.agents:
            space: Any = env.action_spaces[a]  # a Discrete (has n) or a Box
            if hasattr(space, "n"):
                if step.action_masks is not None and a in step.action_masks:
                    m = step.action_masks[a].astype(np.float64)
                    p = m / m.sum(axis=1, keepdims=True)
                    out[a] = np.array([rng.choice(len(row), p=row) for row in p], dtype=np.int64)
                else:
                    out[a] = rng.integers(0, space.n, size=env.num_envs, dtype=np.int64)
            else:
                out[a] = rng.uniform(space.low, space.high, size=(env.num_envs, *space.shape)).astype(
                    np.float32
                )
        return out

    return act
