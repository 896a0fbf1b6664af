"""Judging untrusted programs where the trusted side decides.

A program under test runs in a sandbox process of its own that holds only the program and the
inputs of its calls: never the expected outputs, another check's data, the reference solution or a
result channel that counts. It returns each call's result as plain data (``values``), and this
process compares it with the expected value by :func:`~teamrl.tasks.sandbox.values.strict_equal`.
Forging the process's output therefore buys nothing: a forged result is only a value the program
could have returned, and an object that equals everything cannot cross as data.

Tests come in two forms:

* :class:`CallTest`: a call and its expected value. Model-written asserts become CallTests through
  :func:`parse_assert`, which refuses what it cannot judge that way.
* :class:`CheckFunction`: a HumanEval-style ``check(candidate)`` source with its reference
  solution. Its inputs are recorded once by running the check on the reference; the program under
  test is then run on them in its own process, and the check is replayed in another process on the
  recorded outputs (data), with no code under test in it.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from teamrl.tasks.sandbox.sandbox import SandboxLimits, SandboxResult, _run_blocking
from teamrl.tasks.sandbox.values import UnsupportedValue, decode, encode, strict_equal

_HERE = Path(__file__).parent
# values.py's source first (it defines encode / decode), then the harness.
_PROGRAM = (_HERE / "values.py").read_text() + "\n\n" + (_HERE / "_harness.py").read_text()
_MAX_LINE = 1 << 20
_CACHE_SIZE = 4096


class SandboxLike(Protocol):
    """What the judges need of a sandbox: ``Sandbox`` and the Ray backend's ``RaySandbox`` both fit."""

    limits: SandboxLimits

    async def run(self, source: str, stdin: str = "") -> SandboxResult: ...


class UnjudgeableTest(ValueError):
    """A test that cannot be turned into a call and an expected value."""


@dataclass(frozen=True)
class Call:
    """One call of the function under test: positional and keyword arguments, as plain data."""

    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def text(self, function: str) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"{function}({', '.join(parts)})"

    def tagged(self) -> list[Any]:
        return [encode(self.args), encode(dict(self.kwargs))]


@dataclass(frozen=True)
class CallTest:
    """A call and the value it must return, compared with types (``strict_equal``); floats within
    ``abs_tol``."""

    call: Call
    expected: Any
    abs_tol: float = 0.0

    def text(self, function: str) -> str:
        return f"assert {self.call.text(function)} == {self.expected!r}"


@dataclass(frozen=True)
class CallResult:
    """What one call did: returned ``value`` (``error`` None) or failed (``error`` says how:
    the exception, a CPU timeout, a value that is not plain data, or no result at all)."""

    value: Any = None
    error: str | None = None

    def passes(self, test: CallTest) -> bool:
        return self.error is None and strict_equal(self.value, test.expected, test.abs_tol)

    def describe(self, test: CallTest, function: str) -> str:
        """One line for an execution report: the call, and expected vs actual or the error."""
        call = test.call.text(function)
        if self.error is not None:
            return f"{call} raised {self.error}" if ":" in self.error else f"{call}: {self.error}"
        if self.passes(test):
            return f"{call} == {test.expected!r}"
        return f"{call} returned {self.value!r}, expected {test.expected!r}"


@dataclass(frozen=True)
class CheckFunction:
    """HumanEval-style tests: ``source`` defines ``check(candidate)``; ``reference`` is a correct
    program (it also provides helpers the check may use); ``entry_point`` the function's name."""

    source: str
    reference: str
    entry_point: str


