"""Read a run directory (an LLM-team run of ``teamrl train`` or a classic-MARL run of ``teamrl marl
train``) into plain Python data for the report: its config, metric rows, evaluations, phases and a
few sample episodes. Nothing here imports torch or matplotlib.

Damaged input never raises past :class:`ReportError`: a truncated ``metrics.jsonl`` line or episode
line is skipped and counted in :attr:`Run.warnings`; a directory that is not a run raises
:class:`ReportError` with a one-line message. :func:`read_metrics`, for scripts, skips damaged lines the same
way and raises FileNotFoundError where a directory has no ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TEAM = "team"
MARL = "marl"


class ReportError(Exception):
    """A run directory that cannot be reported on (the message is one line, meant for the user)."""


@dataclass
class PhaseSpan:
    """A stretch of consecutive RL iterations that share a phase name (freeze-rotate: one role)."""

    name: str
    roles: tuple[str, ...]
    first_step: int
    last_step: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    planned: int | None = None  # iterations the recipe gives this phase, when the config says


@dataclass
class EvalPoint:
    label: str
    step: int
    metrics: dict[str, float]


@dataclass
class EpisodeSample:
    source: str  # the episodes file's stem, e.g. "eval_after_rl"
    index: int  # line number in that file
    data: dict[str, Any]

    @property
    def solved(self) -> bool:
        verifier = self.data.get("verifier") or {}
        return bool(verifier.get("solved")) if isinstance(verifier, dict) else False


@dataclass
class Run:
    path: Path
    kind: str  # TEAM or MARL
    name: str
    config: dict[str, Any]
    config_text: str
    rows: list[dict[str, Any]]
    roles: list[str] = field(default_factory=list)  # team roles, or MARL agents
    phases: list[PhaseSpan] = field(default_factory=list)
    planned_phases: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)
    evals: list[EvalPoint] = field(default_factory=list)
    episodes: dict[str, list[EpisodeSample]] = field(default_factory=dict)
    episode_counts: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    eval_result: dict[str, Any] | None = None  # MARL eval.json
    record: dict[str, Any] | None = None  # MARL episode_record.json: an episode as its env recorded it
    warnings: list[str] = field(default_factory=list)
    finished: bool = False
    updated: float = 0.0  # mtime of metrics.jsonl

    @property
    def rl_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if "phase" in r]

    @property
    def last_step(self) -> int:
        return max((int(r.get("step", 0)) for r in self.rows), default=0)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def read_jsonl(path: Path, warnings: list[str], what: str) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, one a line; bad lines are skipped with one warning per file."""
    rows: list[dict[str, Any]] = []
    bad = 0
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        warnings.append(f"could not read {path.name}: {exc.strerror or exc}")
        return rows
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad += 1
    if bad:
        warnings.append(f"{what}: skipped {bad} unreadable line{'s' * (bad > 1)} (cut by a crash mid-write?)")
    return rows


