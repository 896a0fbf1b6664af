"""A rollout worker: the policies, engine, team and sandbox of one process, playing a share of a rollout.

It runs inside a Ray actor (:class:`teamrl.distributed.RayRollouts` wraps it with ``ray.remote``) but
imports nothing of Ray, so it is also an ordinary object in this process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import transformers

from teamrl.config import Config
from teamrl.distributed.cluster import base_fingerprints
from teamrl.distributed.weights import AdapterWeights, adapter_fingerprints, load_adapter_weights
from teamrl.engine.engine import Engine
from teamrl.protocol import Episode
from teamrl.trainer.build import (
    Task,
    build_policies,
    build_sandbox,
    build_team,
    build_workflow,
    episode_factories,
)


@dataclass
class ShardResult:
    """The verified episodes of one share of a rollout (credit not yet assigned) and the engine's
    counters for it."""

    episodes: list[Episode]
    generated_tokens: int
    generate_s: float
    batch_sizes: list[int]
    play_s: float = 0.0  # the share's wall time in the worker, weights loaded to episodes verified
    queued_during: list[int] = field(default_factory=list)  # per batch (``EngineStats.queued_during``)
    # the KL reference's log-probs of the trained roles' turns, when the worker computed them
    # (``teamrl.trainer.learner.reference_logprobs``; run.async_rollouts)
    ref_logprobs: dict[tuple[int, int], list[float]] = field(default_factory=dict)


class RolloutWorker:
    """Builds every policy of ``cfg`` as the trainer does (the embedded base from the same cache, the
    adapters as the driver sends them) and plays episodes with the async engine; each episode is
    verified in its own sandbox process, on the worker's pool of Ray sandbox workers."""

    def __init__(self, cfg: Config) -> None:
        torch.set_num_threads(cfg.run.threads)
        transformers.utils.logging.disable_progress_bar()  # the driver shows progress, not every worker
        self.cfg = cfg
        self.sandbox = build_sandbox(cfg)
        self.workflow = build_workflow(cfg, self.sandbox)  # by name: a user's workflow is imported here too
        self.policies = build_policies(cfg, progress=False)
        self.engine = Engine(self.policies, max_concurrency=cfg.run.max_concurrency)  # type: ignore[arg-type]
        self.team = build_team(cfg, self.engine, cfg.algorithm.temperature)

    def base_fingerprints(self) -> dict[str, str]:
        """Hash of each local policy's base weights, for the driver to compare with its own."""
        return base_fingerprints(self.policies)

    def adapter_fingerprints(self) -> dict[str, str]:
        """``policy/adapter`` -> hash of the adapter's weights as this worker holds them."""
        return adapter_fingerprints(self.policies)

    def rollout(
        self,
        weights: AdapterWeights,
        tasks: list[Task],
        group_size: int,
        share: frozenset[str],
        seed: int,
        rng_state: torch.Tensor | None = None,
        seed_key: str | None = None,
        train: frozenset[str] = frozenset(),
    ) -> ShardResult:
        """Load ``weights``, then play ``group_size`` episodes of every task (as ``Trainer.rollout`` does
        in-process), sampling from ``seed`` or, when given, from the CPU generator state ``rng_state``;
        with ``seed_key``, from each episode's own seeds (``episode_factories``); ``train``: the roles the
        rollout trains (``Team.train_turns``)."""
        start = time.perf_counter()
        load_adapter_weights(self.policies, weights)
        torch.manual_seed(seed)  # every device's generator
        if rng_state is not None:
            torch.set_rng_state(rng_state)
        stats = self.engine.stats
        tokens, generate_s, batches = stats.generated_tokens, stats.generate_s, len(stats.batch_sizes)

        self.team.share_turns(share)
        self.team.train_turns(train)
        try:
            factories = episode_factories(self.cfg, self.workflow, self.team, tasks, group_size, seed_key)
            episodes = self.engine.run(factories)
        finally:
            self.team.share_turns()
            self.team.train_turns()
        return ShardResult(
            episodes=episodes,
            generated_tokens=stats.generated_tokens - tokens,
            generate_s=stats.generate_s - generate_s,
            batch_sizes=stats.batch_sizes[batches:],
            queued_during=stats.queued_during[batches:],
            play_s=time.perf_counter() - start,
        )
