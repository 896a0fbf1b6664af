"""Recipes decide which roles learn when. A recipe is a list of phases; the trainer runs them in
order and checks, after each phase, that the roles outside it did not change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from teamrl.config import Config

DEFAULT_ITERATIONS = 4  # freeze_rotate iterations of a role that a per-role mapping leaves out


@dataclass(frozen=True)
class Phase:
    name: str
    roles: tuple[str, ...]  # the roles RL updates in this phase; every other role is frozen
    iterations: int


def freeze_rotate(
    roles: Sequence[str], rounds: int, iterations_per_role: int | Mapping[str, int]
) -> list[Phase]:
    """For each round and each role: RL that role alone while the others are frozen. A role listed
    twice in ``roles`` gets two phases per round (named ``role#2`` the second time). A mapping gives
    each role its own number of iterations per phase (``DEFAULT_ITERATIONS`` for roles it omits)."""
    phases = []
    for r in range(rounds):
        for i, role in enumerate(roles):
            seen = list(roles[:i]).count(role)
            suffix = f"#{seen + 1}" if seen else ""
            n = iterations_for(role, iterations_per_role)
            phases.append(Phase(f"round{r + 1}/{role}{suffix}", (role,), n))
    return phases


def iterations_for(role: str, iterations_per_role: int | Mapping[str, int]) -> int:
    """A role's iterations per phase: one number for every role, or the mapping's (``DEFAULT_ITERATIONS``
    for a role it omits)."""
    if isinstance(iterations_per_role, Mapping):
        return iterations_per_role.get(role, DEFAULT_ITERATIONS)
    return iterations_per_role


def joint(roles: Sequence[str], iterations: int) -> list[Phase]:
    """Every trainable role is updated in every iteration."""
    return [Phase("joint", tuple(roles), iterations)]


def phases_for(cfg: Config) -> list[Phase]:
    """The phases of a fixed schedule (freeze_rotate, joint). closed_loop has none in advance: it decides
    each phase while it runs (``teamrl.recipes.closed_loop.ClosedLoop``)."""
    if cfg.recipe.name == "closed_loop":
        raise ValueError("recipe closed_loop decides its phases as it runs: see teamrl.recipes.closed_loop")
    roles = cfg.trained_roles()
    if not roles:
        return []
    if cfg.recipe.name == "freeze_rotate":
        return freeze_rotate(roles, cfg.recipe.rounds, cfg.recipe.iterations_per_role)
    return joint(roles, cfg.recipe.iterations)
