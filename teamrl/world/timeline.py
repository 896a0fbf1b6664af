"""A picture of one day in the town (issue 20): who was where, who talked to whom, who took what.

:func:`timeline_rows` reads a played :class:`~teamrl.world.town.Town` into plain rows (JSON-friendly, what a
report stores); :func:`plot_timeline` draws them: one row per agent, one column per tick, each cell coloured
by the place the agent stood at; a conversation is a line from the speaker's row to the listener's at its
tick (its topic's colour, a dot at the listener); an object taken is marked (C coffee, Br bread, Bk the
book); the ticks in which the gathering can happen are shaded.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from teamrl.world.town import PARTY_PLACE, PLACES, TOPICS, Town, read_line

PLACE_COLOURS = {
    "home": "#d9d9d9",
    "cafe": "#c7a27c",
    "park": "#8fd18f",
    "library": "#8fb8e0",
    "market": "#f2c46d",
}
OBJECT_LABELS = {"coffee": "C", "bread": "Br", "book": "Bk"}
TOPIC_COLOURS = {"weather": "tab:gray", "party": "tab:red", "food": "tab:orange", "books": "tab:blue"}


def timeline_rows(town: Town) -> dict[str, Any]:
    """The day so far: ``places[t][agent]`` (where each agent stood as tick ``t`` began), ``talks``
    (tick, from, to, topic), ``taken`` (tick, agent, object) for objects used successfully."""
    taken = [
        (t, agent, str(act.obj))
        for t, agent, _, act, valid in town.log
        if act.kind == "use" and valid and act.obj is not None
    ]
    return {
        "agents": list(town.agents),
        "horizon": town.horizon,
        "places": [dict(p) for p in town.positions[: town.t]],
        "talks": [list(x) for x in town.talks],
        "taken": [list(x) for x in taken],
        "gathering_from": town.horizon // 2,
    }


def rows_from_transcript(transcript: str, horizon: int | None = None) -> dict[str, Any]:
    """:func:`timeline_rows`' rows read back from a day's transcript (:meth:`Town.transcript`, what an
    episode keeps): where each agent stood at each tick, the conversations and the objects taken that
    happened (lines without "(cannot)"). ValueError for text that is not a transcript."""
    places: dict[int, dict[str, str]] = {}
    talks: list[list[Any]] = []
    taken: list[list[Any]] = []
    for line in transcript.splitlines():
        if not line.strip():
            continue
        x = read_line(line)
        if x is None:
            raise ValueError(f"not a line of a town transcript: {line[:80]!r}")
        places.setdefault(x.tick, {})[x.agent] = x.place
        if not x.valid:
            continue
        if x.talk:
            talks.append([x.tick, x.agent, *x.talk])
        elif x.what.startswith("takes the "):
            taken.append([x.tick, x.agent, x.what.removeprefix("takes the ")])
    if not places:
        raise ValueError("an empty transcript")
    agents = sorted({a for where in places.values() for a in where}, key=lambda a: (len(a), a))
    ticks = max(places) + 1
    day = horizon or ticks
    return {
        "agents": agents,
        "horizon": day,
        "places": [places.get(t, {}) for t in range(ticks)],
        "talks": talks,
        "taken": taken,
        "gathering_from": day // 2,
    }


def plot_timeline(rows: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Draw :func:`timeline_rows`' rows to ``path`` (PNG)."""
    fig = timeline_figure(rows, title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    return out


def timeline_figure(rows: dict[str, Any], title: str = "") -> Any:
    """The matplotlib figure of :func:`timeline_rows`' rows (``teamrl report`` draws a run's day with it; a
    plain ``Figure``, no pyplot state, so a report server may draw it from any thread)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    agents, places = rows["agents"], rows["places"]
    ticks = len(places)
    row_of = {a: i for i, a in enumerate(agents)}
    fig = Figure(figsize=(max(6.0, 0.32 * ticks + 2), 0.5 * len(agents) + 1.6))
    ax = fig.subplots()
    ax.axvspan(rows["gathering_from"] - 0.5, max(ticks, rows["horizon"]) - 0.5, color="#fff3d6", zorder=0)
    for t, where in enumerate(places):
        for agent, place in where.items():
            y = row_of[agent]
            ax.add_patch(
                Rectangle((t - 0.5, y - 0.35), 1, 0.7, color=PLACE_COLOURS.get(place, "white"), zorder=1)
            )
    per_tick = Counter(t for t, *_ in rows["talks"])
    seen: Counter[int] = Counter()
    for t, speaker, listener, topic in rows["talks"]:  # a tick's conversations side by side in its column
        x = t - 0.4 + 0.8 * (seen[t] + 0.5) / per_tick[t]
        seen[t] += 1
        y0, y1 = row_of[speaker], row_of[listener]
        colour = TOPIC_COLOURS.get(topic, "black")
        ax.plot([x, x], [y0, y1], color=colour, lw=1.2, zorder=3)
        ax.scatter([x], [y1], color=colour, s=12, zorder=4)
    for t, agent, obj in rows["taken"]:
        label = OBJECT_LABELS.get(obj, obj[:2])
        ax.text(t, row_of[agent], label, ha="center", va="center", fontsize=7, weight="bold", zorder=5)
    ax.set_xlim(-0.5, max(ticks, rows["horizon"]) - 0.5)
    ax.set_ylim(len(agents) - 0.5, -0.5)
    ax.set_yticks(range(len(agents)), agents)
    ax.set_xlabel("tick (shaded: the gathering at the " + PARTY_PLACE + " counts)")
    handles = [Patch(color=PLACE_COLOURS[p], label=p) for p in PLACES]
    handles += [Patch(color=TOPIC_COLOURS[t], label=f"talk: {t}") for t in TOPICS]
    ax.legend(
        handles=handles, fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False
    )
    if title:
        ax.set_title(title, fontsize=10)
    return fig
