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
