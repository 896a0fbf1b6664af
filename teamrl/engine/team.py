"""A Team maps each role to its seat: which policy speaks for it, with which adapter.

Workflows only ever call :meth:`Team.act`; whether the role is a model behind the engine or a
scripted rule (tests, demonstrations) is the seat's business.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from teamrl.engine.engine import Engine
from teamrl.policies.base import Generation, GenerationRequest
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
T = TypeVar("T")


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that depends on ``parts`` only (their ``str``), the same in every process."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@dataclass
class EpisodeSeeds:
    """The sampling seeds of one episode: its n-th model turn is sampled with ``derive_seed(episode, n)``,
    and a shared turn (``Team.share_turns``) with a seed of the rollout, the role and the prompt, so
    whichever episode asks first gets the same sample."""

    rollout: int
    episode: int
    calls: int = 0
    # a tree-shaped group (``algorithm.tree``): the branching factors, this episode's place among the
    # group's sampled episodes (``leaf`` of ``leaves``) and the trained turns taken so far
    tree: tuple[int, ...] = ()
    leaf: int = 0
    leaves: int = 1
    depth: int = 0

    def next(self) -> int:
        self.calls += 1
        return derive_seed(self.episode, self.calls)

    def branch(self) -> tuple[int, ...] | None:
        """A trained turn is taken: the branch it lies on, one index per tree level down to it (the
        episodes that share it are those with the same tuple), or None below the tree (the episode's own)."""
        n, self.depth = self.depth, self.depth + 1
        if n >= len(self.tree):
            return None
        return tuple(self.leaf * math.prod(self.tree[: k + 1]) // self.leaves for k in range(n + 1))

    @property
    def branched(self) -> bool:
        """Whether a trained turn was taken (the teammates' turns below it are a branch's)."""
        return self.depth > 0

    def sibling(self) -> int:
        """This episode's place (0, 1, ...) among the episodes that share its deepest shared trained turn."""
        width = math.prod(self.tree[: min(self.depth, len(self.tree))])
        branch = self.leaf * width // self.leaves
        return self.leaf - -(-branch * self.leaves // width)  # minus the branch's first leaf


_EPISODE_SEEDS: ContextVar[EpisodeSeeds | None] = ContextVar("teamrl_episode_seeds", default=None)
_EPISODE_GREEDY: ContextVar[bool] = ContextVar("teamrl_episode_greedy", default=False)


async def seeded(episode: Awaitable[T], seeds: EpisodeSeeds | None, greedy: bool = False) -> T:
    """Await ``episode`` (a workflow coroutine) with its model turns sampled from ``seeds``; run it as its
    own asyncio task (``Engine.run`` does) so that the seeds stay with this episode. ``greedy``: the turns
    of the roles being trained (:meth:`Team.train_turns`) are decoded at temperature 0 instead (the
    group's greedy anchor, ``algorithm.greedy_episodes``)."""
    if seeds is not None:
        _EPISODE_SEEDS.set(seeds)
    if greedy:
        _EPISODE_GREEDY.set(True)
    return await episode


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
        # Roles whose generations are shared: an identical prompt of such a role is sampled once and the
        # result reused (see share_turns).
        self.shared_roles: frozenset[str] = frozenset()
        self._shared: dict[tuple[object, ...], asyncio.Future[Generation]] = {}
        # Roles the rollout in progress trains (see train_turns); empty outside RL rollouts.
        self.trained_roles: frozenset[str] = frozenset()
        # A role's teammate model: role -> async (its turn -> the probability that what comes next, the
        # execution report or a teammate's verdict, goes its way), read by workflows that imagine before
        # handing over (teamrl.workflows.foresight); none by default.
        self.foresight: dict[str, Callable[[Turn], Awaitable[float]]] = {}

    def share_turns(self, roles: frozenset[str] | set[str] = frozenset()) -> None:
        """From now on, sample each distinct prompt of ``roles`` once and give every episode that asks
        the same the same turn (marked ``reused`` after the first); forget earlier shared samples. A
        workflow that samples one prompt several times in an episode tells the samples apart with
        ``context["sample"]`` (the k-th sample is shared, not the first K times over).

        The trainer shares the frozen roles' turns within a training rollout: the G episodes of a task
        then see the same upstream turns, so the trained role's group-relative advantage compares its
        own samples under a common context instead of mixing in its teammates' sampling noise.
        """
        self.shared_roles = frozenset(roles)
        self._shared = {}

    def train_turns(self, roles: frozenset[str] | set[str] | tuple[str, ...] = frozenset()) -> None:
        """From now on, :attr:`trained_roles` is ``roles``: the roles the episodes being played are
        learned for. The trainer sets them for an RL iteration's rollout only and clears them after it, so
        they are empty in evaluation, demonstrations, probes and counterfactual replays. A workflow may
        spend more samples on a trained role's turns (``teamrl.workflows.branching``: K candidates of a
        turn, one continuing the episode), never on another's."""
        self.trained_roles = frozenset(roles)

    @property
    def roles(self) -> list[str]:
        return list(self.seats)

    @contextmanager
    def seated(self, seats: Mapping[str, Seat]) -> Iterator[None]:
        """Inside the block each role of ``seats`` speaks from the seat given there (a recipe's baseline or
        pool snapshot), every other role from its own; after it, every role from its own again."""
        own = {role: self.seats[role] for role in seats}
        self.seats.update(seats)
        try:
            yield
        finally:
            self.seats.update(own)

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
        seeds = _EPISODE_SEEDS.get()
        shared = role in self.shared_roles
        sample = (context or {}).get("sample")  # repeated attempts at one prompt (self-play's solver)
        # a tree-shaped group (algorithm.tree): a trained turn is shared by the episodes of its branch; below
        # one, the k-th episode of every branch shares its teammates' samples (the branches' continuations
        # differ within a branch and are paired across branches, as a frozen turn's prompt allows)
        tree: tuple[object, ...] = ()
        if seeds is not None and seeds.tree:
            if role in self.trained_roles:
                branch = seeds.branch()
                shared, tree = branch is not None, ("tree", branch)
            elif shared and seeds.branched:
                tree = ("sibling", seeds.sibling())
        seed = None
        if seeds is not None:
            seed = (
                derive_seed(seeds.rollout, "shared", role, prompt, sample, *tree) if shared else seeds.next()
            )
        greedy = _EPISODE_GREEDY.get() and role in self.trained_roles and not shared
        temperature = 0.0 if greedy else seat.temperature
        request = GenerationRequest(prompt, seat.adapter, seat.max_new_tokens, temperature, seed)
        reused = False
        if shared:
            key = (role, prompt, sample, *tree)
            first = self._shared.get(key)
            if first is None:
                future = self._shared[key] = asyncio.get_running_loop().create_future()
                try:
                    gen = await self.engine.generate(seat.policy, request)
                except BaseException as exc:
                    del self._shared[key]  # a later episode asking the same samples afresh
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
                        future.exception()  # retrieved: waiters get it; no "never retrieved" warning
                    raise
                future.set_result(gen)
            else:
                gen = await asyncio.shield(first)
                reused = True
        else:
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
            reused=reused,
            greedy=greedy,
        )
        return parsed_turn(turn, kind)


def parsed_turn(turn: Turn, kind: MessageKind) -> Turn:
    """Attach the parsed message, or the format error, to a turn."""
    try:
        turn.message = parse_message(turn.role, kind, turn.text)
    except FormatError as exc:
        turn.error = str(exc)
    return turn
