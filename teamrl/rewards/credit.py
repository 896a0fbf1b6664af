"""From a verified episode to per-role rewards.

Outcome R: pass fraction of the hidden tests on the final code. Process score p_i per role,
measured by running things, not by opinion:

- plan: the fraction of the task's key items (operations, constants) that the plan names, scaled
  down when it also names many items the task does not have (a list of every operation and
  constant is not a plan);
- code: without a revision, the pass fraction of the first version; with revisions, the share
  of revisions that raised the pass fraction (or kept a perfect one);
- review: the share of verdicts that match whether the code it saw passes every hidden test;
- tests: half for tests that all pass on the reference solution, half more if they also catch
  the buggy variant (at least one fails on it).

Hybrid reward: r_i = alpha * R + (1 - alpha) * p_i - format_penalty * (malformed turns / turns).

``reward.credit`` picks how the outcome becomes per-role rewards (:func:`apply_credit`): ``hybrid``
(the above, the default), ``shared`` (r_i = R), ``maporl`` and ``marti`` (per-turn verifier scores,
:func:`scored_turns`, shaped by :func:`maporl_turn_credit` / :func:`marti_turn_credit`, averaged over
the role's turns, minus the format penalty) and ``counterfactual`` (``teamrl.rewards.counterfactual``,
run by the trainer after the rollout because it plays episodes again).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Protocol

from teamrl.protocol import Episode, MessageKind
from teamrl.rewards.settings import RewardConfig


class RoleConfig(Protocol):
    """A pipeline role as the credit functions read it: the message kind it produces."""

    @property
    def kind(self) -> MessageKind: ...


def plan_words(plan: str | None) -> set[str]:
    return set(re.findall(r"[A-Za-z_]+|-?\d+", plan.lower())) if plan else set()


def plan_coverage(plan: str | None, keys: list[str], named_other: Sequence[str] = ()) -> float:
    """The share of ``keys`` the plan names as words, times ``min(1, (len(keys) + 1) / named)``, where
    ``named`` counts the keys it names plus ``named_other``: the other key items of the suite it names
    (the verifier lists them). One stray item is free ("go over each item" names the word "go");
    naming every item of the suite to cover any task is not."""
    if not plan or not keys:
        return 0.0
    words = plan_words(plan)
    hits = sum(k.lower() in words for k in keys)
    named = hits + len(set(named_other))
    return hits / len(keys) * (min(1.0, (len(keys) + 1) / named) if named else 0.0)


def score_tester(on_reference: list[bool], on_buggy: list[bool]) -> float:
    if not on_reference:
        return 0.0
    sound = all(on_reference)
    catches = sound and not all(on_buggy)
    return 0.5 * sound + 0.5 * catches


def _verdict_score(episode: Episode, turn_index: int, version: int) -> float:
    """1 if the review at ``turn_index`` approves code version ``version`` exactly when it passes."""
    code_pass: list[float] = episode.verifier.get("code_pass", [])  # type: ignore[assignment]
    passes = code_pass[version] == 1.0 if version < len(code_pass) else False
    message = episode.turns[turn_index].message
    verdict = message.verdict if message else None
    return float(verdict is not None and (verdict == "approve") == passes)


def process_scores(episode: Episode, roles: Mapping[str, RoleConfig]) -> dict[str, float]:
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
        add(episode.turns[turn_index].role, _verdict_score(episode, turn_index, version))
    for turn in episode.turns:
        kind = roles[turn.role].kind
        if kind == "plan":
            add(turn.role, plan_coverage(v.get("plan"), v.get("plan_keys", []), v.get("plan_other", [])))  # type: ignore[arg-type]
        elif kind == "tests":
            add(turn.role, score_tester(v.get("tests_on_reference", []), v.get("tests_on_buggy", [])))  # type: ignore[arg-type]
    return {role: sum(vals) / len(vals) for role, vals in scores.items()}


def hybrid_mix(
    episode: Episode,
    outcomes: Mapping[str, float],
    process: dict[str, float],
    alpha: float,
    format_penalty: float,
    role_alpha: Mapping[str, float] | None = None,
) -> None:
    """Fill ``episode.rewards`` (and ``episode.process``) of the roles in ``outcomes``:
    ``alpha * outcome_i + (1 - alpha) * p_i - format_penalty * (malformed turns / turns)``, with
    ``role_alpha`` overriding ``alpha`` for the roles it names and p_i 0 for a role without a score."""
    rewards: dict[str, float] = {}
    for role in outcomes:
        turns = episode.turns_of(role)
        malformed = sum(t.error is not None for t in turns) / max(len(turns), 1)
        p = process.get(role, 0.0)
        a = (role_alpha or {}).get(role, alpha)
        rewards[role] = a * outcomes[role] + (1 - a) * p - format_penalty * malformed
        process[role] = p
    episode.process = process
    episode.rewards = rewards


def assign_hybrid_rewards(
    episode: Episode,
    roles: Mapping[str, RoleConfig],
    alpha: float,
    format_penalty: float,
    role_alpha: Mapping[str, float] | None = None,
) -> None:
    """The pipeline's rewards: :func:`hybrid_mix` of the team outcome and :func:`process_scores` for every
    role that spoke."""
    outcomes = {turn.role: episode.outcome for turn in episode.turns}
    hybrid_mix(episode, outcomes, process_scores(episode, roles), alpha, format_penalty, role_alpha)


def team_reward(episode: Episode) -> float:
    """The team's shared reward for M-GRPO: the mean of its roles' rewards."""
    return sum(episode.rewards.values()) / len(episode.rewards) if episode.rewards else 0.0


# -- per-turn scores and the credit strategies -----------------------------------------------------


@dataclass(frozen=True)
class ScoredTurn:
    """One turn's verifier score, the input of the per-turn strategies (maporl, marti)."""

    role: str
    step: int  # turns of one step speak at once (a debate round) and see only earlier steps
    score: float  # the verifier's score of this turn alone, in [0, 1]


