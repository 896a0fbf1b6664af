"""Workflow ``collaborate`` and task suite ``collaborators``: a team serves one streamer over many episodes,
with a memory of notes between them (issue 19). Written on the public workflow and task-suite API only.

One teamrl episode is a **session**: ``rounds`` episodes with one collaborator (its task), in order. In each,
the proposer role reads the memory (notes distilled from the earlier episodes of the session, within the
capacity) and the candidates, and answers with the number of the one to propose; the collaborator accepts it
or not and reacts; the reaction is distilled into a note and the memory policy (``workflow.memory.policy``)
decides what to keep. The session's outcome is its acceptance rate; each proposal is also rewarded on its
own (accepted or not), ranked against the same episode of the other sessions with the same collaborator
(``Episode.attempt_groups``). The experts (SFT) propose what the notes favour
(:func:`teamrl.memory.learn.reader_choice`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from teamrl.engine.team import RoleCall, ScriptedRole, Team
from teamrl.memory.collaborator import Collaborator, Topic, candidates_for, make_collaborator, split_index
from teamrl.memory.learn import reader_choice
from teamrl.memory.policies import FEATURES, POLICIES, NoteScorer, make_policy
from teamrl.memory.seats import (
    SEATS,
    apply_keep,
    archivist_prompt,
    describe_episode,
    parse_summary,
    seat_expert,
    summariser_prompt,
)
from teamrl.memory.store import Capacity, Note, check_capacity, distil, render, write
from teamrl.protocol import Episode, Message, Turn, render_message
from teamrl.protocol.settings import SeatConfig, Strict, TaskSettings, WorkflowSettings
from teamrl.tasks.base import TaskSuite
from teamrl.workflows.base import Workflow

_NUMBER = re.compile(r"ANSWER:\s*(\d+)")


@dataclass(frozen=True)
class CollaboratorTask:
    """One collaborator to serve for a session."""

    task_id: str
    seed: int
    index: int
    drift: Literal["none", "sudden", "gradual"]
    drift_at: int
    drift_span: int
    small_talk: float

    def collaborator(self) -> Collaborator:
        return make_collaborator(
            self.seed,
            self.index,
            self.drift,
            self.drift_at,
            self.drift_span,
            self.small_talk,  # type: ignore[arg-type]
        )


class CollaboratorTasksConfig(TaskSettings):
    """Simulated streamers (``teamrl.memory.collaborator``); train and held-out ones never share an index."""

    suite: str = "collaborators"
    heldout_size: int = 48
    population: int = Field(4096, ge=2, description="streamers per split to draw from")
    drift: Literal["none", "sudden", "gradual"] = Field("sudden", description="how the taste drifts")
    drift_at: int = Field(6, ge=0, description="the episode of the session where the drift starts")
    drift_span: int = Field(4, ge=1, description="episodes a gradual drift takes")
    small_talk: float = Field(0.5, ge=0, le=1, description="share of reactions that say nothing of taste")


class CollaboratorSuite(TaskSuite[CollaboratorTasksConfig]):
    """``collaborators``: one task per simulated streamer."""

    Settings = CollaboratorTasksConfig
    task_type = CollaboratorTask

    def sample(self, split: str, n: int, rng: random.Random) -> list[Any]:
        s = self.settings
        indices = [split_index(split, rng.randrange(s.population)) for _ in range(n)]
        return [
            CollaboratorTask(
                f"streamer-{s.seed}-{k}", s.seed, k, s.drift, s.drift_at, s.drift_span, s.small_talk
            )
            for k in indices
        ]


def load_scorer(path: str | Path) -> NoteScorer:
    """A note scorer saved as JSON ({feature: weight, ..., "stop": s}); a clear error for a bad file."""
    try:
        data = json.loads(Path(path).expanduser().read_text())
        weights = np.array([float(data[f]) for f in FEATURES])
        return NoteScorer(weights, float(data["stop"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"memory scorer {path}: cannot read it ({type(exc).__name__}: {exc}); it must be a JSON object "
            f"with a number for each of {', '.join(FEATURES)} and 'stop'"
        ) from None


class MemoryConfig(Strict):
    """The session's memory: which policy keeps the notes, and the capacity every bounded policy shares."""

    policy: str = Field(
        "recency",
        description=f"memory policy: a rule or the learned scorer ({', '.join(POLICIES)}), or a seat of the "
        f"team ({', '.join(SEATS)}: the role of that name in workflow.order writes the memory after each "
        "episode, teamrl.memory.seats)",
    )
    entries: int | None = Field(4, ge=1, description="notes kept at most (None: unbounded)")
    tokens: int | None = Field(None, ge=1, description="words kept at most (None: unbounded)")
    scorer: str | None = Field(
        None,
        description="policy learned: a JSON file {feature: weight, ..., 'stop': s} of a trained note scorer "
        "(benchmarks/memory_benchmark.py writes one per seed)",
    )

    horizon: int = Field(
        3,
        ge=1,
        description="a memory seat's turn after episode r is rewarded with the acceptance over episodes "
        "r+1 .. r+horizon of the session (the outer loop's return)",
    )
    invalid_penalty: float = Field(
        0.1,
        ge=0,
        description="subtracted from a memory seat's turn reward when its reply does not parse or names more "
        "than the capacity holds",
    )
    expert: str = Field(
        "recency",
        description="the rule whose choices the archivist's demonstrations follow (one of "
        f"{', '.join(p for p in POLICIES if p not in ('none', 'keep_all', 'tally'))})",
    )

    @field_validator("policy")
    @classmethod
    def _known(cls, policy: str) -> str:
        if policy not in (*POLICIES, *SEATS):
            raise ValueError(f"unknown memory policy {policy!r}; valid: {', '.join((*POLICIES, *SEATS))}")
        return policy

    @field_validator("expert")
    @classmethod
    def _rule(cls, expert: str) -> str:
        valid = [p for p in POLICIES if p not in ("none", "keep_all", "tally")]
        if expert not in valid:
            raise ValueError(
                f"memory.expert {expert!r} cannot demonstrate the archivist; valid: {', '.join(valid)}"
            )
        return expert

    @model_validator(mode="after")
    def _scorer_for_learned(self) -> MemoryConfig:
        for key, value in (("policy", self.policy), ("expert", self.expert)):
            if value == "learned" and self.scorer is None:
                raise ValueError(
                    f"memory.{key} learned needs workflow.memory.scorer: a JSON file of a trained note "
                    "scorer (benchmarks/memory_benchmark.py writes one per seed; examples/memory_scorer.json "
                    "is one)"
                )
        return self

    @field_validator("scorer")
    @classmethod
    def _readable(cls, scorer: str | None) -> str | None:
        """Read now (a bad file is a config error) and saved absolute (the run resumes from anywhere)."""
        if scorer is None:
            return None
        path = Path(scorer).expanduser().resolve()
        load_scorer(path)
        return str(path)


