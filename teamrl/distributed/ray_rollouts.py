"""The driver's side of the Ray backend: a pool of rollout workers (Ray actors) that plays a rollout.

The driver keeps the control flow, the learner (SFT, updates, KL reference, counterfactual replays)
and the cheap maths (credit, advantages); the workers hold copies of the policies and play the
episodes. Before a rollout each worker is sent the role adapters whose weights changed since it was
last sent them (LoRA state dicts only; a new worker gets all of them), then plays its share of the
tasks: whole tasks, so a group's episodes (and the frozen turns they share) stay on one worker. A
worker that dies is replaced and its share retried, at most ``ray.max_retries`` times per share.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from typing import Any

import torch

from teamrl.config import Config, ConfigError
from teamrl.distributed.rollout_worker import AdapterWeights, RolloutWorker, ShardResult
from teamrl.engine.engine import EngineStats
from teamrl.policies.hf import HFPolicy
from teamrl.protocol import Episode
from teamrl.trainer.build import Task

log = logging.getLogger("teamrl")

RAY_MISSING = "Ray is not installed here: pip install 'teamrl[ray]' (or run with --backend local)"


class RolloutWorkerLost(RuntimeError):
    """A share of a rollout lost its worker more often than ``ray.max_retries`` allows."""


def require_ray() -> None:
    """Raise a :class:`ConfigError` naming the fix where Ray cannot be imported."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(f"run.backend is 'ray', but {RAY_MISSING}")


