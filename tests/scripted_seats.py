"""Test helper: seats that answer from scripted queues of texts."""

from __future__ import annotations

from teamrl.engine.team import Seat


def scripted(log: list, replies: dict[str, list[str]]) -> dict[str, Seat]:
    """Each role answers from its queue of texts and logs every call it gets."""

    def make(role: str) -> Seat:
        def script(call):
            log.append(call)
            return replies[role].pop(0)

        return Seat(script=script)

    return {role: make(role) for role in replies}
