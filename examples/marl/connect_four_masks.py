"""Two agents play connect four, each choosing a random *legal* column from ``observation["action_mask"]``.

PettingZoo's AEC loop: ``env.agent_iter()`` yields the agent to move, ``env.last()`` gives its
observation (a dict with the board planes and the action mask), and a finished agent must "step" with
``None``. Run: ``python examples/marl/connect_four_masks.py [--games 5] [--seed 0]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from pettingzoo.classic import connect_four_v3


def play(seed: int) -> dict[str, float]:
    """One game with uniformly random legal moves; returns each player's total reward."""
    env = connect_four_v3.env(render_mode=None)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    totals = {agent: 0.0 for agent in env.agents}
    for agent in env.agent_iter():
        observation, reward, termination, truncation, _ = env.last()
        totals[agent] += reward
        if termination or truncation:
            action = None  # the game is over for this agent
        else:
            legal = np.flatnonzero(observation["action_mask"])  # columns that are not full
            action = int(rng.choice(legal))
        env.step(action)
    env.close()
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    wins = {"player_0": 0, "player_1": 0, "draw": 0}
    for game in range(args.games):
        totals = play(args.seed + game)
        best = max(totals, key=totals.get)
        outcome = best if totals[best] > 0 else "draw"
        wins[outcome] += 1
        print(f"game {game}: rewards {totals} -> {'draw' if outcome == 'draw' else outcome + ' wins'}")
    print(f"summary over {args.games} games: {wins}")


if __name__ == "__main__":
    main()
