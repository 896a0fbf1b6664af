"""Write the report: one self-contained HTML page (inline CSS, charts embedded as PNG data URIs)
and the same charts as PNG files in ``figures/`` next to it.

The page's stylesheet, script and HTML pieces are in :mod:`teamrl.report.markup`, its sections (one per
run, and the comparison of several) in :mod:`teamrl.report.sections`; here are the charts each section
shows, the page around the sections and :func:`write_report`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from teamrl.atomic import atomic_write_bytes
from teamrl.report import figures as F
from teamrl.report.load import MARL, TEAM, Run, load_runs
from teamrl.report.markup import CSS, LIVE_JS, Chart, _warnings, slug
from teamrl.report.sections import comparison_section, marl_section, team_section

log = logging.getLogger("teamrl.report")


@dataclass
class ReportResult:
    index: Path
    runs: list[Run]
    warnings: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)


# -- the charts of each section -----------------------------------------------------------------
def _charts(
    specs: list[tuple[str, str, str, Callable[[], bytes | None]]], warnings: list[str]
) -> list[Chart]:
    out = []
    for key, title, caption, make in specs:
        try:
            png = make()
        except Exception as exc:  # noqa: BLE001 - one odd metric must not cost the whole report
            warnings.append(f"chart {title!r} failed: {type(exc).__name__}: {exc}")
            continue
        if png:
            out.append(Chart(key, title, caption, png))
    return out


def team_charts(run: Run) -> list[Chart]:
    return _charts(
        [
            (
                "success",
                "Team success",
                "held-out evaluations (red) and training rollouts",
                lambda: F.team_success(run),
            ),
            ("reward", "Per-role reward", "hybrid reward of each role", lambda: F.team_rewards(run)),
            (
                "selfplay",
                "Self-play",
                "the game's held-out figures; proposer_solver: the training proposals' difficulty",
                lambda: F.team_self_play(run),
            ),
            (
                "workflow",
                "What the workflow reports",
                "its own figures in training rollouts (held-out evaluations red): e.g. the town's objectives "
                "and what emerged",
                lambda: F.team_workflow(run),
            ),
            ("kl", "KL", "each trained role's KL to its SFT snapshot", lambda: F.team_kl(run)),
            ("loss", "Policy loss", "clipped-surrogate loss of each trained role", lambda: F.team_loss(run)),
            ("throughput", "Tokens / s", "rollout generation throughput", lambda: F.team_throughput(run)),
            (
                "offpolicy",
                "Off-policy rollouts",
                "run.async_rollouts: the episodes' staleness and each role's truncated importance weights",
                lambda: F.team_off_policy(run),
            ),
        ],
        run.warnings,
    )


def phase_charts(run: Run) -> list[Chart]:
    return _charts(
        [
            ("schedule", "Which role trained when", "recipe phases", lambda: F.team_schedule(run)),
            (
                "contribution",
                "Change during each phase",
                "team success and per-role reward, end of phase minus its start",
                lambda: F.team_contribution(run),
            ),
        ],
        run.warnings,
    )


def marl_charts(run: Run) -> list[Chart]:
    return _charts(
        [
            ("return", "Episode return", "summed over agents; per agent faint", lambda: F.marl_return(run)),
            ("losses", "Losses", "", lambda: F.marl_losses(run)),
            ("diagnostics", "Policy diagnostics", "", lambda: F.marl_diagnostics(run)),
            (
                "env",
                "What the env reports",
                "per finished episode (info[agent]['episode']): e.g. a world's objectives and what emerged",
                lambda: F.marl_env(run),
            ),
            (
                "record",
                "A played episode",
                "the final evaluation's first episode as the env recorded it (the town: who was where, who "
                "talked to whom)",
                lambda: F.marl_record(run),
            ),
            ("throughput", "Agent-steps / s", "training throughput", lambda: F.marl_throughput(run)),
        ],
        run.warnings,
    )


def comparison_charts(runs: list[Run], warnings: list[str]) -> list[Chart]:
    team = [r for r in runs if r.kind == TEAM]
    marl = [r for r in runs if r.kind == MARL]
    specs: list[tuple[str, str, str, Callable[[], bytes | None]]] = []
    if team:
        specs += [
            (
                "heldout",
                "Held-out success",
                "",
                lambda: F.compare(team, "", "held-out success", "RL iteration", evals=True),
            ),
            (
                "solved",
                "Training-rollout success",
                "running mean",
                lambda: F.compare(team, "rollout/solved", "success", "RL iteration"),
            ),
            (
                "outcome",
                "Team outcome",
                "running mean",
                lambda: F.compare(team, "rollout/outcome", "outcome", "RL iteration"),
            ),
            (
                "tokens",
                "Tokens / s",
                "running mean",
                lambda: F.compare(team, "perf/rollout_tokens_per_s", "tokens / s", "RL iteration"),
            ),
        ]
    if marl:
        specs += [
            (
                "return",
                "Episode return",
                "running mean",
                lambda: F.compare(marl, "return/mean", "return", "environment steps"),
            ),
            (
                "sps",
                "Agent-steps / s",
                "running mean",
                lambda: F.compare(marl, "agent_steps_per_s", "agent-steps / s", "environment steps"),
            ),
        ]
    return _charts(specs, warnings)


# -- the page -----------------------------------------------------------------------------------
def render_page(
    runs: list[Run],
    ids: list[str],
    sections: list[str],
    compare_html: str,
    warnings: list[str],
    live_version: int | None = None,
    poll_ms: int = 3000,
) -> str:
    title = "teamrl report: " + ", ".join(r.name for r in runs)
    nav = ('<a href="#compare">side by side</a>' if compare_html else "") + "".join(
        f'<a href="#{rid}">{escape(r.name)}</a>' for r, rid in zip(runs, ids, strict=True)
    )
    live = ""
    meta = f"generated {time.strftime('%Y-%m-%d %H:%M:%S')} · {len(runs)} run{'s' * (len(runs) > 1)}"
    if live_version is not None:
        live = f"<script>{LIVE_JS % (int(live_version), poll_ms, poll_ms)}</script>"
        meta += " · live: refreshes when the run writes new metrics"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{escape(title)}</title><link rel="icon" href="data:,"><style>{CSS}</style></head>'
        f'<body data-version="{"" if live_version is None else int(live_version)}">'
        f'<header><h1>{escape(title)}</h1><div class="meta">{escape(meta)}</div><nav>{nav}</nav></header>'
        f"<main>{_warnings(warnings)}{compare_html}{''.join(sections)}</main>{live}</body></html>\n"
    )


def write_report(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    max_episodes: int = 6,
    live_version: int | None = None,
    poll_ms: int = 3000,
) -> ReportResult:
    """Read ``paths`` (run directories), write ``out_dir/index.html`` and ``out_dir/figures/*.png``.

    Raises :class:`teamrl.report.load.ReportError` (a one-line message) when there is no run to
    report on; damaged lines and unreadable side files become warnings shown on the page."""
    out = Path(out_dir)
    runs, skipped = load_runs(list(paths), max_episodes)
    warnings = [f"skipped {s}" for s in skipped]
    ids: list[str] = []
    for run in runs:
        rid = "run-" + slug(run.name)
        while rid in ids:
            rid += "_"
        ids.append(rid)
    written: list[Path] = []

    def save(charts: list[Chart], prefix: str) -> list[Chart]:
        for chart in charts:
            chart.file = f"figures/{prefix}-{chart.key}.png"
            atomic_write_bytes(out / chart.file, chart.png)
            written.append(out / chart.file)
        return charts

    sections = []
    for run, rid in zip(runs, ids, strict=True):
        prefix = rid.removeprefix("run-")
        if run.kind == TEAM:
            charts = save(team_charts(run), prefix)
            phases = save(phase_charts(run), prefix)
            sections.append(team_section(run, rid, charts, phases))
        else:
            sections.append(marl_section(run, rid, save(marl_charts(run), prefix)))
        for w in run.warnings:
            log.warning("%s: %s", run.name, w)
    compare_html = ""
    if len(runs) > 1:
        compare_html = comparison_section(runs, ids, save(comparison_charts(runs, warnings), "compare"))
    for w in warnings:
        log.warning("%s", w)
    index = out / "index.html"
    page = render_page(runs, ids, sections, compare_html, warnings, live_version, poll_ms)
    atomic_write_bytes(index, page.encode("utf-8"))
    return ReportResult(index, runs, warnings + [w for r in runs for w in r.warnings], written)
