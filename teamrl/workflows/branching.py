"""Turn-level groups (AT-GRPO's tree-structured sampling), for any workflow.

Zhao et al., "Stronger-MAS: Multi-Agent Reinforcement Learning for Collaborative LLMs" (AT-GRPO, ICLR
2026; code: PettingLLMs): GRPO's group assumes its samples share a prompt, but in a team the prompt of a
role's turn depends on its teammates' earlier turns. A role's episode-level group (the G episodes of a
task) then mixes, for a downstream role, samples that follow different upstream turns, and its baseline
carries their variance. AT-GRPO samples, at a trained agent's turn, K candidates from the same history;
they form a group (agent- and turn-wise: one prompt), each scored by a turn-level reward, ranked against
each other by GRPO; the best-scoring candidate (greedy) continues the episode.

A workflow offers it with a settings field ``turn_group: TurnGroupConfig`` and, per episode, a
:class:`TurnGroups`; where a role speaks::

    groups = TurnGroups(cfg.turn_group, team, episode)
    ...
    if groups.active(role):
        turn = await groups.take(lambda: team.act(role, prompt, kind), score)   # score: turn -> [0, 1]
    else:
        turn = await team.act(role, prompt, kind); episode.turns.append(turn)

:meth:`TurnGroups.take` samples the K turns concurrently (the engine batches them), scores each, appends
the continuing one to ``episode.turns`` (its reward in ``episode.attempt_rewards``) and keeps the others
in ``episode.candidates``: no turn of the conversation, so verifier turn indices, process scores and the
report are those of the episode as played; the learner ranks the K turns of one prompt together
(``Learner.turn_advantages``), and their tokens count as generated. A role branches only while the team
trains it (``Team.trained_roles``: RL rollouts, never evaluation, demonstrations or replays).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from teamrl.engine.team import Team, derive_seed
from teamrl.protocol import Candidate, Episode, Turn
from teamrl.protocol.settings import SeatConfig, Strict

TurnScore = Callable[[Turn], Awaitable[float]]


class TurnGroupConfig(Strict):
    """Turn-level groups (AT-GRPO): K candidates of a trained role's turn from one history."""

    size: int = Field(
        1,
        ge=1,
        le=32,
        description="K, the candidates sampled from the same history at a trained role's turn during RL "
        "rollouts; they are ranked against each other by their turn-level rewards and one continues the "
        "episode (1: off, the role's advantage is its episode's within the task's group)",
    )
    roles: list[str] | None = Field(
        None, description="the roles whose turns branch when trained; null: every role being trained"
    )
    continues: Literal["best", "random"] = Field(
        "best",
        description="which candidate continues the episode: best, the highest turn-level reward, ties at "
        "random (AT-GRPO's greedy choice); random, any one (the episode then follows the policy's own "
        "distribution and its outcome is not raised by the choice)",
    )

    def check(self, roles: Mapping[str, SeatConfig], config: Any = None) -> None:
        """Raise ValueError if ``roles`` (the workflow's) or the run's ``config`` cannot work with these
        settings."""
        if self.size == 1:
            return
        for name in self.roles or []:
            if name not in roles:
                raise ValueError(f"workflow.turn_group.roles names {name!r}, which is not in workflow.roles")
            if not roles[name].trainable:
                raise ValueError(
                    f"workflow.turn_group.roles names {name!r}, which is not trainable: it never branches"
                )
        algorithm = getattr(config, "algorithm", None)
        if getattr(algorithm, "tree", None):
            raise ValueError(
                "workflow.turn_group.size > 1 and algorithm.tree branch the same turns two ways: choose one"
            )
        if getattr(algorithm, "name", None) == "ppo_critic":
            raise ValueError(
                "workflow.turn_group.size > 1 needs algorithm grpo or mgrpo: ppo_critic's critic gives every "
                "turn its advantage and would ignore the turn-level rewards"
            )


class TurnGroups:
    """One episode's turn-level groups (see the module)."""

    def __init__(self, settings: TurnGroupConfig, team: Team, episode: Episode) -> None:
        self.settings, self.team, self.episode = settings, team, episode

    def active(self, role: str) -> bool:
        """Whether ``role``'s turns branch in this episode: K > 1, the team trains it now, and the
        settings name it (or name none)."""
        s = self.settings
        return s.size > 1 and role in self.team.trained_roles and (s.roles is None or role in s.roles)

    async def take(self, act: Callable[[], Awaitable[Turn]], score: TurnScore) -> Turn:
        """Sample K turns with ``act`` (each call one turn from the same history, not yet in the episode),
        score each with ``score``, and record the group; returns the turn that continues the episode."""
        k = self.settings.size
        turns = list(await asyncio.gather(*(act() for _ in range(k))))
        scores = [float(s) for s in await asyncio.gather(*(score(t) for t in turns))]
        pick = choose(scores, self.settings.continues, self._rng(turns))
        return record(self.episode, turns, scores, pick)

    def _rng(self, turns: Sequence[Turn]) -> random.Random:
        # ties are broken the same way whenever the same candidates are sampled (a rerun, a Ray worker)
        e = self.episode
        return random.Random(derive_seed("turn_group", e.task_id, e.group, *(t.text for t in turns)))


def choose(scores: Sequence[float], rule: str, rng: random.Random) -> int:
    """The index of the candidate that continues: the best score (ties at random), or any with
    ``rule="random"``."""
    if rule == "random":
        return rng.randrange(len(scores))
    if rule != "best":
        raise ValueError(f"continues={rule!r}: use 'best' or 'random'")
    top = max(scores)
    return rng.choice([i for i, s in enumerate(scores) if s == top])


def record(episode: Episode, turns: Sequence[Turn], scores: Sequence[float], pick: int) -> Turn:
    """Append ``turns[pick]`` to the episode (and its format error), its score as its attempt reward, and
    the other turns as its candidates; returns the continuing turn."""
    index = len(episode.turns)
    chosen = turns[pick]
    episode.turns.append(chosen)
    if chosen.error:
        episode.errors.append(chosen.error)
    episode.attempt_rewards[index] = scores[pick]
    episode.candidates += [
        Candidate(turn=t, of=index, reward=s)
        for i, (t, s) in enumerate(zip(turns, scores, strict=True))
        if i != pick
    ]
    return chosen


def turn_group_metrics(episodes: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Over a batch with turn-level groups (none without): candidates and their generated tokens per
    episode, and the continuing turns' mean reward minus their groups' mean (what the choice added)."""
    groups: dict[tuple[int, int], list[float]] = {}
    for i, e in enumerate(episodes):
        for c in e.candidates:
            groups.setdefault((i, c.of), []).append(c.reward)
    if not groups:
        return {}
    gains = []
    for (i, j), others in groups.items():
        chosen = episodes[i].attempt_rewards.get(j, 0.0)
        gains.append(chosen - (chosen + sum(others)) / (len(others) + 1))
    n = max(len(episodes), 1)
    tokens = sum(len(c.turn.completion_ids) for e in episodes for c in e.candidates if not c.turn.reused)
    return {
        f"{prefix}turn_group/candidates": sum(len(e.candidates) for e in episodes) / n,
        f"{prefix}turn_group/candidate_tokens": tokens / n,
        f"{prefix}turn_group/choice_gain": sum(gains) / len(gains),
    }
