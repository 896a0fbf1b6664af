"""Test helpers: watch what each ``Trainer.update`` trained, or stop a run in one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from teamrl.config import load_config
from teamrl.trainer.trainer import Trainer


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


def killed_then_resumed(cfg: Any, run: Path, monkeypatch: Any) -> Trainer:
    """Train ``cfg`` in ``run`` until its second update raises KeyboardInterrupt, as a run killed there
    stops; return the trainer that resumes it."""
    trainer = Trainer(cfg, run)
    interrupt_update(trainer, monkeypatch, call=2)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    return Trainer(load_config(run / "config.yaml"), run, resume=True)
