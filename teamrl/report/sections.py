"""The report's sections, one per run (an LLM-team run or a classic-MARL run) and the side-by-side
comparison of several runs: headline cards, tables, charts and sample episodes as conversations."""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from teamrl.report import figures as F
from teamrl.report.load import TEAM, EpisodeSample, Run
from teamrl.report.markup import Chart, _cards, _fmt, _img, _signed, _status, _table, _warnings, slug


def _last(rows: list[dict[str, Any]], key: str) -> float | None:
    for row in reversed(rows):
        v = row.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


# -- team runs ----------------------------------------------------------------------------------
def _team_cards(run: Run) -> str:
    cfg = run.config
    recipe = (cfg.get("recipe") or {}).get("name", "?")
    algo = (cfg.get("algorithm") or {}).get("name", "?")
    planned = sum(n for _, _, n in run.planned_phases)
    steps = max((int(r["step"]) for r in run.rl_rows), default=0)
    items = [("recipe · algorithm", f"{escape(str(recipe))} · {escape(str(algo))}")]
    items.append(("RL iterations", f"{steps:,}" + (f" / {planned:,}" if planned else "")))
    if run.evals:
        first, last = run.evals[0].metrics["eval/solved"], run.evals[-1].metrics["eval/solved"]
        value = f"{first:.3f}" if len(run.evals) == 1 else f"{first:.3f} → {last:.3f} {_signed(last - first)}"
        items.append(("held-out success", value))
    tokens = _last(run.rl_rows, "perf/rl_tokens_total")
    if tokens is not None:
        items.append(("RL tokens generated", f"{int(tokens):,}"))
    wall = sum(float(r.get("perf/iteration_s", 0.0) or 0.0) for r in run.rl_rows)
    if wall:
        items.append(("RL wall time", f"{wall / 60:.1f} min"))
    tps = [r["perf/rollout_tokens_per_s"] for r in run.rl_rows[-10:] if "perf/rollout_tokens_per_s" in r]
    if tps:
        items.append(("tokens / s (last 10)", f"{sum(tps) / len(tps):,.0f}"))
    return _cards(items)


def _sft_table(run: Run) -> str:
    losses = [(r, _last(run.rows, f"sft/{r}/loss")) for r in run.roles]
    losses = [(r, v) for r, v in losses if v is not None]
    if not losses:
        return ""
    return "<h4>SFT (before RL): final loss per role</h4>" + _table(
        [escape(r) for r, _ in losses], [[_fmt(v) for _, v in losses]]
    )


def _phase_table(run: Run) -> str:
    deltas = F.phase_deltas(run)
    if not deltas:
        return ""
    evals_at = {e.step: e for e in run.evals}
    header = ["phase", "trained", "iterations", "steps", "Δ success"] + [
        f"Δ r:{escape(r)}" for r in run.roles
    ]
    header += ["mean KL (trained)", "updates skipped", "held-out at end"]
    rows = []
    for d in deltas:
        span = d["span"]
        n = d["iterations"]
        iters = f"{n}" + (f" / {span.planned}" if span.planned else "")
        row = [
            escape(span.name),
            escape(", ".join(span.roles) or "–"),
            iters,
            f"{span.first_step}–{span.last_step}",
        ]
        row.append(_signed(d["delta"].get("rollout/solved")))
        for role in run.roles:
            cell = _signed(d["delta"].get(f"rollout/reward/{role}"))
            row.append(f'<span class="trained">{cell}</span>' if role in span.roles else cell)
        kls = [
            float(r[f"train/{role}/kl"]) for role in span.roles for r in span.rows if f"train/{role}/kl" in r
        ]
        row.append(_fmt(sum(kls) / len(kls)) if kls else "–")
        skipped = sum(1 for role in span.roles for r in span.rows if r.get(f"train/{role}/skipped"))
        row.append(str(skipped))
        ev = evals_at.get(span.last_step)
        row.append(_fmt(ev.metrics["eval/solved"]) if ev else "–")
        rows.append(row)
    note = (
        "<p class='muted'>Δ: mean of the phase's last iterations minus mean of its first ones "
        "(up to 5 each), over training rollouts; bold: the role the phase trains.</p>"
    )
    return _table(header, rows) + note