def scored_turns(episode: Episode, roles: Mapping[str, RoleConfig] | None = None) -> list[ScoredTurn]:
    """Every turn's verifier score, in turn order, read from ``episode.verifier``.

    pipeline (``code_pass`` in the verifier; needs ``roles`` for the plan and tests kinds): a code
    turn scores its version's hidden-test pass fraction, a review whether its verdict was right
    (approve exactly when the code passes), a plan its key coverage, tests :func:`score_tester`; each
    turn is its own step. debate (``correct`` and ``debaters``): a debater's turn scores whether its
    answer of that round is right, the judge's whether the verdict is; a round is a step.
    """
    v = episode.verifier
    if "code_pass" in v:
        return _pipeline_scored_turns(episode, roles or {})
    if "correct" in v and "debaters" in v:
        names: list[str] = v["debaters"]  # type: ignore[assignment]
        correct: list[list[bool]] = v["correct"]  # type: ignore[assignment]
        return [
            ScoredTurn(
                t.role,
                t.round,
                float(correct[t.round][names.index(t.role)])
                if t.role in names
                else float(v.get("verdict_correct", False)),  # type: ignore[arg-type]
            )
            for t in episode.turns
        ]
    raise ValueError(
        f"credit needs per-turn verifier scores, but episode {episode.task_id!r} has verifier keys "
        f"{sorted(v)}: verify the episode first, or teach teamrl.rewards.credit.scored_turns its workflow"
    )


def _pipeline_scored_turns(episode: Episode, roles: Mapping[str, RoleConfig]) -> list[ScoredTurn]:
    v = episode.verifier
    code_pass: list[float] = v["code_pass"]  # type: ignore[assignment]
    code_turns: list[int] = v.get("code_turns", [])  # type: ignore[assignment]
    version_of = {turn: k for k, turn in enumerate(code_turns)}
    reviewed = {turn: version for turn, version in v.get("reviews", [])}  # type: ignore[attr-defined]
    out = []
    for i, turn in enumerate(episode.turns):
        if i in version_of:
            k = version_of[i]
            score = code_pass[k] if k < len(code_pass) else 0.0
        elif i in reviewed:
            score = _verdict_score(episode, i, reviewed[i])
        elif turn.role in roles and roles[turn.role].kind == "plan":
            score = plan_coverage(v.get("plan"), v.get("plan_keys", []), v.get("plan_other", []))  # type: ignore[arg-type]
        elif turn.role in roles and roles[turn.role].kind == "tests":
            score = score_tester(v.get("tests_on_reference", []), v.get("tests_on_buggy", []))  # type: ignore[arg-type]
        else:
            raise ValueError(f"turn {i} of role {turn.role!r} has no verifier score: pass the roles' config")
        out.append(ScoredTurn(turn.role, i, score))
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _right(x: float) -> bool:
    return x > 0.5


