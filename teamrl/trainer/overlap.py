"""Rollouts played ahead of the update (``run.async_rollouts: k``).

A rollout worker process (:class:`teamrl.distributed.RolloutWorker`, the same object the Ray backend runs
in its actors) holds its own copy of the policies. When iteration ``i``'s episodes are taken, the rollouts of
iterations ``i+1 .. i+k`` are sent to it with the adapters as they are *before* update ``i``: the worker
plays them while this process updates, so generation and learning overlap (on two cores, one each). The
episodes it returns carry their behaviour log-probs per token, and the learner corrects for the policy
having moved since (truncated importance sampling, ``algorithm.is_cap``; :class:`teamrl.trainer.learner.
Learner`). ``k`` bounds the staleness: an iteration learns from episodes sampled by the policy of at most
``k`` updates before.

What a rollout plays is fixed by its step (the tasks drawn from the step's seed, each episode's sampling
seeds from ``rl{step}``), so a rollout played ahead holds the same tasks and noise as a synchronous run's:
what differs is only the adapters that sampled it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from teamrl.config import Config
from teamrl.distributed.rollout_worker import RolloutWorker, ShardResult
from teamrl.distributed.weights import (
    AdapterKey,
    AdapterWeights,
    Policies,
    adapter_versions,
    adapter_weights,
    hf_policy,
)
from teamrl.engine.engine import EngineStats
from teamrl.policies.base import ref_adapter
from teamrl.policies.hf import HFPolicy
from teamrl.recipes.schedule import Phase, Schedule
from teamrl.tasks.base import checked_draw
from teamrl.trainer.build import Task
from teamrl.trainer.learner import reference_logprobs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutPlan:
    """What iteration ``step`` plays: its tasks, the frozen roles whose turns a group shares, the roles it
    trains, and the seeds (``seed`` for the global generator, ``seed_key`` for each episode's own)."""

    step: int
    tasks: tuple[Task, ...]
    group_size: int
    share: frozenset[str]
    train: tuple[str, ...]
    seed: int
    seed_key: str


@dataclass
class Played:
    """A plan's episodes (verified, credit not yet assigned) and when they were sampled: ``version``
    is the number of updates the adapters that played it had seen."""

    plan: RolloutPlan
    result: ShardResult
    version: int
    wait_s: float  # how long the driver waited for it


WORKER_NICE = 10
"""How much lower the rollout worker process's scheduling priority is than the trainer's (``os.nice``)."""


class RolloutWorkerFailed(RuntimeError):
    """The rollout worker process raised (its traceback is in the message) or died."""


class _WorkerProcess:
    """A :class:`RolloutWorker` in a child process (``python -m teamrl.trainer.overlap``, so nothing of the
    driver's main script is run again), fed over a pipe in the order jobs are submitted by one thread of
    this process. The child has its own session: a Ctrl-C or SIGTERM to the driver's process group is
    the driver's to handle, and the driver stops the child; if the driver dies, the child reads the end
    of its pipe and exits."""

    def __init__(self, cfg: Config) -> None:
        parent, child = multiprocessing.Pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "teamrl.trainer.overlap", str(child.fileno())],
            pass_fds=(child.fileno(),),
            start_new_session=True,
        )
        child.close()
        self.conn = parent
        self.conn.send_bytes(pickle.dumps((list(sys.path), cfg)))  # a user's plugin modules import there too
        self.jobs: queue.SimpleQueue[tuple[bytes, Future[ShardResult]] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="teamrl-rollouts-ahead", daemon=True)
        self.thread.start()

    def submit(self, weights: Any, plan: RolloutPlan) -> Future[ShardResult]:
        future: Future[ShardResult] = Future()
        self.jobs.put((pickle.dumps((weights, plan)), future))  # the weights as they are now
        return future

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            payload, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                self.conn.send_bytes(payload)
                kind, value = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError) as exc:
                code = self.process.poll()
                future.set_exception(
                    RolloutWorkerFailed(f"the rollout worker process died (exit code {code}): {exc!r}")
                )
                continue
            if kind == "ok":
                future.set_result(value)
            else:
                future.set_exception(RolloutWorkerFailed(f"the rollout worker raised:\n{value}"))

    def close(self) -> None:
        """Stop the child (a rollout in progress is not waited for), then the thread that fed it."""
        self.jobs.put(None)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.thread.join(timeout=10)  # its read of the pipe ends with the child
        self.conn.close()


