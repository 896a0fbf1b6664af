"""Run-directory logs: append-only JSON lines that survive a crash mid-write."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teamrl.atomic import atomic_write_text, reporting_full_disk


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


@dataclass
class RestoredRows:
    """The metrics log as a checkpoint left it (see :func:`rows_at_checkpoint`)."""

    rows: list[dict[str, Any]]
    dropped: int = 0  # rows past the checkpoint: their work is replayed and logs them again
    restored: int = 0  # rows the checkpoint covers that were cut or damaged, put back from its copy
    lost_lines: list[int] = field(default_factory=list)  # damaged lines before the copy (1-based)


def rows_at_checkpoint(
    lines: list[dict[str, Any] | None], covered: int, tail: list[dict[str, Any]]
) -> RestoredRows | None:
    """The rows of a log (``JsonlLog.lines``) that a checkpoint covers: its first ``covered`` lines,
    whose last ``len(tail)`` (the rows logged since the checkpoint before) the checkpoint keeps a copy
    of. None when lines the copy does not reach are missing (this checkpoint cannot rebuild the log)."""
    base = covered - len(tail)
    if len(lines) < base:
        return None
    head = lines[:base]
    lost = [i + 1 for i, row in enumerate(head) if row is None]
    restored = sum(  # compared as text: a NaN never equals itself
        1
        for i, row in enumerate(tail)
        if base + i >= len(lines) or json.dumps(lines[base + i]) != json.dumps(row)
    )
    rows = [row for row in head if row is not None] + tail
    return RestoredRows(rows, max(len(lines) - covered, 0), restored, lost)
