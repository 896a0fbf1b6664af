"""Reward functions: one interface for every way a verified batch becomes per-role rewards.

A reward function takes the batch's verified episodes and a :class:`RewardContext` and returns, per
episode, each role's reward (a mapping role -> float; a plain float gives every role that spoke the same
value). A config lists one or more, with weights; their weighted sum is each role's reward::

    reward:
      functions:
        - {name: hybrid, weight: 1.0}                     # built-in
        - {name: mypkg.rewards:brevity, weight: 0.2, args: {limit: 40}}   # yours, by import path

The built-ins are ``hybrid`` (the workflow's own reward: alpha * outcome + (1 - alpha) * process, minus
the format penalty), ``shared`` (the team outcome for every role), ``maporl`` and ``marti`` (per-turn
verifier scores shaped, averaged per role) and ``counterfactual`` (R - R with the role's turns replayed
by a baseline; during RL only, else hybrid). Yours::

    from teamrl import reward_function

    @reward_function
    def brevity(episodes, ctx, limit=40):
        return [{t.role: -max(0, len(t.completion_ids) - limit) / limit for t in e.turns} for e in episodes]

The policy is an adversary: a reward function reads what the verifier measured (``episode.verifier``,
``episode.outcome``), never a claim in the model's text. ``teamrl.testing.check_reward`` checks one.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from teamrl.protocol import Episode
from teamrl.protocol.settings import ConfigError
from teamrl.rewards.credit import ScoredTurn, maporl_turn_credit, marti_turn_credit
from teamrl.rewards.settings import RewardConfig

RoleRewards = Mapping[str, float] | float


class Scorer(Protocol):
    """What reward functions may ask of the workflow (a :class:`teamrl.workflows.base.Workflow`)."""

    def scored_turns(self, episode: Episode) -> list[ScoredTurn]: ...


class RewardFunction(Protocol):
    def __call__(
        self, episodes: list[Episode], ctx: RewardContext, /, **args: Any
    ) -> Sequence[RoleRewards]: ...


@dataclass
class RewardContext:
    """What a reward function is given besides the episodes: the workflow (for its per-turn scores), the
    ``reward:`` settings, and during RL the counterfactual replayer with the roles being trained. A function
    may add figures to ``metrics`` (logged with the iteration)."""

    workflow: Scorer
    settings: RewardConfig
    counterfactual: Callable[[list[Episode]], dict[str, float]] | None = None
    metrics: dict[str, float] = field(default_factory=dict)


F = TypeVar("F", bound=Callable[..., Any])


def reward_function(fn: F) -> F:
    """Mark ``fn`` as a reward function (documentation and ``teamrl.testing.check_reward``); it is
    returned unchanged, and may be named in a config by its import path."""
    fn.__teamrl_reward__ = True  # type: ignore[attr-defined]
    return fn


@reward_function
def hybrid(episodes: list[Episode], ctx: RewardContext) -> list[dict[str, float]]:
    """The workflow's own rewards (``Workflow.assign_rewards``; by default the hybrid mix)."""
    return [dict(e.rewards) for e in episodes]


@reward_function
def shared(episodes: list[Episode], ctx: RewardContext) -> list[dict[str, float]]:
    """r_i = R: the team outcome for every role that spoke."""
    return [{turn.role: e.outcome for turn in e.turns} for e in episodes]


def _per_turn(
    episodes: list[Episode], ctx: RewardContext, credit: Callable[..., list[float]]
) -> list[dict[str, float]]:
    out = []
    penalty = ctx.settings.format_penalty
    for e in episodes:
        turns = ctx.workflow.scored_turns(e)
        values = credit(turns, e)
        per_role: dict[str, list[float]] = {}
        for turn, value in zip(turns, values, strict=True):
            per_role.setdefault(turn.role, []).append(value)
        rewards = dict(e.rewards)  # a role without a scored turn keeps the workflow's reward
        for role, vals in per_role.items():
            spoken = e.turns_of(role)
            malformed = sum(t.error is not None for t in spoken) / len(spoken)
            rewards[role] = sum(vals) / len(vals) - penalty * malformed
        out.append(rewards)
    return out


@reward_function
def maporl(episodes: list[Episode], ctx: RewardContext) -> list[dict[str, float]]:
    """MAPoRL's influence-aware verifier reward per turn (``reward.maporl``), averaged per role."""
    knobs = ctx.settings.maporl.model_dump()
    return _per_turn(episodes, ctx, lambda turns, e: maporl_turn_credit(turns, **knobs))