@dataclass
class Judgement:
    """A program's verdict per test (for a CheckFunction, one verdict), each call's result, and why
    the sandbox never ran where it did not (``SandboxResult.error``)."""

    passed: list[bool]
    results: list[CallResult] = field(default_factory=list)
    error: str | None = None

    @property
    def fraction(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


# ---------------------------------------------------------------- model-written asserts


def _shown(node: ast.AST) -> str:
    """The first 60 characters of ``node``'s source, for an error message (a literal of an int past
    4,300 digits has none: Python refuses to write it)."""
    try:
        return ast.unparse(node)[:60]
    except (ValueError, RecursionError):
        return f"<a {type(node).__name__} too large to show>"


def _literal(node: ast.AST) -> Any:
    try:
        value = ast.literal_eval(node)
        encode(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnsupportedValue) as exc:
        raise UnjudgeableTest(f"{_shown(node)!r} is not a plain literal ({exc})") from None
    return value


def _call(node: ast.AST, function: str) -> Call:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise UnjudgeableTest(f"expected a call of {function}(...), got {_shown(node)!r}")
    if node.func.id != function:
        raise UnjudgeableTest(f"calls {node.func.id}, not the function under test {function}")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise UnjudgeableTest("*args / **kwargs in the call")
    return Call(
        tuple(_literal(a) for a in node.args),
        tuple((cast(str, k.arg), _literal(k.value)) for k in node.keywords),  # no **kwargs (k.arg None)
    )


def parse_assert(line: str, function: str) -> CallTest:
    """``assert f(ARGS) == VALUE`` (either side), ``assert f(ARGS) is True|False|None``,
    ``assert f(ARGS)`` (True) and ``assert not f(ARGS)`` (False) as a :class:`CallTest`, with
    literal arguments and value; anything else raises :class:`UnjudgeableTest` (it could only be
    judged by running it, and it would then run beside the code it judges)."""
    try:
        tree = ast.parse(line.strip(), mode="exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise UnjudgeableTest(f"not Python: {exc}") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise UnjudgeableTest("not a single assert statement")
    test = tree.body[0].test
    if isinstance(test, ast.Compare):
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if len(test.ops) == 1 and isinstance(op, ast.Eq):
            if isinstance(left, ast.Call):
                return CallTest(_call(left, function), _literal(right))
            return CallTest(_call(right, function), _literal(left))
        is_constant = isinstance(op, ast.Is) and isinstance(right, ast.Constant)
        # right is an ast.Constant where is_constant (mypy does not narrow through the flag)
        if len(test.ops) == 1 and is_constant and type(right.value) in (bool, type(None)):  # type: ignore[attr-defined]
            return CallTest(_call(left, function), right.value)  # type: ignore[attr-defined]
        shown = _shown(test)
        raise UnjudgeableTest(f"only one == (or `is True/False/None`) can be judged, not {shown!r}")
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return CallTest(_call(test.operand, function), False)
    return CallTest(_call(test, function), True)


def parse_asserts(lines: Sequence[str], function: str) -> tuple[list[CallTest], list[tuple[str, str]]]:
    """The judgeable tests among ``lines`` and, for each refused line, (line, reason)."""
    tests, refused = [], []
    for line in lines:
        try:
            tests.append(parse_assert(line, function))
        except UnjudgeableTest as exc:
            refused.append((line, str(exc)))
    return tests, refused


# ---------------------------------------------------------------- running programs

_cache: OrderedDict[str, Any] = OrderedDict()


def clear_cache() -> None:
    """Forget every cached judgement (the next check of any program runs it again)."""
    _cache.clear()


def _cache_key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def _remember(key: str, value: Any) -> None:
    _cache[key] = value
    _cache.move_to_end(key)
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)


def _lines(result: SandboxResult) -> list[dict]:
    """The records the process wrote (``repr`` of builtins, read as literals: never evaluated)."""
    records = []
    for line in result.stdout.splitlines():
        if len(line) > _MAX_LINE:
            continue
        try:
            record = ast.literal_eval(line)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _death(result: SandboxResult) -> str:
    if result.error is not None:
        return f"no result: {result.error}"
    if result.timed_out:
        return "no result: the process ran past its wall-clock limit"
    return f"no result: the process ended (exit {result.returncode}) before this call finished"


async def run_calls(
    sandbox: SandboxLike, code: str, function: str, calls: Sequence[Call]
) -> tuple[list[CallResult], str | None]:
    """Run ``code`` in a sandbox process of its own and call ``function`` on each of ``calls``;
    each call's result, and why the sandbox never ran (a lost Ray worker) where it did not.

    The first line for a call counts; a call with no line (the process died) failed. Results of a
    process that ran are cached (the same code on the same calls is judged once)."""
    (results,), error = await _run_programs(sandbox, [code], function, calls)
    return results, error


async def _run_programs(
    sandbox: SandboxLike, programs: Sequence[str], function: str, calls: Sequence[Call]
) -> tuple[list[list[CallResult]], str | None]:
    """``run_calls`` of every program of ``programs`` in one process (each in a fresh namespace)."""
    if not calls:
        return [[] for _ in programs], None
    tagged = [c.tagged() for c in calls]
    limits = (sandbox.limits.check_timeout_s, sandbox.limits.memory_mb)
    key = _cache_key("calls", list(programs), function, tagged, limits)
    if key in _cache:
        _cache.move_to_end(key)
        return [list(r) for r in _cache[key]], None
    request: dict[str, Any] = {
        "mode": "calls",
        "programs": list(programs),
        "function": function,
        "calls": tagged,
    }
    request["timeout_s"] = sandbox.limits.check_timeout_s
    result = await sandbox.run(_PROGRAM, stdin=repr(request))
    found: dict[tuple[int, int], CallResult] = {}
    for record in _lines(result):
        where = cast(tuple[int, int], (record.get("p"), record.get("i")))  # ints, or skipped just below
        if not all(type(x) is int for x in where) or where in found:
            continue
        if not (0 <= where[0] < len(programs) and 0 <= where[1] < len(calls)):
            continue
        if "value" in record:
            try:
                found[where] = CallResult(value=decode(record["value"]))
            except UnsupportedValue as exc:
                found[where] = CallResult(error=f"returned {exc}")
        else:
            error = record.get("error")
            found[where] = CallResult(error=error[:300] if isinstance(error, str) else "failed")
    death = CallResult(error=_death(result))
    results = [[found.get((p, i), death) for i in range(len(calls))] for p in range(len(programs))]
    if result.error is None:
        _remember(key, results)
    return results, result.error


async def judge_calls(sandbox: SandboxLike, code: str, function: str, tests: Sequence[CallTest]) -> Judgement:
    """``code`` against ``tests``: each passes when its call returned its expected value."""
    results, error = await run_calls(sandbox, code, function, [t.call for t in tests])
    return _judgement(results, tests, error)


async def judge_trusted(
    sandbox: SandboxLike, programs: Sequence[str], function: str, tests: Sequence[CallTest]
) -> list[Judgement]:
    """Each of ``programs`` against ``tests``, all in one sandbox process. Only for programs that are
    not the policy's (a task's reference and buggy solutions judging the tester's tests, which are
    data): code under test gets a process of its own (:func:`judge_calls`)."""
    results, error = await _run_programs(sandbox, programs, function, [t.call for t in tests])
    return [_judgement(rs, tests, error) for rs in results]


def _judgement(results: list[CallResult], tests: Sequence[CallTest], error: str | None) -> Judgement:
    return Judgement([r.passes(t) for r, t in zip(results, tests, strict=True)], results, error)


class CheckError(RuntimeError):
    """A CheckFunction that fails on its own reference solution, or whose inputs are not plain data."""


async def record_inputs(sandbox: SandboxLike, check: CheckFunction) -> list[Call]:
    """The distinct calls ``check`` makes on its reference (run once per check and cached)."""
    key = _cache_key("record", check.source, check.reference, check.entry_point)
    if key in _cache:
        return _cache[key]
    request = {"mode": "record", "timeout_s": sandbox.limits.check_timeout_s}
    request |= {"reference": check.reference, "check": check.source, "entry_point": check.entry_point}
    result = await sandbox.run(_PROGRAM, stdin=repr(request))
    records = _lines(result)
    if not records or "inputs" not in records[0]:
        raise CheckError(f"recording the check's inputs for {check.entry_point} failed: {_death(result)}")
    if records[0].get("error"):
        raise CheckError(f"the check of {check.entry_point} fails on its reference: {records[0]['error']}")
    try:
        calls = [Call(decode(a), tuple(decode(k).items())) for a, k in records[0]["inputs"]]
    except (UnsupportedValue, ValueError, TypeError, AttributeError) as exc:
        raise CheckError(
            f"the check of {check.entry_point} made calls that are not plain data: {exc}"
        ) from None
    _remember(key, calls)
    return calls


async def judge_check(sandbox: SandboxLike, code: str, check: CheckFunction) -> Judgement:
    """``code`` against a HumanEval-style check: its function runs on the recorded inputs in one
    process; the check is replayed on those results, as data, in another."""
    calls = await record_inputs(sandbox, check)
    results, error = await run_calls(sandbox, code, check.entry_point, calls)
    if error is not None:
        return Judgement([False], results, error)
    outputs = [[repr(c.tagged()), _tagged_result(r)] for c, r in zip(calls, results, strict=True)]
    key = _cache_key("replay", check.source, check.reference, outputs)
    if key in _cache:
        return Judgement([_cache[key]], results)
    request = {"mode": "replay", "timeout_s": sandbox.limits.check_timeout_s, "outputs": outputs}
    request |= {"reference": check.reference, "check": check.source, "entry_point": check.entry_point}
    result = await sandbox.run(_PROGRAM, stdin=repr(request))
    records = _lines(result)
    passed = bool(records) and records[0].get("passed") is True
    if result.error is None:
        _remember(key, passed)
    return Judgement([passed], results, result.error)


def _tagged_result(result: CallResult) -> dict[str, Any]:
    return {"error": result.error} if result.error is not None else {"value": encode(result.value)}


async def judge(
    sandbox: SandboxLike, code: str, function: str, tests: Sequence[CallTest] | CheckFunction
) -> Judgement:
    """``code`` against either form of tests."""
    if isinstance(tests, CheckFunction):
        return await judge_check(sandbox, code, tests)
    return await judge_calls(sandbox, code, function, tests)


def judge_sync(
    sandbox: SandboxLike, code: str, function: str, tests: Sequence[CallTest] | CheckFunction
) -> Judgement:
    """Blocking :func:`judge` for code without an event loop."""
    return _run_blocking(judge(sandbox, code, function, tests))


async def judge_many(
    sandbox: SandboxLike, jobs: Sequence[tuple[str, str, Sequence[CallTest] | CheckFunction]]
) -> list[Judgement]:
    """Several (code, function, tests) judgements at once, each in its own processes."""
    return list(await asyncio.gather(*(judge(sandbox, *job) for job in jobs)))
