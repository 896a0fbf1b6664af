"""The compact table ``teamrl train`` prints while it trains: one fixed-width row per RL iteration
(printed through ``tqdm.write`` so it scrolls above the progress bar), the header every few rows."""

from __future__ import annotations

import math
import re
from typing import Any


def _cell(value: Any, width: int, digits: int = 3) -> str:
    if isinstance(value, bool) or value is None:
        text = "-"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, int | float):
        v = float(value)
        if not math.isfinite(v):
            text = "nan"
        elif abs(v) >= 10_000:
            text = f"{v:.0f}"
        elif abs(v) >= 100:
            text = f"{v:.1f}" if width >= 7 else f"{v:.0f}"
        else:
            text = f"{v:.{digits}f}"
    else:
        text = str(value)
    return text[:width].rjust(width)


def _role_label(role: str) -> str:
    """The role's column, 7 characters wide; a numbered role keeps its number ("r:deb_0")."""
    number = re.search(r"_\d+$", role)
    tail = number.group() if number else ""
    return "r:" + role if len(role) <= 5 else "r:" + role[: 5 - len(tail)] + tail


class LiveTable:
    """Rows of the latest metrics: step, phase, team success and outcome, each role's reward, the
    trained roles' KL and policy loss, throughput, seconds per iteration and held-out success."""

    def __init__(self, roles: list[str], header_every: int = 20) -> None:
        self.roles = list(roles)
        self.header_every = header_every
        self._rows = 0

    def header(self) -> str:
        cells = ["step".rjust(5), "phase".ljust(16), "solved".rjust(6), "R".rjust(6)]
        cells += [_role_label(r).rjust(7) for r in self.roles]
        cells += ["kl".rjust(7), "loss".rjust(8), "tok/s".rjust(6), "s/it".rjust(5), "eval".rjust(6)]
        return " ".join(cells)

    def row(self, record: dict[str, Any]) -> str:
        trained = [r for r in self.roles if any(k.startswith(f"train/{r}/") for k in record)]

        def mean(stat: str) -> float | None:
            vals = [record[f"train/{r}/{stat}"] for r in trained if f"train/{r}/{stat}" in record]
            return sum(vals) / len(vals) if vals else None

        skipped = bool(trained) and all(record.get(f"train/{r}/skipped") for r in trained)
        phase = str(record.get("phase", ""))
        cells = [
            _cell(record.get("step"), 5),
            (phase if len(phase) <= 16 else "…" + phase[-15:]).ljust(16),
            _cell(record.get("rollout/solved"), 6),
            _cell(record.get("rollout/outcome"), 6),
        ]
        cells += [_cell(record.get(f"rollout/reward/{r}"), 7) for r in self.roles]
        cells += [
            "skip".rjust(7) if skipped else _cell(mean("kl"), 7, 4),
            "skip".rjust(8) if skipped else _cell(mean("policy_loss"), 8, 4),
            _cell(record.get("perf/rollout_tokens_per_s"), 6),
            _cell(record.get("perf/iteration_s"), 5, 1),
            _cell(record.get("eval/solved"), 6),
        ]
        return " ".join(cells)

    def lines(self, record: dict[str, Any]) -> list[str]:
        """The row for ``record``, preceded by the header on the first row and every few rows."""
        out = [self.header()] if self._rows % self.header_every == 0 else []
        self._rows += 1
        return out + [self.row(record)]
