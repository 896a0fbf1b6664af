"""Algorithm names -> (module, preset). A module exposes ``Config``, ``train(cfg, run)`` and
``make_actor(checkpoint) -> actor``; a preset fixes the fields that make the named variant."""

from __future__ import annotations

import importlib
import itertools
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError

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


def nest(overrides: dict[str, Any]) -> dict[str, Any]:
    """``{"model.horizon": 3}`` -> ``{"model": {"horizon": 3}}`` (merged with a ``model`` given whole)."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            child = node.get(part)
            node[part] = child = dict(child) if isinstance(child, dict) else {}
            node = child
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            value = {**node[leaf], **value}
        node[leaf] = value
    return out


def preset_config(
    model: type[BaseModel], base: dict[str, Any], env_defaults: dict[str, Any], user: dict[str, Any]
) -> tuple[BaseModel, list[str]]:
    """``model`` from ``base`` (the algorithm's preset), ``env_defaults`` (:func:`env_preset`), then the
    ``user``'s settings (``--set`` keys, dotted ones nested: :func:`nest`); and the env-preset keys left out.
    An env preset only sets defaults, so keys of it that the user's own settings rule out give way: where the
    merged settings are invalid and leaving out the fewest env-preset keys the user did not set (at most
    three; later keys first) makes them valid, those keys are left out (``--set entity_actor=false`` on
    simple_spread drops the preset's ``shared_encoder``, which needs the entity actor). Otherwise the merged
    settings' ``ValidationError`` is raised."""
    user = nest(user)
    try:
        return model(**{**base, **env_defaults, **user}), []
    except ValidationError as err:
        free = [k for k in reversed(env_defaults) if k not in user]
        for size in range(1, min(3, len(free)) + 1):
            for drop in itertools.combinations(free, size):
                rest = {k: v for k, v in env_defaults.items() if k not in drop}
                try:
                    return model(**{**base, **rest, **user}), list(drop)
                except ValidationError:
                    continue
        raise err
