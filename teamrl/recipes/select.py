"""The recipe of a run, behind two questions the trainer asks: which phases (what to train next, decided
up front or as the run goes), and which hooks act inside the iterations (who plays which seat). Each
recipe works against a :class:`~teamrl.recipes.schedule.RecipeHost` (rollouts, the team, the run's
state), never against a workflow."""

from __future__ import annotations

from teamrl.recipes.closed_loop import ClosedLoop
from teamrl.recipes.population import Population
from teamrl.recipes.schedule import IterationHooks, RecipeHost, Schedule, phases_for


def recipe_phases(host: RecipeHost) -> Schedule:
    """The run's phases: a fixed list (freeze_rotate, joint, population), or closed_loop's, each decided
    when the run reaches it (it measures the roles first)."""
    return ClosedLoop(host) if host.cfg.recipe.name == "closed_loop" else phases_for(host.cfg)


def recipe_hooks(host: RecipeHost) -> IterationHooks | None:
    """What acts inside the iterations: population seats its pool's snapshots; the others nothing."""
    return Population(host) if host.cfg.recipe.name == "population" else None
