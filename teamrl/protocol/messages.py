"""The nouns every part of teamrl shares: Message, Turn, Episode.

A model's raw text becomes a :class:`Message` through :func:`parse_message`; text that does not
parse becomes a :class:`FormatError` that the workflow records as a penalty, never an exception
that stops a run. This module depends on nothing else of ours and on no tensor library.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, Field

MessageKind = Literal["plan", "code", "review", "tests", "answer", "text"]
Verdict = Literal["approve", "revise"]


class Message(BaseModel):
    """One utterance from a role to the team."""

    role: str = Field(description="the role that spoke, e.g. 'coder'")
    kind: MessageKind = Field(description="what the message carries")
    content: str = Field(description="the payload: plan text, Python source, review comment, test statements")
    verdict: Verdict | None = Field(default=None, description="a reviewer's decision; None for other kinds")


class Turn(BaseModel):
    """One generation by one role: what it was shown, what it produced, and how that parsed."""

    role: str
    round: int = 0
    prompt: str
    text: str
    prompt_ids: list[int] = Field(default_factory=list)
    completion_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(
        default_factory=list, description="behaviour log-prob of each completion token"
    )
    finished: bool = True
    message: Message | None = None
    error: str | None = Field(default=None, description="why the raw text did not parse, if it did not")
    reused: bool = Field(
        default=False,
        description="a frozen role's turn sampled once and shared by a group's episodes (not generated here)",
    )
    greedy: bool = Field(
        default=False,
        description="decoded at temperature 0 (its group's greedy anchor, algorithm.greedy_episodes): its "
        "log-probs are not the sampling policy's",
    )


class Candidate(BaseModel):
    """A turn sampled from the same history as a turn of the episode, that did not continue it: one of a
    turn-level group (``teamrl.workflows.branching``). It is no turn of the conversation: verifier turn
    indices, process scores, per-turn credit and the report read ``Episode.turns`` only; the learner ranks
    it against its group and its tokens count as generated."""

    turn: Turn
    of: int = Field(description="index in Episode.turns of the group's turn that continued the episode")
    reward: float = Field(
        description="this turn's own reward, ranked against the continuing turn's "
        "(Episode.attempt_rewards[of]) and the group's other candidates'"
    )


class Episode(BaseModel):
    """One team's full trajectory on one task, with verifier results and per-role rewards."""

    task_id: str
    group: int = Field(default=0, description="index of the episode within its task's group of G")
    turns: list[Turn] = Field(default_factory=list)
    verifier: dict[str, object] = Field(default_factory=dict)
    outcome: float = 0.0
    process: dict[str, float] = Field(default_factory=dict)
    rewards: dict[str, float] = Field(default_factory=dict)
    attempt_rewards: dict[int, float] = Field(
        default_factory=dict,
        description="turn index -> reward of that turn alone, for a role's turns that are attempts at one "
        "prompt (the solver's K attempts at a proposed problem; a turn-level group's continuing turn, ranked "
        "with its ``candidates``): GRPO ranks them against each other instead of giving each its episode's "
        "advantage",
    )
    attempt_groups: dict[int, str] = Field(
        default_factory=dict,
        description="turn index -> group key, for turns of ``attempt_rewards`` that are not ranked against "
        "the attempts at their own prompt but against the turns of the same role and key in every episode of "
        "the task's group (a coder's second version against the other teams' second versions, each scored by "
        "what it changed)",
    )
    candidates: list[Candidate] = Field(
        default_factory=list,
        description="turns sampled beside a turn of ``turns`` from the same history that did not continue "
        "the episode (turn-level groups): learned from and counted as generated tokens, never part of the "
        "conversation",
    )
    discarded: list[Turn] = Field(
        default_factory=list,
        description="turns generated for the episode and set aside (a coder's imagined versions not kept, "
        "``workflow.imagine``): counted as generated tokens, neither learned from nor part of the "
        "conversation",
    )
    errors: list[str] = Field(default_factory=list)

    def turns_of(self, role: str) -> list[Turn]:
        return [t for t in self.turns if t.role == role]

    @property
    def num_generated_tokens(self) -> int:
        """Completion tokens generated for this episode: its turns (except reused ones), its candidates and
        the turns it set aside."""
        turns = [*self.turns, *(c.turn for c in self.candidates), *self.discarded]
        return sum(len(t.completion_ids) for t in turns if not t.reused)


class FormatError(ValueError):
    """Raised by :func:`parse_message` when a completion does not follow its role's output format."""


# Output tags per message kind: short and regular so that a tiny model can learn them.
TAGS: dict[str, str] = {
    "plan": "plan",
    "code": "code",
    "review": "review",
    "tests": "tests",
    "answer": "answer",
}
_VERDICT = re.compile(r"^\s*(approve|revise)\b[\s:,-]*", re.IGNORECASE)


def parse_message(role: str, kind: MessageKind, raw: str) -> Message:
    """Parse ``<tag>...</tag>`` from a completion into a Message of the expected kind.

    A review's content starts with its verdict: ``<review>approve</review>`` or
    ``<review>revise: f(2) gives 5, expected 4</review>``.
    """
    if kind == "text":
        return Message(role=role, kind="text", content=raw.strip())
    tag = TAGS[kind]
    start, end = f"<{tag}>", f"</{tag}>"
    i = raw.find(start)
    if i < 0:
        raise FormatError(f"{role}: expected '{start}...{end}', got {raw[:60]!r}")
    j = raw.find(end, i + len(start))
    if j < 0:
        raise FormatError(f"{role}: '{start}' is never closed by '{end}'")
    content = raw[i + len(start) : j].strip("\n")
    if not content.strip():
        raise FormatError(f"{role}: empty {kind}")
    if kind != "review":
        return Message(role=role, kind=kind, content=content)
    m = _VERDICT.match(content)
    if m is None:
        raise FormatError(f"{role}: a review must start with 'approve' or 'revise', got {content[:40]!r}")
    verdict = m.group(1).lower()
    return Message(role=role, kind="review", content=content[m.end() :].strip(), verdict=verdict)  # type: ignore[arg-type]


def render_message(message: Message) -> str:
    """The inverse of :func:`parse_message`: the raw text a role should produce for ``message``."""
    if message.kind == "text":
        return message.content
    tag = TAGS[message.kind]
    body = message.content
    if message.kind == "review":
        body = message.verdict or "approve"
        if message.content:
            body += ": " + message.content
    return f"<{tag}>{body}</{tag}>"


def message_json_schema() -> str:
    """The JSON Schema of the messages roles exchange (printed by ``teamrl schema``)."""
    return json.dumps(Message.model_json_schema(), indent=2)
