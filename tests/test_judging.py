"""The verifier's parts, by hand: the plain-data codec and its type-strict equality, turning asserts into
calls, HumanEval-style checks by record and replay, and the seccomp filter's tables."""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from pathlib import Path

import pytest

from teamrl.tasks.sandbox import (
    Call,
    CallTest,
    CheckError,
    CheckFunction,
    Judgement,
    Sandbox,
    SandboxLimits,
    UnjudgeableTest,
    judge_sync,
    parse_assert,
    seccomp,
)
from teamrl.tasks.sandbox.values import (
    MAX_DEPTH,
    UnsupportedValue,
    decode,
    dumps,
    encode,
    loads,
    strict_equal,
)

PLAIN = [
    None,
    True,
    False,
    0,
    -7,
    2**60,
    -(2**200),
    1.5,
    -0.0,
    float("inf"),
    "",
    "héllo\n",
    b"\x00\xff",
    [1, [2, (3,)]],
    (),
    {"b": 1, "a": [None]},
    {(1, 2): frozenset({"x"})},
    {3, 1, 2},
    frozenset(),
]


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_plain_values_round_trip_with_their_types(value: object) -> None:
    back = loads(dumps(value))
    assert back == value and type(back) is type(value)
    assert strict_equal(back, value)
    if isinstance(value, dict):
        assert list(back) == list(value)  # a dict keeps its order (code can observe it)


def test_strict_equality_compares_types_everywhere() -> None:
    assert not strict_equal(1, 1.0) and not strict_equal(1, True) and not strict_equal(0, False)
    assert not strict_equal([1], (1,)) and not strict_equal({1}, frozenset({1}))
    assert not strict_equal({"a": 1}, {"a": 1.0}) and not strict_equal([[1]], [[True]])
    assert strict_equal({"a": 1, "b": 2}, {"b": 2, "a": 1})  # dicts as mappings
    assert strict_equal(float("nan"), float("nan"))  # equal as data
    assert not strict_equal(0.1 + 0.2, 0.3) and strict_equal(0.1 + 0.2, 0.3, abs_tol=1e-9)
    assert strict_equal({"k": [0.1 + 0.2]}, {"k": [0.3]}, abs_tol=1e-9)
    assert not strict_equal({0.1 + 0.2}, {0.3}, abs_tol=1e-9)  # set members compare exactly


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class EqualInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    "value",
    [AlwaysEqual(), EqualInt(3), [1, AlwaysEqual()], {"k": EqualInt(0)}, object(), 1j, range(3), print],
    ids=lambda v: type(v).__name__,
)
def test_only_builtins_by_exact_type_cross_and_nothing_equals_them(value: object) -> None:
    with pytest.raises(UnsupportedValue):
        encode(value)
    assert not strict_equal(value, 3) and not strict_equal(3, value) and not strict_equal(value, value)


def test_size_and_depth_are_bounded() -> None:
    nested: list = []
    for _ in range(MAX_DEPTH + 1):
        nested = [nested]
    with pytest.raises(UnsupportedValue, match="nested deeper"):
        encode(nested)
    with pytest.raises(UnsupportedValue, match="values to send back"):
        encode(list(range(200_000)))
    with pytest.raises(UnsupportedValue, match="characters of text"):
        encode("x" * (2 << 20))
    # an int is bounded by what Python will write in decimal (a report shows it), both ways
    assert decode(encode(2**13_999)) == 2**13_999
    with pytest.raises(UnsupportedValue, match="an integer of more than 14000 bits"):
        encode(10**5000)
    for forged in ({"int": hex(10**5000)}, {"int": hex(2**14_005)}, 10**4250):
        with pytest.raises(UnsupportedValue, match="an integer of more than 14000 bits"):
            decode(forged)


def test_a_forged_set_of_colliding_hashes_is_refused_before_it_is_built() -> None:
    # ints k * (2**61 - 1) all hash to 0: a set of 31k of them took 6 s of the trusted side's CPU to build
    colliding = [k * (2**61 - 1) for k in range(31_000)]
    forged = {"set": [{"int": hex(x)} if x >= 2**53 else x for x in colliding]}
    start = time.process_time()
    with pytest.raises(UnsupportedValue, match="a set of more than 5000 members"):
        decode(forged)
    with pytest.raises(UnsupportedValue, match="a dict of more than 5000 members"):
        decode({"dict": [0, 1] * 5001})
    assert time.process_time() - start < 0.5
    with pytest.raises(UnsupportedValue, match="a frozenset of more than 5000 members"):
        encode(frozenset(range(5001)))
    assert decode(encode(set(range(5000)))) == set(range(5000))


