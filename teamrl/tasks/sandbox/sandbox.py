"""Run untrusted Python source in a contained, short-lived process.

Two isolation levels (``isolation="auto"`` is bwrap, and refuses to run without it):

* ``"bwrap"``: bubblewrap with fresh pid, net, ipc and uts namespaces, a read-only view of
  the host, a private size-capped tmpfs ``/tmp`` that is also the work dir, and the process
  tree killed with the pid namespace. Plus the rlimits and uid drop below.
* ``"rlimits"``: a plain subprocess with rlimits, a non-root uid and a private work dir made
  on the host. No filesystem namespace: the program can write to world-writable places such as
  ``/tmp``. Only when asked for by name (and then with a warning), for machines where bwrap is
  missing or unusable (no namespaces in an unprivileged container, for example).

Both run the program under a seccomp filter (``seccomp.py``): no new namespaces, no ptrace, no
mounts, no sockets but local ones (so no network even without a network namespace).

When the parent runs as root every run gets its own uid (``_UID_BASE`` and up, no passwd
entry needed): the kernel only enforces ``RLIMIT_NPROC`` for non-root uids, a per-run uid
keeps one run's fork bomb from using up another's process budget, and it lets the cleanup
kill exactly that run's leftovers. A non-root parent runs programs as itself.

The interpreter is the one running us (``sys.executable``, resolved out of any venv; the
program gets the stdlib only). A pyenv interpreter lives under ``/root`` (mode 700), which the
run's uid cannot enter: under bwrap ``/root`` is replaced by an empty tmpfs (hiding the rest
of it) with the interpreter's prefix bound back read-only; likewise for one under ``/tmp``.
The fallback cannot remap paths, so it takes the first of our own interpreter,
``/usr/local/bin/python3.X`` and ``/usr/bin/python3.X`` (then ``python3``) that any user may run.

Machine setup: ``apt-get install -y bubblewrap`` (tests skip the bwrap cases without it,
except under ``CI``, where they fail).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import glob
import logging
import marshal
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar, cast

from teamrl.tasks.sandbox.seccomp import filter_program

log = logging.getLogger("teamrl.sandbox")
_T = TypeVar("_T")

ISOLATION_LEVELS = ("bwrap", "rlimits")

_MIB = 1 << 20
# Captured per stream; the rest is read and dropped so a chatty program cannot fill our memory.
_MAX_OUTPUT_BYTES = _MIB
_TMPFS_FILES = 4  # the private /tmp holds this many maximal files (see SandboxLimits.max_file_mb)
_UID_BASE = 1 << 30
_SLOTS_PER_PROCESS = 256
_PID_SPAN = 1 << 22  # Linux pid_max ceiling, so uids of two parent processes never collide
_BOOT_SOURCE = (Path(__file__).with_name("_boot.py")).read_text()
_HEADER_BYTES = 16
_PYTHON_FLAGS = ("-I", "-S", "-B")  # no site-packages or env vars: faster start, fewer surprises
_SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_PIPE_GRACE_S = 1.0
_KILL_PASSES = 100
_PROBE_SOURCE = "import json\nprint(json.dumps('ok'))\n"


class SandboxUnavailableError(RuntimeError):
    """The requested isolation cannot work on this machine."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one sandbox process.

    Under bwrap the private ``/tmp`` is capped at four times ``max_file_mb``.
    """

    timeout_s: float = 10.0  # wall clock for the whole process
    cpu_s: int = 10  # RLIMIT_CPU
    memory_mb: int = 512  # RLIMIT_AS
    max_processes: int = 64  # RLIMIT_NPROC, counting threads; only enforced for a non-root uid
    max_file_mb: int = 16  # RLIMIT_FSIZE
    check_timeout_s: float = 1.0  # CPU seconds per call of the function under test (calls.py)

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            seconds = field.name.endswith("timeout_s")
            kind, wanted = (float | int, "a number") if seconds else (int, "an integer")
            if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
                raise ValueError(f"SandboxLimits.{field.name} must be {wanted} > 0, got {value!r}")


@dataclass
class SandboxResult:
    """Outcome of one run. ``returncode`` is None when the wall-clock timeout killed the
    process, or when it never ran; a death by signal N reads 128+N under both isolation levels.
    ``error`` says why it never ran (its Ray sandbox worker was lost, teamrl.distributed.RaySandbox)."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    isolation: str
    error: str | None = None


