"""Run-directory logs: append-only JSON lines that survive a crash mid-write."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from teamrl.atomic import JsonlLog, write_jsonl  # noqa: F401 - imported from here too


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
