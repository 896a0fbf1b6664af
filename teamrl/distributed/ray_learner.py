"""The driver's side of the Ray learner: the policy update runs in one Ray actor holding the models and
optimizers (:class:`teamrl.distributed.LearnerWorker`), called as the local ``Learner`` is.

Before an update the actor is sent the role adapters (and their SFT snapshots, the KL references)
whose weights changed on the driver since it last got them, then the batch (the verified, credited
episodes: token ids, log-probs, rewards); it runs ``Learner.update`` and returns the metrics and the new
weights of the adapters it changed, which the driver loads into its own policies. The driver's copy is
then what rollout workers are sent and what the checkpoint saves; the optimizers' (and the critic's)
state come from the actor at every checkpoint. A learner that dies stops the run (``LearnerLost``): its
optimizer state exists only there, so ``--resume`` continues from the last checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from teamrl.config import Config
from teamrl.distributed.cluster import ActorLost, base_fingerprints, check_bases, require_ray
from teamrl.distributed.learner_worker import (
    LearnerFiles,
    LearnerWorker,
    UpdateResult,
    read_files,
    write_files,
)
from teamrl.distributed.weights import (
    AdapterKey,
    Policies,
    adapter_versions,
    adapter_weights,
    hf_policy,
    load_adapter_weights,
)
from teamrl.protocol import Episode
from teamrl.trainer.learner import ref_adapter


class LearnerLost(ActorLost):
    """The learner actor died; the run continues from its last checkpoint with ``--resume``."""


class RayLearner:
    """``update`` / ``save`` / ``load`` as ``Learner`` has them, run by a learner actor that starts at the
    first call (after the driver has built, and cached, the base models it loads). Ray must be
    initialised (:func:`teamrl.distributed.cluster.connect`)."""

    def __init__(self, cfg: Config, policies: Policies) -> None:
        require_ray()
        import ray

        self.cfg, self.policies = cfg, policies
        r = cfg.ray
        self._actor = ray.remote(LearnerWorker).options(
            num_cpus=r.num_cpus_per_learner, num_gpus=r.num_gpus_per_learner, max_restarts=0
        )
        self.worker: Any = None
        self._held: dict[AdapterKey, int] = {}  # adapter -> weights_version the actor holds
        self._loaded: LearnerFiles | None = None  # a checkpoint's learner state, for the actor to load
        self.roles = [(cfg.seat(r).policy, r) for r in cfg.role_order() if cfg.seat(r).adapter]

    def _call(self, method: str, *args: Any) -> Any:
        """``method`` of the actor (started first where it is not running yet)."""
        import ray

        try:
            if self.worker is None:
                self.worker = self._actor.remote(self.cfg)
                bases = ray.get(self.worker.base_fingerprints.remote())
                check_bases(base_fingerprints(self.policies), bases, "the learner actor")
                if self._loaded is not None:
                    ray.get(self.worker.load.remote(self._loaded))
            return ray.get(getattr(self.worker, method).remote(*args))
        except ray.exceptions.RayActorError as exc:
            raise LearnerLost(
                f"the Ray learner actor died ({type(exc).__name__}: {exc}); its optimizer state is lost "
                "with it, so the run continues from its last checkpoint"
            ) from None

    def update(self, episodes: list[Episode], roles: tuple[str, ...], step: int) -> dict[str, float]:
        """``Learner.update`` in the actor; the adapters it changed are then loaded here."""
        keys = [
            (policy, adapter)
            for policy, role in self.roles
            for adapter in (role, ref_adapter(role))
            if adapter in hf_policy(self.policies, policy).adapter_names
        ]
        versions = adapter_versions(self.policies, keys)
        stale = [k for k in keys if self._held.get(k) != versions[k]]
        weights = adapter_weights(self.policies, stale)
        result: UpdateResult = self._call("update", weights, episodes, roles, step)
        load_adapter_weights(self.policies, result.weights)
        self._held = adapter_versions(self.policies, keys)
        return result.stats

    def save(self, directory: Path) -> None:
        """``Learner.save`` into ``directory`` (the driver's checkpoint being written), from the actor."""
        write_files(directory, self._call("save"))

    def load(self, directory: Path) -> None:
        """Keep the learner's part of the checkpoint in ``directory`` for the actor (now or at its start)."""
        self._loaded = read_files(directory)
        if self.worker is not None:
            self._call("load", self._loaded)

    def adapter_fingerprints(self) -> dict[str, str]:
        """``policy/adapter`` -> fingerprint, as the actor holds them."""
        return self._call("adapter_fingerprints")

    def close(self) -> None:
        """Stop the actor."""
        import ray

        if self.worker is not None:
            ray.kill(self.worker, no_restart=True)
            self.worker = None
