"""Memory policies: after each episode, what to write, merge and forget, within a capacity (issue 19).

A policy sees the memory, the note the episode left (already distilled) and the round, and returns the
notes to keep (``teamrl.memory.store.check_capacity`` holds every one of them to its capacity). A new note
stating a fact already in memory merges into it (count + 1) for every policy. The baselines:

- ``none``: remembers nothing;
- ``keep_all``: keeps everything (unbounded: the upper bound in tokens);
- ``fifo``: writes every note, forgets the oldest written;
- ``recency``: writes every note, forgets the least recently confirmed;
- ``tally``: one running tally per taste value (likes minus dislikes over every episode), the strongest
  ``entries`` shown: a summary of everything, kept by rule (not by a model).

``learned``: a small scorer (:class:`NoteScorer`: a linear score of each note's features: age, how often it
was confirmed, whether it states a fact, whether a newer note contradicts it or it contradicts an older one)
ranks memory and the new note together with a STOP entry and keeps the notes ranked before STOP, at most the
capacity (a Plackett-Luce draw while it learns, the best ranking when it is evaluated). It is trained by RL
in an outer loop (``teamrl.memory.learn``) whose reward is the task's acceptance over the next K episodes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from teamrl.memory.store import Capacity, Note, check_capacity, write

POLICIES = ("none", "keep_all", "fifo", "recency", "tally", "learned")
FEATURES = ("bias", "age", "count", "is_fact", "contradicted", "contradicts_older", "is_new")


def fill(ranked: list[Note], capacity: Capacity) -> list[Note]:
    """The longest prefix-greedy selection of ``ranked`` within ``capacity`` (a note that does not fit is
    skipped; a later, shorter one may still fit)."""
    kept: list[Note] = []
    for n in ranked:
        if capacity.fits([*kept, n]):
            kept.append(n)
    return kept


def features(pool: list[Note], new: Note | None, round_: int) -> np.ndarray:
    """[len(pool), len(FEATURES)]: one row per note of ``pool`` (the memory with the new note merged in or
    appended)."""
    rows = []
    for n in pool:
        contradicted = any(o.value == n.value and o.sign == -n.sign and o.last > n.last for o in pool)
        older = any(o.value == n.value and o.sign == -n.sign and o.last < n.last for o in pool)
        rows.append(
            [
                1.0,
                min(round_ - n.last, 40) / 10.0,
                math.log1p(n.count),
                float(n.value is not None),
                float(n.value is not None and contradicted),
                float(n.value is not None and older),
                float(new is not None and n.key() == new.key()),
            ]
        )
    return np.asarray(rows, dtype=np.float64).reshape(len(pool), len(FEATURES))


@dataclass
class NoteScorer:
    """Linear scores of notes (``weights`` over :data:`FEATURES`) and of STOP (``stop``)."""

    weights: np.ndarray = field(default_factory=lambda: np.zeros(len(FEATURES)))
    stop: float = -2.0

    def scores(self, x: np.ndarray) -> np.ndarray:
        return x @ self.weights


@dataclass
class Decision:
    """What a learned policy did at one round, for the outer loop: the pool's features and the order it
    drew (indices into the pool, then -1 for STOP when it stopped before the capacity)."""

    x: np.ndarray
    order: list[int]
    round: int


def learned_update(
    scorer: NoteScorer,
    memory: list[Note],
    new: Note | None,
    round_: int,
    capacity: Capacity,
    rng: random.Random | None = None,
    record: list[Decision] | None = None,
) -> list[Note]:
    """The learned policy: rank pool + STOP by score (a Plackett-Luce draw with ``rng``, else greedily) and
    keep the notes before STOP that fit the capacity. With ``record``, the draw is appended to it."""
    pool = write(memory, new)
    if not pool:
        return []
    x = features(pool, new, round_)
    s = np.append(scorer.scores(x), scorer.stop)  # the last entry is STOP
    remaining = list(range(len(s)))
    order: list[int] = []
    kept: list[Note] = []
    while remaining:
        if rng is None:
            pick = max(remaining, key=lambda i: (s[i], -i))
        else:
            logits = np.array([s[i] for i in remaining])
            p = np.exp(logits - logits.max())
            pick = remaining[
                int(
                    np.searchsorted(np.cumsum(p / p.sum()), rng.random(), side="right").clip(
                        0, len(remaining) - 1
                    )
                )
            ]
        remaining.remove(pick)
        if pick == len(pool):
            order.append(-1)
            break
        order.append(pick)
        if capacity.fits([*kept, pool[pick]]):
            kept.append(pool[pick])
        if capacity.entries is not None and len(kept) >= capacity.entries:
            break
    if record is not None:
        record.append(Decision(x, order, round_))
    return kept


Policy = Callable[[list[Note], "Note | None", int], list[Note]]


def make_policy(
    name: str,
    capacity: Capacity,
    scorer: NoteScorer | None = None,
    rng: random.Random | None = None,
    record: list[Decision] | None = None,
) -> Policy:
    """The policy ``name`` (one of :data:`POLICIES`) bound to ``capacity``; its results are checked against
    it. ``learned`` needs ``scorer``; with ``rng`` it draws (training), else ranks greedily; with ``record``
    each of its draws is appended there (for the outer loop)."""
    if name not in POLICIES:
        raise ValueError(f"unknown memory policy {name!r}; valid: {', '.join(POLICIES)}")
    if name == "learned" and scorer is None:
        raise ValueError("the learned memory policy needs a trained NoteScorer (teamrl.memory.learn)")
    tallies: dict[str, int] = {}

    def update(memory: list[Note], new: Note | None, round_: int) -> list[Note]:
        if name == "none":
            return []
        if name == "learned":
            assert scorer is not None
            kept = learned_update(scorer, memory, new, round_, capacity, rng, record)
            return check_capacity(kept, capacity, name)
        if name == "tally":
            if new is not None and new.value is not None:
                tallies[new.value] = tallies.get(new.value, 0) + new.sign
            ranked = sorted((v for v in tallies if tallies[v]), key=lambda v: (-abs(tallies[v]), v))
            notes = [
                Note(
                    f"{'likes' if tallies[v] > 0 else 'dislikes'} {v}",
                    v,
                    1 if tallies[v] > 0 else -1,
                    round_,
                    round_,
                    abs(tallies[v]),
                )
                for v in ranked
            ]
            return check_capacity(fill(notes, capacity), capacity, name)
        pool = write(memory, new)
        if name == "keep_all":
            return pool
        key = (lambda n: n.first) if name == "fifo" else (lambda n: n.last)
        return check_capacity(fill(sorted(pool, key=key, reverse=True), capacity), capacity, name)

    return update