def read_metrics(run_dir: str | Path, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/metrics.jsonl`` in order (FileNotFoundError where it is missing). A line cut by
    a crash mid-write is skipped with a note, added to ``warnings`` (printed to stderr where none is given),
    so a killed run's metrics still read."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics.jsonl (not a run directory, or the run never started)")
    notes: list[str] = []
    rows = read_jsonl(path, notes, str(path))
    if warnings is None:
        for note in notes:
            print(note, file=sys.stderr)
    else:
        warnings.extend(notes)
    return rows


def _read_json(path: Path, warnings: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        warnings.append(f"skipped {path.name}: {exc}")
        return None
    return data if isinstance(data, dict) else None


def detect_kind(config: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
    if "workflow" in config or "recipe" in config:
        return TEAM
    if isinstance(config.get("algorithm"), str) and "env" in config:
        return MARL
    keys = {k for r in rows[:50] for k in r}
    if any(k.startswith(("rollout/", "eval/", "sft/", "train/")) for k in keys):
        return TEAM
    if any(k.startswith("return/") for k in keys):
        return MARL
    return None


def load_run(path: str | Path, max_episodes: int = 6) -> Run:
    """Read one run directory; raises :class:`ReportError` if ``path`` is not one."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such directory")
    if not path.is_dir():
        raise ReportError(f"{path} is not a directory")
    metrics, cfg_file = path / "metrics.jsonl", path / "config.yaml"
    if not metrics.exists() and not cfg_file.exists():
        raise ReportError(f"{path} is not a run directory (it has neither config.yaml nor metrics.jsonl)")
    warnings: list[str] = []
    config: dict[str, Any] = {}
    config_text = ""
    if cfg_file.exists():
        try:
            config_text = cfg_file.read_text()
            loaded = yaml.safe_load(config_text)
            config = loaded if isinstance(loaded, dict) else {}
        except (OSError, yaml.YAMLError) as exc:
            warnings.append(f"config.yaml unreadable: {str(exc).splitlines()[0]}")
    rows = read_jsonl(metrics, warnings, "metrics.jsonl") if metrics.exists() else []
    rows = [r for r in rows if _finite(r.get("step"))]
    kind = detect_kind(config, rows)
    if kind is None:
        raise ReportError(
            f"{path} does not look like a teamrl run (unknown config.yaml and no known metrics)"
        )
    run = Run(
        path=path,
        kind=kind,
        name=path.resolve().name,
        config=config,
        config_text=config_text,
        rows=rows,
        warnings=warnings,
        updated=metrics.stat().st_mtime if metrics.exists() else 0.0,
    )
    if not rows:
        warnings.append("metrics.jsonl is missing or empty: nothing to plot yet")
    if kind == TEAM:
        _load_team(run, max_episodes)
    else:
        _load_marl(run)
    return run


# -- LLM-team runs ------------------------------------------------------------------------------
def _team_roles(run: Run) -> list[str]:
    order = (run.config.get("workflow") or {}).get("order")
    roles = [str(r) for r in order] if isinstance(order, list) else []
    for row in run.rows:
        for key in row:
            parts = key.split("/")
            if len(parts) == 3 and parts[1] == "reward" and parts[2] not in roles:
                roles.append(parts[2])
            if len(parts) == 3 and parts[0] in ("train", "sft") and parts[1] not in roles:
                roles.append(parts[1])
    return roles


def _phases(run: Run) -> list[PhaseSpan]:
    spans: list[PhaseSpan] = []
    for row in run.rl_rows:
        name, step = str(row["phase"]), int(row["step"])
        if spans and spans[-1].name == name:
            spans[-1].last_step = step
            spans[-1].rows.append(row)
        else:
            spans.append(PhaseSpan(name, (), step, step, [row]))
    for span in spans:
        trained = [r for r in run.roles if any(k.startswith(f"train/{r}/") for row in span.rows for k in row)]
        if not trained:  # no update stats logged: fall back on the freeze-rotate name "round1/coder#2"
            guess = span.name.rsplit("/", 1)[-1].split("#")[0]
            trained = [guess] if guess in run.roles else []
        span.roles = tuple(trained)
    return spans


def _planned_phases(run: Run) -> list[tuple[str, tuple[str, ...], int]]:
    """The recipe's phases (name, roles, iterations), when config.yaml is a valid teamrl config."""
    if not run.config_text:
        return []
    try:
        from teamrl.config import Config
        from teamrl.recipes import phases_for

        cfg = Config.model_validate(run.config)
        return [(p.name, tuple(p.roles), int(p.iterations)) for p in phases_for(cfg)]
    except Exception:  # noqa: BLE001 - an older or hand-edited config: the report works without it
        return []


def _evals(run: Run) -> list[EvalPoint]:
    labels: dict[tuple[int, float], str] = {}
    for ev in (run.summary or {}).get("evals", []) if run.summary else []:
        if isinstance(ev, dict) and _finite(ev.get("eval/solved")):
            labels[(int(ev.get("step", 0)), round(float(ev["eval/solved"]), 9))] = str(ev.get("label", ""))
    points: list[EvalPoint] = []
    for row in run.rows:
        if not _finite(row.get("eval/solved")):
            continue
        step = int(row["step"])
        metrics = {k: float(v) for k, v in row.items() if k.startswith("eval/") and _finite(v)}
        if points and points[-1].step == step and points[-1].metrics == metrics:
            continue  # the trainer logs a phase-end evaluation in the iteration's row and again alone
        label = labels.get((step, round(metrics["eval/solved"], 9))) or (
            "after_sft" if step == 0 else f"step{step}"
        )
        points.append(EvalPoint(label, step, metrics))
    return points


def sample_episodes(episodes: list[EpisodeSample], k: int) -> list[EpisodeSample]:
    """Up to ``k`` episodes of distinct tasks, alternating solved, failed and badly formatted ones."""
    if k <= 0:
        return []

    def has_error(e: EpisodeSample) -> bool:
        return any(isinstance(t, dict) and t.get("error") for t in e.data.get("turns") or [])

    pools = [
        [e for e in episodes if e.solved],
        [e for e in episodes if not e.solved and not has_error(e)],
        [e for e in episodes if has_error(e)],
    ]
    picked: list[EpisodeSample] = []
    tasks: set[str] = set()
    cursors = [0, 0, 0]
    while len(picked) < k and any(c < len(p) for c, p in zip(cursors, pools, strict=True)):
        for i, pool in enumerate(pools):
            while cursors[i] < len(pool):
                e = pool[cursors[i]]
                cursors[i] += 1
                task = str(e.data.get("task_id", ""))
                if task not in tasks and all(e is not p for p in picked):
                    tasks.add(task)
                    picked.append(e)
                    break
            if len(picked) >= k:
                break
    if len(picked) < k:  # fewer distinct tasks than k: fill with repeats of tasks
        picked += [e for e in episodes if all(e is not p for p in picked)][: k - len(picked)]
    return sorted(picked, key=lambda e: e.index)


def _episode_files(path: Path) -> list[Path]:
    files = [p for p in (path / "episodes").glob("*.jsonl") if p.is_file()]

    def order(p: Path) -> tuple[int, float]:
        rank = {"eval_after_rl": 0, "last_rollout": 2, "eval_after_sft": 3}.get(p.stem, 1)
        return rank, -p.stat().st_mtime

    return sorted(files, key=order)


WEAK_ISOLATION = (
    "sandbox.isolation: rlimits: the model-written code of this run ran without bubblewrap "
    "(rlimits, a non-root uid and a seccomp filter, but no file-system isolation)"
)


def _runs_code(workflow: str) -> bool:
    """Whether the workflow named ``workflow`` runs model-written code in the sandbox (True when it
    cannot be loaded here: the warning is the safe side)."""
    try:
        from teamrl.config import workflow_class

        return workflow_class(workflow).uses_sandbox
    except Exception:  # noqa: BLE001 - a plugin this machine cannot import
        return True


def _load_team(run: Run, max_episodes: int) -> None:
    run.summary = _read_json(run.path / "summary.json", run.warnings)
    run.finished = run.summary is not None
    sandbox = got if isinstance(got := run.config.get("sandbox"), dict) else {}
    isolation = (run.summary or {}).get("sandbox_isolation") or sandbox.get("isolation")
    workflow = got if isinstance(got := run.config.get("workflow"), dict) else {}
    if isolation == "rlimits" and _runs_code(str(workflow.get("name", "pipeline"))):
        run.warnings.append(WEAK_ISOLATION)
    run.roles = _team_roles(run)
    run.phases = _phases(run)
    run.planned_phases = _planned_phases(run)
    planned = {name: n for name, _, n in run.planned_phases}
    for span in run.phases:
        span.planned = planned.get(span.name)
    run.evals = _evals(run)
    for file in _episode_files(run.path):
        rows = read_jsonl(file, run.warnings, f"episodes/{file.name}")
        samples = [
            EpisodeSample(file.stem, i, row)
            for i, row in enumerate(rows)
            if isinstance(row.get("turns"), list)
        ]
        run.episode_counts[file.stem] = len(samples)
        if samples:
            run.episodes[file.stem] = sample_episodes(samples, max_episodes)


# -- classic MARL runs --------------------------------------------------------------------------
def _load_marl(run: Run) -> None:
    run.eval_result = _read_json(run.path / "eval.json", run.warnings)
    run.record = _read_json(run.path / "episode_record.json", run.warnings)
    run.finished = run.eval_result is not None
    agents: list[str] = []
    for row in run.rows:
        for key in row:
            if key.startswith("return/") and key not in ("return/mean", "return/std"):
                agent = key.removeprefix("return/")
                if agent not in agents:
                    agents.append(agent)
    run.roles = agents


def load_runs(paths: list[str | Path], max_episodes: int = 6) -> tuple[list[Run], list[str]]:
    """Every readable run of ``paths``, and a warning for each path skipped. One path that is not a
    run raises :class:`ReportError`; among several, such paths are skipped unless all of them are."""
    runs: list[Run] = []
    skipped: list[str] = []
    for p in paths:
        try:
            runs.append(load_run(p, max_episodes))
        except ReportError as exc:
            if len(paths) == 1:
                raise
            skipped.append(str(exc))
    if not runs:
        raise ReportError("none of the directories is a run: " + "; ".join(skipped))
    names = [r.name for r in runs]
    for run in runs:  # two runs called "base" in different sweeps: tell them apart by their parent
        if names.count(run.name) > 1:
            run.name = f"{run.path.resolve().parent.name}/{run.name}"
    return runs, skipped


def describe_age(mtime: float) -> str:
    if not mtime:
        return "never"
    age = max(0.0, time.time() - mtime)
    if age < 90:
        return f"{age:.0f} s ago"
    if age < 5400:
        return f"{age / 60:.0f} min ago"
    if age < 2 * 86400:
        return f"{age / 3600:.1f} h ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime))
