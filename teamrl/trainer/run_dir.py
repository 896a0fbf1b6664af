"""A run directory: resolved config, JSONL metrics, TensorBoard events, checkpoints.

Every file is written atomically (temp file or temp dir, then rename), so a run killed at any
moment leaves either the old or the new version, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_dir(path: Path, fill: Callable[[Path], None]) -> None:
    """Build a directory with ``fill(tmp_dir)`` and move it into place in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        fill(tmp)
        old = path.with_name(f".{path.name}.old")
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def recover_dir(path: Path) -> None:
    """Undo an interrupted :func:`atomic_write_dir`: if only the old copy survived, restore it."""
    old = path.with_name(f".{path.name}.old")
    if not path.exists() and old.exists():
        os.replace(old, path)


class JsonlLog:
    """Append-only JSON lines; each record is flushed and fsynced as one write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a crash mid-write
                continue
        return rows

    def keep(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        """Rewrite the log keeping only matching rows (used on resume to drop rows past the checkpoint)."""
        rows = [r for r in self.read() if predicate(r)]
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in rows))


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