def _worker_main(fd: int) -> None:
    """The child's loop: build the worker from the config sent first, then play each plan sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    # the trainer's update is the longer side where both compete for the cores (and the evaluation after
    # SFT runs beside the first rollout): the worker and its sandbox processes yield to it
    os.nice(WORKER_NICE)
    conn = Connection(fd)
    path, cfg = pickle.loads(conn.recv_bytes())
    sys.path[:] = path
    worker: RolloutWorker | None = None
    failure = ""
    try:
        worker = RolloutWorker(cfg)
    except Exception:  # noqa: BLE001 - reported to the driver with each job, which raises it
        failure = traceback.format_exc()
    while True:
        try:
            weights, plan = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            if worker is None:
                raise RuntimeError(f"the rollout worker could not be built:\n{failure}")
            reply: tuple[str, Any] = ("ok", _play(worker, weights, plan))
        except Exception:  # noqa: BLE001 - the driver raises it, with this traceback
            reply = ("error", traceback.format_exc())
        try:
            conn.send_bytes(pickle.dumps(reply))
        except (EOFError, OSError):
            return


def _play(worker: RolloutWorker, weights: AdapterWeights, plan: RolloutPlan) -> ShardResult:
    """Play ``plan``; then, with a KL term, score the trained roles' turns under their references here,
    where the worker would otherwise wait for the update (the references are frozen after SFT)."""
    cfg = worker.cfg
    for name, adapters in weights.items():
        policy = hf_policy(worker.policies, name)
        for adapter in adapters:
            role = adapter.removeprefix(ref_adapter(""))
            if adapter not in policy.adapter_names and adapter == ref_adapter(role):
                policy.copy_adapter(role, adapter)  # its shape; the weights sent are loaded next
    result = worker.rollout(
        weights,
        list(plan.tasks),
        plan.group_size,
        plan.share,
        plan.seed,
        seed_key=plan.seed_key,
        train=frozenset(plan.train),
    )

    def policy_of(role: str) -> HFPolicy:
        return hf_policy(worker.policies, cfg.seat(role).policy)

    if cfg.algorithm.kl_coef > 0:
        roles = [r for r in plan.train if ref_adapter(r) in policy_of(r).adapter_names]
        result.ref_logprobs = reference_logprobs(cfg, policy_of, result.episodes, roles)
    return result


def _iteration(plan: RolloutPlan) -> tuple[Any, ...]:
    # tasks are the suite's objects (not always comparable): a step's tasks follow from its seed
    return (plan.step, plan.train, plan.share, plan.group_size, plan.seed_key)


class RolloutsAhead:
    """Plays :class:`RolloutPlan` s in one worker process, in the order they are submitted; each is sent
    the adapters whose weights changed since the worker was last sent them (LoRA state dicts only)."""

    def __init__(self, cfg: Config, policies: Policies, stats: EngineStats) -> None:
        self.cfg, self.policies, self.stats = cfg, policies, stats
        self._held: dict[AdapterKey, int] = {}  # adapter -> the weights_version the worker was sent
        self._process: _WorkerProcess | None = None
        self._queue: deque[tuple[RolloutPlan, int, Future[ShardResult]]] = deque()

    def adapters(self) -> list[AdapterKey]:
        """The adapters the worker holds: every seat's, and with a KL term the references (the SFT
        snapshots, once made), under which it scores the trained roles' turns."""
        cfg, out = self.cfg, []
        for role in dict.fromkeys(cfg.role_order()):
            if not cfg.seat(role).adapter:
                continue
            policy = cfg.seat(role).policy
            out.append((policy, role))
            if (
                cfg.algorithm.kl_coef > 0
                and ref_adapter(role) in hf_policy(self.policies, policy).adapter_names
            ):
                out.append((policy, ref_adapter(role)))
        return out

    def _worker(self) -> _WorkerProcess:
        if self._process is None:  # started at the first rollout: the driver has built (cached) the bases
            self._process = _WorkerProcess(self.cfg)
            self._held = {}
        return self._process

    @property
    def pending(self) -> list[int]:
        """The steps submitted and not yet taken."""
        return [plan.step for plan, _, _ in self._queue]

    def submit(self, plan: RolloutPlan, version: int) -> None:
        """Play ``plan`` after the plans already submitted, with the adapters as they are now (the policy
        after ``version`` updates)."""
        keys = self.adapters()
        versions = adapter_versions(self.policies, keys)
        stale = [k for k in keys if self._held.get(k) != versions[k]]
        future = self._worker().submit(adapter_weights(self.policies, stale), plan)
        self._held.update(versions)
        self._queue.append((plan, version, future))

    def take(self, plan: RolloutPlan, version: int) -> Played:
        """``plan``'s episodes: the ones played ahead for its step and roles if they were submitted (with the
        tasks drawn then: ``Played.plan``), else played now with the adapters as they are. Anything submitted
        before it and not taken is dropped."""
        while self._queue and _iteration(self._queue[0][0]) != _iteration(plan):
            # a plan that no longer follows: if it was never sent, nor were the weights it carried
            if self._queue.popleft()[2].cancel():
                self._held = {}  # so the next plan carries every adapter
        if not self._queue:
            self.submit(plan, version)
        queued, played_at, future = self._queue.popleft()
        start = time.perf_counter()
        result = future.result()  # a worker's error is raised here, with its traceback
        self.stats.add(result.generated_tokens, result.generate_s, result.batch_sizes, result.queued_during)
        return Played(queued, result, played_at, time.perf_counter() - start)

    def close(self) -> None:
        """Stop the worker without waiting for what it is playing (nothing taken is lost)."""
        for _, _, future in self._queue:
            future.cancel()
        self._queue.clear()  # the process goes too: what it holds no longer matters
        if self._process is not None:
            self._process.close()
            self._process = None
        self._held = {}


