"""The book's IPPO snippet (SB3 PPO + SuperSuit, one policy shared by all agents) on simple_spread, repaired.

The book's version, for reference::

    from pettingzoo.mpe import simple_spread_v3
    from stable_baselines3 import PPO
    import supersuit as ss
    env = simple_spread_v3.env(N=3)
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    env = ss.concat_vec_envs_v1(env, 8, num_cpus=1, base_env="single")
    model = PPO("MlpPolicy", env, verbose=1, learning_rate=3e-4, n_steps=2048)
    model.learn(total_timesteps=200_000)
    model.save("./models/ippo_simple_spread")

Each change is marked ``FIX n`` below; the error it repairs was reproduced with pettingzoo 1.27, mpe2 1.1.1,
supersuit 3.11.0, stable-baselines3 2.9.2, gymnasium 1.4.

SuperSuit turns every agent of every env copy into one SB3 "env": with 8 copies of 3 agents, SB3 sees 24
envs and its ``total_timesteps`` counts agent-steps (3 per joint env step). ``learn`` always finishes the
rollout it is in, so it stops at the next multiple of ``n_steps * 24`` agent-steps.

    .venv/bin/python examples/marl/sb3_supersuit_ippo.py [--timesteps 50000] [--seed 0]
        [--out runs/sb3_ippo_simple_spread]
"""

from __future__ import annotations

import argparse

import supersuit as ss
import torch

# FIX 1: MPE left PettingZoo. ``from pettingzoo.mpe import simple_spread_v3`` now raises
#   ImportError: MPE has been moved into its own package: MPE2. Install with `pip install mpe2`. ...
# The same environment (same version suffix) lives in the mpe2 package.
from mpe2 import simple_spread_v3
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed


def main() -> None:
    """Train the shared-parameter PPO policy and save it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # The book trains 200_000 agent-steps; the default here takes about a minute on one CPU thread.
    parser.add_argument("--timesteps", type=int, default=50_000, help="SB3 timesteps = agent-steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/sb3_ippo_simple_spread", help="model path (.zip is added)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    # FIX 2: pettingzoo_env_to_vec_env_v1 only takes a ParallelEnv; with the AEC ``env(N=3)`` it fails with
    #   AssertionError: pettingzoo_env_to_vec_env takes in a pettingzoo ParallelEnv. ...
    env = simple_spread_v3.parallel_env(N=3)
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    # FIX 3: concat_vec_envs_v1 has no ``base_env`` argument (TypeError: ... unexpected keyword argument
    # 'base_env'), and without ``base_class="stable_baselines3"`` it returns a gymnasium VectorEnv that SB3
    # rejects (ValueError: The environment is of type <class 'supersuit.vector.concat_vec_env.ConcatVecEnv'>,
    # not a Gymnasium environment. ...).
    env = ss.concat_vec_envs_v1(env, 8, num_cpus=1, base_class="stable_baselines3")
    # FIX 4: seeding. The book passes no seed, so every run differs (the envs draw OS entropy). The usual
    # ``PPO(..., seed=s)`` or ``env.reset(seed=s)`` ends in ConcatVecEnv.seed, which gymnasium 1.x vector
    # envs no longer have (AttributeError: 'ConcatVecEnv' object has no attribute 'seed'). So: seed
    # python/numpy/torch through SB3's helper, and seed the env copies (s, s+1, ...) with one reset of the
    # ConcatVecEnv under SB3's wrapper; their generators carry on through SB3's own unseeded resets.
    set_random_seed(args.seed)
    env.venv.reset(seed=args.seed)
    model = PPO("MlpPolicy", env, verbose=1, learning_rate=3e-4, n_steps=2048)
    model.learn(total_timesteps=args.timesteps)
    model.save(args.out)
    print(
        f"saved {args.out}.zip after {model.num_timesteps} agent-steps ({model.num_timesteps // 3} env steps)"
    )
    env.close()


if __name__ == "__main__":
    main()
