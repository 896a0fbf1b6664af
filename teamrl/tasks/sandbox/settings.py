"""The ``sandbox:`` section: how model-written code is contained."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from teamrl.protocol.settings import Strict


class SandboxConfig(Strict):
    isolation: Literal["auto", "bwrap", "rlimits"] = "auto"
    timeout_s: float = Field(10.0, gt=0)
    memory_mb: int = Field(512, ge=64)
    check_timeout_s: float = Field(1.0, gt=0)
    trust_demonstrations: bool = Field(
        True,
        description="the scripted experts' code in demonstrations (the task's reference, the generator's "
        "own bugs, tests from the reference; no model writes it) is forked from warm interpreters, with the "
        "same rlimits but not contained: the same demonstrations for a fraction of the CPU; false: it runs "
        "in the sandbox like model-written code",
    )
