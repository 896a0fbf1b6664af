"""Atomic writes: a killed writer leaves the old version or the new one, never half of either."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_FULL = (errno.ENOSPC, errno.EDQUOT)
# how libraries that lose the errno (safetensors, a Rust error) word a full disk
_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "StorageFull", "os error 28", "os error 122")


class DiskFull(OSError):
    """The disk (or the quota) filled up while ``filename`` was being written."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(errno.ENOSPC, "no space left on device", str(path))

    def __str__(self) -> str:
        return f"no space left on device while writing {self.filename}"


def is_disk_full(exc: BaseException, where: Path | None = None) -> bool:
    """Whether ``exc`` (or an exception it wraps) is a full disk; with ``where``, also when a library
    error that names no cause (torch's "file write failed") came with less than 1 MiB free there."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL:
            return True
        if any(words in str(seen) for words in _FULL_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    if where is None:
        return False
    try:
        return shutil.disk_usage(where).free < 1 << 20
    except OSError:
        return False


@contextmanager
def reporting_full_disk(path: Path, where: Path | None = None) -> Iterator[None]:
    """Turn a full disk met while writing ``path`` into :class:`DiskFull` naming it."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as exc:
        if is_disk_full(exc, where):
            raise DiskFull(path) from exc
        raise


def fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc/self/status``), else by
    setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_file_beside(path: Path, suffix: str = ".tmp") -> tuple[int, str]:
    """A new temp file in ``path``'s directory, open (fd, name), with the mode a plain ``open`` would give
    it (0666 less the umask), not ``mkstemp``'s 0600: renamed over ``path``, it must stay readable by whoever
    reads the run (a shared TensorBoard, a teammate)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return fd, tmp


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically: see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path``, fsync it, then rename it over ``path``.

    A full disk raises :class:`DiskFull` naming ``path``."""
    with reporting_full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_file_beside(path)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def recover_directory(target: Path) -> None:
    """Undo a replacement by :func:`atomic_directory` that was killed between its two renames."""
    target = Path(target)
    if target.exists():
        return
    olds = sorted(target.parent.glob(f".{target.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds:
        olds[-1].rename(target)


@contextmanager
def atomic_directory(target: Path, replace: bool = True) -> Iterator[Path]:
    """Yield a sibling temp dir to fill; on success it becomes ``target``, on error it is deleted.

    A killed writer therefore never leaves a half-written ``target`` (at worst a stale hidden temp dir).
    An existing ``target`` is swapped out when ``replace`` (leaving a brief moment where it does not
    exist), or kept and the new contents discarded when not (a concurrent writer won the race).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        if not target.exists():
            tmp.rename(target)
        elif replace:
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        # else: a concurrent writer already produced target; ours is dropped below
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


class JsonlLog:
    """Append-only JSON lines; each record is flushed and fsynced as one write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict[str, Any]) -> None:
        with reporting_full_disk(self.path), open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def lines(self) -> list[dict[str, Any] | None]:
        """Every line in order, parsed; None for a line that is not a JSON object (cut by a crash
        mid-write, or damaged)."""
        if not self.path.exists():
            return []
        text = self.path.read_text(errors="replace")
        out: list[dict[str, Any] | None] = []
        for line in text.split("\n")[: -1 if text.endswith("\n") or not text else None]:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            out.append(row if isinstance(row, dict) else None)
        return out

    def read(self) -> list[dict[str, Any]]:
        return [row for row in self.lines() if row is not None]

    def rewrite(self, rows: list[dict[str, Any]]) -> None:
        """Replace the log by ``rows`` (atomically)."""
        write_jsonl(self.path, rows)


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