class _UidPool:
    """Hands out per-run uids unique on this machine while the run lasts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: set[int] = set()
        self._next_shared = 0

    @contextlib.contextmanager
    def uid(self) -> Iterator[int]:
        with self._lock:
            free = [slot for slot in range(_SLOTS_PER_PROCESS) if slot not in self._used]
            if free:
                slot = free[0]
                self._used.add(slot)
            else:
                # Over 256 concurrent runs in one process share uids; still non-root.
                slot, self._next_shared = self._next_shared, (self._next_shared + 1) % _SLOTS_PER_PROCESS
        try:
            yield _UID_BASE + (os.getpid() % _PID_SPAN) * _SLOTS_PER_PROCESS + slot
        finally:
            if free:
                with self._lock:
                    self._used.discard(slot)


_uid_pool = _UidPool()


def _is_root() -> bool:
    return os.geteuid() == 0


def _hidden_from_others(path: str) -> str | None:
    """The first directory on ``path`` that users other than its owner and group cannot enter."""
    current = Path("/")
    for part in Path(path).parts[1:]:
        current = current / part
        mode = current.stat().st_mode
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return str(current)
    return None


def _interpreter_roots() -> list[str]:
    """Host directories the interpreter needs: its binary and its stdlib."""
    paths = {
        os.path.realpath(sys.base_prefix),
        os.path.realpath(sys.base_exec_prefix),
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    return sorted(p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths))


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


@functools.cache
def _site_packages() -> tuple[str, ...]:
    """Directories of installed packages the sandbox would otherwise see: the interpreter's and the
    system's site-packages / dist-packages (the code under test runs with -I -S: it imports none). Looked
    up once per process, not for every sandboxed run."""
    found: set[str] = set()
    for root in {*_interpreter_roots(), "/usr", "/usr/local"}:
        for pattern in (
            "lib/python3*/site-packages",
            "lib/python3*/dist-packages",
            "lib/python3/dist-packages",
        ):
            found.update(os.path.realpath(p) for p in glob.glob(os.path.join(root, pattern)))
    return tuple(sorted(p for p in found if os.path.isdir(p)))


def _bwrap_argv(bwrap: str, limits: SandboxLimits, seccomp_fd: int | None) -> list[str]:
    """bwrap arguments up to ``--``, with the interpreter made visible to the sandbox uid and the
    seccomp filter read from ``seccomp_fd``."""
    if _is_root():
        # No user namespace: the boot script drops to the run's uid itself (see _boot.py).
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        namespaces.append("--unshare-cgroup-try")
    else:
        namespaces = ["--unshare-all"]
    tmp_bytes = str(_TMPFS_FILES * limits.max_file_mb * _MIB)
    # Only the system's directories and the interpreter are seen, read-only: not the host's other files
    # (this repository's task generators and data, the virtualenv, the runs), which code under test could
    # read to answer its hidden tests.
    argv = [bwrap, *namespaces, "--die-with-parent", "--new-session"]
    for top in _SYSTEM_DIRS:
        if os.path.islink(top):  # a merged /usr: /lib -> usr/lib
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    argv += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
    for root in _interpreter_roots():
        seen = any(root == top or root.startswith(top + os.sep) for top in _SYSTEM_DIRS)
        if seen and _hidden_from_others(root) is None:
            continue
        # An interpreter elsewhere (a pyenv one under /root, one under /tmp) is bound at its own path,
        # its parents made (mode 755, where bwrap would make them 700).
        for parent in reversed(Path(root).parents[:-1]):
            argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", root, root]
    for packages in _site_packages():  # installed packages (teamrl itself, datasets) hidden too
        argv += ["--tmpfs", packages]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv + ["--chdir", "/tmp", "--"]


def _world_executable(path: str) -> bool:
    mode = os.stat(path).st_mode
    return _hidden_from_others(path) is None and bool(mode & stat.S_IXOTH) and bool(mode & stat.S_IROTH)


def _fallback_python() -> str | None:
    """An interpreter that a uid without any group can run, preferring our own version."""
    if not _is_root():
        return os.path.realpath(sys.executable)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [os.path.realpath(sys.executable)]
    for directory in ("/usr/local/bin", "/usr/bin"):
        candidates += [f"{directory}/{version}", f"{directory}/python3"]
    for candidate in candidates:
        if os.path.isfile(candidate) and _world_executable(candidate):
            return candidate
    return None


@dataclass(frozen=True)
class _Backend:
    isolation: str
    python: str
    bwrap: str | None = None


def _probe(backend: _Backend) -> str | None:
    """Run a tiny program through ``backend``; None if it works, else why not."""
    limits = SandboxLimits(timeout_s=20.0)
    with _uid_pool.uid() as uid, _work_dir(backend, uid) as work_dir, _seccomp_pipe(backend) as fd:
        argv, stdin = _command(backend, limits, uid, _PROBE_SOURCE, "", fd)
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                timeout=limits.timeout_s,
                pass_fds=() if fd is None else (fd,),
                **_placement(work_dir),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        if done.returncode != 0 or done.stdout.strip() != b'"ok"':
            return f"exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[-500:]}"
    return None


@functools.cache
def _bwrap_backend() -> tuple[_Backend | None, str]:
    """The bwrap backend if it works here, else None and the reason (probed once)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bwrap is not installed (Debian/Ubuntu: apt-get install -y bubblewrap)"
    backend = _Backend("bwrap", os.path.realpath(sys.executable), bwrap)
    problem = _probe(backend)
    if problem is not None:
        return None, f"{bwrap} does not work here ({problem})"
    return backend, ""


