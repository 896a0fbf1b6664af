"""From a verified episode to per-role rewards.

Outcome R: pass fraction of the hidden tests on the final code. Process score p_i per role,
measured by running things, not by opinion:

- plan: the fraction of the task's key items (operations, constants) that the plan names;
- code: without a revision, the pass fraction of the first version; with revisions, the share
  of revisions that raised the pass fraction (or kept a perfect one);
- review: the share of verdicts that match whether the code it saw passes every hidden test;
- tests: half for tests that all pass on the reference solution, half more if they also catch
  the buggy variant (at least one fails on it).

Hybrid reward: r_i = alpha * R + (1 - alpha) * p_i - format_penalty * (malformed turns / turns).
"""

from __future__ import annotations

import re

from teamrl.config import RoleConfig
from teamrl.protocol import Episode


def plan_coverage(plan: str | None, keys: list[str]) -> float:
    if not plan or not keys:
        return 0.0
    words = set(re.findall(r"[A-Za-z_]+|-?\d+", plan.lower()))
    return sum(k.lower() in words or k.lower() in plan.lower() for k in keys) / len(keys)


def score_tester(on_reference: list[bool], on_buggy: list[bool]) -> float:
    if not on_reference:
        return 0.0
    sound = all(on_reference)
    catches = sound and not all(on_buggy)
    return 0.5 * sound + 0.5 * catches


def process_scores(episode: Episode, roles: dict[str, RoleConfig]) -> dict[str, float]:
    """p_i for every role that spoke in ``episode`` (needs ``episode.verifier``)."""
    v = episode.verifier
    code_pass: list[float] = v.get("code_pass", [])  # type: ignore[assignment]
    code_turns: list[int] = v.get("code_turns", [])  # type: ignore[assignment]
    reviews: list[list[int]] = v.get("reviews", [])  # type: ignore[assignment]
    scores: dict[str, list[float]] = {}

    def add(role: str, value: float) -> None:
        scores.setdefault(role, []).append(value)

    for version, turn_index in enumerate(code_turns):
        role = episode.turns[turn_index].role
        if version == 0:
            add(role, code_pass[0])
        else:
            before, after = code_pass[version - 1], code_pass[version]
            add(role, float(after > before or after == 1.0))
    # a coder with revisions is judged on its revisions only
    for role, vals in list(scores.items()):
        if len(vals) > 1:
            scores[role] = vals[1:]
    for turn_index, version in reviews:
        turn = episode.turns[turn_index]
        passes = code_pass[version] == 1.0 if version < len(code_pass) else False
        verdict = turn.message.verdict if turn.message else None
        add(turn.role, float(verdict is not None and (verdict == "approve") == passes))
    for turn in episode.turns:
        kind = roles[turn.role].kind
        if kind == "plan":
            add(turn.role, plan_coverage(v.get("plan"), v.get("plan_keys", [])))  # type: ignore[arg-type]
        elif kind == "tests":
            add(turn.role, score_tester(v.get("tests_on_reference", []), v.get("tests_on_buggy", [])))  # type: ignore[arg-type]
    return {role: sum(vals) / len(vals) for role, vals in scores.items()}


def assign_hybrid_rewards(
    episode: Episode, roles: dict[str, RoleConfig], alpha: float, format_penalty: float
) -> None:
    """Fill ``episode.process`` and ``episode.rewards`` for every role that spoke."""
    process = process_scores(episode, roles)
    rewards: dict[str, float] = {}
    for role in dict.fromkeys(t.role for t in episode.turns):
        turns = episode.turns_of(role)
        malformed = sum(t.error is not None for t in turns) / len(turns)
        p = process.get(role, 0.0)
        rewards[role] = alpha * episode.outcome + (1 - alpha) * p - format_penalty * malformed
        process[role] = p
    episode.process = process
    episode.rewards = rewards


def team_reward(episode: Episode) -> float:
    """The team's shared reward for M-GRPO: the mean of its roles' rewards."""
    return sum(episode.rewards.values()) / len(episode.rewards) if episode.rewards else 0.0