def _credit_table(run: Run) -> str:
    """Per role: reward (process score, format-error rate) at every evaluation and in recent rollouts."""
    if not run.roles or (not run.evals and not run.rl_rows):
        return ""
    header = ["role"] + [f"{escape(e.label)}<br><span class='muted'>step {e.step}</span>" for e in run.evals]
    recent = run.rl_rows[-10:]
    if recent:
        header.append("training rollouts<br><span class='muted'>last 10 iterations</span>")
    rows = []
    for role in run.roles:
        color = F.role_color(run.roles, role)
        row = [f'<b style="color:{color}">{escape(role)}</b>']
        for e in run.evals:
            m = e.metrics
            row.append(
                _credit_cell(
                    m.get(f"eval/reward/{role}"),
                    m.get(f"eval/process/{role}"),
                    m.get(f"eval/format_error/{role}"),
                )
            )
        if recent:

            def mean(key: str) -> float | None:
                vals = [float(r[key]) for r in recent if isinstance(r.get(key), int | float)]
                return sum(vals) / len(vals) if vals else None

            row.append(
                _credit_cell(
                    mean(f"rollout/reward/{role}"),
                    mean(f"rollout/process/{role}"),
                    mean(f"rollout/format_error/{role}"),
                )
            )
        rows.append(row)
    success = ["<i>team success</i>"] + [_fmt(e.metrics.get("eval/solved")) for e in run.evals]
    if recent:
        vals = [float(r["rollout/solved"]) for r in recent if "rollout/solved" in r]
        success.append(_fmt(sum(vals) / len(vals)) if vals else "–")
    rows.append(success)
    note = (
        '<p class="muted">reward (process score · format-error rate); the reward mixes the team outcome '
        "and the role's own process score.</p>"
    )
    return _table(header, rows) + note


def _credit_cell(reward: Any, process: Any, fmt_err: Any) -> str:
    if reward is None:
        return "–"
    extra = []
    if process is not None:
        extra.append(_fmt(process, 2))
    if fmt_err:
        extra.append(
            f'<span class="bad" title="share of turns that did not parse">{100 * fmt_err:.1f}% fmt</span>'
        )
    return f"<b>{_fmt(reward)}</b>" + (f" <span class='muted'>({' · '.join(extra)})</span>" if extra else "")


def _value(v: Any) -> str:
    if isinstance(v, bool | int | float):
        return _fmt(v)
    if isinstance(v, str):
        return f"<pre>{escape(v)}</pre>" if "\n" in v or len(v) > 80 else escape(v)
    if isinstance(v, list) and all(isinstance(x, bool | int | float) for x in v):
        return ", ".join(_fmt(x, 2) for x in v) or "[]"
    return f"<code>{escape(json.dumps(v, default=str))}</code>"


def _sandbox(verifier: dict[str, Any]) -> str:
    parts = []
    tests = verifier.get("tests")
    handled = set()
    if isinstance(tests, list) and tests:
        on_ref, on_bug = verifier.get("tests_on_reference") or [], verifier.get("tests_on_buggy") or []
        rows = []
        for i, t in enumerate(tests):
            ref = on_ref[i] if i < len(on_ref) else None
            bug = on_bug[i] if i < len(on_bug) else None
            rows.append([f"<code>{escape(str(t))}</code>", _mark(ref), _mark(bug)])
        parts.append(_table(["test written by the team", "passes on reference", "passes on buggy"], rows))
        handled |= {"tests", "tests_on_reference", "tests_on_buggy"}
    rows = [[escape(str(k)), _value(v)] for k, v in verifier.items() if k not in handled]
    if rows:
        parts.insert(0, _table(["check", "result"], rows, cls="left"))
    title = "Sandbox results" if "code_pass" in verifier else "Verifier results"  # a debate runs no code
    return f'<div class="sandbox"><b>{title}</b>' + "".join(parts) + "</div>"


def _mark(v: Any) -> str:
    if v is None:
        return "–"
    return '<span class="ok">✓</span>' if v else '<span class="bad">✗</span>'