class RayRollouts:
    """``rollout(tasks, group_size, share)`` as ``Trainer.rollout`` plays it, on Ray actors.

    Joins the cluster of ``ray.address`` (else ``RAY_ADDRESS``, else starts a local instance sized for
    the workers) unless Ray is already initialised in this process. Workers start at the first
    rollout, after the driver has built (and cached) the base models they load. The engine counters of
    every worker's share are added to ``stats``.
    """

    def __init__(self, cfg: Config, policies: dict[str, Any], stats: EngineStats) -> None:
        require_ray()
        import ray

        self.cfg, self.policies, self.stats = cfg, policies, stats
        r = cfg.ray
        self._connected = False  # whether this pool called ray.init (and so calls ray.shutdown)
        if not ray.is_initialized():
            address = r.address or os.environ.get("RAY_ADDRESS")
            if address:
                try:
                    ray.init(address=address, logging_level=logging.WARNING)
                except ConnectionError as exc:
                    source = "ray.address" if r.address else "RAY_ADDRESS"
                    raise ConfigError(
                        f"{source}: cannot join the Ray cluster at {address!r} ({exc}); start it (ray start "
                        "--head), fix the address, or unset it for a local instance. A cluster with token "
                        "authentication also needs RAY_AUTH_MODE=token and its token here"
                    ) from None
            else:  # a local instance: as many logical CPUs as the workers reserve, whatever the machine has
                cpus = math.ceil(r.num_rollout_workers * r.num_cpus_per_worker)
                ray.init("local", num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
            self._connected = True
        have = ray.cluster_resources()
        for kind, each in (("CPU", r.num_cpus_per_worker), ("GPU", r.num_gpus_per_worker)):
            if r.num_rollout_workers * each > have.get(kind, 0.0):
                log.warning(
                    "ray: %d rollout workers x %s %ss asked for, the cluster has %s: the workers wait until "
                    "it has them (lower ray.num_rollout_workers or ray.num_%ss_per_worker if it never will)",
                    r.num_rollout_workers,
                    each,
                    kind,
                    have.get(kind, 0.0),
                    kind.lower(),
                )
        self._actor = ray.remote(RolloutWorker).options(
            num_cpus=r.num_cpus_per_worker, num_gpus=r.num_gpus_per_worker, max_restarts=0
        )
        self.workers: list[Any] = []
        self._bases: dict[str, str] | None = None  # the driver's base fingerprints, once needed
        self._held: list[dict[tuple[str, str], int]] = []  # per worker: adapter -> weights_version it holds
        self.replacements = 0
        self.adapters = [
            (spec.policy, role)
            for role, spec in cfg.workflow.roles.items()
            if role in cfg.workflow.order and spec.adapter
        ]

    # -- workers ----------------------------------------------------------------------------------
    def _start(self, count: int) -> list[Any]:
        """``count`` new workers, once their policies are built and their bases match the driver's."""
        import ray

        workers = [self._actor.remote(self.cfg) for _ in range(count)]
        try:
            bases = ray.get([w.base_fingerprints.remote() for w in workers])
        except ray.exceptions.RayActorError as exc:
            raise RolloutWorkerLost(f"a Ray rollout worker failed to start: {exc}") from None
        if self._bases is None:
            self._bases = {
                name: p.fingerprint(None) for name, p in self.policies.items() if isinstance(p, HFPolicy)
            }
        for base in bases:
            for name, fp in base.items():
                mine = self._bases[name]
                if fp != mine:
                    raise RolloutWorkerLost(
                        f"a rollout worker built policy {name!r} with other base weights than the driver's "
                        f"(fingerprint {fp} vs {mine}): give every Ray node the same checkpoint "
                        f"(policies.{name}.path) or the same embedded base cache "
                        f"(policies.{name}.embedded.cache_dir)"
                    )
        return workers

    def _replace(self, index: int, reason: str) -> None:
        import ray

        log.warning("ray: rollout worker %d lost (%s); starting a replacement", index, reason)
        ray.kill(self.workers[index], no_restart=True)  # it may only be unreachable
        self.workers[index] = self._start(1)[0]
        self._held[index] = {}
        self.replacements += 1

    def _versions(self) -> dict[tuple[str, str], int]:
        return {(p, a): self.policies[p].weights_version(a) for p, a in self.adapters}

    def _weights(self, keys: tuple[tuple[str, str], ...]) -> AdapterWeights:
        out: AdapterWeights = {}
        for policy, adapter in keys:
            pol: HFPolicy = self.policies[policy]
            out.setdefault(policy, {})[adapter] = pol.adapter_state_dict(adapter)
        return out

    # -- the rollout ------------------------------------------------------------------------------
    def rollout(
        self,
        tasks: list[Task],
        group_size: int,
        share: frozenset[str] = frozenset(),
        seed_key: str | None = None,
    ) -> list[Episode]:
        """Episodes in the order ``Trainer.rollout`` returns them (task by task, group by group),
        verified, without credit. With ``seed_key`` every episode samples from its own seeds, as in
        ``Trainer.rollout``, so the workers play exactly what the local engine would.

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
            i: (shards[i], group_size, share, seed + i, rng_state if i == 0 else None, seed_key)
            for i in range(n)
            if shards[i]
        }
        versions = self._versions()
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
            self.stats.generated_tokens += shard.generated_tokens
            self.stats.generate_s += shard.generate_s
            self.stats.batches += len(shard.batch_sizes)
            self.stats.requests += sum(shard.batch_sizes)
            self.stats.batch_sizes += shard.batch_sizes
        return episodes

    def _submit(
        self,
        i: int,
        versions: dict[tuple[str, str], int],
        payloads: dict[tuple[tuple[str, str], ...], Any],
        args: tuple[Any, ...],
    ) -> Any:
        """Worker ``i``'s rollout call, carrying the adapters it does not hold at ``versions`` (each
        distinct set put in the object store once, in ``payloads``)."""
        import ray

        stale = tuple(k for k in self.adapters if self._held[i].get(k) != versions[k])
        if stale not in payloads:
            payloads[stale] = ray.put(self._weights(stale))
        return self.workers[i].rollout.remote(payloads[stale], *args)

    def adapter_fingerprints(self) -> list[dict[str, str]]:
        """Each worker's ``policy/adapter`` -> fingerprint (compare with ``HFPolicy.fingerprint``)."""
        import ray

        return ray.get([w.adapter_fingerprints.remote() for w in self.workers])

    def close(self) -> None:
        """Stop the workers; leave Ray if this pool joined it (which stops a local instance it started,
        not a cluster)."""
        import ray

        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers, self._held = [], []
        if self._connected:
            ray.shutdown()
            self._connected = False
