"""Run-directory logs: append-only JSON lines that survive a crash mid-write."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from teamrl.atomic import atomic_write_text


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
