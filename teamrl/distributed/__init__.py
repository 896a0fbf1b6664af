"""The Ray backend (``run.backend: ray``): rollout workers, the learner and sandbox workers as Ray
actors, called as the local trainer calls its own parts. Importing this package imports neither Ray
nor torch (a sandbox worker's process loads it for ``ray_sandbox`` alone): each name below loads its
module on first use, and :class:`RayRollouts` / :class:`RayLearner` say how to install Ray where it
is missing."""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "RAY_MISSING": "cluster",
    "ActorLost": "cluster",
    "connect": "cluster",
    "require_ray": "cluster",
    "LearnerLost": "ray_learner",
    "RayLearner": "ray_learner",
    "LearnerWorker": "learner_worker",
    "RayRollouts": "ray_rollouts",
    "RolloutWorkerLost": "ray_rollouts",
    "RolloutWorker": "rollout_worker",
    "ShardResult": "rollout_worker",
    "RaySandbox": "ray_sandbox",
    "SandboxWorker": "ray_sandbox",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
