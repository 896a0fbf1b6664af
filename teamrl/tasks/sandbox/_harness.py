"""Check harness run inside the sandbox by ``run_checks``; its text is the sandboxed program.

Standard input: JSON ``{"marker": str, "timeout_s": float, "checks": [{"code": str, "tests": [str]}]}``.
Standard output: one line ``MARKER INDEX JSON_BOOLS`` per check, flushed as soon as the check
is judged so that results survive if a later check kills the process. Everything the
untrusted code writes to fds 1 and 2 goes to /dev/null, so it cannot break the JSON lines; the
random marker keeps plain prints of look-alike lines from being taken as results.
"""

import json
import os
import signal
import sys


class _StatementTimeout(BaseException):
    # A BaseException so that the untrusted code's ``except Exception`` cannot swallow it.
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _StatementTimeout


def _passes(source: str, namespace: dict, timeout_s: float) -> bool:
    try:
        code = compile(source, "<check>", "exec")
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            exec(code, namespace)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException:
        # Includes SystemExit and a timer firing inside the finally clause itself.
        return False
    return True


def main() -> None:
    request = json.loads(sys.stdin.read())
    marker, timeout_s = request["marker"], float(request["timeout_s"])
    sys.stdout.flush()
    results_out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    signal.signal(signal.SIGALRM, _on_alarm)
    for index, check in enumerate(request["checks"]):
        namespace = {"__name__": "solution"}
        code_ok = _passes(check["code"], namespace, timeout_s)
        results = [code_ok and _passes(test, namespace, timeout_s) for test in check["tests"]]
        results_out.write(f"{marker} {index} {json.dumps(results)}\n")
        results_out.flush()


if __name__ == "__main__":
    main()
