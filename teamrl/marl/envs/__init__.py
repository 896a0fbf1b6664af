"""Environments for :mod:`teamrl.marl`, all behind :func:`make_vec_env`.

* ``simple_spread``, ``simple_tag``, ``simple_adversary``: the batched numpy MPE (fast; agrees with
  mpe2 step by step), ``kwargs`` go to the scenario (e.g. ``N``, ``local_ratio``, ``max_cycles``);
* ``mpe2:<module>`` (e.g. ``mpe2:simple_spread_v3``): any mpe2 env through :class:`PettingZooVecEnv`,
  ``kwargs`` go to its ``parallel_env``;
* ``lbf:<id>``, ``rware:<id>`` (e.g. ``lbf:Foraging-8x8-2p-3f-v3``, ``rware:rware-tiny-2ag-v2``): Level-Based
  Foraging and the multi-robot warehouse (pip ``lbforaging``, ``rware``) through
  :class:`~teamrl.marl.envs.gym_tuple.GymTupleParallelEnv` and :class:`PettingZooVecEnv`, ``kwargs`` to
  ``gymnasium.make``;
* ``vmas:<scenario>`` (e.g. ``vmas:balance``, ``vmas:navigation``): VMAS's torch-vectorised scenarios, batched
  by VMAS itself (:class:`~teamrl.marl.envs.vmas_env.VmasVecEnv`; pip ``vmas``);
* ``connect_four``, ``tictactoe``: PettingZoo classic games through :class:`TurnBasedVecEnv`;
* ``package.module:factory`` or ``path/to/file.py:factory``: the user's own PettingZoo ``ParallelEnv``
  (``factory(**kwargs)``) through :class:`PettingZooVecEnv` (see :mod:`teamrl.marl.envs.user`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

from teamrl.marl.core import VecMultiAgentEnv
from teamrl.marl.envs.adapters import PettingZooVecEnv, TurnBasedVecEnv
from teamrl.marl.envs.mpe import SCENARIOS, BatchedMPE, BatchedMPEParallelEnv, parallel_env
from teamrl.marl.envs.user import is_import_path, make_user_vec_env

TURN_BASED_GAMES = {
    "connect_four": "pettingzoo.classic.connect_four_v3",
    "tictactoe": "pettingzoo.classic.tictactoe_v3",
}

__all__ = [
    "SCENARIOS",
    "BatchedMPE",
    "BatchedMPEParallelEnv",
    "PettingZooVecEnv",
    "TurnBasedVecEnv",
    "list_envs",
    "make_vec_env",
    "parallel_env",
]


def _mpe2_modules() -> list[str]:
    try:
        import mpe2
    except ImportError:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(mpe2.__path__) if re.fullmatch(r".+_v\d+", m.name))


def list_envs() -> list[str]:
    """Every name :func:`make_vec_env` accepts."""
    from teamrl.marl.envs.gym_tuple import EXAMPLES
    from teamrl.marl.envs.vmas_env import scenarios as vmas_scenarios

    gym_tuple = [f"{prefix}:{example}" for prefix, example in EXAMPLES.items()]  # and every id of theirs
    vmas = [f"vmas:{s}" for s in vmas_scenarios()]
    return [*SCENARIOS, *(f"mpe2:{m}" for m in _mpe2_modules()), *gym_tuple, *vmas, *TURN_BASED_GAMES]


def simple_spread_slots(env: VecMultiAgentEnv, kwargs: dict[str, Any]) -> tuple[int, int, int] | None:
    """The landmark slots (start, count, width) of mpe2 simple_spread's observation, derived from its
    arguments: velocity and position (4 values), then one relative position per landmark it sees (all N, or
    ``num_landmark_neighbors``, zero-padded), then the other agents' positions and messages. None (so an
    entity actor refuses the env with a clear error) when the observation does not have that layout."""
    n = int(kwargs.get("N", 3))
    landmarks = kwargs.get("num_landmark_neighbors") or n
    others = kwargs.get("num_agent_neighbors") or n - 1
    width = 4 + 2 * int(landmarks) + (2 + 2) * int(others)  # other agents: position and a 2-d message
    shapes = {env.observation_spaces[a].shape for a in env.agents}
    return (4, int(landmarks), 2) if shapes == {(width,)} else None


def make_vec_env(name: str, num_envs: int, seed: int | None = None, **kwargs: Any) -> VecMultiAgentEnv:
    """``num_envs`` copies of the env ``name`` (see :func:`list_envs`); ``seed`` fixes the first reset."""
    if name in SCENARIOS:
        return SCENARIOS[name](num_envs=num_envs, seed=seed, **kwargs)
    if name.startswith("mpe2:") and name[len("mpe2:") :] in _mpe2_modules():
        module = importlib.import_module(f"mpe2.{name[len('mpe2:') :]}")
        env = PettingZooVecEnv(lambda: module.parallel_env(**kwargs), num_envs, seed=seed)
        if name == "mpe2:simple_spread_v3":
            slots = simple_spread_slots(env, kwargs)
            if slots is not None:  # an attribute only some envs have (ppo reads it with getattr)
                env.entity_slots = {a: slots for a in env.agents}  # type: ignore[attr-defined]
        return env
    if name.startswith("vmas:"):
        from teamrl.marl.envs.vmas_env import VmasVecEnv

        return VmasVecEnv(name[len("vmas:") :], num_envs, seed, **kwargs)
    if name.partition(":")[0] in ("lbf", "rware"):
        from teamrl.marl.envs import gym_tuple

        gym_tuple.parallel_env(name, **kwargs).close()  # an unknown id or a missing package: one clear line
        return PettingZooVecEnv(lambda: gym_tuple.parallel_env(name, **kwargs), num_envs, seed=seed)
    if name in TURN_BASED_GAMES:
        module = importlib.import_module(TURN_BASED_GAMES[name])
        return TurnBasedVecEnv(lambda: module.env(**kwargs), num_envs, seed=seed)
    if is_import_path(name):
        return make_user_vec_env(name, num_envs, seed, **kwargs)
    hint = " (a file needs its factory: path/to/file.py:factory)" if name.endswith(".py") else ""
    raise ValueError(
        f"unknown env {name!r}{hint}; valid names: {', '.join(list_envs())}, or your own PettingZoo "
        "ParallelEnv as package.module:factory or path/to/file.py:factory"
    )