def test_decoding_untrusted_data_fails_only_with_unsupported_value() -> None:
    bad = [
        {"tuple": 3},
        {"set": [[1]]},
        {"dict": [1]},
        {"float": "1.5"},
        {"int": "zz"},
        {"bytes": "0"},
        {"a": 1, "b": 2},
        {"nope": []},
        [1, 2],
        {"list": [{"list": [{"x": 1}]}]},
    ]
    for item in bad:
        with pytest.raises(UnsupportedValue):
            decode(item)
    rng = random.Random(0)
    atoms = [None, True, 1, -2.5, "s", [], {}, {"int": "0x10"}, {"float": "nan"}, {"list": []}]

    def junk(depth: int) -> object:
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(atoms)
        tag = rng.choice(["list", "tuple", "set", "frozenset", "dict", "int", "x", "bytes"])
        return {tag: [junk(depth - 1) for _ in range(rng.randrange(4))]}

    for _ in range(2000):
        try:
            decode(junk(5))
        except UnsupportedValue:
            pass
    for text in ["", "[" * 100_000, '{"int": "' + "f" * 10_000 + '"}', "\x00", "1e999999"]:
        try:
            loads(text)
        except UnsupportedValue:
            pass


@pytest.mark.parametrize(
    "line, call, expected",
    [
        ("assert f(1, 'a') == [2]", Call((1, "a")), [2]),
        ("assert [2] == f(1, 'a')", Call((1, "a")), [2]),
        ("assert f(x=-3, y=(1, 2)) == {'k': None}", Call((), (("x", -3), ("y", (1, 2)))), {"k": None}),
        ("assert f() is True", Call(), True),
        ("assert f(0) is None", Call((0,)), None),
        ("assert f(2)", Call((2,)), True),
        ("assert not f(2)", Call((2,)), False),
        ("  assert f({1, 2}) == 1.5, 'message is ignored'  ", Call(({1, 2},)), 1.5),
    ],
)
def test_asserts_that_become_calls(line: str, call: Call, expected: object) -> None:
    test = parse_assert(line, "f")
    assert test == CallTest(call, expected)
    assert parse_assert(test.text("f"), "f") == test  # its own text parses back


@pytest.mark.parametrize(
    "line, reason",
    [
        ("f(1) == 2", "not a single assert"),
        ("assert f(1) == 2\nassert f(2) == 3", "not a single assert"),
        ("assert f(1) == g(2)", "not a plain literal"),
        ("assert f(1) > 2", "only one =="),
        ("assert f(1) == 2 == 2", "only one =="),
        ("assert f(1) is 2", "only one =="),
        ("assert g(1) == 2", "not the function under test"),
        ("assert obj.f(1) == 2", "expected a call"),
        ("assert f(*a) == 2", r"\*args"),
        ("assert f(**k) == 2", r"\*args"),
        ("assert f(1j) == 2", "not a plain literal"),
        ("assert f(" + "9" * 5000 + ") == 1", "not Python"),
        ("assert f(1) ==", "not Python"),
        ("assert f", "expected a call"),
    ],
)
def test_asserts_that_cannot_be_judged_safely_are_refused(line: str, reason: str) -> None:
    with pytest.raises(UnjudgeableTest, match=reason):
        parse_assert(line, "f")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(SandboxLimits(timeout_s=10.0, check_timeout_s=0.5))


CHECK = CheckFunction(
    source=(
        "import random\n"
        "def check(candidate):\n"
        "    assert candidate([3, 1]) == [1, 3]\n"
        "    assert abs(candidate([0.5])[0] - 0.5) < 1e-9\n"
        "    for _ in range(5):\n"  # random inputs: the same ones are drawn when recording and replaying
        "        xs = [random.randint(0, 9) for _ in range(4)]\n"
        "        assert candidate(list(xs)) == helper(xs)\n"
    ),
    reference="def helper(xs):\n    return sorted(xs)\n\ndef sort_it(xs):\n    return sorted(xs)\n",
    entry_point="sort_it",
)


def test_a_check_function_is_judged_by_record_and_replay(sandbox) -> None:
    assert judge_sync(sandbox, "def sort_it(xs):\n    xs.sort()\n    return xs", "sort_it", CHECK).passed == [
        True
    ]
    for wrong in [
        "def sort_it(xs):\n    return xs",
        "def sort_it(xs):\n    return None",
        "class A:\n    def __eq__(s, o): return True\n    def __getitem__(s, i): return 0.5\n"
        "def sort_it(xs):\n    return A()",
        "import os\ndef sort_it(xs):\n    os._exit(0)",
    ]:
        judged = judge_sync(sandbox, wrong, "sort_it", CHECK)
        assert judged.passed == [False], wrong


