"""Training schedules: freeze-rotate and joint."""

from teamrl.recipes.schedule import Phase, freeze_rotate, joint, phases_for

__all__ = ["Phase", "freeze_rotate", "joint", "phases_for"]
