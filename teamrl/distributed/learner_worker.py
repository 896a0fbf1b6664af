"""The learner of the Ray backend: a :class:`teamrl.trainer.learner.Learner` on policies of its own.

It runs inside a Ray actor (:class:`teamrl.distributed.RayLearner` wraps it with ``ray.remote``) but
imports nothing of Ray, so it is also an ordinary object in this process.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from teamrl.config import Config
from teamrl.distributed.cluster import base_fingerprints
from teamrl.distributed.weights import (
    AdapterWeights,
    adapter_fingerprints,
    adapter_versions,
    adapter_weights,
    hf_policy,
    load_adapter_weights,
)
from teamrl.protocol import Episode
from teamrl.trainer.build import build_policies
from teamrl.trainer.learner import LEARNER_FILES, Learner, ref_adapter

LearnerFiles = dict[str, bytes]
"""What ``Learner.save`` wrote (the optimizers, the critic): path relative to the checkpoint -> bytes."""


@dataclass
class UpdateResult:
    """The update's metrics and the new weights of every adapter it changed."""

    stats: dict[str, float]
    weights: AdapterWeights


class LearnerWorker:
    """Builds every policy of ``cfg`` as the trainer does and runs the trainer's own ``Learner`` on them;
    the adapters are the driver's, sent before each update (a role's SFT snapshot is made here the
    first time it is sent)."""

    def __init__(self, cfg: Config) -> None:
        torch.set_num_threads(cfg.run.threads)
        transformers.utils.logging.disable_progress_bar()
        self.policies = build_policies(cfg, progress=False)
        self.learner = Learner(cfg, self.policies)
        self.snapshots = {ref_adapter(r): r for r in cfg.role_order() if cfg.seat(r).adapter}

    def base_fingerprints(self) -> dict[str, str]:
        return base_fingerprints(self.policies)

    def adapter_fingerprints(self) -> dict[str, str]:
        return adapter_fingerprints(self.policies)

    def update(
        self, weights: AdapterWeights, episodes: list[Episode], roles: tuple[str, ...], step: int
    ) -> UpdateResult:
        """Load ``weights``, run ``Learner.update`` and return the adapters it changed."""
        for policy, adapters in weights.items():
            pol = hf_policy(self.policies, policy)
            for adapter in adapters.keys() - set(pol.adapter_names):
                pol.copy_adapter(self.snapshots[adapter], adapter)
        load_adapter_weights(self.policies, weights)
        keys = [(self.learner.policy_of(r).name, r) for r in roles]
        before = adapter_versions(self.policies, keys)
        stats = self.learner.update(episodes, roles, step)
        after = adapter_versions(self.policies, keys)
        return UpdateResult(stats, adapter_weights(self.policies, [k for k in keys if after[k] != before[k]]))

    def save(self) -> LearnerFiles:
        """What ``Learner.save`` writes, for the driver to put into its checkpoint."""
        with tempfile.TemporaryDirectory(prefix="teamrl-learner-") as tmp:
            self.learner.save(Path(tmp))
            return read_files(Path(tmp))

    def load(self, files: LearnerFiles) -> None:
        """``Learner.load`` of what :meth:`save` returned (read back from a checkpoint)."""
        with tempfile.TemporaryDirectory(prefix="teamrl-learner-") as tmp:
            write_files(Path(tmp), files)
            self.learner.load(Path(tmp))


def read_files(directory: Path) -> LearnerFiles:
    """The files ``Learner.save`` writes, as they are in ``directory`` (a checkpoint holds more)."""
    found = [directory / name for name in LEARNER_FILES if (directory / name).exists()]
    files = [f for top in found for f in ([top] if top.is_file() else sorted(top.rglob("*"))) if f.is_file()]
    return {str(f.relative_to(directory)): f.read_bytes() for f in files}


def write_files(directory: Path, files: LearnerFiles) -> None:
    for name, data in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
