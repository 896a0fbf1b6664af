"""Named fault points for the crash tests (``tests/test_crash_safety.py``).

``TEAMRL_FAULT=NAME:COUNT[:SIGNAL]`` sends this process SIGNAL (default KILL; TERM and INT too) the
COUNT-th time it reaches ``fault_point(NAME)``, as an operator or the machine would at that moment.
Unset, a point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "TEAMRL_FAULT"
_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    wanted, _, rest = spec.partition(":")
    if wanted != name:
        return
    count, _, sig = rest.partition(":")
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(count or 1):
        os.kill(os.getpid(), getattr(signal, f"SIG{sig or 'KILL'}"))
