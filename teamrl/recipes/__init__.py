"""Training schedules: freeze-rotate, joint and population blocks; the hooks a recipe may run in
the trainer's iterations."""

from teamrl.recipes.schedule import IterationHooks, Phase, freeze_rotate, joint, phases_for, population_blocks

__all__ = ["IterationHooks", "Phase", "freeze_rotate", "joint", "phases_for", "population_blocks"]
