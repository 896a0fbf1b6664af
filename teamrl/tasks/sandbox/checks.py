"""Judge agent-written programs against test statements, all checks of a call in one sandbox run."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from teamrl.tasks.sandbox.sandbox import Sandbox, _run_blocking

_HARNESS_SOURCE = Path(__file__).with_name("_harness.py").read_text()


@dataclass
class ProgramCheck:
    """A module ``code`` and test statements (usually asserts), each judged on its own."""

    code: str
    tests: list[str]


def _parse(stdout: str, marker: str, checks: list[ProgramCheck]) -> list[list[bool]]:
    results = [[False] * len(check.tests) for check in checks]
    for line in stdout.splitlines():
        head, _, rest = line.partition(" ")
        if head != marker:
            continue
        index_text, _, payload = rest.partition(" ")
        try:
            index, verdicts = int(index_text), json.loads(payload)
        except ValueError:
            continue
        if 0 <= index < len(checks) and isinstance(verdicts, list):
            if len(verdicts) == len(checks[index].tests):
                results[index] = [verdict is True for verdict in verdicts]
    return results


async def run_checks(sandbox: Sandbox, checks: list[ProgramCheck]) -> list[list[bool]]:
    """Per check, per test: did the statement run without raising after ``code`` was executed?

    Everything the process did not report (crash, memory, wall-clock timeout) counts as False.
    """
    return (await judge_checks(sandbox, checks))[0]


async def judge_checks(sandbox: Sandbox, checks: list[ProgramCheck]) -> tuple[list[list[bool]], str | None]:
    """``run_checks``'s verdicts and, where the sandbox process never ran, why (``SandboxResult.error``)."""
    if not checks:
        return [], None
    marker = f"@@teamrl-{secrets.token_hex(16)}@@"
    request = {
        "marker": marker,
        "timeout_s": sandbox.limits.check_timeout_s,
        "checks": [{"code": check.code, "tests": list(check.tests)} for check in checks],
    }
    result = await sandbox.run(_HARNESS_SOURCE, stdin=json.dumps(request))
    return _parse(result.stdout, marker, checks), result.error


def run_checks_sync(sandbox: Sandbox, checks: list[ProgramCheck]) -> list[list[bool]]:
    """Blocking ``run_checks`` for code without an event loop."""
    return _run_blocking(run_checks(sandbox, checks))