def _episode(run: Run, ep: EpisodeSample, ident: str) -> str:
    d = ep.data
    roles = run.roles
    rewards = got if isinstance(got := d.get("rewards"), dict) else {}
    process = got if isinstance(got := d.get("process"), dict) else {}
    verifier = got if isinstance(got := d.get("verifier"), dict) else {}
    turns = [t for t in d.get("turns") or [] if isinstance(t, dict)]
    status = '<span class="ok">✓ solved</span>' if ep.solved else '<span class="bad">✗ not solved</span>'
    chips = "".join(
        f'<span class="chip" style="border-color:{F.role_color(roles, r)};color:{F.role_color(roles, r)}">'
        f"{escape(str(r))} {_fmt(v, 2)}</span>"
        for r, v in rewards.items()
    )
    n_err = sum(1 for t in turns if t.get("error"))
    summary = (
        f"{status} <code>{escape(str(d.get('task_id', '?')))}</code> · group {escape(str(d.get('group', 0)))}"
        f" · {len(turns)} turns · outcome {_fmt(d.get('outcome', 0.0), 2)} · {chips}"
        + (f' · <span class="bad">{n_err} format error{"s" * (n_err > 1)}</span>' if n_err else "")
    )
    body = []
    if turns:
        prompt = str(turns[0].get("prompt", ""))
        lines = prompt.splitlines()
        task = "\n".join(lines[1:] if lines and lines[0].startswith("###") else lines).strip()
        if task:
            body.append(f'<div class="task"><b>Task</b><pre>{escape(task)}</pre></div>')
    for i, t in enumerate(turns):
        role = str(t.get("role", "?"))
        msg = t.get("message") if isinstance(t.get("message"), dict) else None
        kind = msg.get("kind") if msg else "unparsed"
        tags = f'<span class="tag">{escape(str(kind))}</span>'
        if msg and msg.get("verdict"):
            tags += f'<span class="tag {escape(str(msg["verdict"]))}">{escape(str(msg["verdict"]))}</span>'
        if t.get("reused"):
            tags += (
                '<span class="tag" title="sampled once and shared by the group (frozen role)">shared</span>'
            )
        if t.get("finished") is False:
            tags += '<span class="tag" title="hit max_new_tokens">cut off</span>'
        content = msg.get("content", "") if msg else t.get("text", "")
        if msg and msg.get("kind") == "review" and not content:
            content = msg.get("verdict") or ""
        error = f'<div class="error">format error: {escape(str(t["error"]))}</div>' if t.get("error") else ""
        body.append(
            f'<div class="turn{" alt" if i % 2 else ""}" style="--role:{F.role_color(roles, role)}">'
            f'<div class="who"><b>{escape(role)}</b> · round {escape(str(t.get("round", 0)))} {tags}'
            f" · {len(t.get('completion_ids') or [])} tokens</div>"
            f'<pre class="content">{escape(str(content))}</pre>{error}'
            f'<details class="prompt"><summary>prompt shown to {escape(role)}</summary>'
            f"<pre>{escape(str(t.get('prompt', '')))}</pre></details></div>"
        )
    if verifier:
        body.append(_sandbox(verifier))
    credit_rows = [
        [
            f'<b style="color:{F.role_color(roles, r)}">{escape(str(r))}</b>',
            _fmt(process.get(r)) if r in process else "–",
            _fmt(v),
        ]
        for r, v in rewards.items()
    ]
    credit = _table(["role", "process score", "reward"], credit_rows) if credit_rows else ""
    body.append(
        f'<div class="credit"><b>Credit</b> · team outcome {_fmt(d.get("outcome", 0.0))}{credit}</div>'
    )
    errors = d.get("errors") or []
    if errors:
        body.append(_warnings([str(e) for e in errors]))
    return (
        f'<details class="episode" id="{escape(ident)}"><summary>{summary}</summary>'
        f'<div class="transcript">{"".join(body)}</div></details>'
    )


def _episodes(run: Run, rid: str) -> str:
    if not run.episodes:
        return '<p class="muted">no episodes written yet</p>'
    out = []
    for source, samples in run.episodes.items():
        total = run.episode_counts.get(source, len(samples))
        solved = sum(s.solved for s in samples)
        out.append(
            f"<h4>{escape(source)} <span class='muted'>· {len(samples)} of {total} episodes "
            f"({solved} solved shown) — click one to open its transcript</span></h4>"
        )
        out += [_episode(run, s, f"ep-{rid}-{slug(source)}-{s.index}") for s in samples]
    return "".join(out)


def _config(run: Run) -> str:
    if not run.config_text:
        return ""
    text = escape(run.config_text)
    return f'<details class="config"><summary>config.yaml</summary><pre>{text}</pre></details>'


def team_section(run: Run, rid: str, charts: list[Chart], phases: list[Chart]) -> str:
    badge = f'<span class="badge">LLM team · {escape(", ".join(run.roles))}</span>'
    html = [f'<section class="run" id="{rid}"><h2>{escape(run.name)} {badge} {_status(run)}</h2>']
    html.append(f'<div class="muted">{escape(str(run.path))}</div>')
    html.append(_team_cards(run))
    html.append(_warnings(run.warnings))
    html.append("<h3>Learning curves</h3>")
    html.append(
        '<div class="charts">' + "".join(_img(c) for c in charts) + "</div>"
        if charts
        else "<p class='muted'>no curves yet</p>"
    )
    if phases or run.phases:
        html.append("<h3>Per-role contribution by phase</h3>")
        html.append('<div class="charts">' + "".join(_img(c) for c in phases) + "</div>")
        html.append(_phase_table(run))
    html.append("<h3>Per-role credit at each evaluation</h3>")
    html.append(_credit_table(run) or "<p class='muted'>no evaluations yet</p>")
    html.append(_sft_table(run))
    html.append("<h3>Sample episodes</h3>")
    html.append(_episodes(run, rid))
    html.append(_config(run))
    html.append("</section>")
    return "".join(html)


