"""The pieces of configuration every component shares: the strict pydantic base, a role's seat, the base
of a workflow's and of a task suite's settings, and :class:`ConfigError`.

Each component declares its own settings model next to its code (``teamrl.policies.settings``,
``teamrl.workflows.debate.DebateConfig``, ...); ``teamrl.config.Config`` assembles them. This module
depends on pydantic only.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key and how to fix it."""


class Strict(BaseModel):
    """A settings model: unknown keys are errors, and assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SeatConfig(Strict):
    """Who speaks for a role, and whether RL may change it."""

    policy: str = Field("default", description="name of the entry in `policies` that speaks for this role")
    adapter: bool = Field(True, description="give the role its own LoRA adapter (False: the bare base model)")
    trainable: bool = Field(True, description="may RL update this role (needs adapter: true)")
    max_new_tokens: int = Field(64, ge=1, le=4096)
    temperature: float | None = Field(
        None,
        gt=0,
        description="this role's sampling temperature in rollouts and evaluations (null: "
        "algorithm.temperature); the update takes its log-probs at the same temperature. A role whose "
        "turns barely vary at the common temperature explores more with a higher one",
    )


class WorkflowSettings(Strict):
    """Base of a workflow's settings (the ``workflow:`` section). ``name`` selects the workflow: a
    built-in name or an import path ``package.module:Class``. A subclass declares its own fields, a
    ``roles`` mapping (role -> :class:`SeatConfig` or a subclass) and the ``order`` the roles speak in
    (a field or a property)."""

    name: str = Field(description="the workflow: a built-in name or an import path package.module:Class")

    # fields left out of the defaults a YAML file is merged into (they depend on other fields)
    merge_exclude: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The section's defaults, into which a YAML file's ``workflow:`` mapping is merged (so that it can
        change one field of one role without restating the rest)."""
        try:
            return cls.model_validate({}).model_dump(mode="json", exclude=set(cls.merge_exclude))
        except Exception:  # noqa: BLE001 - a settings model with required fields has no defaults
            return {}

    def interchangeable_roles(self) -> list[str]:
        """Roles that play the same part (a debate's debaters): recipe population may seat one's snapshots
        in the others' seats by default."""
        return []

    def seat(self, role: str) -> SeatConfig:
        """The seat of ``role``."""
        roles: dict[str, SeatConfig] = getattr(self, "roles", {})
        return roles[role]


class TaskSettings(Strict):
    """Base of a task suite's settings (the ``tasks:`` section). ``suite`` selects the suite: a built-in
    name or an import path ``package.module:Class`` of a :class:`teamrl.tasks.TaskSuite`."""

    suite: str = Field(description="the task suite: a built-in name or an import path package.module:Class")
    seed: int = Field(0, description="seed of the suite's generation and split")
    heldout_size: int = Field(96, ge=1, description="held-out tasks in every evaluation")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        try:
            return cls.model_validate({}).model_dump(mode="json")
        except Exception:  # noqa: BLE001
            return {}
