"""Sandboxed execution and judging of untrusted, agent-written Python code (the trusted side decides:
``calls``)."""

from teamrl.tasks.sandbox.calls import (
    Call,
    CallResult,
    CallTest,
    CheckError,
    CheckFunction,
    Judgement,
    UnjudgeableTest,
    judge,
    judge_many,
    judge_sync,
    parse_assert,
    parse_asserts,
    run_calls,
)
from teamrl.tasks.sandbox.sandbox import Sandbox, SandboxLimits, SandboxResult, SandboxUnavailableError

__all__ = [
    "Call",
    "CallResult",
    "CallTest",
    "CheckError",
    "CheckFunction",
    "Judgement",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "UnjudgeableTest",
    "judge",
    "judge_many",
    "judge_sync",
    "parse_assert",
    "parse_asserts",
    "run_calls",
]