@reward_function
def marti(episodes: list[Episode], ctx: RewardContext) -> list[dict[str, float]]:
    """MARTI's shaped per-turn reward (``reward.marti``), averaged per role."""
    knobs = ctx.settings.marti.model_dump()
    return _per_turn(episodes, ctx, lambda turns, e: marti_turn_credit(turns, e.outcome, **knobs))


@reward_function
def counterfactual(episodes: list[Episode], ctx: RewardContext) -> list[dict[str, float]]:
    """R - R_cf for the roles being trained (their turns replayed by ``reward.counterfactual_baseline``, at
    most ``reward.counterfactual_budget`` replays); outside RL, and for other roles, the hybrid reward."""
    if ctx.counterfactual is None:
        return hybrid(episodes, ctx)
    saved = [dict(e.rewards) for e in episodes]
    ctx.metrics.update(ctx.counterfactual(episodes))  # sets the trained roles' rewards in place
    out = [dict(e.rewards) for e in episodes]
    for e, rewards in zip(episodes, saved, strict=True):
        e.rewards = rewards
    return out


class RewardError(ValueError):
    """A reward function returned something that is not a reward per role per episode."""


def normalise(name: str, episodes: list[Episode], returned: object) -> list[dict[str, float]]:
    """``returned`` checked and made one mapping role -> finite float per episode; RewardError otherwise."""
    if isinstance(returned, Mapping) or not isinstance(returned, Sequence) or isinstance(returned, str):
        raise RewardError(
            f"reward function {name} returned a {type(returned).__name__}; return a list with one entry per "
            "episode (a mapping role -> reward, or a float for every role)"
        )
    if len(returned) != len(episodes):
        raise RewardError(
            f"reward function {name} returned {len(returned)} entries for {len(episodes)} episodes"
        )
    out = []
    for e, value in zip(episodes, returned, strict=True):
        spoke = list(dict.fromkeys(t.role for t in e.turns))
        rewards = dict.fromkeys(spoke, float(value)) if isinstance(value, int | float) else value
        if not isinstance(rewards, Mapping):
            raise RewardError(
                f"reward function {name}: the entry of episode {e.task_id!r} is a {type(value).__name__}; "
                "give a mapping role -> reward or a float"
            )
        clean: dict[str, float] = {}
        for role, r in rewards.items():
            if not isinstance(role, str) or isinstance(r, bool) or not isinstance(r, int | float):
                raise RewardError(f"reward function {name}: {role!r}: {r!r} is no (role, number) pair")
            if not math.isfinite(r):
                raise RewardError(f"reward function {name}: role {role!r} of episode {e.task_id!r} got {r}")
            if role not in spoke:
                raise RewardError(
                    f"reward function {name} rewards {role!r}, which did not speak in episode {e.task_id!r} "
                    f"(roles that spoke: {spoke})"
                )
            clean[role] = float(r)
        out.append(clean)
    return out


def combine(
    episodes: list[Episode],
    ctx: RewardContext,
    functions: Sequence[tuple[str, Callable[..., Any], float, Mapping[str, Any]]],
) -> None:
    """Set every episode's rewards to the weighted sum of ``functions`` ((name, function, weight, args));
    a role a function leaves out gets 0 from it. One function of weight 1 gives its rewards exactly."""
    results = [(w, normalise(name, episodes, fn(episodes, ctx, **args))) for name, fn, w, args in functions]
    if len(results) == 1 and results[0][0] == 1.0:
        for e, rewards in zip(episodes, results[0][1], strict=True):
            e.rewards = rewards
        return
    for i, e in enumerate(episodes):
        total: dict[str, float] = {}
        for weight, per_episode in results:
            for role, r in per_episode[i].items():
                total[role] = total.get(role, 0.0) + weight * r
        e.rewards = total


def check_reward_function(name: str, fn: Any, args: Mapping[str, Any]) -> Any:
    """``fn`` (what ``reward.functions``' ``name`` resolved to) if it is a function that can be called as
    ``fn(episodes, ctx, **args)``; else :class:`ConfigError` saying why, so a bad entry stops the config,
    not the run after SFT."""
    if not callable(fn) or isinstance(fn, type):
        what = "class" if isinstance(fn, type) else type(fn).__name__
        raise ConfigError(f"reward function {name!r} is a {what}, not a function (episodes, ctx, **args)")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # one without a signature (a builtin): called as it is
        return fn
    try:
        signature.bind(None, None, **args)
    except TypeError as exc:
        raise ConfigError(
            f"reward function {name!r} cannot take args {dict(args)} ({exc}); its parameters are "
            f"{signature}: (episodes, ctx), then the args"
        ) from None
    return fn
