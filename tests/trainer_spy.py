"""Test helper: watch what each ``Trainer.update`` trained."""

from __future__ import annotations

from typing import Any


def record_updates(trainer: Any, monkeypatch: Any) -> list[tuple[tuple[str, ...], set[str], set[str]]]:
    """Wrap ``trainer.update``; every call appends (roles updated, roles skipped for zero advantages,
    fingerprints that changed in it) to the returned list."""
    seen: list[tuple[tuple[str, ...], set[str], set[str]]] = []
    original = trainer.update

    def spy(episodes, roles):
        before = trainer.fingerprints()
        stats = original(episodes, roles)
        after = trainer.fingerprints()
        skipped = {r for r in roles if stats.get(f"train/{r}/skipped")}
        seen.append((roles, skipped, {k for k in before if before[k] != after[k]}))
        return stats

    monkeypatch.setattr(trainer, "update", spy)
    return seen


def interrupt_update(trainer: Any, monkeypatch: Any, call: int) -> None:
    """Make the ``call``-th ``trainer.update`` raise KeyboardInterrupt: a run killed mid-iteration."""
    original = trainer.update
    calls = {"n": 0}

    def update(episodes, roles):
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return original(episodes, roles)

    monkeypatch.setattr(trainer, "update", update)
