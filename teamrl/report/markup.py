"""The report page's building blocks: its stylesheet and live-reload script, a chart as the page
shows it, and the small HTML pieces the sections are made of (numbers, cards, tables, figures, badges,
warnings)."""

from __future__ import annotations

import base64
import math
import re
import time
from dataclasses import dataclass
from html import escape
from typing import Any

from teamrl.report.load import Run, describe_age


@dataclass
class Chart:
    key: str
    title: str
    caption: str
    png: bytes
    file: str = ""


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool):
        return "✓" if value else "✗"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.2e}"
        return f"{value:.{digits}f}"
    return escape(str(value))


def _signed(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    cls = "up" if value > 0.005 else "down" if value < -0.005 else ""
    return f'<span class="{cls}">{value:+.3f}</span>'


# -- the page's stylesheet and live-reload script -----------------------------------------------
CSS = """
:root{
 --fg:#1d2330;--muted:#667085;--line:#e4e7ec;--bg:#f8f9fb;--card:#fff;--ok:#0f7b3f;
 --bad:#b42318}
*{box-sizing:border-box}
body{
 margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
 background:var(--bg)}
header{
 padding:18px 28px 8px;background:#fff;border-bottom:1px solid var(--line);position:sticky;
 top:0;z-index:2}
header h1{margin:0;font-size:20px} header .meta{color:var(--muted);margin:2px 0 6px}
nav a{margin-right:14px;color:#175cd3;text-decoration:none;font-weight:500}
nav a:hover{text-decoration:underline}
main{padding:8px 28px 60px;max-width:1500px}
section.run,section.compare{
 background:var(--card);border:1px solid var(--line);border-radius:10px;padding:8px 22px 18px;
 margin:18px 0}
h2{font-size:18px;margin:14px 0 8px}
h3{font-size:15px;margin:22px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h4{font-size:13px;margin:14px 0 6px;color:#344054}
.badge{
 display:inline-block;font-size:11px;font-weight:600;border-radius:10px;padding:1px 8px;
 margin-left:6px;background:#eef4ff;color:#3538cd;vertical-align:middle}
.badge.done{background:#ecfdf3;color:var(--ok)} .badge.live{background:#fffaeb;color:#b54708}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}
.card{
 border:1px solid var(--line);border-radius:8px;padding:8px 12px;min-width:150px;
 background:#fcfcfd}
.card .k{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.card .v{font-size:17px;font-weight:600}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:14px}
figure{margin:0;border:1px solid var(--line);border-radius:8px;padding:8px;background:#fff}
figure img{width:100%;height:auto;display:block}
figcaption{font-size:12px;color:var(--muted)}
figcaption b{color:var(--fg)}
figure.wide{grid-column:1/-1} figure.wide img{width:auto;max-width:100%}
table.left td,table.left th{text-align:left}
table{border-collapse:collapse;font-size:13px;margin:4px 0 8px}
th,td{border-bottom:1px solid var(--line);padding:4px 10px;text-align:right;vertical-align:top}
th{background:#f9fafb;font-weight:600} td:first-child,th:first-child{text-align:left}
.up{color:var(--ok)} .down{color:var(--bad)} .muted{color:var(--muted)} .trained{font-weight:700}
.warn{
 background:#fffaeb;border:1px solid #fedf89;border-radius:6px;padding:6px 10px;margin:6px 0;
 color:#93370d}
details.episode{border:1px solid var(--line);border-radius:8px;margin:6px 0;background:#fff}
details.episode>summary{cursor:pointer;padding:7px 12px;list-style-position:inside}
details.episode[open]>summary{border-bottom:1px solid var(--line);background:#f9fafb}
.ok{color:var(--ok);font-weight:600} .bad{color:var(--bad);font-weight:600}
.chip{
 display:inline-block;border:1px solid;border-radius:9px;padding:0 7px;margin:0 2px;
 font-size:12px}
.transcript{padding:10px 14px;display:flex;flex-direction:column;gap:8px}
.task,.sandbox,.credit{
 background:#f9fafb;border:1px solid var(--line);border-radius:8px;padding:8px 12px}
.turn{
 border-left:4px solid var(--role,#999);background:#fff;border-radius:0 8px 8px 0;
 padding:6px 12px;box-shadow:0 1px 2px rgba(16,24,40,.06);max-width:920px}
.turn.alt{margin-left:48px}
.who{font-size:12px;color:var(--muted)} .who b{color:var(--role,#333);font-size:13px}
pre{
 margin:4px 0;white-space:pre-wrap;word-break:break-word;
 font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.turn pre.content{background:#f6f8fa;border-radius:6px;padding:6px 8px}
.error{color:var(--bad);font-size:12px}
.tag{font-size:11px;border-radius:6px;padding:0 6px;margin-left:4px;background:#f2f4f7}
.tag.approve{background:#ecfdf3;color:var(--ok)} .tag.revise{background:#fef3f2;color:var(--bad)}
details.prompt summary,details.config summary{cursor:pointer;color:var(--muted);font-size:12px}
"""


LIVE_JS = """
(function(){
  var version = %s;
  var key = 'teamrl-report-state';
  try {
    var saved = JSON.parse(sessionStorage.getItem(key) || 'null');
    if (saved) {
      sessionStorage.removeItem(key);
      saved.open.forEach(function(id){ var el = document.getElementById(id); if (el) el.open = true; });
      window.scrollTo(0, saved.y);
    }
  } catch (e) {}
  function poll(){
    fetch('version', {cache: 'no-store'}).then(function(r){ return r.json(); }).then(function(d){
      if (d.version !== version) {
        var open = Array.prototype.map.call(document.querySelectorAll('details[open][id]'),
                                            function(el){ return el.id; });
        sessionStorage.setItem(key, JSON.stringify({y: window.scrollY, open: open}));
        location.reload();
      }
    }).catch(function(){}).then(function(){ setTimeout(poll, %d); });
  }
  setTimeout(poll, %d);
})();
"""


# -- HTML pieces --------------------------------------------------------------------------------
def _img(chart: Chart, wide: bool = False) -> str:
    data = base64.b64encode(chart.png).decode()
    caption = f"<b>{escape(chart.title)}</b>" + (f" · {escape(chart.caption)}" if chart.caption else "")
    return (
        f'<figure class="{"wide" if wide else ""}" data-file="{escape(chart.file)}">'
        f'<img class="chart" alt="{escape(chart.title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _cards(items: list[tuple[str, str]]) -> str:
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="k">{escape(k)}</div><div class="v">{v}</div></div>'
            for k, v in items
        )
        + "</div>"
    )


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _status(run: Run) -> str:
    if run.finished:
        return '<span class="badge done">finished</span>'
    recent = time.time() - run.updated < 600
    label = "running" if recent else "stopped early"
    return f'<span class="badge live">{label} · updated {escape(describe_age(run.updated))}</span>'


def _warnings(items: list[str]) -> str:
    return "".join(f'<div class="warn">⚠ {escape(w)}</div>' for w in items)
