"""One trainer per run directory: an exclusive ``flock`` on ``RUN_DIR/.lock``, held while it trains.

The kernel drops the lock when its process dies (even by SIGKILL), so a stale lock never blocks a
resume. Trainers of one process share its lock (a notebook or a test resuming in-process).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import ClassVar

LOCK_FILE = ".lock"


class RunDirectoryInUse(RuntimeError):
    """Another process trains in this run directory."""


class RunLock:
    _held: ClassVar[dict[str, RunLock]] = {}  # run directory -> this process's lock on it

    def __init__(self, key: str, fd: int) -> None:
        self.key, self.fd, self.users = key, fd, 1

    @classmethod
    def acquire(cls, run_dir: Path) -> RunLock:
        """Lock ``run_dir`` for this process, or raise :class:`RunDirectoryInUse` naming the holder."""
        key = str(Path(run_dir).resolve())
        if key in cls._held:
            cls._held[key].users += 1
            return cls._held[key]
        fd = os.open(Path(key) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirectoryInUse(
                f"run directory {run_dir} is in use by pid {holder} (another teamrl train); wait for it "
                "to finish or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        lock = cls._held[key] = cls(key, fd)
        return lock

    def release(self) -> None:
        """Give the lock up once every trainer of this process that took it released it."""
        self.users -= 1
        if self.users == 0 and self._held.get(self.key) is self:
            del self._held[self.key]
            os.close(self.fd)  # closing the descriptor drops the flock
