"""Algorithm names -> (module, preset). A module exposes ``Config``, ``train(cfg, run)`` and
``make_actor(checkpoint) -> actor``; a preset fixes the fields that make the named variant."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

ALGORITHMS: dict[str, tuple[str, dict[str, Any]]] = {
    "ippo": ("teamrl.marl.ppo", {"centralised_critic": False}),
    "mappo": ("teamrl.marl.ppo", {"centralised_critic": True}),
    "qmix": ("teamrl.marl.qmix", {"mixer": "qmix"}),
    "vdn": ("teamrl.marl.qmix", {"mixer": "vdn"}),
    "maddpg": ("teamrl.marl.maddpg", {}),
}


def algorithm(name: str) -> tuple[ModuleType, dict[str, Any]]:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(sorted(ALGORITHMS))}")
    module, preset = ALGORITHMS[name]
    return importlib.import_module(module), dict(preset)


def env_preset(module: ModuleType, env: str) -> dict[str, Any]:
    """The algorithm module's defaults for ``env`` (its ``ENV_PRESETS``): by the env's exact name, else by
    its family, the name up to and with the first ``:`` (``"lbf:"`` covers every Level-Based Foraging id)."""
    presets: dict[str, dict[str, Any]] = getattr(module, "ENV_PRESETS", {})
    if env in presets:
        return dict(presets[env])
    family, colon, _ = env.partition(":")
    return dict(presets.get(family + colon, {})) if colon else {}