def iteration_seed(cfg: Config, step: int) -> int:
    """The seed of RL iteration ``step``: its tasks are drawn from it, and the trainer seeds torch with it."""
    return cfg.run.seed * 1_000_003 + step


# a suite's held-out ids, by id(suite) (the suite kept, so its id is not reused); emptied once warned
_HELDOUT_IDS: dict[int, tuple[Any, set[Any]]] = {}


def iteration_tasks(cfg: Config, suite: Any, step: int) -> list[Any]:
    """The training tasks RL iteration ``step`` plays, drawn from the step's seed (so a finished run's can be
    drawn again: ``benchmarks/greedy_eval.py --transfer``)."""
    n = cfg.algorithm.tasks_per_iteration
    tasks = suite.sample("train", n, random.Random(iteration_seed(cfg, step)))
    checked_draw(tasks, f"{type(suite).__name__}.sample('train', {n}) for RL iteration {step}")
    if id(suite) not in _HELDOUT_IDS:  # the held-out ids, once per suite: a warning if RL plays one
        heldout = suite.fixed_set("heldout", cfg.tasks.heldout_size)
        _HELDOUT_IDS[id(suite)] = (suite, {t.task_id for t in heldout})
    shared = sorted({t.task_id for t in tasks} & _HELDOUT_IDS[id(suite)][1], key=str)
    if shared:
        _HELDOUT_IDS[id(suite)] = (suite, set())  # warned once
        log.warning(
            "%s: RL iteration %d plays held-out task ids %s: the train and heldout splits overlap, so the "
            "held-out figures measure tasks RL trained on",
            type(suite).__name__,
            step,
            shared[:5],
        )
    return tasks


def plan_iteration(cfg: Config, suite: Any, phase: Phase, step: int) -> RolloutPlan:
    """What RL iteration ``step`` of ``phase`` plays: its tasks (drawn from the step's seed), the frozen
    roles whose turns a group shares, the roles it trains, its sampling seeds."""
    seed = iteration_seed(cfg, step)
    tasks = iteration_tasks(cfg, suite, step)
    share = [r for r in cfg.role_order() if r not in phase.roles and cfg.algorithm.share_frozen_turns]
    return RolloutPlan(
        step, tuple(tasks), cfg.algorithm.group_size, frozenset(share), phase.roles, seed, f"rl{step}"
    )


def play_ahead(
    ahead: RolloutsAhead, suite: Any, phases: Schedule, index: int, state: Any, first: bool = False
) -> None:
    """Send the worker the rollouts of the ``run.async_rollouts`` iterations after ``state.step`` (in phase
    ``index``, iteration ``state.phase_iteration``) not yet sent, with the adapters as they are before this
    iteration's update; past the current phase only where the schedule is a fixed list (closed_loop
    decides its next phase by measuring the team first). ``first``: only the rollout of ``state.step``
    itself (played during the evaluation after SFT, by the same adapters), and only from a fixed list."""
    if first and not isinstance(phases, list):
        return
    it, step = state.phase_iteration + (0 if first else 1), state.step + (0 if first else 1)
    last = state.step if first else state.step + ahead.cfg.run.async_rollouts
    while step <= last:
        if it >= phases[index].iterations:
            if not isinstance(phases, list) or index + 1 >= len(phases):
                return
            index, it = index + 1, 0
            continue
        if step not in ahead.pending:
            ahead.submit(plan_iteration(ahead.cfg, suite, phases[index], step), state.step)
        it, step = it + 1, step + 1


if __name__ == "__main__":
    _worker_main(int(sys.argv[1]))