def test_a_check_that_fails_its_own_reference_is_an_error(sandbox) -> None:
    broken = CheckFunction(
        "def check(candidate):\n    assert candidate(1) == 3\n", "def f(x):\n    return x", "f"
    )
    with pytest.raises(CheckError, match="fails on its reference"):
        judge_sync(sandbox, "def f(x):\n    return 3", "f", broken)
    opaque = CheckFunction(
        "def check(candidate):\n    assert candidate(object()) is None\n", "def f(x):\n    pass", "f"
    )
    with pytest.raises(CheckError):
        judge_sync(sandbox, "def f(x):\n    pass", "f", opaque)


def test_judging_never_raises_for_what_the_program_does(sandbox) -> None:
    tests = [parse_assert("assert f(1) == 1", "f")]
    for program in [
        "",
        "\x00",
        "def f(:",
        "import sys\nsys.stdout.close()\ndef f(x): return x",
        "raise MemoryError",
    ]:
        judged = judge_sync(sandbox, program, "f", tests)
        assert len(judged.passed) == 1
    assert judge_sync(sandbox, "import sys\nsys.stdout.close()\ndef f(x): return x", "f", tests).passed == [
        True
    ]


def _header_numbers(path: Path) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", path.read_text())}


@pytest.mark.parametrize(
    "machine, header",
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        ("aarch64", "/usr/include/asm-generic/unistd.h"),
    ],
)
def test_seccomp_syscall_numbers_match_the_kernel_headers(machine: str, header: str) -> None:
    path = Path(header)
    if not path.exists():
        pytest.skip(f"{header} not installed (linux-libc-dev)")
    numbers = _header_numbers(path)
    ours = seccomp.syscall_numbers(machine)
    assert set(seccomp.DENIED) <= set(ours)
    assert {name: numbers[name] for name in ours} == ours


def test_seccomp_program_shape() -> None:
    for machine in ("x86_64", "aarch64"):
        program = seccomp.filter_program(machine)
        assert len(program) % 8 == 0 and 40 < len(program) // 8 < 256
    with pytest.raises(seccomp.UnsupportedMachine, match="riscv64"):
        seccomp.filter_program("riscv64")


def test_the_sandbox_denies_namespaces_ptrace_mounts_and_network(sandbox) -> None:
    probe = (
        "import ctypes, errno, json, os, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def err(result):\n    return ctypes.get_errno() if result == -1 else 0\n"
        "out = {\n"
        "    'unshare_user': err(libc.unshare(0x10000000)),\n"
        "    'unshare_mount': err(libc.unshare(0x00020000)),\n"
        "    'ptrace': err(libc.ptrace(16, os.getppid(), None, None)),\n"
        "    'mount': err(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
        "    'clone3': err(libc.syscall(435, None, 0)),\n"
        "}\n"
        "try:\n    socket.socket(socket.AF_INET)\n    out['inet'] = 0\n"
        "except OSError as e:\n    out['inet'] = e.errno\n"
        "a, b = socket.socketpair()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os._exit(7)\n"
        "out['fork'] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
        "print(json.dumps(out))\n"
    )
    for isolation in ("bwrap", "rlimits"):
        result = Sandbox(isolation=isolation).run_sync(probe)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out == {
            "unshare_user": 1,
            "unshare_mount": 1,
            "ptrace": 1,
            "mount": 1,
            "clone3": 38,
            "inet": 97,
            "fork": 7,
        }, isolation


def test_call_results_describe_what_happened() -> None:
    test = parse_assert("assert f(2) == 4", "f")
    from teamrl.tasks.sandbox import CallResult

    assert CallResult(4).describe(test, "f") == "f(2) == 4"
    assert CallResult(4.0).describe(test, "f") == "f(2) returned 4.0, expected 4"
    assert CallResult(error="ZeroDivisionError: division by zero").describe(test, "f") == (
        "f(2) raised ZeroDivisionError: division by zero"
    )
    assert not CallResult(4.0).passes(test) and CallResult(4).passes(test)
    assert math.isclose(CallTest(Call((1,)), 0.3, abs_tol=1e-9).expected, 0.3)
    assert json.loads(dumps({"a": 1})) == {"dict": ["a", 1]}


def test_trusted_programs_share_one_process_each_in_its_own_namespace(sandbox) -> None:
    from teamrl.tasks.sandbox.calls import judge_trusted

    tests = [parse_assert("assert f(2) == 4", "f"), parse_assert("assert f(3) == 6", "f")]
    programs = [
        "G = 0\ndef f(x):\n    return 2 * x",
        "def f(x):\n    return x + 2",
        "raise ValueError('x')",
        "G",
    ]
    judged = asyncio.run(judge_trusted(sandbox, programs, "f", tests))
    assert [j.passed for j in judged] == [[True, True], [True, False], [False, False], [False, False]]
    assert "NameError" in judged[3].results[0].error  # the first program's globals are not the fourth's
    assert asyncio.run(judge_trusted(sandbox, programs, "f", [])) == [Judgement([])] * 4
