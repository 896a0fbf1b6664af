"""The async rollout engine (DESIGN section 3).

Episodes are asyncio tasks. When a workflow awaits ``team.act(...)``, the request joins its
policy's queue; one batcher per policy waits until every live episode that can make progress has
queued its request, then sends the whole batch to the policy in a worker thread. Fast roles
never wait for slow ones, and each policy always sees the largest batch the episodes allow.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from teamrl.policies.base import Generation, GenerationRequest
from teamrl.protocol.plugins import plugin_frame

log = logging.getLogger(__name__)


class BatchPolicy(Protocol):
    name: str

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]: ...


@dataclass
class EngineStats:
    """Counters of one engine, for logs and the rollout benchmark."""

    batches: int = 0
    requests: int = 0
    generated_tokens: int = 0
    generate_s: float = 0.0
    batch_sizes: list[int] = field(default_factory=list)
    # per batch: the requests that joined the policy's queue while it generated (the rows a decode loop
    # that admits new requests, continuous batching, could have taken in; 0 when episodes move in lockstep)
    queued_during: list[int] = field(default_factory=list)

    @property
    def mean_batch(self) -> float:
        return self.requests / self.batches if self.batches else 0.0

    def add(
        self, generated_tokens: int, generate_s: float, batch_sizes: list[int], queued_during: list[int]
    ) -> None:
        """Count another engine's share (a rollout worker's) into these counters."""
        self.generated_tokens += generated_tokens
        self.generate_s += generate_s
        self.batches += len(batch_sizes)
        self.requests += sum(batch_sizes)
        self.batch_sizes += batch_sizes
        self.queued_during += queued_during


class _PolicyQueue:
    def __init__(self, policy: BatchPolicy, max_batch: int, stats: EngineStats) -> None:
        self.policy = policy
        self.max_batch = max_batch
        self.stats = stats
        self.pending: list[tuple[GenerationRequest, asyncio.Future[Generation]]] = []
        self.wakeup = asyncio.Event()
        self.worker: asyncio.Task[None] | None = None

    def submit(self, request: GenerationRequest) -> asyncio.Future[Generation]:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self.wakeup.set()
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._run())
        return future

    async def _run(self) -> None:
        while self.pending:
            # Let every runnable episode reach its next request before cutting the batch: keep
            # yielding to the event loop while the queue is still growing.
            size = -1
            while size != len(self.pending) and len(self.pending) < self.max_batch:
                size = len(self.pending)
                for _ in range(3):
                    await asyncio.sleep(0)
            batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch :]
            requests = [r for r, _ in batch]
            waiting = len(self.pending)  # those that did not fit in max_batch
            start = time.perf_counter()
            try:
                results = await asyncio.to_thread(self.policy.generate, requests)
            except Exception as exc:  # a policy failure fails its requests, not the engine
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.stats.generate_s += time.perf_counter() - start
            self.stats.batches += 1
            self.stats.requests += len(batch)
            self.stats.batch_sizes.append(len(batch))
            self.stats.queued_during.append(len(self.pending) - waiting)
            for (_, fut), gen in zip(batch, results, strict=True):
                self.stats.generated_tokens += len(gen.completion_ids)
                if not fut.done():
                    fut.set_result(gen)


class Engine:
    """Runs many episodes concurrently and batches each policy's requests across them."""

    def __init__(
        self,
        policies: dict[str, BatchPolicy],
        max_batch: int = 128,
        max_concurrency: int = 256,
        stall_warning_s: float = 300.0,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"engine.max_batch must be >= 1, got {max_batch}")
        if max_concurrency < 1:
            raise ValueError(f"engine.max_concurrency must be >= 1, got {max_concurrency}")
        self.policies = policies
        self.max_batch = max_batch
        self.max_concurrency = max_concurrency
        self.stats = EngineStats()
        # a warning, with where, when the episodes' event loop is blocked this long (a workflow's or a
        # task's synchronous code that never returns: nothing else can run, not even Ctrl-C's handler)
        self.stall_warning_s = stall_warning_s
        self._queues: dict[str, _PolicyQueue] = {}

    async def generate(self, policy: str, request: GenerationRequest) -> Generation:
        if policy not in self.policies:
            raise KeyError(f"no policy named {policy!r}; known: {sorted(self.policies)}")
        queue = self._queues.get(policy)
        if queue is None:
            queue = self._queues[policy] = _PolicyQueue(self.policies[policy], self.max_batch, self.stats)
        return await queue.submit(request)

    async def gather(self, factories: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
        """Run episode coroutines with at most ``max_concurrency`` alive; results in input order."""
        limit = asyncio.Semaphore(self.max_concurrency)

        async def bounded(factory: Callable[[], Awaitable[Any]]) -> Any:
            async with limit:
                return await factory()

        return list(await asyncio.gather(*(bounded(f) for f in factories)))

    def run(self, factories: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
        """Synchronous entry point: a fresh event loop per call (queues are bound to it)."""
        self._queues = {}
        beat = [time.monotonic()]
        done = threading.Event()

        async def main() -> list[Any]:
            async def heartbeat() -> None:
                while True:
                    beat[0] = time.monotonic()
                    await asyncio.sleep(min(1.0, self.stall_warning_s / 4))

            pulse = asyncio.create_task(heartbeat())
            try:
                return await self.gather(factories)
            finally:
                pulse.cancel()

        watchdog = threading.Thread(
            target=_watch, args=(threading.get_ident(), beat, done, self.stall_warning_s), daemon=True
        )
        watchdog.start()
        try:
            return asyncio.run(main())
        finally:
            done.set()


def _watch(loop_thread: int, beat: list[float], done: threading.Event, limit: float) -> None:
    """Warn (once per ``limit`` seconds of it) while the event loop in ``loop_thread`` has not run its
    heartbeat for ``limit`` seconds, naming the code it is stuck in."""
    warned, last = 0.0, beat[0]
    while not done.wait(min(limit / 4, 5.0)):
        if beat[0] != last:  # the loop ran again: a later block is warned of anew
            warned, last = 0.0, beat[0]
        blocked = time.monotonic() - beat[0]
        if blocked < limit or blocked - warned < limit:
            continue
        warned = blocked
        frame = sys._current_frames().get(loop_thread)
        stuck = plugin_frame(traceback.extract_stack(frame) if frame is not None else [])
        where = f" at {stuck.filename}:{stuck.lineno} in {stuck.name}" if stuck else ""
        log.warning(
            "the episodes have not moved for %.0f s: the event loop is blocked%s (synchronous code that does "
            "not return, a task's check say: give it a timeout); Ctrl-C twice stops the run",
            blocked,
            where,
        )
