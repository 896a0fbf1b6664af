"""Recipes decide which roles learn when. A recipe is a list of phases; the trainer runs them in
order and checks, after each phase, that the roles outside it did not change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from teamrl.engine.team import Seat
from teamrl.protocol import Episode
from teamrl.recipes.settings import RecipeConfig

DEFAULT_ITERATIONS = 4  # freeze_rotate iterations of a role that a per-role mapping leaves out


@dataclass(frozen=True)
class Phase:
    name: str
    roles: tuple[str, ...]  # the roles RL updates in this phase; every other role is frozen
    iterations: int


class Schedule(Protocol):
    """What to train next: ``len()`` phases, the k-th asked for when the run reaches it (a list of phases
    is one; closed_loop decides each on first access)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Phase: ...


class IterationHooks(Protocol):
    """What a recipe may do inside the trainer's iterations (recipe population does):"""

    def seats(self, phase: Phase) -> dict[str, Seat]:
        """The seats some roles play from in this iteration's rollout (the others keep theirs)."""
        ...

    def after_iteration(self, phase: Phase, episodes: list[Episode]) -> dict[str, Any]:
        """Called after the update with the iteration's episodes; returns metrics to log with it."""
        ...

    def save(self, directory: Path) -> None:
        """Write the recipe's state into a checkpoint being written."""
        ...

    def saved(self) -> None:
        """That checkpoint is complete, and only the newest ``run.keep_checkpoints`` are kept."""
        ...

    def restore(self, directory: Path) -> None:
        """Read it back from a checkpoint (a resumed run); the directory may not exist."""
        ...


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


def population_blocks(learners: Sequence[str], iterations: int, snapshot_every: int) -> list[Phase]:
    """Recipe population's schedule: ``iterations`` RL iterations in blocks of ``snapshot_every``, the
    learners taking the blocks in turn (the last block may be shorter); a learner's adapter joins its pool
    at the end of each of its blocks (``teamrl.recipes.population``)."""
    phases = []
    for k, start in enumerate(range(0, iterations, snapshot_every)):
        role = learners[k % len(learners)]
        phases.append(Phase(f"block{k + 1}/{role}", (role,), min(snapshot_every, iterations - start)))
    return phases


class RunPlan(Protocol):
    """What a schedule reads of a run's config (``teamrl.config.Config`` is one)."""

    @property
    def recipe(self) -> RecipeConfig: ...

    def trained_roles(self) -> list[str]: ...

    def population_learners(self) -> list[str]: ...


def phases_for(cfg: RunPlan) -> list[Phase]:
    """The phases of a fixed schedule (freeze_rotate, joint, population). closed_loop has none in advance:
    it decides each phase while it runs (``teamrl.recipes.closed_loop.ClosedLoop``)."""
    if cfg.recipe.name == "closed_loop":
        raise ValueError("recipe closed_loop decides its phases as it runs: see teamrl.recipes.closed_loop")
    if cfg.recipe.name == "population":
        p = cfg.recipe.population
        return population_blocks(cfg.population_learners(), cfg.recipe.iterations, p.snapshot_every)
    roles = cfg.trained_roles()
    if not roles:
        return []
    if cfg.recipe.name == "freeze_rotate":
        return freeze_rotate(roles, cfg.recipe.rounds, cfg.recipe.iterations_per_role)
    return joint(roles, cfg.recipe.iterations)


class RecipeHost(Protocol):
    """What the recipes that act during a run (closed_loop, population) use of it: the narrow interface
    they are written against (``teamrl.trainer.Trainer`` is one)."""

    cfg: Any  # teamrl.config.Config
    run_dir: Path
    state: Any  # step, phase, phase_iteration
    suite: Any  # teamrl.tasks.TaskSuite
    workflow: Any  # teamrl.workflows.base.Workflow
    team: Any  # teamrl.engine.team.Team
    engine: Any  # teamrl.engine.engine.Engine
    policies: dict[str, Any]
    learner: Any
    progress: bool

    def rollout(
        self,
        tasks: list[Any],
        group_size: int,
        share: frozenset[str] = frozenset(),
        seed_key: str | None = None,
    ) -> list[Episode]: ...

    def policy_of(self, role: str) -> Any: ...

    def log_metrics(self, record: dict[str, Any]) -> None: ...
