"""A simulated collaborator whose taste is hidden, structured and drifts (issue 19).

A streamer picks the topic of the next stream among ``n_candidates`` proposals, each described by one
value of every attribute (genre, format, mood). The streamer's hidden taste is a weight per attribute value;
a proposal's appeal is the sum of its values' weights. Each round the team proposes one candidate; the
streamer **accepts** it when no other candidate appeals more (the verifiable reward, 1 or 0), and answers
with a short free-text reaction: either a fact about its taste ("I'm into music lately", "long streams
bore me"), true at that round, or small talk that says nothing about it. Taste **drifts** on a schedule:
``sudden`` (part of the weights re-drawn at ``drift_at``) or ``gradual`` (blended from the old weights to
the new ones over ``drift_span`` rounds).

Collaborators are drawn from a seed and an index; the train and held-out populations never share an index.
Everything here is plain Python (no torch), deterministic given the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "genre": ("games", "music", "cooking", "tech", "travel", "art"),
    "format": ("short", "long"),
    "mood": ("calm", "hype"),
}
# what the streamer says about a value it likes / dislikes (one template drawn per reaction)
LIKE = ("I'm into {v} lately", "more {v} please", "{v} is my thing")
DISLIKE = ("{v} bores me", "no more {v}", "I'm tired of {v}")
SMALL_TALK = (
    "had a long day",
    "the weather is nice",
    "my cat says hi",
    "chat was busy today",
    "coffee helps",
    "thanks for the idea",
)

Drift = Literal["none", "sudden", "gradual"]


def all_values() -> list[tuple[str, str]]:
    """Every (attribute, value) pair, in a fixed order."""
    return [(a, v) for a, values in ATTRIBUTES.items() for v in values]


@dataclass(frozen=True)
class Topic:
    """One proposal: a value of every attribute."""

    genre: str
    format: str
    mood: str

    def values(self) -> tuple[str, str, str]:
        return (self.genre, self.format, self.mood)

    def describe(self) -> str:
        return f"{self.mood} {self.format} {self.genre} stream"


@dataclass(frozen=True)
class Reaction:
    """The streamer's answer to a proposal: accepted or not, the text, and (for the verifier and the tests
    only, never shown to a role) the taste fact the text states: (value, +1 like / -1 dislike), or None."""

    accepted: bool
    text: str
    fact: tuple[str, int] | None


def _draw_taste(rng: random.Random) -> dict[str, float]:
    """A taste: each genre liked (+1), disliked (-1) or indifferent (0, or a small weight), one format and one
    mood preferred. Weights are distinct enough that one candidate usually appeals most."""
    w: dict[str, float] = {}
    genres = list(ATTRIBUTES["genre"])
    rng.shuffle(genres)
    for i, g in enumerate(genres):
        w[g] = (2.0, 1.5, -1.5, -2.0)[i] if i < 4 else rng.uniform(-0.3, 0.3)
    for attr in ("format", "mood"):
        a, b = ATTRIBUTES[attr]
        sign = 1.0 if rng.random() < 0.5 else -1.0
        w[a], w[b] = sign * 1.0, -sign * 1.0
    return w


@dataclass
class Collaborator:
    """One streamer: taste before and after the drift, the schedule, and how chatty it is."""

    index: int
    taste_before: dict[str, float]
    taste_after: dict[str, float]
    drift: Drift = "none"
    drift_at: int = 0
    drift_span: int = 1
    small_talk: float = 0.5  # probability that a reaction is small talk
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"collaborator-{self.seed}-{self.index}-reactions")

    def taste(self, round_: int) -> dict[str, float]:
        """The weights in force at ``round_`` (0-based)."""
        if self.drift == "none" or round_ < self.drift_at:
            return dict(self.taste_before)
        if self.drift == "sudden" or round_ >= self.drift_at + self.drift_span:
            return dict(self.taste_after)
        t = (round_ - self.drift_at + 1) / (self.drift_span + 1)
        return {k: (1 - t) * self.taste_before[k] + t * self.taste_after[k] for k in self.taste_before}

    def appeal(self, topic: Topic, round_: int) -> float:
        w = self.taste(round_)
        return sum(w[v] for v in topic.values())

    def best(self, candidates: list[Topic], round_: int) -> list[int]:
        """Indices of the candidates that appeal most (ties all count)."""
        scores = [self.appeal(c, round_) for c in candidates]
        top = max(scores)
        return [i for i, s in enumerate(scores) if s >= top - 1e-9]

    def react(self, candidates: list[Topic], choice: int | None, round_: int) -> Reaction:
        """Accept ``choice`` (an index into ``candidates``; None: the team proposed nothing valid) when it
        appeals most; the text is a taste fact true at ``round_`` or, with probability ``small_talk``,
        small talk. The fact is about the proposal's own values when there is one (what a person reacts
        to), else about any value the streamer feels strongly about."""
        accepted = choice is not None and choice in self.best(candidates, round_)
        rng = self._rng
        if rng.random() < self.small_talk:
            return Reaction(accepted, rng.choice(SMALL_TALK), None)
        w = self.taste(round_)
        pool = list(candidates[choice].values()) if choice is not None else [v for _, v in all_values()]
        strong = [v for v in pool if abs(w[v]) >= 0.75] or [v for _, v in all_values() if abs(w[v]) >= 0.75]
        value = rng.choice(strong)
        sign = 1 if w[value] > 0 else -1
        text = rng.choice(LIKE if sign > 0 else DISLIKE).format(v=value)
        return Reaction(accepted, ("yes! " if accepted else "hmm. ") + text, (value, sign))


def make_collaborator(
    seed: int,
    index: int,
    drift: Drift = "sudden",
    drift_at: int = 20,
    drift_span: int = 10,
    small_talk: float = 0.5,
) -> Collaborator:
    """Collaborator ``index`` of population ``seed``. At the drift the streamer tires of what it liked: the
    genres' weights turn over (a liked genre becomes disliked, a disliked one liked; format and mood stay)."""
    rng = random.Random(f"collaborator-{seed}-{index}")
    before = _draw_taste(rng)
    after = dict(before)
    for g in ATTRIBUTES["genre"]:
        after[g] = -before[g]
    return Collaborator(index, before, after, drift, drift_at, drift_span, small_talk, seed)


def candidates_for(seed: int, index: int, round_: int, n: int = 4) -> list[Topic]:
    """The ``n`` proposals on the table at ``round_`` with collaborator ``index`` (distinct genres)."""
    rng = random.Random(f"candidates-{seed}-{index}-{round_}")
    genres = rng.sample(ATTRIBUTES["genre"], n)
    return [Topic(g, rng.choice(ATTRIBUTES["format"]), rng.choice(ATTRIBUTES["mood"])) for g in genres]


def split_index(split: str, i: int) -> int:
    """The index of the ``i``-th collaborator of ``split``: train ones are even, held-out ones odd, so the
    two never share a streamer."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', not {split!r}")
    return 2 * i + (split == "heldout")


def population(seed: int, split: str, n: int, **kwargs: object) -> list[Collaborator]:
    """``n`` collaborators of ``split`` (see :func:`split_index`)."""
    return [make_collaborator(seed, split_index(split, i), **kwargs) for i in range(n)]  # type: ignore[arg-type]