@functools.cache
def _rlimits_backend() -> tuple[_Backend | None, str]:
    python = _fallback_python()
    if python is None:
        return None, (
            f"no Python interpreter is executable by an unprivileged uid: {sys.executable} sits in a "
            "directory closed to other users; install bubblewrap, or a system python3 "
            "(apt-get install -y python3)"
        )
    backend = _Backend("rlimits", python)
    problem = _probe(backend)
    if problem is not None:
        return None, f"{python} fails as an unprivileged uid ({problem})"
    return backend, ""


def _command(
    backend: _Backend, limits: SandboxLimits, uid: int, source: str, stdin: str, seccomp_fd: int | None
) -> tuple[list[str], bytes]:
    """The child's argv and its standard input (see _boot.py for both protocols). Under bwrap the
    seccomp filter is read by bwrap from ``seccomp_fd`` (no ctypes import in the program); without
    it the boot script installs it."""
    prefix = [] if backend.bwrap is None else _bwrap_argv(backend.bwrap, limits, seccomp_fd)
    run_as = uid if _is_root() else -1
    reap = int(backend.bwrap is None and _is_root())  # bwrap's own pid 1 reaps under bwrap
    boot_args: list[int | str] = [run_as, run_as, limits.cpu_s, limits.memory_mb * _MIB, limits.max_processes]
    boot_args += [limits.max_file_mb * _MIB, reap, "-" if backend.bwrap else filter_program().hex()]
    argv = [*prefix, backend.python, *_PYTHON_FLAGS, "-c", _BOOT_SOURCE, *map(str, boot_args)]
    compiled = _compiled(source) if backend.python == os.path.realpath(sys.executable) else None
    # another interpreter may not read this one's code objects; source that does not compile fails there
    kind, program = (b"S", source.encode()) if compiled is None else (b"M", compiled)
    header = kind + str(len(program)).rjust(_HEADER_BYTES - 1).encode()
    return argv, header + program + stdin.encode()


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> bytes | None:
    """``source`` (the program, ours: the code under test comes on its standard input) compiled once
    here: a long judging program costs ~10 ms to compile in every run. None if it does not compile."""
    try:
        return marshal.dumps(compile(source, "<sandbox>", "exec"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@contextlib.contextmanager
def _seccomp_pipe(backend: _Backend) -> Iterator[int | None]:
    """For bwrap: the read end of a pipe holding the filter (passed to the child, which reads it to
    its end); None otherwise."""
    if backend.bwrap is None:
        yield None
        return
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, filter_program())  # a few hundred bytes: within the pipe's buffer
        os.close(write_end)
        write_end = -1
        yield read_end
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


@contextlib.contextmanager
def _work_dir(backend: _Backend, uid: int) -> Iterator[str | None]:
    """A private host work dir for the fallback; None under bwrap, which uses its own /tmp."""
    if backend.bwrap is not None:
        yield None
        return
    path = tempfile.mkdtemp(prefix="teamrl-sandbox-")
    try:
        if _is_root():
            os.chown(path, uid, uid)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _placement(work_dir: str | None) -> dict:
    """``cwd`` and ``env`` for the child process (bwrap's --chdir moves it into its /tmp)."""
    home = work_dir or "/tmp"
    env = {"PATH": _SANDBOX_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
    return {"cwd": work_dir or "/", "env": env}


def process_statuses() -> Iterator[tuple[int, dict[str, str]]]:
    """``(pid, fields of /proc/PID/status)`` for every process still there when it is read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue  # already gone
        yield int(entry.name), dict(line.split(":", 1) for line in status.splitlines() if ":" in line)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is ``uid``, until none is left alive."""
    # Each pass also catches children forked just before their parent died; the bound only
    # guards against a process stuck in uninterruptible sleep.
    for _ in range(_KILL_PASSES):
        found = False
        for pid, fields_ in process_statuses():
            if int(fields_["Uid"].split()[0]) == uid and not fields_["State"].strip().startswith(("Z", "X")):
                found = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not found:
            return
    log.warning("sandbox: processes of uid %d survived %d SIGKILL passes", uid, _KILL_PASSES)


def _sweep_uid(uid: int, timeout_s: float = 2.0) -> None:
    """SIGKILL the live processes of ``uid`` and wait (bounded) until none, zombies included, is left
    in /proc. One scan of /proc when the run left nothing behind, the usual case."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = False
        for pid, fields_ in process_statuses():
            if int(fields_["Uid"].split()[0]) == uid:
                found = True
                if not fields_["State"].strip().startswith(("Z", "X")):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        if not found or time.monotonic() > deadline:
            return
        time.sleep(0.01)


class _Collector(asyncio.SubprocessProtocol):
    """Keeps capped output and reports the exit apart from the pipes closing: on Python 3.11
    ``Process.wait()`` also waits for the pipes, which leftover children may hold open."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.output = {1: bytearray(), 2: bytearray()}
        self.exited = loop.create_future()
        self.pipes_closed = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        kept = self.output[fd]
        kept += data[: max(0, _MAX_OUTPUT_BYTES - len(kept))]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        self.exited.set_result(None)


def default_parallel() -> int:
    """Sandbox processes at once: a few per core (most of a check is process start-up)."""
    return max(8, 4 * (os.cpu_count() or 1))


class Sandbox:
    """Runs untrusted Python programs, one contained process per call, at most ``max_parallel`` at
    once (the rest wait for a slot before their clock starts); safe to use concurrently."""

    def __init__(
        self,
        limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen
        isolation: str = "auto",
        max_parallel: int | None = None,
    ):
        if isolation not in ("auto", *ISOLATION_LEVELS):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'rlimits', got {isolation!r}")
        self.max_parallel = default_parallel() if max_parallel is None else max_parallel
        if self.max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {self.max_parallel}")
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.limits = limits
        backend, why_not_bwrap = _bwrap_backend() if isolation in ("auto", "bwrap") else (None, "")
        if backend is None and isolation != "rlimits":
            raise SandboxUnavailableError(
                f"isolation={isolation!r} needs bubblewrap, but {why_not_bwrap}. Untrusted code is not run "
                "without it unless you accept weaker isolation explicitly: sandbox.isolation: rlimits "
                "(rlimits, a non-root uid and a seccomp filter, but no filesystem isolation)"
            )
        if backend is None:
            backend, why_not = _rlimits_backend()
            if backend is None:
                raise SandboxUnavailableError(f"isolation={isolation!r}: {why_not}")
            _warn_rlimits_once()
        self._backend = backend

    @property
    def isolation(self) -> str:
        """``"bwrap"`` or ``"rlimits"``."""
        return self._backend.isolation

    async def run(self, source: str, stdin: str = "") -> SandboxResult:
        """Run ``source`` as ``__main__`` with ``stdin``; never raises for anything the program does."""
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(self.max_parallel)
        async with slots:
            return await self._run(loop, source, stdin)

    async def _run(self, loop: asyncio.AbstractEventLoop, source: str, stdin: str) -> SandboxResult:
        with _uid_pool.uid() as uid, _work_dir(self._backend, uid) as work_dir:
            with _seccomp_pipe(self._backend) as seccomp_fd:  # the child keeps its own copy
                argv, payload = _command(self._backend, self.limits, uid, source, stdin, seccomp_fd)
                start = time.monotonic()
                transport, collector = await loop.subprocess_exec(
                    lambda: _Collector(loop),
                    *argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    pass_fds=() if seccomp_fd is None else (seccomp_fd,),
                    **_placement(work_dir),
                )
            try:
                # The transport buffers what the pipe cannot take yet; no drain needed.
                stdin_pipe = cast(asyncio.WriteTransport, transport.get_pipe_transport(0))  # stdin=PIPE
                stdin_pipe.write(payload)
                stdin_pipe.close()
                await asyncio.wait([collector.exited], timeout=self.limits.timeout_s)
            finally:
                wall_s = time.monotonic() - start
                timed_out = transport.get_returncode() is None
                if self._kill_tree(transport, uid):
                    await _swept(uid)
                await collector.exited
                # Leftovers are dead now, so the pipes close promptly, except after a setsid()
                # escape in the non-root fallback: do not wait on those forever.
                await asyncio.wait([collector.pipes_closed], timeout=_PIPE_GRACE_S)
                transport.close()
        returncode = cast(int, transport.get_returncode())  # None only when timed out, then unused
        return SandboxResult(
            returncode=None if timed_out else (128 - returncode if returncode < 0 else returncode),
            stdout=collector.output[1].decode(errors="replace"),
            stderr=collector.output[2].decode(errors="replace"),
            timed_out=timed_out,
            wall_s=wall_s,
            isolation=self.isolation,
        )

    def run_sync(self, source: str, stdin: str = "") -> SandboxResult:
        """Blocking ``run`` for code without an event loop."""
        return _run_blocking(self.run(source, stdin))

    def _kill_tree(self, transport: asyncio.SubprocessTransport, uid: int) -> bool:
        """Kill what the run left; True when the caller must still sweep ``uid`` (:func:`_sweep_uid`)."""
        alive = transport.get_returncode() is None
        if self._backend.bwrap is not None:
            if alive:
                # Kills bwrap, whose pid 1 follows (--die-with-parent) taking the namespace along.
                transport.kill()
            # The namespace's teardown is asynchronous, and slow on a loaded machine: as root, kill the
            # run's uid ourselves and wait until the kernel has taken its processes away.
            return _is_root()
        if _is_root():
            if alive:
                # Not our root reaper (_boot.py): it reaps the run's processes once they die.
                _kill_uid(uid)
        else:
            # Without a uid of its own only the process group can be reached, leftovers of a
            # finished program included; a program that calls setsid() escapes this.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(transport.get_pid(), signal.SIGKILL)
        return False


_SWEEPER = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="teamrl-sweep")


async def _swept(uid: int) -> None:
    """:func:`_sweep_uid` in a worker thread: the scan of /proc and the short sleeps while the kernel
    takes the run's processes away no longer hold up the event loop (the other episodes' generation and
    checks). The uid goes back to the pool only once it is swept, even when the run is cancelled."""
    future = _SWEEPER.submit(_sweep_uid, uid)
    try:
        await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.result()  # bounded by _sweep_uid's own timeout; the uid must not be reused before
        raise


@functools.cache
def _warn_rlimits_once() -> None:
    log.warning(
        "sandbox: isolation rlimits: untrusted code runs with rlimits, a non-root uid and a seccomp "
        "filter (no network), but without filesystem isolation (it can write to /tmp, /var/tmp, /dev/shm)"
    )


def _run_blocking(coroutine: Coroutine[object, object, _T]) -> _T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise RuntimeError("run_sync/judge_sync called inside a running event loop; await the async version")
