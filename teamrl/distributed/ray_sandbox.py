"""Sandbox workers: with the Ray backend the code checks run on Ray actors of their own.

A :class:`SandboxWorker` actor holds a :class:`teamrl.tasks.sandbox.Sandbox` and runs every call in its
own contained process, as in-process (the same limits; bubblewrap where it works on that node), many
calls at once (an async actor). :class:`RaySandbox` offers the part of ``Sandbox`` that verification
uses (``limits``, ``await run(source, stdin)``) and spreads the calls over a pool of such actors. A call
whose actor dies is retried once on a replacement; when that one dies too, the result carries the
reason in ``SandboxResult.error`` and the call's checks count as failed (the episode records it).

This module imports only the sandbox (and Ray when a pool starts): a sandbox worker's process loads it,
and nothing of torch.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from teamrl.tasks.sandbox import Sandbox, SandboxLimits, SandboxResult, SandboxUnavailableError

log = logging.getLogger("teamrl")


class SandboxWorker:
    """The Ray actor: a ``Sandbox`` with ``limits`` and ``isolation`` on whichever node it lands."""

    def __init__(self, limits: SandboxLimits, isolation: str) -> None:
        self.sandbox = Sandbox(limits, isolation=isolation)

    async def isolation(self) -> str:
        return self.sandbox.isolation

    async def run(self, source: str, stdin: str) -> SandboxResult:
        return await self.sandbox.run(source, stdin)


class RaySandbox:
    """``Sandbox.run`` on a pool of ``workers`` sandbox actors (each reserving ``num_cpus``), round robin.

    The actors start at the first call and belong to the process that made this pool: a rollout worker's
    pool dies with it. ``replacements`` counts the actors replaced, ``lost`` the calls given up."""

    def __init__(self, limits: SandboxLimits, isolation: str, workers: int, num_cpus: float) -> None:
        self.limits = limits
        self.isolation = isolation
        self.size, self.num_cpus = workers, num_cpus
        self.workers: list[Any] = []
        self._next = 0
        self.replacements = 0
        self.lost = 0

    def _new_worker(self) -> Any:
        import ray

        actor = ray.remote(SandboxWorker).options(num_cpus=self.num_cpus, max_restarts=0)
        return actor.remote(self.limits, self.isolation)

    def _start(self) -> None:
        """The pool, once every actor has made its sandbox (a sandbox that cannot work here is a
        configuration error, raised as in-process)."""
        import ray

        workers = [self._new_worker() for _ in range(self.size)]
        try:
            ray.get([w.isolation.remote() for w in workers])
        except ray.exceptions.RayActorError as exc:
            for worker in workers:
                ray.kill(worker, no_restart=True)
            raise SandboxUnavailableError(f"a Ray sandbox worker could not make its sandbox: {exc}") from None
        self.workers = workers

    def _submit(self, index: int, source: str, stdin: str) -> Any:
        return self.workers[index].run.remote(source, stdin)

    async def run(self, source: str, stdin: str = "") -> SandboxResult:
        """``Sandbox.run`` on the next actor of the pool; never raises for a lost actor."""
        import ray

        if not self.workers:
            self._start()
        index = self._next % len(self.workers)
        self._next += 1
        start = time.monotonic()
        for outcome in ("retried on its replacement", "counted as failed"):
            handle = self.workers[index]
            try:
                return await self._submit(index, source, stdin)
            except ray.exceptions.RayActorError as exc:
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.warning("ray: sandbox worker %d lost a check (%s); the check is %s", index, reason, outcome)
            if self.workers[index] is handle:  # not yet replaced by a call that saw the same death
                ray.kill(handle, no_restart=True)  # it may only be unreachable
                self.workers[index] = self._new_worker()
                self.replacements += 1
        self.lost += 1
        return SandboxResult(
            returncode=None,
            stdout="",
            stderr="",
            timed_out=False,
            wall_s=time.monotonic() - start,
            isolation=self.isolation,
            error=f"the sandbox worker running this check died twice (last: {reason}); counted as failed",
        )

    def close(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []
