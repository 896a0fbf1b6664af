"""Sandboxed execution of untrusted, agent-written Python code."""

from teamrl.tasks.sandbox.checks import ProgramCheck, judge_checks, run_checks, run_checks_sync
from teamrl.tasks.sandbox.sandbox import Sandbox, SandboxLimits, SandboxResult, SandboxUnavailableError

__all__ = [
    "ProgramCheck",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "judge_checks",
    "run_checks",
    "run_checks_sync",
]
