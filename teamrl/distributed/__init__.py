"""The Ray backend (``run.backend: ray``): rollout workers as Ray actors, the same calls as the local
trainer. Importing this package does not import Ray; :class:`RayRollouts` does, and says how to install
it where it is missing."""

from teamrl.distributed.ray_rollouts import RAY_MISSING, RayRollouts, RolloutWorkerLost, require_ray
from teamrl.distributed.rollout_worker import RolloutWorker, ShardResult

__all__ = ["RAY_MISSING", "RayRollouts", "RolloutWorker", "RolloutWorkerLost", "ShardResult", "require_ray"]
