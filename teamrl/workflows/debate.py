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

from teamrl.config import JUDGE, DebateConfig
from teamrl.engine.team import Team
from teamrl.protocol import Episode, Turn
from teamrl.tasks.reasoning import ReasoningTask, extract_answer, normalize_answer


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
    rewards = {}
    for role in outcome:
        turns = episode.turns_of(role)
        malformed = sum(t.error is not None for t in turns) / len(turns)
        rewards[role] = alpha * outcome[role] + (1 - alpha) * process[role] - format_penalty * malformed
    episode.process = process
    episode.rewards = rewards


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
