"""Random actions on simple_spread (N=3, local_ratio=0.5, max_cycles=25): mpe2's PettingZoo parallel env
and the batched numpy copy in ``teamrl.marl.envs``, so the two mean returns can be compared.

Run: ``python examples/marl/simple_spread_random.py [--episodes 50] [--seed 0]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpe2 import simple_spread_v3

from teamrl.marl.envs import make_vec_env
from teamrl.marl.evaluate import evaluate, random_actor

KWARGS = {"N": 3, "local_ratio": 0.5, "max_cycles": 25}


def mpe2_episode(seed: int) -> dict[str, float]:
    """One episode of uniformly random actions on mpe2's parallel env; each agent's return."""
    env = simple_spread_v3.parallel_env(**KWARGS)
    observations, _ = env.reset(seed=seed)
    for i, agent in enumerate(env.agents):
        env.action_space(agent).seed(1000 * seed + i)
    returns = {agent: 0.0 for agent in env.agents}
    while env.agents:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        observations, rewards, terminations, truncations, _ = env.step(actions)
        for agent, reward in rewards.items():
            returns[agent] += reward
    env.close()
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    episodes = [mpe2_episode(args.seed + e) for e in range(args.episodes)]
    first = episodes[0]
    print(
        "one mpe2 episode:", {a: round(r, 2) for a, r in first.items()}, "sum", round(sum(first.values()), 2)
    )
    sums = [sum(ep.values()) for ep in episodes]
    print(
        f"mpe2 parallel_env, {args.episodes} episodes: return (sum over agents) "
        f"{np.mean(sums):.2f} +- {np.std(sums) / np.sqrt(len(sums)):.2f} (mean +- s.e.); per agent "
        + ", ".join(f"{a} {np.mean([ep[a] for ep in episodes]):.2f}" for a in first)
    )

    env = make_vec_env("simple_spread", num_envs=args.episodes, seed=args.seed, **KWARGS)
    out = evaluate(random_actor(env, args.seed), env, episodes=args.episodes, seed=args.seed)
    print(
        f"batched simple_spread, {args.episodes} episodes: return (sum over agents) "
        f"{out['return/mean']:.2f} +- {out['return/std'] / np.sqrt(out['episodes']):.2f}; per agent "
        + ", ".join(f"{a} {out['return/' + a]:.2f}" for a in env.agents)
    )


if __name__ == "__main__":
    main()
