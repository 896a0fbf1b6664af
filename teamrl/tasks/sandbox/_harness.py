"""The program every check runs in the sandbox; its text follows ``values.py``'s source there.

Standard input: one request, as Python literal text (``repr`` of builtins); standard output: one
``repr`` of a record per line, each flushed when written (what a later crash or kill cuts off still
arrives); the trusted side reads them with ``ast.literal_eval``. No ``json``, ``signal`` or
``random`` import: they would cost more start-up time than the whole check. Everything the code
under test writes to fds 1 and 2 goes to /dev/null. The request's ``mode``:

* ``calls``: run each of ``programs`` (one, the code under test, unless every program is trusted),
  each in a fresh namespace, then its function ``function`` on each of ``calls`` (tagged args and
  kwargs, decoded afresh for every call); one line per call, ``{"p": P, "i": N, "value": TAGGED}`` or
  ``{"p": P, "i": N, "error": TEXT}``. The expected values never enter this process.
* ``record``: run the trusted ``reference`` and ``check`` sources, then ``check(candidate)`` with
  the reference's function recording each call's arguments; one line ``{"inputs": [...],
  "error": TEXT | null}``.
* ``replay``: run ``reference`` (for helpers the check uses) and ``check``, then ``check`` on a
  stand-in that answers each recorded input with the recorded output (``outputs``: pairs of the
  input's key and ``{"value": ...}`` or ``{"error": ...}``); no code under test is here, only its
  results as data. One line ``{"passed": bool, "error": TEXT | null}``.

Per-call limits count CPU time (``ITIMER_PROF``), so a loaded machine does not fail correct code.
"""

import _signal
import os
import sys

if "encode" not in globals():  # imported as a module (tests); in the sandbox values.py precedes this
    from teamrl.tasks.sandbox.values import UnsupportedValue, decode, encode

_TEXT_LIMIT = 300


class _CpuTimeout(BaseException):
    # A BaseException so that the code under test's ``except Exception`` cannot swallow it.
    pass


def _on_timer(signum: int, frame: object) -> None:
    raise _CpuTimeout


def _timed(seconds: float, function, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
    _signal.setitimer(_signal.ITIMER_PROF, seconds)
    try:
        return function(*args, **kwargs)
    finally:
        _signal.setitimer(_signal.ITIMER_PROF, 0)


def _describe(exc: BaseException, seconds: float) -> str:
    """One line naming the exception; its text is produced under the timer too (a custom __str__)."""
    if isinstance(exc, _CpuTimeout):
        return f"timeout: over {seconds:g} s of CPU time"
    if isinstance(exc, SystemExit):
        return "SystemExit: the code under test exited"
    name = type(exc).__name__ if type(type(exc)) is type else "exception"
    try:
        text = _timed(seconds, str, exc)
        text = text if type(text) is str else ""
    except BaseException:  # noqa: BLE001 - anything the code under test's __str__ does
        text = ""
    line = f"{name}: {text}" if text else name
    return line.splitlines()[0][:_TEXT_LIMIT] if line.strip() else name


def _key(args: object, kwargs: object) -> str:
    return repr([encode(args), encode(kwargs)])


def _run_calls(request: dict, out) -> None:  # noqa: ANN001
    seconds = float(request["timeout_s"])
    for program, code in enumerate(request["programs"]):  # one, unless all are trusted (``trusted``)
        namespace = {"__name__": "solution"}
        try:
            _timed(seconds, exec, compile(code, "<solution>", "exec"), namespace)
            failed = None
        except BaseException as exc:  # noqa: BLE001 - the code under test failed to load
            failed = "the program failed to load: " + _describe(exc, seconds)
        function = namespace.get(request["function"])
        if failed is None and not callable(function):
            failed = f"the program defines no function {request['function']}"
        for index, (args, kwargs) in enumerate(request["calls"]):
            if failed is not None:
                record = {"p": program, "i": index, "error": failed}
            else:
                try:
                    value = _timed(seconds, function, *decode(args), **decode(kwargs))
                    record = {"p": program, "i": index, "value": _timed(seconds, encode, value)}
                except UnsupportedValue as exc:
                    record = {"p": program, "i": index, "error": f"returned {exc}"}
                except BaseException as exc:  # noqa: BLE001 - whatever the call raised
                    record = {"p": program, "i": index, "error": _describe(exc, seconds)}
            out.write(repr(record) + "\n")
            out.flush()


def _load_check(request: dict) -> dict:
    namespace = {"__name__": "check"}
    exec(compile(request["reference"], "<reference>", "exec"), namespace)
    exec(compile(request["check"], "<check>", "exec"), namespace)
    if not callable(namespace.get("check")):
        raise ValueError("the check source defines no function check(candidate)")
    import random

    random.seed(0)  # checks that draw random inputs draw the same ones when recording and replaying
    return namespace


def _record(request: dict, out) -> None:  # noqa: ANN001
    seconds = float(request["timeout_s"]) * 50
    inputs, seen = [], set()
    try:
        namespace = _load_check(request)
        reference = namespace[request["entry_point"]]

        def candidate(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            key = _key(args, kwargs)
            if key not in seen:
                seen.add(key)
                inputs.append([encode(args), encode(kwargs)])
            return reference(*args, **kwargs)

        _timed(seconds, namespace["check"], candidate)
        error = None
    except BaseException as exc:  # noqa: BLE001 - a broken check or reference
        error = _describe(exc, seconds)
    out.write(repr({"inputs": inputs, "error": error}) + "\n")
    out.flush()


def _replay(request: dict, out) -> None:  # noqa: ANN001
    seconds = float(request["timeout_s"]) * 50
    outputs = {key: result for key, result in request["outputs"]}
    try:
        namespace = _load_check(request)

        def candidate(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            result = outputs.get(_key(args, kwargs))
            if result is None:
                raise AssertionError("called with an input that was not recorded")
            if "error" in result:
                raise RuntimeError(result["error"])
            return decode(result["value"])

        _timed(seconds, namespace["check"], candidate)
        record: dict[str, object] = {"passed": True, "error": None}
    except BaseException as exc:  # noqa: BLE001 - the check failed
        record = {"passed": False, "error": _describe(exc, seconds)}
    out.write(repr(record) + "\n")
    out.flush()


def main() -> None:
    request = eval(sys.stdin.read(), {"__builtins__": {}})  # noqa: S307 - our own repr of builtins
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    _signal.signal(_signal.SIGPROF, _on_timer)
    {"calls": _run_calls, "record": _record, "replay": _replay}[request["mode"]](request, out)


if __name__ == "__main__":
    main()