def _wrong(x: float) -> bool:
    return x < 0.5


def maporl_turn_credit(
    turns: Sequence[ScoredTurn],
    gamma: float,
    alpha_follow: float = 0.0,
    alpha_independent: float = 0.0,
    beta_persuade: float = 0.0,
    beta_oppose: float = 0.0,
) -> list[float]:
    """MAPoRL's influence-aware verifier reward with its switch and persuasion incentives, per turn.

    Park et al., "MAPoRL: Multi-Agent Post-Co-Training for Collaborative LLMs with RL" (ACL 2025),
    as in the authors' code (``score_rule`` with ``discounted_sum`` / ``all``, and ``bonus_rule``).
    For the turn of role i at step t, with s the verifier score of a turn, steps t_0 < ... < t_T the
    steps that have scored turns, and m(t') the mean score of all turns at step t' (i's included)::

        V_i,t = [ s_i,t + sum_{t' > t} gamma^(t'-t) m(t') ] / sum_{t' >= t} gamma^(t'-t)

    (exponents count steps), so a turn is paid for its own answer and, discounted, for how the whole
    team does after it. An answer is right if its score is > 0.5 and wrong if < 0.5. Incentives:

    - switch (role i changes an earlier answer/verdict: its previous turn right and this one wrong,
      or the reverse), judged against o, the mean of the other roles' latest scores before step t
      (what i saw): a switch to the side o was on (right when o is right, wrong when o is wrong:
      i followed the others) gets +alpha_follow if it is a correct switch (wrong -> right) and
      -alpha_follow if incorrect (right -> wrong); a switch away from o's side (i acted on its own)
      gets +/- alpha_independent. With no other role before, +/- alpha_independent.
    - persuasion: b and a are the other roles' mean score at their last turn at or before step t and
      at their first turn after it (roles with both). If the others go wrong -> right, the turn gets
      +beta_persuade when it was right (it led them there) and +beta_oppose when it was wrong; if the
      others go right -> wrong, -beta_persuade when it was wrong and -beta_oppose when it was right.

    The paper adds these incentives "to encourage corrective and persuasive discussions"; its released
    ``bonus_rule`` applies the two persuasion terms with the opposite sign (negative beta values
    reproduce that code). The paper's alpha_0, alpha_1, beta_0, beta_1 are alpha_follow,
    alpha_independent, beta_oppose, beta_persuade. Returns one credit per turn, in order.
    """
    steps = sorted({t.step for t in turns})
    pos = {step: k for k, step in enumerate(steps)}
    mean_at = {step: _mean([t.score for t in turns if t.step == step]) for step in steps}
    out = []
    for u in turns:
        later = steps[pos[u.step] + 1 :]
        weights = [gamma ** (pos[step] - pos[u.step]) for step in later]
        value = (u.score + sum(w * mean_at[step] for w, step in zip(weights, later, strict=True))) / (
            1 + sum(weights)
        )
        value += _switch_incentive(turns, u, alpha_follow, alpha_independent)
        value += _persuasion_incentive(turns, u, beta_persuade, beta_oppose)
        out.append(value)
    return out


def _latest_before(turns: Sequence[ScoredTurn], role: str, step: int, inclusive: bool) -> float | None:
    earlier = [t for t in turns if t.role == role and (t.step <= step if inclusive else t.step < step)]
    return max(earlier, key=lambda t: t.step).score if earlier else None


def _switch_incentive(turns: Sequence[ScoredTurn], u: ScoredTurn, follow: float, independent: float) -> float:
    previous = _latest_before(turns, u.role, u.step, inclusive=False)
    if previous is None:
        return 0.0
    if _right(previous) and _wrong(u.score):
        sign = -1.0
    elif _wrong(previous) and _right(u.score):
        sign = 1.0
    else:
        return 0.0
    seen = [_latest_before(turns, r, u.step, inclusive=False) for r in {t.role for t in turns} - {u.role}]
    others = [x for x in seen if x is not None]
    if not others:
        return sign * independent
    o = _mean(others)
    if (_right(o) and _right(u.score)) or (_wrong(o) and _wrong(u.score)):
        return sign * follow
    if (_right(o) and _wrong(u.score)) or (_wrong(o) and _right(u.score)):
        return sign * independent
    return 0.0