SEAT_TOKENS = {"archivist": 16, "summariser": 40}  # room for KEEP: 1 2 3 4 / four "likes music x3" lines


class CollaborateConfig(WorkflowSettings):
    """Workflow ``collaborate``: a session of proposals to one streamer, with memory between episodes."""

    name: str = "collaborate"
    roles: dict[str, SeatConfig] = Field(default_factory=lambda: {"proposer": SeatConfig(max_new_tokens=8)})
    order: list[str] = Field(default_factory=lambda: ["proposer"])
    rounds: int = Field(10, ge=1, le=200, description="episodes with the collaborator in one session")
    candidates: int = Field(4, ge=2, le=6, description="proposals on the table each episode")
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    show: Literal["list", "per_candidate"] = Field(
        "list",
        description="how the proposer sees the memory: list = every note, then the candidates; per_candidate "
        "= each candidate with the notes on its values (memory retrieved by what is on the table)",
    )

    @model_validator(mode="after")
    def _seats(self) -> CollaborateConfig:
        order = self.order or list(self.roles)
        if order and order[0] in SEATS:
            raise ValueError(f"workflow.order {order}: the first role proposes, it cannot be a memory seat")
        for seat, tokens in SEAT_TOKENS.items():  # a seat named in order without settings gets these
            if seat in order and seat not in self.roles:
                self.roles[seat] = SeatConfig(max_new_tokens=tokens)
        seat = self.memory.policy
        if seat in SEATS and seat not in order:
            first = order[0] if order else "proposer"
            raise ValueError(
                f"memory.policy {seat} is written by the role {seat!r}: add it to workflow.roles and to "
                f"workflow.order after the proposer, e.g. order: [{first}, {seat}]"
            )
        return self


