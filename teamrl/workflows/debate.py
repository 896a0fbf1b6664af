"""Workflow ``debate``: N debaters answer, revise over R rounds seeing each other, then a verdict.

Round 0: every debater answers the question alone. Rounds 1..R: every debater sees its own last
argument and the latest arguments (round r - 1) of ``visible_others`` peers (all by default; in
ring order, or shuffled with a seeded rng) and may revise. All debaters of a round speak at once,
from prompts built before any of them spoke, so a debater never sees a peer's message of its own
round nor of a later one; the engine batches their requests together.

The episode ends with a verdict: the ``judge`` role's answer (it sees the debaters' final answers,
or their full last-round arguments), or the majority vote over the final round.

Every reply is ``<answer>argument ... ANSWER: 42</answer>``; a reply without the tags or without a
final answer is malformed (``Turn.error``) and costs the format penalty. The label is the task's
answer; a task without one (``answer`` None) takes the final round's majority answer as its label
(test-time RL, as in MARTI). Rewards (:func:`assign_debate_rewards`) mix, as ``credit.py`` does,
r_i = alpha * R_i + (1 - alpha) * p_i - format_penalty * (malformed turns / turns), where for a
debater R_i is its final answer's correctness and p_i its correctness averaged over rounds, and for
the judge both are its verdict's correctness.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any, Literal

from pydantic import Field, model_validator

from teamrl.engine.team import ScriptedRole, Team
from teamrl.protocol import Episode, Turn
from teamrl.protocol.settings import ConfigError, SeatConfig, WorkflowSettings
from teamrl.rewards.credit import ScoredTurn, hybrid_mix, scored_turns
from teamrl.tasks.reasoning import ReasoningTask, extract_answer, normalize_answer
from teamrl.workflows.base import Workflow

JUDGE = "judge"


class DebateConfig(WorkflowSettings):
    """Workflow ``debate``: who debates, for how long, what each sees, and how the verdict is reached
    (see teamrl/workflows/debate.py). Its roles are debater_0 .. debater_{N-1}, plus ``judge`` when
    the judge gives the verdict."""

    name: str = "debate"
    debaters: int = Field(3, ge=1, le=16, description="number of debaters, roles debater_0 .. debater_{N-1}")
    rounds: int = Field(1, ge=0, le=8, description="revision rounds after round 0's independent answers")
    visible_others: int | None = Field(
        None, ge=0, description="how many peers' latest arguments a debater sees per round; None: all"
    )
    shuffle: bool = Field(
        False, description="show peers in a seeded random order (else ring order i+1, i+2..)"
    )
    seed: int = Field(0, description="seed of the shuffle; with the task id and group it fixes every view")
    aggregation: Literal["judge", "majority"] = Field(
        "majority", description="verdict: the judge role's answer, or the final round's majority answer"
    )
    judge_sees: Literal["answers", "arguments"] = Field(
        "answers", description="the judge sees the final answers only, or the full last-round arguments"
    )
    debater_sop: str = Field("Solve it step by step. End with ANSWER: <number>.")
    judge_sop: str = Field("Decide the correct answer. Reply ANSWER: <number>.")
    roles: dict[str, SeatConfig] = Field(
        default_factory=dict,
        description="seat of each role (policy, adapter, trainable, max_new_tokens); roles left out get "
        "the defaults",
    )

    @model_validator(mode="after")
    def _roles(self) -> DebateConfig:
        if self.visible_others is not None and self.visible_others > self.debaters - 1:
            raise ValueError(
                f"visible_others={self.visible_others} exceeds the {self.debaters - 1} other debaters; "
                "lower it or use None (all)"
            )
        for name in self.roles:
            if name not in self.order:
                fix = "set aggregation: judge to have one" if name == JUDGE else "raise debaters or remove it"
                raise ValueError(f"roles.{name} is not a role of this debate {self.order}; {fix}")
        for name in self.order:  # in place: assigning would validate this model again
            self.roles.setdefault(name, SeatConfig())
        return self

    merge_exclude = frozenset({"roles"})  # they follow from debaters and aggregation

    def interchangeable_roles(self) -> list[str]:
        return self.debater_roles

    @property
    def debater_roles(self) -> list[str]:
        return [f"debater_{i}" for i in range(self.debaters)]

    @property
    def order(self) -> list[str]:
        """Every role, in speaking order."""
        return self.debater_roles + [JUDGE] * (self.aggregation == "judge")


def debate_prompt(role: str, sop: str, task: ReasoningTask, sections: list[tuple[str, str]]) -> str:
    """The prompt layout of the pipeline workflow: SOP, question, then (label, text) sections."""
    lines = [f"### {role}: {sop}", task.brief()]
    for label, text in sections:
        sep = "\n" if "\n" in text else " "
        lines.append(f"{label}:{sep}{text}")
    return "\n".join(lines) + "\n"


def visible_peers(
    index: int, debaters: int, visible_others: int | None, rng: random.Random | None
) -> list[int]:
    """The peers debater ``index`` sees: the next ones round the ring, or a shuffled draw with ``rng``."""
    others = [(index + k) % debaters for k in range(1, debaters)]
    if rng is not None:
        rng.shuffle(others)
    return others if visible_others is None else others[:visible_others]


def argument(turn: Turn) -> str:
    return turn.message.content if turn.message is not None else "(none)"


def final_answer(turn: Turn) -> str | None:
    """The answer a well-formed turn ends with; None for a malformed one."""
    return extract_answer(turn.message.content) if turn.message is not None and turn.error is None else None


def majority(answers: list[str | None]) -> str | None:
    """The most common answer (compared after normalize_answer); a tie goes to the earliest given."""
    keys = [normalize_answer(a) for a in answers if a is not None]
    if not keys:
        return None
    counts = Counter(keys)
    return max(counts, key=lambda k: (counts[k], -keys.index(k)))


async def debate(team: Team, task: ReasoningTask, cfg: DebateConfig, group: int = 0) -> Episode:
    """Play one debate and verify it (checking answers needs nothing but the task)."""
    episode = Episode(task_id=task.task_id, group=group)
    names = cfg.debater_roles
    rng = random.Random(f"teamrl-debate-{cfg.seed}-{task.task_id}-{group}") if cfg.shuffle else None
    rounds: list[list[Turn]] = []  # rounds[r][i]: debater i's turn in round r
    seen: dict[str, list[list[str]]] = {name: [] for name in names}  # the peers each saw, per round >= 1

    async def ask(
        role: str, sop: str, sections: list[tuple[str, str]], round_: int, peers: dict[str, str]
    ) -> Turn:
        prompt = debate_prompt(role, sop, task, sections)
        turn = await team.act(role, prompt, "answer", round=round_, context={"task": task, "peers": peers})
        if turn.error is None and final_answer(turn) is None:
            turn.error = f"{role}: no final answer; end with 'ANSWER: <answer>'"
        return turn

    for r in range(cfg.rounds + 1):
        calls = []
        for i, name in enumerate(names):
            sections: list[tuple[str, str]] = []
            peers: dict[str, str] = {}
            if r > 0:  # built from round r - 1 alone, before anyone speaks in round r
                previous = rounds[r - 1]
                shown = visible_peers(i, cfg.debaters, cfg.visible_others, rng)
                peers = {names[j]: argument(previous[j]) for j in shown}
                seen[name].append(list(peers))
                sections = [("your last argument", argument(previous[i])), *peers.items()]
            calls.append(ask(name, cfg.debater_sop, sections, r, peers))
        rounds.append(list(await asyncio.gather(*calls)))
        episode.turns += rounds[-1]

    finals = [final_answer(t) for t in rounds[-1]]
    verdict = majority(finals)
    if cfg.aggregation == "judge":
        if cfg.judge_sees == "answers":
            shown_to_judge = {f"{n} answer": a or "(none)" for n, a in zip(names, finals, strict=True)}
        else:
            shown_to_judge = {n: argument(t) for n, t in zip(names, rounds[-1], strict=True)}
        turn = await ask(JUDGE, cfg.judge_sop, list(shown_to_judge.items()), cfg.rounds + 1, shown_to_judge)
        episode.turns.append(turn)
        verdict = final_answer(turn)

    episode.errors = [t.error for t in episode.turns if t.error is not None]
    verify(episode, task, cfg, [[final_answer(t) for t in turns] for turns in rounds], verdict, seen)
    return episode


def verify(
    episode: Episode,
    task: ReasoningTask,
    cfg: DebateConfig,
    answers: list[list[str | None]],
    verdict: str | None,
    seen: dict[str, list[list[str]]],
) -> None:
    """Label the episode and check every answer; store the figures in ``episode.verifier``."""
    has_truth = task.answer is not None
    label = str(task.answer) if has_truth else majority(answers[-1])

    def correct(a: str | None) -> bool:
        if has_truth:
            return task.check(a)
        return a is not None and label is not None and normalize_answer(a) == label

    episode.outcome = float(correct(verdict))
    episode.verifier = {
        "debaters": cfg.debater_roles,
        "aggregation": cfg.aggregation,
        "answers": answers,
        "correct": [[correct(a) for a in row] for row in answers],
        "verdict": verdict,
        "verdict_correct": correct(verdict),
        "solved": correct(verdict),  # the team's success, as every workflow reports it
        "label": label,
        "label_source": "ground_truth" if has_truth else "majority" if label is not None else "none",
        "seen": seen,
    }


def assign_debate_rewards(episode: Episode, alpha: float, format_penalty: float) -> None:
    """Fill ``episode.process`` and ``episode.rewards`` for every role that spoke (needs ``verify``)."""
    outcome, process = _debate_scores(episode)
    hybrid_mix(episode, outcome, process, alpha, format_penalty)


def pairing_score(episode: Episode, role: str, opponent: str) -> float | None:
    """Recipe population's result of debater ``role`` against debater ``opponent`` in one verified
    debate, from their final answers: 1 (a win) when ``role``'s is correct and ``opponent``'s is not, 0
    for the reverse, 0.5 (a draw) when both are correct or both are not; None when either is no
    debater (the judge gives no answer of its own to compare)."""
    names: list[str] = episode.verifier["debaters"]  # type: ignore[assignment]
    if role not in names or opponent not in names:
        return None
    final: list[bool] = episode.verifier["correct"][-1]  # type: ignore[index]
    mine, theirs = final[names.index(role)], final[names.index(opponent)]
    return 0.5 if mine == theirs else float(mine)


def with_answers(tasks: list[Any]) -> list[Any]:
    """The tasks an expert can demonstrate: those with a known answer (a task file may leave it out)."""
    known = [t for t in tasks if getattr(t, "answer", None) is not None]
    if not known:
        raise ConfigError(
            "tasks.path: no training task in the file has an answer, so no expert can demonstrate one "
            "for SFT or for the embedded base model; give answers, or use a `kind: hf` policy with "
            "recipe.sft.enabled: false"
        )
    return known


class Debate(Workflow[DebateConfig]):
    """``debate``: debaters answer, then revise over rounds seeing their peers; a judge or the majority
    gives the verdict."""

    Settings = DebateConfig
    task_suite = "reasoning"
    task_type = ReasoningTask
    headline = [("accuracy", "eval/solved")]

    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        return await debate(team, task, self.settings, group=group)

    def role_outcomes(self, episode: Episode) -> dict[str, float]:
        return _debate_scores(episode)[0]

    def process_scores(self, episode: Episode) -> dict[str, float]:
        return _debate_scores(episode)[1]

    def scored_turns(self, episode: Episode) -> list[ScoredTurn]:
        return scored_turns(episode)

    def pairing_score(self, episode: Episode, role: str, opponent: str) -> float | None:
        return pairing_score(episode, role, opponent)

    def answer_of(self, turn: Turn) -> str | None:
        return final_answer(turn)

    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        from teamrl.workflows.experts import debate_experts  # it imports this module

        experts = debate_experts(rng)
        return {r: experts["judge" if r == JUDGE else "debater"] for r in self.settings.order}

    def demonstration_tasks(self, tasks: list[Any]) -> list[Any]:
        return with_answers(tasks)


def _debate_scores(episode: Episode) -> tuple[dict[str, float], dict[str, float]]:
    """Each role's outcome (a debater's final answer right, the judge's verdict right) and process score
    (a debater's share of rounds answered right)."""
    v = episode.verifier
    correct: list[list[bool]] = v["correct"]  # type: ignore[assignment]
    names: list[str] = v["debaters"]  # type: ignore[assignment]
    outcome: dict[str, float] = {}
    process: dict[str, float] = {}
    for i, name in enumerate(names):
        per_round = [float(row[i]) for row in correct]
        outcome[name], process[name] = per_round[-1], sum(per_round) / len(per_round)
    if episode.turns_of(JUDGE):
        outcome[JUDGE] = process[JUDGE] = float(v["verdict_correct"])  # type: ignore[arg-type]
    return outcome, process
