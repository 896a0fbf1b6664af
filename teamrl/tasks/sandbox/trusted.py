"""A runner for trusted programs: code that no model wrote (a workflow's scripted experts' references, the
task generator's own bugs, tests written from the reference), run while the experts demonstrate.

It keeps :class:`~teamrl.tasks.sandbox.Sandbox`'s protocol (``run(source, stdin)`` returns a
:class:`SandboxResult`: the program as ``__main__``, its standard input, its output, exit code and wall
time, the same rlimits) but does not contain the program: each one is forked from a warm interpreter
(a *zygote*, one per core) instead of started afresh under bubblewrap with a uid of its own. A run then
costs a fork, not an interpreter's start-up and a namespace: the demonstrations of the main job (about
2,000 runs) take a fraction of the CPU. Model-written code never runs here: the trainer's sandbox runs it.
"""

from __future__ import annotations

import asyncio
import marshal
import os
import queue
import struct
import subprocess
import sys
import threading
import weakref
from typing import IO

from teamrl.tasks.sandbox.sandbox import SandboxLimits, SandboxResult

ISOLATION = "trusted"

# The zygote: reads framed requests (marshal of source, stdin, wall timeout, rlimits) from its standard
# input, forks one child per request that runs the program as __main__ on pipes of its own, and answers
# with a frame (marshal of returncode or None, stdout, stderr, timed out, wall seconds). It exits when its
# standard input closes (its parent is gone).
_ZYGOTE = r"""
import marshal, os, select, signal, struct, sys, time
def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            os._exit(0)
        data += chunk
    return data
def child(code, fds, limits):
    import resource
    in_r, out_w, err_w = fds
    os.setpgid(0, 0)
    os.dup2(in_r, 0); os.dup2(out_w, 1); os.dup2(err_w, 2)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    cpu_s, as_bytes, fsize = limits
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    try:
        if isinstance(code, BaseException):  # the program did not compile: raised as a fresh one would
            raise code
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
        status = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            sys.stderr.write(str(exc.code) + "\n")
            status = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush(); sys.stderr.flush()
    except BaseException:
        pass
    os._exit(status & 255)
codes = {}
while True:
    (size,) = struct.unpack("<Q", read_exact(8))
    source, stdin, timeout_s, limits = marshal.loads(read_exact(size))
    code = codes.get(source)
    if code is None:
        try:
            code = compile(source, "<sandbox>", "exec")
        except BaseException as exc:
            code = exc
        if len(codes) > 64:
            codes.clear()
        codes[source] = code
    in_r, in_w = os.pipe(); out_r, out_w = os.pipe(); err_r, err_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(in_w); os.close(out_r); os.close(err_r)
        child(code, (in_r, out_w, err_w), limits)
    os.close(in_r); os.close(out_w); os.close(err_w)
    pending = memoryview(stdin)
    if not pending:
        os.close(in_w)
        in_w = -1
    chunks = {out_r: [], err_r: []}
    open_r = [out_r, err_r]
    deadline = start + timeout_s
    timed_out = False
    while open_r:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        readable, writable, _ = select.select(open_r, [in_w] if in_w >= 0 else [], [], left)
        if writable:
            try:
                sent = os.write(in_w, pending[:65536])
            except OSError:  # the program closed its standard input: the rest is not read
                sent = len(pending)
            pending = pending[sent:]
            if not pending:
                os.close(in_w)
                in_w = -1
        for fd in readable:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_r.remove(fd)
    while not timed_out:  # the output is closed: wait for the exit (unreaped, so the group stays ours)
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            break
        if time.monotonic() >= deadline:
            timed_out = True
        else:
            time.sleep(0.0005)
    try:  # the program, if it timed out, and whatever it started in its group
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    wall = time.monotonic() - start
    for fd in (out_r, err_r) + ((in_w,) if in_w >= 0 else ()):
        os.close(fd)
    code_ = os.waitstatus_to_exitcode(status)
    returncode = None if timed_out else (128 - code_ if code_ < 0 else code_)
    reply = marshal.dumps((returncode, b"".join(chunks[out_r]), b"".join(chunks[err_r]), timed_out, wall))
    out = memoryview(struct.pack("<Q", len(reply)) + reply)
    while out:
        out = out[os.write(1, out):]
"""


class _Zygote:
    """One warm interpreter and its pipes; one request at a time (the caller holds it meanwhile)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", _ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def call(self, request: bytes) -> tuple[int | None, bytes, bytes, bool, float]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(struct.pack("<Q", len(request)) + request)
        stdin.flush()
        (size,) = struct.unpack("<Q", _read(stdout, 8))
        return marshal.loads(_read(stdout, size))  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()  # the zygote exits at the end of its input
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _read(stream: IO[bytes], count: int) -> bytes:
    """``count`` bytes of the zygote's reply (a buffered read waits for them all, or for its end)."""
    data = stream.read(count)
    if len(data) < count:
        raise RuntimeError("the trusted runner's zygote exited")
    return data


def _close_all(zygotes: list[_Zygote]) -> None:
    for zygote in zygotes:
        zygote.close()


class TrustedRunner:
    """Runs trusted programs as :class:`~teamrl.tasks.sandbox.Sandbox` runs untrusted ones (the same
    ``run`` and result, the same rlimits), forked from ``workers`` warm interpreters (default: one per
    core) instead of contained. For code no model wrote only (the demonstrations' experts); safe to use
    concurrently, from any event loop or thread."""

    isolation = ISOLATION

    def __init__(self, limits: SandboxLimits = SandboxLimits(), workers: int | None = None) -> None:  # noqa: B008
        self.limits = limits
        self.workers = max(1, workers if workers is not None else os.cpu_count() or 1)
        self._idle: queue.SimpleQueue[_Zygote] = queue.SimpleQueue()
        self._all: list[_Zygote] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self._all)

    def _take(self) -> _Zygote:
        with self._lock:
            if self._closed:
                raise RuntimeError("this TrustedRunner is closed")
            if len(self._all) < self.workers and self._idle.empty():
                zygote = _Zygote()
                self._all.append(zygote)
                return zygote
        return self._idle.get()

    def _discard(self, zygote: _Zygote) -> None:
        with self._lock:
            if zygote in self._all:
                self._all.remove(zygote)
        zygote.close()

    def run_blocking(self, source: str, stdin: str = "") -> SandboxResult:
        """Run ``source`` as ``__main__`` with ``stdin``, waiting in this thread."""
        limits = self.limits
        request = marshal.dumps(
            (
                source,
                stdin.encode(),
                float(limits.timeout_s),
                (limits.cpu_s, limits.memory_mb * 2**20, limits.max_file_mb * 2**20),
            )
        )
        zygote = self._take()
        try:
            returncode, out, err, timed_out, wall_s = zygote.call(request)
        except BaseException:
            self._discard(zygote)  # a zygote that failed once is not trusted with another run
            raise
        self._idle.put(zygote)
        return SandboxResult(
            returncode=returncode,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=timed_out,
            wall_s=wall_s,
            isolation=ISOLATION,
        )

    async def run(self, source: str, stdin: str = "") -> SandboxResult:
        """:meth:`run_blocking` in a worker thread: the event loop goes on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(None, self.run_blocking, source, stdin)

    def close(self) -> None:
        """Stop the warm interpreters (also done when the runner is collected, or at exit); runs after
        this raise."""
        with self._lock:
            self._closed = True
        self._finalizer()
