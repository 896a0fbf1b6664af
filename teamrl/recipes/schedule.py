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
            n = (
                iterations_per_role.get(role, DEFAULT_ITERATIONS)
                if isinstance(iterations_per_role, Mapping)
                else iterations_per_role
            )
            phases.append(Phase(f"round{r + 1}/{role}{suffix}", (role,), n))
    return phases


def joint(roles: Sequence[str], iterations: int) -> list[Phase]:
    """Every trainable role is updated in every iteration."""
    return [Phase("joint", tuple(roles), iterations)]


def phases_for(cfg: Config) -> list[Phase]:
    roles = cfg.trained_roles()
    if not roles:
        return []
    if cfg.recipe.name == "freeze_rotate":
        return freeze_rotate(roles, cfg.recipe.rounds, cfg.recipe.iterations_per_role)
    return joint(roles, cfg.recipe.iterations)