# -- MARL runs ----------------------------------------------------------------------------------
def _marl_cards(run: Run) -> str:
    cfg = run.config
    inner = got if isinstance(got := cfg.get("config"), dict) else {}
    total = inner.get("total_env_steps")
    items = [
        ("algorithm · env", f"{escape(str(cfg.get('algorithm', '?')))} · {escape(str(cfg.get('env', '?')))}")
    ]
    items.append(
        ("env steps", f"{run.last_step:,}" + (f" / {int(total):,}" if isinstance(total, int | float) else ""))
    )
    rets = [float(r["return/mean"]) for r in run.rows if isinstance(r.get("return/mean"), int | float)]
    if rets:
        tail = rets[-max(1, len(rets) // 20) :]
        items.append(("train return (last 5%)", _fmt(sum(tail) / len(tail), 2)))
    ev = run.eval_result or {}
    if isinstance(ev.get("return/mean"), int | float):
        std = ev.get("return/std")
        items.append(
            (
                f"eval return ({ev.get('policy', '')})",
                _fmt(float(ev["return/mean"]), 2)
                + (f" ± {_fmt(float(std), 2)}" if isinstance(std, int | float) else ""),
            )
        )
    sps = [
        float(r["agent_steps_per_s"])
        for r in run.rows[-20:]
        if isinstance(r.get("agent_steps_per_s"), int | float)
    ]
    if sps:
        items.append(("agent-steps / s", f"{sum(sps) / len(sps):,.0f}"))
    return _cards(items)


def marl_section(run: Run, rid: str, charts: list[Chart]) -> str:
    badge = f'<span class="badge">classic MARL · {escape(str(run.config.get("algorithm", "?")))}</span>'
    html = [f'<section class="run" id="{rid}"><h2>{escape(run.name)} {badge} {_status(run)}</h2>']
    html.append(f'<div class="muted">{escape(str(run.path))}</div>')
    html.append(_marl_cards(run))
    html.append(_warnings(run.warnings))
    html.append("<h3>Learning curves</h3>")
    html.append(
        '<div class="charts">'
        + "".join(_img(c, wide=c.key in ("losses", "diagnostics", "env")) for c in charts)
        + "</div>"
        if charts
        else "<p class='muted'>no curves yet</p>"
    )
    if run.eval_result:
        rows = [
            [escape(k), _value(v)]
            for k, v in run.eval_result.items()
            if not isinstance(v, dict | list) and k != "definition"  # not the per-episode returns
        ]
        html.append("<h3>Evaluation (eval.json)</h3>" + _table(["", "value"], rows))
    html.append(_config(run))
    html.append("</section>")
    return "".join(html)


# -- several runs -------------------------------------------------------------------------------
def comparison_section(runs: list[Run], ids: list[str], charts: list[Chart]) -> str:
    rows = []
    for run, rid in zip(runs, ids, strict=True):
        if run.kind == TEAM:
            first = run.evals[0].metrics["eval/solved"] if run.evals else None
            last = run.evals[-1].metrics["eval/solved"] if run.evals else None
            recent = [float(r["rollout/solved"]) for r in run.rl_rows[-10:] if "rollout/solved" in r]
            headline = "no evaluation yet"
            if first is not None and last is not None:
                headline = f"held-out {_fmt(first)} → {_fmt(last)} {_signed(last - first)}"
            extra = f"rollout success (last 10): {_fmt(sum(recent) / len(recent))}" if recent else ""
            kind = f"LLM team · {escape(str((run.config.get('recipe') or {}).get('name', '?')))}"
            steps = f"{max((int(r['step']) for r in run.rl_rows), default=0):,} iterations"
        else:
            ev = run.eval_result or {}
            rets = [
                float(r["return/mean"]) for r in run.rows if isinstance(r.get("return/mean"), int | float)
            ]
            headline = (
                f"eval return {_fmt(ev['return/mean'], 2)}"
                if isinstance(ev.get("return/mean"), int | float)
                else ""
            )
            extra = f"train return (last): {_fmt(rets[-1], 2)}" if rets else ""
            algo, env = run.config.get("algorithm", "?"), run.config.get("env", "?")
            kind = f"classic MARL · {escape(str(algo))} · {escape(str(env))}"
            steps = f"{run.last_step:,} env steps"
        status = "finished" if run.finished else "in progress / stopped"
        rows.append([f'<a href="#{rid}">{escape(run.name)}</a>', kind, status, steps, headline, extra])
    table = _table(["run", "kind", "status", "progress", "result", ""], rows, cls="left")
    figs = '<div class="charts">' + "".join(_img(c) for c in charts) + "</div>" if charts else ""
    return f'<section class="compare" id="compare"><h2>Side by side</h2>{table}{figs}</section>'
