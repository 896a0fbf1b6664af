"""Checks shared by the task suites' constructors: one message for one mistake, whichever suite."""

from __future__ import annotations

from collections.abc import Sequence


def difficulty_levels(difficulty: int | tuple[int, int], allowed: Sequence[int]) -> tuple[int, ...]:
    """``2`` or ``(1, 3)`` -> the difficulty levels it covers, within ``allowed``."""
    lo, hi = (difficulty, difficulty) if isinstance(difficulty, int) else tuple(difficulty)
    if not (allowed[0] <= lo <= hi <= allowed[-1]):
        raise ValueError(
            f"difficulty={difficulty!r} is out of range; use an int in {tuple(allowed)} "
            "or a (low, high) pair with low <= high inside it"
        )
    return tuple(range(lo, hi + 1))


def choices(name: str, given: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    """``given`` without repeats, in order; every entry must be one of ``allowed``."""
    if not given or any(g not in allowed for g in given):
        raise ValueError(f"{name}={given!r} is invalid; use a non-empty tuple drawn from {tuple(allowed)}")
    return tuple(dict.fromkeys(given))


def heldout_fraction(value: float) -> float:
    if not 0.0 < value < 1.0:
        raise ValueError(f"heldout_fraction={value!r} must lie strictly between 0 and 1")
    return value
