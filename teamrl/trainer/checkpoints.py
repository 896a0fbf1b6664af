"""A run's checkpoints: the last ``run.keep_checkpoints`` kept, each file fsynced, each directory with a
``manifest.json`` (size and sha256 of every file) written last and checked before a resume trusts it.

Layout: ``RUN_DIR/checkpoints/000007-step-000012/`` (the 7th checkpoint written, after RL step 12) and
``RUN_DIR/checkpoint``, a symlink to the newest (the name of the single checkpoint older runs kept,
which a resume moves into ``checkpoints/``). A checkpoint is filled in a hidden temp directory and
renamed into place once complete, so a killed writer leaves the previous checkpoints as they were.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from teamrl.atomic import fsync_directory, recover_directory, reporting_full_disk
from teamrl.trainer.faults import fault_point

log = logging.getLogger("teamrl")

CHECKPOINTS = "checkpoints"
LATEST = "checkpoint"
MANIFEST = "manifest.json"
STATE = "state.json"
_NAME = re.compile(r"(\d{6,})-step-(\d{6,})")


class CheckpointError(RuntimeError):
    """No checkpoint of a run can be trusted; the message names the damaged files."""


def checkpoint_name(index: int, step: int) -> str:
    return f"{index:06d}-step-{step:06d}"


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """The run's checkpoint directories, newest (highest index) first."""
    root = Path(run_dir) / CHECKPOINTS
    found = [p for p in root.iterdir() if _NAME.fullmatch(p.name) and p.is_dir()] if root.is_dir() else []
    return sorted(found, key=lambda p: int(_NAME.fullmatch(p.name)[1]), reverse=True)  # type: ignore[index]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def seal(directory: Path) -> None:
    """fsync every file and directory under ``directory``, then write its manifest (fsynced) last."""
    files: dict[str, dict[str, Any]] = {}
    for path in _files(directory):
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
        files[path.relative_to(directory).as_posix()] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), reverse=True):
        fsync_directory(sub)
    with open(directory / MANIFEST, "w") as fh:
        fh.write(json.dumps({"files": files}, indent=1))
        fh.flush()
        os.fsync(fh.fileno())
    fsync_directory(directory)


def verify(directory: Path) -> str | None:
    """What is wrong with checkpoint ``directory`` (naming the file), or None when every file matches
    its manifest."""
    manifest = directory / MANIFEST
    try:
        files = json.loads(manifest.read_text())["files"]
    except FileNotFoundError:
        return f"{manifest} is missing (the checkpoint was never completed)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{manifest} is unreadable ({type(exc).__name__})"
    if STATE not in files:
        return f"{manifest} lists no {STATE}"
    for rel, want in files.items():
        path = directory / rel
        if not path.is_file():
            return f"{path} is missing"
        size = path.stat().st_size
        if size != want["size"]:
            return f"{path} is {size} bytes, the manifest says {want['size']} (truncated or overwritten)"
        if _sha256(path) != want["sha256"]:
            return f"{path} does not match its sha256 in the manifest (damaged)"
    return None


def read_state(directory: Path) -> dict[str, Any]:
    return json.loads((directory / STATE).read_text())


