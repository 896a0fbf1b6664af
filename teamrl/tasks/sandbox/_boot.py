"""First code run inside every sandbox process; its text is passed as ``python -I -S -B -c``.

Arguments: ``UID GID CPU_S AS_BYTES NPROC FSIZE_BYTES REAP SECCOMP``. ``UID`` -1 keeps the current
uid; ``REAP`` 1 keeps a root reaper process above the program (see ``_reap``); ``SECCOMP`` is the
hex of the seccomp filter (``teamrl.tasks.sandbox.seccomp``) installed right before the program
runs, or ``-`` for none.
Standard input: a 16-byte header (``S`` or ``M``, then an ASCII decimal length), that many bytes of
program: UTF-8 source (``S``) or a ``marshal``-ed code object of this interpreter compiled by the
parent (``M``, which saves compiling a long program in every process), then the program's own
standard input.

Limits are set here rather than in a ``preexec_fn`` because the parent is multi-threaded
(asyncio, torch) and ``preexec_fn`` is not fork-safe there. The uid is dropped here too:
under bubblewrap the process starts as root (so that no user namespace is needed, which
would map the sandbox uid back to root and make the kernel skip ``RLIMIT_NPROC``).
"""

import os
import resource
import sys

_HEADER_BYTES = 16
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def _read_exact(count: int) -> bytes:
    # os.read on fd 0 leaves sys.stdin's buffer empty, so the program still sees the rest.
    chunks = []
    while count > 0:
        chunk = os.read(0, count)
        if not chunk:
            raise SystemExit(f"sandbox boot: standard input ended {count} bytes early")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _become(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _reap(uid: int, gid: int) -> None:
    """Fork; the child returns to run the program, this process stays root and never returns.

    Without a pid namespace, orphans of the program would go to the machine's pid 1, and a
    container's pid 1 often never reaps them: the zombies would pile up and keep counting
    against the uid's RLIMIT_NPROC. As a child subreaper this process inherits them instead.
    """
    import ctypes  # only here: ~5 ms of import that the bwrap path does not need

    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    program = os.fork()
    if program == 0:
        return
    for fd in (0, 1, 2):
        os.close(fd)  # so the pipes close as soon as the program's whole tree is gone
    _, status = os.waitpid(program, 0)
    killer = os.fork()
    if killer == 0:
        _become(uid, gid)
        os.kill(-1, 9)  # every process of the run's uid except this one, atomically
        os._exit(0)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def _seccomp(program: bytes) -> None:
    """Install the filter for this process and every process it starts; fails loudly, never silently."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    ulong = ctypes.c_ulong
    if prctl(_PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if prctl(_PR_SET_SECCOMP, ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def main() -> None:
    uid, gid, cpu_s, as_bytes, nproc, fsize_bytes, reap = (int(arg) for arg in sys.argv[1:8])
    seccomp = sys.argv[8]
    del sys.argv[1:]
    header = _read_exact(_HEADER_BYTES)
    program = _read_exact(int(header[1:]))
    if reap:
        _reap(uid, gid)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # One extra hard second: SIGXCPU at the soft limit, SIGKILL if the program ignores it.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))
    if uid >= 0:
        _become(uid, gid)
    if seccomp != "-":
        _seccomp(bytes.fromhex(seccomp))
    if header[:1] == b"M":
        import marshal

        code = marshal.loads(program)
    else:
        code = compile(program.decode(), "<sandbox>", "exec")
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})


if __name__ == "__main__":
    main()
