"""Counterfactual (leave-one-out) credit: what did a role add over a baseline in its seat?

Role i's credit in an episode with outcome R is ``R - R_cf``, where R_cf is the outcome of the same
episode replayed with role i's turns taken by a baseline seat: the trainer gives it the role's frozen
reference policy (the SFT snapshot it keeps as KL reference; ``reward.counterfactual_baseline:
reference``) or no seat at all, an empty turn (``empty``, which parses as a format error). The
replay keeps every turn recorded before role i's first turn, lets the baseline speak for role i from
there on, and lets the other roles re-generate their later turns with their current policies (fresh
samples, not shared); the workflow then verifies the replay as usual.

One replay per (episode, role) pair, at most ``budget`` per call. The budget goes to whole groups
(all episodes of one task for one role), role by role in the order given, then group by group, so
that the group-relative advantages of a role never mix counterfactual credits with hybrid rewards in
one group; pairs beyond it keep their hybrid rewards and are counted as fallbacks.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team, parsed_turn
from teamrl.protocol import Episode, MessageKind, Turn

log = logging.getLogger("teamrl")

Replay = Callable[[Team, Episode], Awaitable[Episode]]
"""Plays ``episode``'s task again with the given team (same group index) and verifies it."""


class ReplayTeam(Team):
    """A team that replays ``original`` with ``role`` swapped for a baseline.

    The k-th call of a role that the original answered before ``role`` first spoke returns that
    recorded turn (if the prompt is the same; a workflow that drifted gets a fresh sample instead);
    ``role`` speaks from ``baseline`` (an empty turn when it is None); every other call goes to the
    live team's seats.
    """

    def __init__(self, team: Team, original: Episode, role: str, baseline: Seat | None) -> None:
        super().__init__(team.seats, team.engine)
        self.role = role
        first = next(i for i, t in enumerate(original.turns) if t.role == role)
        self._recorded: dict[tuple[str, int], Turn] = {}
        calls: dict[str, int] = {}
        for turn in original.turns[:first]:
            k = calls.get(turn.role, 0)
            calls[turn.role] = k + 1
            self._recorded[(turn.role, k)] = turn
        self._calls: dict[str, int] = {}
        self._baseline = Team({role: baseline}, team.engine) if baseline is not None else None

    async def act(
        self,
        role: str,
        prompt: str,
        kind: MessageKind,
        *,
        round: int = 0,
        context: dict[str, Any] | None = None,
    ) -> Turn:
        k = self._calls.get(role, 0)
        self._calls[role] = k + 1
        recorded = self._recorded.get((role, k))
        if recorded is not None and recorded.prompt == prompt:
            return recorded.model_copy(deep=True)
        if role != self.role:
            return await super().act(role, prompt, kind, round=round, context=context)
        if self._baseline is None:
            return parsed_turn(Turn(role=role, round=round, prompt=prompt, text=""), kind)
        return await self._baseline.act(role, prompt, kind, round=round, context=context)


@dataclasses.dataclass
class CounterfactualStats:
    """What one call did: replays run, pairs that kept hybrid rewards, replay outcomes per role."""

    rollouts: int = 0
    fallbacks: int = 0
    generated_tokens: int = 0
    replay_outcomes: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    credits: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        out = {
            "credit/counterfactual_rollouts": float(self.rollouts),
            "credit/counterfactual_fallbacks": float(self.fallbacks),
            "credit/counterfactual_tokens": float(self.generated_tokens),
        }
        for role, values in self.credits.items():
            out[f"credit/{role}/counterfactual"] = sum(values) / len(values)
            replays = self.replay_outcomes[role]
            out[f"credit/{role}/replay_outcome"] = sum(replays) / len(replays)
        return out


def schedule_replays(
    episodes: Sequence[Episode], roles: Sequence[str], budget: int
) -> tuple[list[tuple[int, str]], int]:
    """(episode index, role) pairs to replay within ``budget``, by whole groups; and the fallback count."""
    groups: dict[str, list[int]] = {}
    for i, ep in enumerate(episodes):
        groups.setdefault(ep.task_id, []).append(i)
    chosen: list[tuple[int, str]] = []
    fallbacks = 0
    for role in roles:
        for members in groups.values():
            pairs = [(i, role) for i in members if episodes[i].turns_of(role)]
            if len(chosen) + len(pairs) <= budget:
                chosen += pairs
            else:
                fallbacks += len(pairs)
    return chosen, fallbacks


def counterfactual_credit(
    episodes: Sequence[Episode],
    roles: Sequence[str],
    team: Team,
    engine: Engine,
    replay: Replay,
    baseline: Callable[[str], Seat | None],
    budget: int,
) -> CounterfactualStats:
    """Set ``episode.rewards[role] = R - R_cf`` for the scheduled pairs of ``roles`` (see the module).

    ``baseline(role)`` is the seat that replaces the role (None: an empty turn). Each replayed episode
    also records ``verifier["counterfactual_outcome"][role] = R_cf``.
    """
    chosen, fallbacks = schedule_replays(episodes, roles, budget)
    stats = CounterfactualStats(fallbacks=fallbacks)
    if fallbacks:
        log.info(
            "counterfactual credit: budget %d replays; %d (episode, role) pairs kept hybrid rewards",
            budget,
            fallbacks,
        )
    if not chosen:
        return stats

    def factory(i: int, role: str) -> Callable[[], Awaitable[Episode]]:
        replay_team = ReplayTeam(team, episodes[i], role, baseline(role))
        return lambda: replay(replay_team, episodes[i])

    tokens0 = engine.stats.generated_tokens
    replays = engine.run([factory(i, role) for i, role in chosen])
    stats.generated_tokens = engine.stats.generated_tokens - tokens0
    stats.rollouts = len(replays)
    for (i, role), again in zip(chosen, replays, strict=True):
        ep = episodes[i]
        credit = ep.outcome - again.outcome
        ep.rewards[role] = credit
        recorded = ep.verifier.setdefault("counterfactual_outcome", {})
        recorded[role] = again.outcome  # type: ignore[index]
        stats.replay_outcomes.setdefault(role, []).append(again.outcome)
        stats.credits.setdefault(role, []).append(credit)
    return stats
