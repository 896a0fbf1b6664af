"""Memory: notes distilled from past episodes, kept within a capacity (issue 19).

A :class:`Note` is what is left of an episode's reaction once distilled: a taste fact ("likes music",
"dislikes long") or, when the distiller cannot read one, the gist of what was said ("said: my cat says hi")
-- never the raw transcript. Notes that state the same fact merge (their ``count`` grows and ``last`` moves
to the newer round). A :class:`Capacity` bounds the entries and the tokens (words) a memory may hold; every
memory policy (``teamrl.memory.policies``) returns a set of notes within it, which :func:`check_capacity`
enforces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from teamrl.memory.collaborator import DISLIKE, LIKE, all_values

_VALUES = {v for _, v in all_values()}
_LIKE_RE = [re.compile("^" + t.replace("{v}", r"(\w+)") + "$") for t in LIKE]
_DISLIKE_RE = [re.compile("^" + t.replace("{v}", r"(\w+)") + "$") for t in DISLIKE]


@dataclass(frozen=True)
class Note:
    """One memory entry. ``value``/``sign``: the taste fact (None for a note that states none); ``first`` /
    ``last``: the rounds it was first and last written; ``count``: how many episodes stated it."""

    text: str
    value: str | None
    sign: int
    first: int
    last: int
    count: int = 1

    @property
    def tokens(self) -> int:
        return len(self.text.split())

    def key(self) -> tuple[str | None, int, str]:
        """Notes with equal keys merge: the same fact, or the same words for a note without one."""
        return (self.value, self.sign, self.text if self.value is None else "")


@dataclass(frozen=True)
class Capacity:
    """At most ``entries`` notes and ``tokens`` words in all; None: unbounded."""

    entries: int | None = 4
    tokens: int | None = None

    def fits(self, notes: list[Note]) -> bool:
        if self.entries is not None and len(notes) > self.entries:
            return False
        return self.tokens is None or sum(n.tokens for n in notes) <= self.tokens


class CapacityExceeded(RuntimeError):
    """A memory policy returned more than its capacity allows."""


def check_capacity(notes: list[Note], capacity: Capacity, policy: str) -> list[Note]:
    if not capacity.fits(notes):
        raise CapacityExceeded(
            f"memory policy {policy!r} kept {len(notes)} notes, {sum(n.tokens for n in notes)} tokens: over "
            f"its capacity ({capacity.entries} entries, {capacity.tokens} tokens)"
        )
    return notes


def distil(text: str, round_: int) -> Note:
    """The note an episode's reaction leaves: its taste fact when the words state one, else its gist."""
    body = text.removeprefix("yes! ").removeprefix("hmm. ").strip()
    for patterns, sign, verb in ((_LIKE_RE, 1, "likes"), (_DISLIKE_RE, -1, "dislikes")):
        for pattern in patterns:
            m = pattern.match(body)
            if m and m.group(1) in _VALUES:
                return Note(f"{verb} {m.group(1)}", m.group(1), sign, round_, round_)
    return Note(f"said: {' '.join(body.split()[:6])}", None, 0, round_, round_)


def merge(notes: list[Note], new: Note) -> tuple[list[Note], bool]:
    """``notes`` with ``new`` merged into the note of the same key (count + 1, last = new's round); and
    whether it merged (False: ``new`` is not in the returned list, the caller decides whether to write it)."""
    for i, n in enumerate(notes):
        if n.key() == new.key():
            out = list(notes)
            out[i] = replace(n, last=new.last, count=n.count + 1)
            return out, True
    return list(notes), False


def write(notes: list[Note], new: Note | None) -> list[Note]:
    """The pool a memory policy chooses from: ``notes`` with ``new`` merged in (see :func:`merge`) or, when
    it states nothing already there, appended; ``notes`` as they are without a new note."""
    if new is None:
        return list(notes)
    pool, merged = merge(notes, new)
    return pool if merged else [*pool, new]


def render(notes: list[Note]) -> str:
    """The memory as a role reads it in its prompt, one note per line, newest first."""
    if not notes:
        return "(nothing remembered)"
    ordered = sorted(notes, key=lambda n: (-n.last, n.text))
    return "\n".join(f"- {n.text}" + (f" (x{n.count})" if n.count > 1 else "") for n in ordered)