def proposal_prompt(notes: list[Note], candidates: list[Topic], show: str = "list") -> str:
    """What the proposer reads: the memory, then the numbered candidates (``show: list``); or each candidate
    followed by the notes on its values (``show: per_candidate``: the memory retrieved by what is on the
    table, likes as +, dislikes as -, each as often as it was stated)."""
    head = "### proposer: Propose the stream the streamer will accept. Reply ANSWER: <number>.\n"
    if show == "per_candidate":
        lines = []
        for i, c in enumerate(candidates):
            marks = [
                f"{'+' if n.sign > 0 else '-'}{n.value}"
                for n in sorted(notes, key=lambda n: (n.value or "", n.sign))
                if n.value in c.values()
                for _ in range(min(n.count, 3))
            ]
            lines.append(f"{i + 1}. {c.describe()}: {' '.join(marks) or 'no notes'}")
        return head + "candidates:\n" + "\n".join(lines) + "\n"
    listed = "\n".join(f"{i + 1}. {c.describe()}" for i, c in enumerate(candidates))
    return head + f"memory:\n{render(notes)}\ncandidates:\n{listed}\n"


def parse_choice(text: str, n: int) -> int | None:
    """The 0-based candidate named by ``ANSWER: k`` or by a bare number (1-based, 1..n); None for anything
    else."""
    found = _NUMBER.findall(text) or re.findall(r"^\s*(\d+)\s*$", text)
    if not found:
        return None
    k = int(found[-1])
    return k - 1 if 1 <= k <= n else None


