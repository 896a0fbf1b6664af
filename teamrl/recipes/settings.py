"""The ``recipe:`` section: who learns when (freeze_rotate, joint, closed_loop, population) and SFT."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from teamrl.protocol.settings import Strict


class SFTConfig(Strict):
    enabled: bool = True
    demo_episodes: int = Field(300, ge=1)
    epochs: int = Field(1, ge=1)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(32, ge=1)


class ClosedLoopConfig(Strict):
    """recipe closed_loop: each round, measure every trained role on a probe set of train tasks, train
    the weakest one, and measure again at the next round (see teamrl/recipes/closed_loop.py)."""

    probe_tasks: int = Field(16, ge=1, description="train tasks in the probe set (the same every round)")
    probe_samples: int = Field(2, ge=1, description="episodes per probe task in each measurement")
    select: Literal["contribution", "process"] = Field(
        "contribution",
        description="contribution: the role whose swap for its baseline costs the team least success; "
        "process: the role with the lowest mean process score",
    )
    baseline: Literal["empty", "reference"] = Field(
        "empty",
        description="who takes a role's seat when its contribution is measured: an empty turn, or its frozen "
        "SFT snapshot (the KL reference; a role not trained yet plays exactly that, so it stays a candidate "
        "until it has been trained once)",
    )
    max_repeats: int | None = Field(
        2,
        ge=1,
        description="a role is picked at most this many rounds in a row, then the weakest of the others gets "
        "the round (a role whose training does not move the probe would otherwise be picked forever); "
        "null: no limit",
    )


class PopulationConfig(Strict):
    """recipe population: the learners play against a pool of their own historical snapshots (see
    teamrl/recipes/population.py)."""

    learners: list[str] | None = Field(
        None,
        description="roles that train, in turn, each for snapshot_every iterations (default: the first "
        "trained role)",
    )
    opponents: dict[str, str] | None = Field(
        None,
        description="seat role -> learner whose pool plays it (default, debate: every other debater plays "
        "from the first learning debater's pool; otherwise none); a learner not training plays from its "
        "own pool",
    )
    pool_size: int = Field(16, ge=1, description="snapshots kept per learner (K); the oldest leaves first")
    snapshot_every: int = Field(
        2, ge=1, description="a learner's adapter joins its pool after every M iterations of its training"
    )
    sampling: Literal["uniform", "prioritized", "latest"] = Field(
        "uniform",
        description="how a seat's snapshot is drawn: uniform; prioritized (PFSP: weight (1 - win rate)^p, "
        "favouring snapshots the learner beats least); latest (no pool: the current policies, plain "
        "self-play)",
    )
    priority_power: float = Field(2.0, ge=0, description="p of prioritized sampling")
    elo_k: float = Field(32.0, gt=0, description="Elo K-factor: rating points at stake per pairing")
    probe_tasks: int = Field(
        8, ge=1, description="train tasks (the same every time) on which each snapshot's diversity is probed"
    )


class RecipeConfig(Strict):
    name: Literal["freeze_rotate", "joint", "closed_loop", "population"] = "freeze_rotate"
    rounds: int = Field(
        1, ge=1, description="freeze_rotate: passes over the roles; closed_loop: measure-and-train rounds"
    )
    iterations_per_role: int | dict[str, int] = Field(
        4,
        description="freeze_rotate and closed_loop: RL iterations per role per phase; a mapping role -> "
        "iterations gives roles different counts (roles it leaves out get 4)",
    )
    iterations: int = Field(
        16, ge=1, description="joint: RL iterations with every trainable role; population: RL iterations"
    )
    roles: list[str] | None = Field(
        None, description="roles to train (default: every trainable role, in order)"
    )
    token_budget: int | None = Field(
        None, ge=1, description="stop RL once rollouts generated this many tokens (equal-compute comparisons)"
    )
    sft: SFTConfig = Field(default_factory=SFTConfig)
    closed_loop: ClosedLoopConfig = Field(default_factory=ClosedLoopConfig)
    population: PopulationConfig = Field(default_factory=PopulationConfig)
