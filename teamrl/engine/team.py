"""A Team maps each role to its seat: which policy speaks for it, with which adapter.

Workflows only ever call :meth:`Team.act`; whether the role is a model behind the engine or a
scripted rule (tests, demonstrations) is the seat's business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teamrl.engine.engine import Engine
from teamrl.policies.base import GenerationRequest
from teamrl.protocol import FormatError, MessageKind, Turn, parse_message


@dataclass(frozen=True)
class RoleCall:
    """What a scripted role is given: the prompt plus the workflow's structured context."""

    role: str
    prompt: str
    kind: MessageKind
    round: int
    context: dict[str, Any]


ScriptedRole = Callable[[RoleCall], str]


@dataclass(frozen=True)
class Seat:
    """One role's place in the team."""

    policy: str = "default"
    adapter: str | None = None
    trainable: bool = True
    max_new_tokens: int = 64
    temperature: float = 1.0
    script: ScriptedRole | None = field(default=None, compare=False)


class Team:
    def __init__(self, seats: dict[str, Seat], engine: Engine | None = None) -> None:
        needs_engine = [r for r, s in seats.items() if s.script is None]
        if needs_engine and engine is None:
            raise ValueError(f"roles {needs_engine} are served by a policy, so the team needs an engine")
        self.seats = seats
        self.engine = engine

    @property
    def roles(self) -> list[str]:
        return list(self.seats)

    async def act(
        self,
        role: str,
        prompt: str,
        kind: MessageKind,
        *,
        round: int = 0,
        context: dict[str, Any] | None = None,
    ) -> Turn:
        """Let ``role`` speak once; a completion that does not parse becomes ``Turn.error``."""
        seat = self.seats.get(role)
        if seat is None:
            raise KeyError(f"the team has no role {role!r}; roles: {self.roles}")
        if seat.script is not None:
            text = seat.script(RoleCall(role, prompt, kind, round, context or {}))
            return parsed_turn(Turn(role=role, round=round, prompt=prompt, text=text), kind)
        assert self.engine is not None
        request = GenerationRequest(prompt, seat.adapter, seat.max_new_tokens, seat.temperature)
        gen = await self.engine.generate(seat.policy, request)
        turn = Turn(
            role=role,
            round=round,
            prompt=prompt,
            text=gen.text,
            prompt_ids=gen.prompt_ids,
            completion_ids=gen.completion_ids,
            logprobs=gen.logprobs,
            finished=gen.finished,
        )
        return parsed_turn(turn, kind)


def parsed_turn(turn: Turn, kind: MessageKind) -> Turn:
    """Attach the parsed message, or the format error, to a turn."""
    try:
        turn.message = parse_message(turn.role, kind, turn.text)
    except FormatError as exc:
        turn.error = str(exc)
    return turn