def write_checkpoint(run_dir: Path, index: int, step: int, fill: Callable[[Path], None], keep: int) -> Path:
    """Fill a temp directory with ``fill``, seal it, rename it to ``checkpoints/<index>-step-<step>``,
    point ``checkpoint`` at it and delete all but the newest ``keep``. A full disk raises
    ``teamrl.atomic.DiskFull`` naming the checkpoint; the earlier checkpoints are untouched."""
    root = Path(run_dir) / CHECKPOINTS
    target = root / checkpoint_name(index, step)
    tmp = root / f".tmp-{target.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with reporting_full_disk(target, where=root):
            root.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            fill(tmp)
            seal(tmp)
            tmp.rename(target)
            fsync_directory(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    fault_point("checkpoint_renamed")
    point_latest(run_dir, target)
    for old in checkpoint_dirs(run_dir)[keep:]:
        remove(old)
    return target


def point_latest(run_dir: Path, directory: Path) -> None:
    """Swap the ``checkpoint`` symlink to ``directory`` (a rename: never missing, never half made)."""
    run_dir = Path(run_dir)
    link = run_dir / f".{LATEST}.link-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with reporting_full_disk(run_dir / LATEST):
        os.symlink(Path(CHECKPOINTS) / directory.name, link)
        try:
            os.replace(link, run_dir / LATEST)
        except BaseException:
            link.unlink(missing_ok=True)
            raise
        fsync_directory(run_dir)


def remove(directory: Path) -> None:
    """Delete a checkpoint: renamed to a hidden ``.old-`` name first, so a kill mid-delete leaves
    no half checkpoint under a checkpoint's name (``clean_stale`` finishes the job)."""
    old = directory.parent / f".old-{directory.name}-{uuid.uuid4().hex[:8]}"
    directory.rename(old)
    fault_point("checkpoint_pruning")
    shutil.rmtree(old, ignore_errors=True)


def discard(directory: Path) -> Path:
    """Set a checkpoint that cannot be used aside as ``<name>.bad`` (kept for a post-mortem, never
    loaded or counted again); returns the new path."""
    bad = directory.with_name(f"{directory.name}.bad")
    if bad.exists():
        shutil.rmtree(bad)
    directory.rename(bad)
    return bad


def clean_stale(run_dir: Path) -> None:
    """Remove what killed writers left (temp and half-deleted checkpoints, temp files and links) and
    move an older run's single ``checkpoint/`` directory into ``checkpoints/``."""
    run_dir = Path(run_dir)
    latest = run_dir / LATEST
    if not latest.is_symlink():
        if any(run_dir.glob(f".{LATEST}.old-*")):  # the old layout, killed between its two renames
            recover_directory(latest)
        if latest.is_dir():
            _migrate(run_dir)
    stale = [
        *run_dir.glob(f"{CHECKPOINTS}/.tmp-*"),
        *run_dir.glob(f"{CHECKPOINTS}/.old-*"),
        *run_dir.glob(f".{LATEST}.tmp-*"),
        *run_dir.glob(f".{LATEST}.old-*"),
        *run_dir.glob(f".{LATEST}.link-*"),
        *run_dir.glob(".*.tmp"),  # atomic_write_text's temp files (metrics, summary, config)
    ]
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _migrate(run_dir: Path) -> None:
    """An older run's ``checkpoint/`` (written atomically, without a manifest) becomes the first
    checkpoint of ``checkpoints/``."""
    old = run_dir / LATEST
    if not (old / STATE).exists():  # not a checkpoint at all
        return
    step = int(read_state(old).get("step", 0))
    seal(old)
    (run_dir / CHECKPOINTS).mkdir(exist_ok=True)
    target = run_dir / CHECKPOINTS / checkpoint_name(0, step)
    old.rename(target)
    fsync_directory(run_dir / CHECKPOINTS)
    point_latest(run_dir, target)
    log.info("moved %s (the single checkpoint of an older teamrl) to %s", old, target)


def latest_good(run_dir: Path) -> Path | None:
    """The newest checkpoint whose files match its manifest (a warning names each damaged one
    passed over); None when the run has no checkpoint. Raises :class:`CheckpointError` when it has
    checkpoints but none is intact. Reads only: for ``teamrl eval`` and other readers."""
    problems = []
    for directory in checkpoint_dirs(run_dir):
        problem = verify(directory)
        if problem is None:
            return directory
        log.warning("checkpoint %s is damaged: %s; using the one before", directory.name, problem)
        problems.append(problem)
    legacy = Path(run_dir) / LATEST
    if not problems and legacy.is_dir() and not legacy.is_symlink() and (legacy / STATE).exists():
        return legacy  # an older run's single checkpoint, not yet moved by a resume
    if problems:
        raise CheckpointError(no_good_checkpoint(run_dir, problems))
    return None


def no_good_checkpoint(run_dir: Path, problems: list[str]) -> str:
    return (
        f"no intact checkpoint in {run_dir}: " + "; ".join(problems) + ". Restore the damaged files, or "
        "start a new run"
    )
