"""The report's charts: matplotlib (Agg, no pyplot state) figures returned as PNG bytes.

Each function returns ``None`` when the run has nothing to draw for it, so a run that is just
starting, or a kind of run that lacks a metric, leaves the chart out instead of drawing it empty.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from typing import Any

from teamrl.report.load import EvalPoint, Run
from teamrl.workflows.self_play import HELD_OUT_FIGURES

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
PHASE_SHADES = ["#f3f6fb", "#fdf6ec"]
DPI = 100


def role_color(roles: Sequence[str], role: str) -> str:
    index = list(roles).index(role) if role in roles else len(roles)
    return PALETTE[index % len(PALETTE)]


def _figure(width: float = 6.4, height: float = 3.4, ncols: int = 1, nrows: int = 1):
    """A figure and its axes, row by row (a flat list)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, list(axes)


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _num(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return math.nan


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) over ``rows``; NaN where a row lacks ``key`` so lines break across gaps."""
    return [float(r["step"]) for r in rows], [_num(r.get(key)) for r in rows]


def has(rows: list[dict[str, Any]], key: str) -> bool:
    return any(math.isfinite(_num(r.get(key))) for r in rows)


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` finite values (NaN stays NaN)."""
    out: list[float] = []
    recent: list[float] = []
    for v in values:
        if math.isnan(v):
            out.append(math.nan)
            continue
        recent = (recent + [v])[-window:]
        out.append(sum(recent) / len(recent))
    return out


