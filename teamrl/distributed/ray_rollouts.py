"""The driver's side of the Ray backend: a pool of rollout workers (Ray actors) that plays a rollout.

The driver keeps the control flow, SFT, the KL reference snapshots, counterfactual replays and
credit; the learner actor (``ray_learner.py``) runs the updates; the workers hold copies of the
policies and play the episodes, whose code checks run on sandbox workers (``ray_sandbox.py``).
Before a rollout each worker is sent the role adapters whose weights changed since it was last sent
them (LoRA state dicts only; a new worker gets all of them), then plays its share of the tasks: whole
tasks, so a group's episodes (and the frozen turns they share) stay on one worker. A worker that dies
is replaced and its share retried, at most ``ray.max_retries`` times per share.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from teamrl.config import Config
from teamrl.distributed.cluster import ActorLost, base_fingerprints, check_bases, require_ray
from teamrl.distributed.rollout_worker import RolloutWorker, ShardResult
from teamrl.distributed.weights import AdapterKey, adapter_versions, adapter_weights
from teamrl.engine.engine import EngineStats
from teamrl.protocol import Episode
from teamrl.trainer.build import Task

log = logging.getLogger("teamrl")


class RolloutWorkerLost(ActorLost):
    """A share of a rollout lost its worker more often than ``ray.max_retries`` allows."""


class RayRollouts:
    """``rollout(tasks, group_size, share)`` as ``Trainer.rollout`` plays it, on Ray actors.

    Ray must be initialised (:func:`teamrl.distributed.cluster.connect`). Workers start at the first
    rollout, after the driver has built (and cached) the base models they load. The engine counters of
    every worker's share are added to ``stats``.
    """

    def __init__(self, cfg: Config, policies: dict[str, Any], stats: EngineStats) -> None:
        require_ray()
        import ray

        self.cfg, self.policies, self.stats = cfg, policies, stats
        r = cfg.ray
        self._actor = ray.remote(RolloutWorker).options(
            num_cpus=r.num_cpus_per_worker, num_gpus=r.num_gpus_per_worker, max_restarts=0
        )
        self.workers: list[Any] = []
        self._held: list[dict[AdapterKey, int]] = []  # per worker: adapter -> weights_version it holds
        self.replacements = 0
        self.adapters = [
            (spec.policy, role)
            for role, spec in cfg.workflow.roles.items()  # type: ignore[attr-defined]
            if role in cfg.role_order() and spec.adapter
        ]

    # -- workers ----------------------------------------------------------------------------------
    def _start(self, count: int) -> list[Any]:
        """``count`` new workers, once their policies are built and their bases match the driver's."""
        import ray

        workers = [self._actor.remote(self.cfg) for _ in range(count)]
        try:
            bases = ray.get([w.base_fingerprints.remote() for w in workers])  # type: ignore[attr-defined]
        except ray.exceptions.RayActorError as exc:
            raise RolloutWorkerLost(f"a Ray rollout worker failed to start: {exc}") from None
        mine = base_fingerprints(self.policies)
        for base in bases:
            check_bases(mine, base, "a rollout worker")
        return workers

    def _replace(self, index: int, reason: str) -> None:
        import ray

        log.warning("ray: rollout worker %d lost (%s); starting a replacement", index, reason)
        ray.kill(self.workers[index], no_restart=True)  # it may only be unreachable
        self.workers[index] = self._start(1)[0]
        self._held[index] = {}
        self.replacements += 1

    # -- the rollout ------------------------------------------------------------------------------
    def rollout(
        self,
        tasks: list[Task],
        group_size: int,
        share: frozenset[str] = frozenset(),
        seed_key: str | None = None,
        train: frozenset[str] | tuple[str, ...] = frozenset(),
    ) -> list[Episode]:
        """Episodes in the order ``Trainer.rollout`` returns them (task by task, group by group),
        verified, without credit; ``train``: the roles the rollout trains (``Team.train_turns``). With
        ``seed_key`` every episode samples from its own seeds, as in ``Trainer.rollout``, so the workers
        play exactly what the local engine would.

        Worker 0 continues the driver's torch RNG stream, so one worker samples exactly what the local
        engine would; worker ``i > 0`` samples from a seed drawn from that stream plus ``i``. A retried
        share samples as its first try did."""
        import ray

        missing = self.cfg.ray.num_rollout_workers - len(self.workers)
        if missing > 0:
            self.workers += self._start(missing)
            self._held += [{} for _ in range(missing)]
        n = len(self.workers)
        shards = [tasks[i * len(tasks) // n : (i + 1) * len(tasks) // n] for i in range(n)]
        rng_state = torch.get_rng_state()
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        calls = {
            i: (
                shards[i],
                group_size,
                share,
                seed + i,
                rng_state if i == 0 else None,
                seed_key,
                frozenset(train),
            )
            for i in range(n)
            if shards[i]
        }
        versions = adapter_versions(self.policies, self.adapters)
        payloads: dict[tuple[tuple[str, str], ...], Any] = {}
        pending = {self._submit(i, versions, payloads, calls[i]): i for i in calls}
        retries = dict.fromkeys(calls, 0)
        results: dict[int, ShardResult] = {}
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ref)
            try:
                results[i] = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                retries[i] += 1
                if retries[i] > self.cfg.ray.max_retries:
                    raise RolloutWorkerLost(
                        f"rollout worker {i} died playing its share of {len(shards[i])} tasks, on all "
                        f"{retries[i]} tries (ray.max_retries={self.cfg.ray.max_retries}); last error: {exc}"
                    ) from None
                self._replace(i, type(exc).__name__)
                pending[self._submit(i, versions, payloads, calls[i])] = i
                continue
            self._held[i] = dict(versions)
        episodes: list[Episode] = []
        for i in sorted(results):
            shard = results[i]
            episodes += shard.episodes
            self.stats.add(shard.generated_tokens, shard.generate_s, shard.batch_sizes, shard.queued_during)
        return episodes

    def _submit(
        self,
        i: int,
        versions: dict[AdapterKey, int],
        payloads: dict[tuple[tuple[str, str], ...], Any],
        args: tuple[Any, ...],
    ) -> Any:
        """Worker ``i``'s rollout call, carrying the adapters it does not hold at ``versions`` (each
        distinct set put in the object store once, in ``payloads``)."""
        import ray

        stale = tuple(k for k in self.adapters if self._held[i].get(k) != versions[k])
        if stale not in payloads:
            payloads[stale] = ray.put(adapter_weights(self.policies, stale))
        return self.workers[i].rollout.remote(payloads[stale], *args)

    def adapter_fingerprints(self) -> list[dict[str, str]]:
        """Each worker's ``policy/adapter`` -> fingerprint (compare with ``HFPolicy.fingerprint``)."""
        import ray

        return ray.get([w.adapter_fingerprints.remote() for w in self.workers])

    def close(self) -> None:
        """Stop the workers (and with them their sandbox workers)."""
        import ray

        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers, self._held = [], []
