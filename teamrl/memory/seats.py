"""Memory written by a seat of the team, not by a rule (issue 19): an LLM role after each episode.

Two seats, on the same base model as the task roles:

- **archivist**: reads the memory and the note the episode left (numbered, each with how often it was
  stated and how many episodes ago it was last stated) and answers ``KEEP: <numbers>`` (or ``KEEP: none``):
  what to keep of memory + new note, within the capacity. Notes stating the same fact merge before it
  chooses (the same ``write`` as every policy). Trained by RL in the **outer loop**: each of its turns is
  rewarded with the task's acceptance over the next ``horizon`` episodes of the session with the memory it
  chose, ranked against the same episode's turns of the other sessions with the same collaborator.
- **summariser**: the summarise-everything baseline: reads the memory and the episode itself (what was
  proposed, accepted or not, the collaborator's words, not a distilled note) and rewrites the whole memory,
  one fact per line (``likes music x3``); the lines are parsed back into notes.

What a seat writes can never exceed the capacity: the notes it names are kept in its order while they fit
(:func:`teamrl.memory.policies.fill`), the rest dropped, and the turn counts as malformed. A reply that
does not parse leaves the memory as it was (the new note unwritten) and counts as malformed too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from teamrl.memory.collaborator import all_values
from teamrl.memory.policies import Policy, fill
from teamrl.memory.store import Capacity, Note, write

SEATS = ("archivist", "summariser")
NOTHING = "(nothing)"  # an empty memory, as the summariser reads and writes it
_VALUES = {v for _, v in all_values()}
_KEEP = re.compile(r"KEEP:\s*(none|[\d ,]*\d)", re.IGNORECASE)
_FACT = re.compile(r"^(likes|dislikes) (\w+)(?: x(\d+))?$")


def _limit(capacity: Capacity) -> str:
    parts = [f"{capacity.entries} notes"] if capacity.entries is not None else []
    parts += [f"{capacity.tokens} words"] if capacity.tokens is not None else []
    return " and ".join(parts) or "any number of notes"


# -- archivist ---------------------------------------------------------------------------------------
def archivist_prompt(pool: list[Note], new: Note | None, round_: int, capacity: Capacity) -> str:
    """What the archivist reads: the pool (memory with the new note merged in), one numbered line each."""
    lines = []
    for i, n in enumerate(pool):
        tags = [f"x{n.count}"] if n.count > 1 else []
        tags.append(
            "new" if new is not None and n.key() == new.key() and n.count == 1 else f"{round_ - n.last} ago"
        )
        lines.append(f"{i + 1}. {n.text} ({', '.join(tags)})")
    listed = "\n".join(lines) or NOTHING
    return f"### archivist: Keep at most {_limit(capacity)}. Reply KEEP: <numbers>.\nnotes:\n{listed}\n"


def parse_keep(text: str, n: int) -> list[int] | None:
    """The 0-based notes named by ``KEEP: 1 3`` (in the order named, repeats and numbers outside 1..n
    dropped; ``KEEP: none``: []); None when there is no ``KEEP:``."""
    found = _KEEP.findall(text)
    if not found:
        return None
    if found[-1].lower() == "none":
        return []
    out: list[int] = []
    for k in map(int, re.findall(r"\d+", found[-1])):
        if 1 <= k <= n and k - 1 not in out:
            out.append(k - 1)
    return out


def archivist_reply(pool: list[Note], kept: list[Note]) -> str:
    """``KEEP: ...`` naming ``kept`` (notes of ``pool``) by their numbers, ascending."""
    keys = {n.key() for n in kept}
    numbers = [str(i + 1) for i, n in enumerate(pool) if n.key() in keys]
    return "KEEP: " + (" ".join(numbers) or "none")


def apply_keep(
    memory: list[Note], pool: list[Note], text: str, capacity: Capacity
) -> tuple[list[Note], bool]:
    """The memory the archivist's reply leaves, and whether the reply was well formed and within the
    capacity (else: unparsable -> ``memory`` unchanged; too much -> what fits, in the order named)."""
    picked = parse_keep(text, len(pool))
    if picked is None:
        return fill(memory, capacity), False
    chosen = [pool[i] for i in picked]
    kept = fill(chosen, capacity)
    return kept, len(kept) == len(chosen)


# -- summariser --------------------------------------------------------------------------------------
def summariser_prompt(memory: list[Note], episode: str, capacity: Capacity) -> str:
    """What the summariser reads: its memory as it wrote it, then the episode (proposal, outcome, words)."""
    return (
        f"### summariser: Rewrite the memory, at most {_limit(capacity)}, one per line.\n"
        f"memory:\n{summary_text(memory) or NOTHING}\nepisode: {episode}\n"
    )


def summary_text(notes: list[Note]) -> str:
    """The memory as the summariser writes it: one line per note, ``likes music x3``."""
    return "\n".join(n.text + (f" x{n.count}" if n.count > 1 else "") for n in notes)


def net_summary(memory: list[Note], new: Note | None, capacity: Capacity) -> list[Note]:
    """The summariser's expert: every fact stated, likes and dislikes of a value netted into one note
    (count = likes - dislikes), the strongest kept within the capacity (the most recent first among
    equals); small talk is not kept."""
    net: dict[str, tuple[int, int, int]] = {}  # value -> (likes - dislikes, first, last)
    for n in [*memory, *([new] if new is not None else [])]:
        if n.value is not None:
            total, first, last = net.get(n.value, (0, n.first, 0))
            net[n.value] = (total + n.sign * n.count, min(first, n.first), max(last, n.last))
    notes = [
        Note(
            f"{'likes' if total > 0 else 'dislikes'} {value}",
            value,
            1 if total > 0 else -1,
            first,
            last,
            abs(total),
        )
        for value, (total, first, last) in net.items()
        if total != 0
    ]
    notes.sort(key=lambda n: (-n.count, -n.last, n.text))
    return fill(notes, capacity)


def parse_summary(
    text: str, memory: list[Note], new: Note | None, round_: int, capacity: Capacity
) -> tuple[list[Note], bool]:
    """The notes the summariser's lines state (``likes|dislikes VALUE [xN]``, a known value), in its order
    and within the capacity, and whether every line parsed and fitted. A line names a fact only once."""
    body = re.sub(r"</?answer>", "", text)
    lines = [line.strip() for line in body.splitlines() if line.strip() and line.strip() != NOTHING]
    old = {n.key(): n for n in memory}
    notes: list[Note] = []
    ok = True
    for line in lines:
        m = _FACT.match(line)
        if m is None or m.group(2) not in _VALUES:
            ok = False
            continue
        sign = 1 if m.group(1) == "likes" else -1
        note = Note(
            f"{m.group(1)} {m.group(2)}", m.group(2), sign, round_, round_, min(int(m.group(3) or 1), 99)
        )
        if any(n.key() == note.key() for n in notes):
            ok = False
            continue
        prior = old.get(note.key())
        if prior is not None:
            fresh = new is not None and new.key() == note.key()
            note = replace(note, first=prior.first, last=round_ if fresh else prior.last)
        notes.append(note)
    kept = fill(notes, capacity)
    return kept, ok and len(kept) == len(notes)


def describe_episode(proposal: str, accepted: bool, words: str) -> str:
    return f"proposed {proposal}; {'accepted' if accepted else 'not accepted'}; said: {words}"


# -- the expert of each seat -------------------------------------------------------------------------
def seat_expert(seat: str, capacity: Capacity, rule: Policy) -> Callable[[dict[str, object]], str]:
    """The reply of ``seat``'s scripted expert from a turn's context: the archivist names what ``rule`` (a
    memory policy) keeps; the summariser writes :func:`net_summary`."""

    def reply(context: dict[str, object]) -> str:
        memory: list[Note] = context["memory"]  # type: ignore[assignment]
        new: Note | None = context["new"]  # type: ignore[assignment]
        round_: int = context["round"]  # type: ignore[assignment]
        if seat == "archivist":
            pool = write(memory, new)
            return archivist_reply(pool, rule(memory, new, round_))
        return summary_text(net_summary(memory, new, capacity)) or NOTHING

    return reply