class Collaborate(Workflow[CollaborateConfig]):
    """``collaborate`` (see the module)."""

    Settings = CollaborateConfig
    task_suite = "collaborators"
    task_type = CollaboratorTask
    headline = [("acceptance", "eval/outcome"), ("all accepted", "eval/solved")]

    def __init__(self, settings: CollaborateConfig, sandbox: Any = None) -> None:
        super().__init__(settings, sandbox)
        m = settings.memory
        self.capacity = Capacity(m.entries, m.tokens)
        self.scorer = load_scorer(m.scorer) if "learned" in (m.policy, m.expert) and m.scorer else None

    @property
    def seats(self) -> list[str]:
        """The memory seats among the workflow's roles (they speak when ``memory.policy`` names them)."""
        return [r for r in dict.fromkeys(self.order) if r in SEATS]

    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        return await self._session(team, task, group, self.settings.memory.policy)

    async def _session(self, team: Team, task: Any, group: int, memory_policy: str) -> Episode:
        cfg = self.settings
        role = cfg.order[0]
        collaborator = task.collaborator()
        seat = memory_policy if memory_policy in SEATS else None
        policy = None if seat else make_policy(memory_policy, self.capacity, self.scorer)
        episode = Episode(task_id=task.task_id, group=group)
        memory: list[Note] = []
        accepted: list[float] = []
        invalid = seat_invalid = 0
        seat_turns: dict[int, tuple[int, bool]] = {}  # turn index -> (the episode after which it wrote, ok)
        for r in range(cfg.rounds):
            candidates = candidates_for(task.seed, task.index, r, cfg.candidates)
            context = {"notes": list(memory), "candidates": candidates, "round": r}
            turn = await team.act(
                role, proposal_prompt(memory, candidates, cfg.show), "answer", round=r, context=context
            )
            choice = parse_choice(turn.message.content if turn.message else turn.text, len(candidates))
            invalid += choice is None
            reaction = collaborator.react(candidates, choice, r)
            self._add(episode, turn)
            episode.attempt_rewards[len(episode.turns) - 1] = float(reaction.accepted)
            episode.attempt_groups[len(episode.turns) - 1] = f"episode {r}"
            accepted.append(float(reaction.accepted))
            note = distil(reaction.text, r)
            if policy is not None:
                memory = policy(memory, note, r + 1)
            elif seat is not None and r < cfg.rounds - 1:  # the memory after the last episode is never read
                proposal = candidates[choice].describe() if choice is not None else "nothing"
                memory, ok, written = await self._seat_turn(
                    team, seat, memory, note, r, describe_episode(proposal, reaction.accepted, reaction.text)
                )
                seat_invalid += not ok
                self._add(episode, written)
                seat_turns[len(episode.turns) - 1] = (r, ok)
        for index, (r, ok) in seat_turns.items():  # the outer loop's return: the next episodes' acceptance
            future = float(np.mean(accepted[r + 1 : r + 1 + cfg.memory.horizon]))
            episode.attempt_rewards[index] = future - (0.0 if ok else cfg.memory.invalid_penalty)
            episode.attempt_groups[index] = f"memory after episode {r}"
        episode.outcome = float(np.mean(accepted))
        episode.verifier = {
            "accepted": accepted,
            "solved": all(a == 1.0 for a in accepted),
            "invalid_proposals": invalid,
            "memory_policy": memory_policy,
            "memory_final": [n.text for n in memory],
            "drift_at": task.drift_at if task.drift != "none" else cfg.rounds,
        }
        if seat is not None:
            episode.verifier |= {
                "memory_seat": seat,
                "memory_invalid": seat_invalid,
                "memory_turns": len(seat_turns),
            }
        return episode

    @staticmethod
    def _add(episode: Episode, turn: Turn) -> None:
        episode.turns.append(turn)
        if turn.error:
            episode.errors.append(turn.error)

    async def _seat_turn(
        self, team: Team, seat: str, memory: list[Note], note: Note, r: int, episode: str
    ) -> tuple[list[Note], bool, Turn]:
        """The memory seat's turn after episode ``r``: (the memory it leaves, whether its reply was well
        formed and within the capacity, the turn)."""
        context = {"memory": list(memory), "new": note, "round": r + 1, "episode": episode}
        if seat == "archivist":
            pool = write(memory, note)
            prompt = archivist_prompt(pool, note, r + 1, self.capacity)
        else:
            prompt = summariser_prompt(memory, episode, self.capacity)
        turn = await team.act(seat, prompt, "answer", round=r, context=context)
        text = turn.message.content if turn.message else turn.text
        if turn.error:  # not even the message format: the memory stays as it was
            return memory, False, turn
        if seat == "archivist":
            kept, ok = apply_keep(memory, pool, text, self.capacity)
        else:
            kept, ok = parse_summary(text, memory, note, r, self.capacity)
        return check_capacity(kept, self.capacity, seat), ok, turn

    def process_scores(self, episode: Episode) -> dict[str, float]:
        v = episode.verifier
        n = max(len(v.get("accepted", [])), 1)  # type: ignore[arg-type]
        invalid = int(v.get("invalid_proposals", 0))  # type: ignore[call-overload]
        scores = {self.settings.order[0]: 1.0 - invalid / n}
        seat, turns = v.get("memory_seat"), int(v.get("memory_turns", 0))  # type: ignore[call-overload]
        if isinstance(seat, str) and turns:
            scores[seat] = 1.0 - int(v.get("memory_invalid", 0)) / turns  # type: ignore[call-overload]
        return scores

    def metrics(self, episodes: list[Episode], prefix: str) -> dict[str, float]:
        """Acceptance before and after the collaborator's drift, and invalid proposals per session."""
        if not episodes:
            return {}
        out = {
            f"{prefix}invalid_per_session": float(
                np.mean([e.verifier.get("invalid_proposals", 0) for e in episodes])
            )
        }
        before: list[float] = []
        after: list[float] = []
        for e in episodes:
            acc: list[float] = e.verifier.get("accepted", [])  # type: ignore[assignment]
            cut = int(e.verifier.get("drift_at", 0))  # type: ignore[call-overload]
            before += acc[:cut]
            after += acc[cut:]
        if before:
            out[f"{prefix}acceptance_before_drift"] = float(np.mean(before))
        if after:
            out[f"{prefix}acceptance_after_drift"] = float(np.mean(after))
        seated = [e for e in episodes if e.verifier.get("memory_turns")]
        if seated:
            out[f"{prefix}memory_invalid_share"] = float(
                sum(int(e.verifier.get("memory_invalid", 0)) for e in seated)  # type: ignore[call-overload]
                / sum(int(e.verifier["memory_turns"]) for e in seated)  # type: ignore[call-overload]
            )
        return out

    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        """The proposer proposes what the notes favour (ties drawn from ``rng``); the archivist keeps what
        ``memory.expert`` keeps; the summariser nets every fact stated (``teamrl.memory.seats``)."""

        def proposer(call: RoleCall) -> str:
            k = reader_choice(call.context["notes"], call.context["candidates"], rng)
            return render_message(Message(role=call.role, kind="answer", content=f"ANSWER: {k + 1}"))

        experts: dict[str, ScriptedRole] = {self.settings.order[0]: proposer}
        rule = make_policy(self.settings.memory.expert, self.capacity, self.scorer)
        for seat in self.seats:
            reply = seat_expert(seat, self.capacity, rule)
            experts[seat] = lambda call, reply=reply: render_message(  # type: ignore[misc]
                Message(role=call.role, kind="answer", content=reply(call.context))
            )
        return experts

    async def demonstrate(self, team: Team, tasks: Sequence[Any]) -> list[Episode]:
        """The experts' sessions; with memory seats among the roles, the sessions take turns at which one
        writes the memory, so the SFT teaches every seat (and the proposer reads each seat's memory)."""
        seats = self.seats or [self.settings.memory.policy]
        return [await self._session(team, t, 0, seats[k % len(seats)]) for k, t in enumerate(tasks)]
