"""``teamrl.train``: one run from Python, as ``teamrl train`` runs it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from teamrl.config import Config, load_config


def train(
    config: Config | str | Path | None = None,
    overrides: list[str] | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train a team: ``config`` is a :class:`~teamrl.config.Config`, a YAML path or None (the defaults),
    ``overrides`` are ``--set`` strings. The run goes to ``run_dir`` (default: ``run.out_dir`` /
    ``run.name`` or a name from the time); with ``resume`` it continues the run there. Returns the run's
    summary (its evaluations and directory)."""
    from teamrl.trainer.trainer import Trainer, resume_config

    if resume:
        if run_dir is None:
            raise ValueError("resume needs run_dir: the run to continue")
        cfg = resume_config(Path(run_dir))
    elif isinstance(config, Config):
        cfg = config
        if overrides:
            raise ValueError("overrides apply to a YAML path or the defaults, not to a Config object")
    else:
        cfg = load_config(config, overrides)
    if run_dir is None:
        name = cfg.run.name or f"run__s{cfg.run.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = Path(cfg.run.out_dir) / name
    trainer = Trainer(cfg, Path(run_dir), resume=resume)
    try:
        return trainer.fit()
    finally:
        trainer.close()