def _persuasion_incentive(
    turns: Sequence[ScoredTurn], u: ScoredTurn, persuade: float, oppose: float
) -> float:
    before, after = [], []
    for role in {t.role for t in turns} - {u.role}:
        b = _latest_before(turns, role, u.step, inclusive=True)
        later = [t for t in turns if t.role == role and t.step > u.step]
        if b is not None and later:
            before.append(b)
            after.append(min(later, key=lambda t: t.step).score)
    if not before:
        return 0.0
    b, a = _mean(before), _mean(after)
    if _wrong(b) and _right(a):
        sign, moved_to_right = 1.0, True
    elif _right(b) and _wrong(a):
        sign, moved_to_right = -1.0, False
    else:
        return 0.0
    if _right(u.score) if moved_to_right else _wrong(u.score):
        return sign * persuade  # the others moved to this turn's side
    if _wrong(u.score) if moved_to_right else _right(u.score):
        return sign * oppose
    return 0.0


def marti_turn_credit(
    turns: Sequence[ScoredTurn],
    outcome: float,
    mode: str = "quality",
    alpha: float = 0.5,
    outcome_bonus: float = 0.0,
    history: str = "team",
) -> list[float]:
    """MARTI's reward shaping per turn (TsinghuaC3I/MARTI, ``marti/verifiers/auto_reward_alloc.py``).

    r is the turn's verifier score and Q the mean score of the earlier turns (at earlier steps) of
    the whole team (``history="team"``: MARTI's chain and multi-agent allocation) or of the role
    itself (``"own"``: its debate allocation)::

        quality: r' = r + alpha * (Q * r - (1 - Q) * (1 - r))
        margin:  r' = r + alpha * (r - Q)

    A turn with no earlier turn keeps r' = r. The optional outcome bonus adds outcome_bonus * R, R
    the team outcome (MARTI's "..._with_outcome" adds beta times the final turn's raw score, which is
    R for a chain). quality rewards being right after a good history and punishes being wrong after a
    bad one; margin rewards improving on the history. Returns one credit per turn, in order.
    """
    if mode not in ("quality", "margin"):
        raise ValueError(f"mode={mode!r}: use 'quality' or 'margin'")
    if history not in ("team", "own"):
        raise ValueError(f"history={history!r}: use 'team' or 'own'")
    out = []
    for u in turns:
        earlier = [t.score for t in turns if t.step < u.step and (history == "team" or t.role == u.role)]
        r = u.score
        shaped = r
        if earlier:
            q = _mean(earlier)
            shaped = r + alpha * (q * r - (1 - q) * (1 - r) if mode == "quality" else r - q)
        out.append(shaped + outcome_bonus * outcome)
    return out


def apply_credit(
    episode: Episode, reward: RewardConfig, roles: Mapping[str, RoleConfig] | None = None
) -> None:
    """Turn ``episode.rewards`` (the workflow's hybrid rewards) into ``reward.credit``'s, for every
    role that spoke, with the reward functions of ``teamrl.rewards.functions`` (``roles``: a pipeline's,
    for its per-turn scores).

    hybrid and counterfactual leave them (counterfactual credit needs replays: the trainer runs
    ``teamrl.rewards.counterfactual.counterfactual_credit`` after the rollout); shared gives every
    role R; maporl and marti give a role the mean of its turns' credits minus format_penalty times its
    share of malformed turns. A role without a scored turn keeps its hybrid reward.
    """
    from teamrl.rewards import functions  # it imports this module

    fn = {"shared": functions.shared, "maporl": functions.maporl, "marti": functions.marti}.get(reward.credit)
    if fn is None:
        return
    scorer = SimpleNamespace(scored_turns=lambda e: scored_turns(e, roles))
    [episode.rewards] = fn([episode], functions.RewardContext(workflow=scorer, settings=reward))