def _window(n: int) -> int:
    return max(1, n // 15) if n > 20 else 1


def _noisy_line(ax, xs, ys, color: str, label: str) -> None:
    """The raw series faint, its running mean bold (when there are enough points to smooth)."""
    finite = sum(not math.isnan(v) for v in ys)
    w = _window(finite)
    if w > 1:
        ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(xs, smooth(ys, w), color=color, linewidth=1.8, label=f"{label} (mean of {w})")
    else:
        ax.plot(
            xs, ys, color=color, linewidth=1.5, marker="o" if finite < 30 else None, markersize=3, label=label
        )


def _shade_phases(ax, run: Run) -> None:
    if len(run.phases) < 2:
        return
    for i, span in enumerate(run.phases):
        ax.axvspan(span.first_step - 0.5, span.last_step + 0.5, color=PHASE_SHADES[i % 2], zorder=0, lw=0)
    if len(run.phases) <= 12:
        total = max(run.phases[-1].last_step - run.phases[0].first_step + 1, 1)
        for i, span in enumerate(run.phases):
            narrow = (span.last_step - span.first_step + 1) / total < 0.12
            ax.text(
                (span.first_step + span.last_step) / 2,
                1.0 + (0.06 if narrow and i % 2 else 0.0),
                span.name.rsplit("/", 1)[-1],
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
                color="#555",
            )


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best", framealpha=0.8)


# -- LLM-team runs ------------------------------------------------------------------------------
def team_success(run: Run) -> bytes | None:
    rl = run.rl_rows
    if not run.evals and not has(rl, "rollout/solved"):
        return None
    fig, (ax,) = _figure()
    _shade_phases(ax, run)
    if has(rl, "rollout/solved"):
        xs, ys = series(rl, "rollout/solved")
        _noisy_line(ax, xs, ys, "#7f7f7f", "training rollouts")
    if run.evals:
        ax.plot(
            [e.step for e in run.evals],
            [e.metrics["eval/solved"] for e in run.evals],
            color="#d62728",
            marker="o",
            linewidth=2,
            label="held-out",
        )
        for e in run.evals:
            ax.annotate(
                f"{e.metrics['eval/solved']:.2f}",
                (e.step, e.metrics["eval/solved"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color="#d62728",
            )
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("success (tasks solved)")
    ax.set_ylim(-0.02, 1.05)
    _legend(ax)
    return _png(fig)


# a self-play game's held-out shares (its held-out figures but the difficulty proxies), as drawn
SELF_PLAY_SHARES = [
    (key, label)
    for figures in HELD_OUT_FIGURES.values()
    for label, key in figures
    if not key.startswith("eval/selfplay/difficulty/")
]
SELF_PLAY_DIFFICULTY = (
    ("rollout/selfplay/difficulty/operations", "operations per proposal"),
    ("rollout/selfplay/difficulty/max_operand", "largest number"),
)


def team_self_play(run: Run) -> bytes | None:
    """A self-play game's held-out shares over training (left) and, for proposer_solver, the training
    proposals' difficulty proxies (right); None for other workflows."""
    shares = [(k, label) for k, label in SELF_PLAY_SHARES if any(k in e.metrics for e in run.evals)]
    difficulty = [(k, label) for k, label in SELF_PLAY_DIFFICULTY if has(run.rl_rows, k)]
    if not shares and not difficulty:
        return None
    panels = int(bool(shares)) + int(bool(difficulty))
    fig, axes = _figure(width=5.5 * panels if panels > 1 else 6.4, ncols=panels)
    if shares:
        ax = axes[0]
        _shade_phases(ax, run)
        for i, (key, label) in enumerate(shares):
            pts = [(e.step, e.metrics[key]) for e in run.evals if key in e.metrics]
            color = PALETTE[i % len(PALETTE)]
            ax.plot(*zip(*pts, strict=True), marker="o", markersize=4, color=color, label=label)
        ax.set_xlabel("RL iteration (held-out evaluations)")
        ax.set_ylabel("share")
        ax.set_ylim(-0.02, 1.05)
        _legend(ax)
    if difficulty:
        ax = axes[-1]
        _shade_phases(ax, run)
        xs, ys = series(run.rl_rows, difficulty[0][0])
        _noisy_line(ax, xs, ys, PALETTE[0], difficulty[0][1])
        ax.set_ylabel(difficulty[0][1])
        if len(difficulty) > 1:  # the largest number on its own scale
            twin = ax.twinx()
            xs, ys = series(run.rl_rows, difficulty[1][0])
            _noisy_line(twin, xs, ys, PALETTE[1], difficulty[1][1])
            twin.set_ylabel(difficulty[1][1])
            twin.spines[["top"]].set_visible(False)
            lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
            labels = ax.get_legend_handles_labels()[1] + twin.get_legend_handles_labels()[1]
            ax.legend(lines, labels, fontsize=7, loc="best", framealpha=0.8)
        ax.set_xlabel("RL iteration (training proposals)")
    return _png(fig)


# rollout figures drawn elsewhere: the trainer's per-role ones and a self-play game's (its own chart)
OWN_CHARTS = ("reward", "process", "format_error", "selfplay")


def team_workflow(run: Run) -> bytes | None:
    """What the workflow reports under a name of its own (``rollout/<name>/<key>`` of its ``metrics``: the
    town's objectives and what emerged, a game's figures): one small curve per key over RL iterations, the
    held-out evaluations as red dots; at most :data:`MAX_ENV_PANELS`, the first in name order."""
    keys = sorted(
        {
            k
            for r in run.rl_rows
            for k in r
            if k.startswith("rollout/") and k.count("/") >= 2 and k.split("/")[1] not in OWN_CHARTS
        }
    )
    return _panels(run, keys, limit=MAX_ENV_PANELS, prefix="rollout/", xlabel="RL iteration")


def team_rewards(run: Run) -> bytes | None:
    rl = run.rl_rows
    roles = [
        r
        for r in run.roles
        if has(rl, f"rollout/reward/{r}") or any(f"eval/reward/{r}" in e.metrics for e in run.evals)
    ]
    if not roles:
        return None
    fig, (ax,) = _figure()
    _shade_phases(ax, run)
    for role in roles:
        color = role_color(run.roles, role)
        if has(rl, f"rollout/reward/{role}"):
            xs, ys = series(rl, f"rollout/reward/{role}")
            _noisy_line(ax, xs, ys, color, role)
        pts = [
            (e.step, e.metrics[f"eval/reward/{role}"])
            for e in run.evals
            if f"eval/reward/{role}" in e.metrics
        ]
        if pts:
            ax.plot(
                *zip(*pts, strict=True),
                linestyle="none",
                marker="D",
                markersize=5,
                color=color,
                markeredgecolor="k",
            )
    ax.set_xlabel("RL iteration   (lines: training rollouts; diamonds: held-out)")
    ax.set_ylabel("reward")
    _legend(ax)
    return _png(fig)


def _per_role(run: Run, stat: str, ylabel: str) -> bytes | None:
    rl = run.rl_rows
    roles = [r for r in run.roles if has(rl, f"train/{r}/{stat}")]
    if not roles:
        return None
    fig, (ax,) = _figure()
    _shade_phases(ax, run)
    for role in roles:
        xs, ys = series(rl, f"train/{role}/{stat}")
        _noisy_line(ax, xs, ys, role_color(run.roles, role), role)
    ax.set_xlabel("RL iteration")
    ax.set_ylabel(ylabel)
    _legend(ax)
    return _png(fig)


def team_kl(run: Run) -> bytes | None:
    return _per_role(run, "kl", "KL to the SFT reference")


def team_loss(run: Run) -> bytes | None:
    return _per_role(run, "policy_loss", "policy loss")


def team_throughput(run: Run) -> bytes | None:
    rl = run.rl_rows
    if not has(rl, "perf/rollout_tokens_per_s"):
        return None
    fig, (ax,) = _figure()
    _shade_phases(ax, run)
    xs, ys = series(rl, "perf/rollout_tokens_per_s")
    _noisy_line(ax, xs, ys, "#2ca02c", "rollout tokens/s")
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("generated tokens / s")
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _png(fig)


def team_off_policy(run: Run) -> bytes | None:
    """``run.async_rollouts``: how many updates old the policy that sampled each iteration's episodes was
    (left), and each trained role's mean truncated importance weight pi_prox / pi_behaviour with the share
    of its tokens truncated (right)."""
    rl = run.rl_rows
    roles = [r for r in run.roles if has(rl, f"train/{r}/is_weight")]
    if not has(rl, "train/staleness") and not roles:
        return None
    fig, (left, right) = _figure(width=9.6, ncols=2)
    for ax in (left, right):
        _shade_phases(ax, run)
        ax.set_xlabel("RL iteration")
    if has(rl, "train/staleness"):
        xs, ys = series(rl, "train/staleness")
        left.step(xs, ys, where="mid", color="#555555", label="staleness")
        left.set_ylim(bottom=0)
        left.yaxis.get_major_locator().set_params(integer=True)  # whole updates
    left.set_ylabel("updates between sampling and learning")
    for role in roles:
        color = role_color(run.roles, role)
        xs, ys = series(rl, f"train/{role}/is_weight")
        _noisy_line(right, xs, ys, color, f"{role}: weight")
        if has(rl, f"train/{role}/is_truncated"):
            xt, yt = series(rl, f"train/{role}/is_truncated")
            right.plot(xt, yt, linestyle=":", color=color, label=f"{role}: share truncated")
    right.axhline(1.0, color="k", linewidth=0.5)
    right.set_ylabel("importance weight (mean, truncated)")
    if roles:
        _legend(right)
    return _png(fig)


def team_schedule(run: Run) -> bytes | None:
    """Which role trained when: one lane per role, the recipe's plan hatched behind what ran."""
    if not run.phases and not run.planned_phases:
        return None
    roles = list(run.roles)
    fig, (ax,) = _figure(height=0.6 + 0.45 * max(len(roles), 1))
    start = 1
    for _name, p_roles, n in run.planned_phases:
        for role in p_roles:
            if role in roles:
                ax.broken_barh(
                    [(start - 0.5, n)],
                    (roles.index(role) - 0.35, 0.7),
                    facecolor="none",
                    edgecolor=role_color(roles, role),
                    hatch="///",
                    alpha=0.5,
                    label="planned" if start == 1 and role == p_roles[0] else None,
                )
        start += n
    for span in run.phases:
        for role in span.roles:
            if role in roles:
                ax.broken_barh(
                    [(span.first_step - 0.5, span.last_step - span.first_step + 1)],
                    (roles.index(role) - 0.35, 0.7),
                    facecolor=role_color(roles, role),
                    edgecolor="k",
                    linewidth=0.5,
                )
    ax.set_yticks(range(len(roles)), roles)
    ax.set_ylim(-0.6, len(roles) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("RL iteration   (filled: trained; hatched: planned by the recipe)")
    ax.grid(axis="y", alpha=0)
    return _png(fig)


def phase_deltas(run: Run) -> list[dict[str, Any]]:
    """Per phase: how team success and each role's reward moved while that phase's roles trained
    (mean of the phase's last iterations minus mean of its first ones, over training rollouts)."""
    out = []
    for span in run.phases:
        n = len(span.rows)
        w = max(1, min(5, n // 2))
        entry: dict[str, Any] = {"span": span, "iterations": n, "window": w, "delta": {}, "mean": {}}
        for key in ["rollout/solved"] + [f"rollout/reward/{r}" for r in run.roles]:
            vals = [_num(r.get(key)) for r in span.rows]
            vals = [v for v in vals if math.isfinite(v)]
            if not vals:
                continue
            entry["mean"][key] = sum(vals) / len(vals)
            if len(vals) >= 2:
                head, tail = vals[:w], vals[-w:]
                entry["delta"][key] = sum(tail) / len(tail) - sum(head) / len(head)
        out.append(entry)
    return out


def team_contribution(run: Run) -> bytes | None:
    """Grouped bars: per phase, the change of each role's reward (the trained role's bar outlined)."""
    deltas = [d for d in phase_deltas(run) if d["delta"]]
    roles = [r for r in run.roles if any(f"rollout/reward/{r}" in d["delta"] for d in deltas)]
    if not deltas or not roles:
        return None
    fig, (ax,) = _figure(width=max(6.4, 1.1 * len(deltas) + 2))
    width = 0.8 / (len(roles) + 1)
    for i, d in enumerate(deltas):
        bars = ["rollout/solved"] + [f"rollout/reward/{r}" for r in roles]
        for j, key in enumerate(bars):
            if key not in d["delta"]:
                continue
            role = key.rsplit("/", 1)[-1]
            trained = role in d["span"].roles
            ax.bar(
                i - 0.4 + width * (j + 0.5),
                d["delta"][key],
                width,
                color="#444" if j == 0 else role_color(run.roles, role),
                edgecolor="k" if trained else "none",
                linewidth=1.6 if trained else 0,
                label=("team success" if j == 0 else role) if i == 0 else None,
            )
    ax.axhline(0, color="k", linewidth=0.6)
    ax.set_xticks(
        range(len(deltas)),
        [d["span"].name for d in deltas],
        fontsize=8,
        rotation=20 if len(deltas) > 4 else 0,
    )
    ax.set_ylabel("change during the phase")
    ax.set_xlabel("phase   (outlined bar: the role being trained)")
    _legend(ax)
    return _png(fig)


# -- classic MARL runs --------------------------------------------------------------------------
MARL_LOSSES = ["loss/policy", "loss/value", "loss", "actor_loss", "critic_loss"]
MARL_DIAGNOSTICS = ["entropy", "approx_kl", "clip_frac", "epsilon", "q_taken_mean", "q_mean", "target_mean"]


def marl_return(run: Run) -> bytes | None:
    rows = [r for r in run.rows if "return/mean" in r]
    if not has(rows, "return/mean"):
        return None
    fig, (ax,) = _figure()
    for agent in run.roles:
        xs, ys = series(rows, f"return/{agent}")
        ax.plot(
            xs,
            smooth(ys, _window(len(ys))),
            color=role_color(run.roles, agent),
            alpha=0.5,
            linewidth=0.9,
            label=agent,
        )
    xs, ys = series(rows, "return/mean")
    _noisy_line(ax, xs, ys, "#000000", "team (sum over agents)")
    evals = [r for r in run.rows if "eval/return/mean" in r]
    if evals:  # the evaluation curve (teamrl marl train --eval-every): fixed episodes, deterministic policy
        xs, ys = series(evals, "eval/return/mean")
        ax.plot(
            xs, ys, "o-", color="#d62728", markersize=3, linewidth=1.2, label="evaluation (deterministic)"
        )
    ev = run.eval_result or {}
    if isinstance(ev.get("return/mean"), int | float):
        ax.axhline(
            ev["return/mean"],
            color="#d62728",
            linestyle="--",
            linewidth=1.2,
            label=f"eval {ev['return/mean']:.2f}",
        )
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    _legend(ax)
    return _png(fig)


def _panels(
    run: Run, keys: list[str], limit: int = 4, prefix: str = "", xlabel: str = "environment steps"
) -> bytes | None:
    """One small curve per key of ``keys`` that the run logged (the first ``limit``), four to a row; each
    titled by its key without ``prefix``; a team run's held-out evaluations of the same figure
    (``eval/`` for ``rollout/``) as red dots."""
    keys = [k for k in keys if has(run.rows, k)][:limit]
    if not keys:
        return None
    ncols = min(4, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    width = max(6.4, 3.4 * ncols)
    fig, axes = _figure(width=width, height=3.0 if nrows == 1 else 2.4 * nrows, ncols=ncols, nrows=nrows)
    for ax in axes[len(keys) :]:
        ax.set_visible(False)
    for i, (ax, key) in enumerate(zip(axes, keys, strict=False)):
        rows = [r for r in run.rows if key in r]
        xs, ys = series(rows, key)
        _noisy_line(ax, xs, ys, PALETTE[i % len(PALETTE)], key)
        held = "eval/" + key.removeprefix("rollout/") if key.startswith("rollout/") else None
        points = [(e.step, e.metrics[held]) for e in run.evals if held and held in e.metrics]
        if points:
            ax.plot(*zip(*points, strict=True), "o", color="#d62728", ms=4, label="held-out")
        ax.set_title(key.removeprefix(prefix), fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(labelsize=7)
    return _png(fig)


def marl_losses(run: Run) -> bytes | None:
    return _panels(run, MARL_LOSSES)


def marl_diagnostics(run: Run) -> bytes | None:
    return _panels(run, MARL_DIAGNOSTICS)


MAX_ENV_PANELS = 12


def marl_env(run: Run) -> bytes | None:
    """What the env reports about its finished episodes (``env/<key>`` rows: ``info[agent]["episode"]``,
    e.g. each objective of a world and what emerged in it): one small curve per key, four to a row, at most
    :data:`MAX_ENV_PANELS` (the first in name order)."""
    keys = sorted({k for r in run.rows for k in r if k.startswith("env/")})
    return _panels(run, keys, limit=MAX_ENV_PANELS, prefix="env/")


def _town_day(data: Any, title: str) -> Any:
    from teamrl.world.timeline import timeline_figure

    return timeline_figure(data, title)


# how ``teamrl report`` draws an episode record (``episode_record.json``) of each kind: data, title -> figure
RECORD_FIGURES: dict[str, Callable[[Any, str], Any]] = {"town_day": _town_day}


def marl_record(run: Run) -> bytes | None:
    """The final evaluation's first episode as its env recorded it (``infos[agent]["record"]``), drawn by
    the :data:`RECORD_FIGURES` entry of its kind (the town's day: who was where, who talked to whom); a
    record of an unknown kind or with bad data is a warning, not a figure."""
    record = run.record
    if not record:
        return None
    kind = record.get("kind")
    draw = RECORD_FIGURES.get(kind) if isinstance(kind, str) else None
    if draw is None:
        run.warnings.append(f"episode_record.json: no figure for records of kind {kind!r}")
        return None
    try:
        fig = draw(record.get("data"), f"the final evaluation's first episode ({kind})")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        run.warnings.append(f"episode_record.json ({kind}): cannot draw it ({type(exc).__name__}: {exc})")
        return None
    return _png(fig)


def marl_throughput(run: Run) -> bytes | None:
    rows = [r for r in run.rows if "agent_steps_per_s" in r]
    if not has(rows, "agent_steps_per_s"):
        return None
    fig, (ax,) = _figure()
    xs, ys = series(rows, "agent_steps_per_s")
    _noisy_line(ax, xs, ys, "#2ca02c", "agent-steps/s")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("agent-steps / s")
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _png(fig)


# -- several runs -------------------------------------------------------------------------------
def compare(runs: list[Run], key: str, ylabel: str, xlabel: str, evals: bool = False) -> bytes | None:
    drawn = False
    fig, (ax,) = _figure(width=7.2, height=3.8)
    for i, run in enumerate(runs):
        color = PALETTE[i % len(PALETTE)]
        if evals:
            pts: list[EvalPoint] = run.evals
            if pts:
                ax.plot(
                    [e.step for e in pts],
                    [e.metrics["eval/solved"] for e in pts],
                    marker="o",
                    color=color,
                    label=run.name,
                )
                drawn = True
            continue
        rows = [r for r in run.rows if key in r]
        if has(rows, key):
            xs, ys = series(rows, key)
            few = len(ys) < 30
            ax.plot(
                xs,
                smooth(ys, _window(len(ys))),
                color=color,
                linewidth=1.6,
                marker="o" if few else None,
                markersize=3,
                label=run.name,
            )
            drawn = True
    if not drawn:
        return None
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(ax)
    return _png(fig)
