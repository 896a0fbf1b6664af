"""Generated repositories as tasks: "fix this GitHub issue" at the embedded model's size.

A repository has 2 to 4 modules: helper modules of one or two short functions each, every function a task
of the programming suite's families (:mod:`teamrl.tasks.programming_families`: reference body, bug
mutations, input generators), with its spec as its docstring, and ``app.py``, whose ``run`` chains the
helpers (``return cap(calc(x))``). One helper holds a bug (a mutation of its family); the issue reports the
symptom at the top-level call (``run(4) returns 9 but should return 8``), so the module that shows the bug
is not the one that holds it. The repository's own tests (shown) pass on unit inputs where the bug does not
show, and one top-level test fails; hidden tests call the buggy function and ``run`` where the bug shows,
and guard the other functions.

Every task is fully determined by its canonical content (difficulty, the helpers' families, parameters and
names, the files they live in, which one is buggy); tests are drawn with a content-seeded generator. The
train / held-out split hashes only the fixed body of the buggy function (its family, difficulty and
reference body; no function or file names, no context), so a held-out repository is never a renamed copy
of a training one, and the fix it asks for is never one a training repository asks for.

Execution (:func:`judge_repo`): a change is one whole new version of one function of one file
(:func:`parse_change`), checked here before anything runs: a known file, a def of a function that file
defines, with its signature unchanged (nothing then runs at definition time: no defaults, decorators or
annotations) and nothing else. The repository runs in the sandbox as one trusted loader program that makes
each file a module (``from util import calc`` works); each test calls one function with literal inputs and
the trusted side compares the returned value (``teamrl.tasks.sandbox.calls``). The tests of each function
run in a sandbox process of their own, so a function that patches another at call time changes nothing
that another function's tests see.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import random
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from pydantic import Field, model_validator

from teamrl.protocol.settings import TaskSettings
from teamrl.tasks.base import SPLITS, TaskSuite
from teamrl.tasks.programming import _body_text, _lit
from teamrl.tasks.programming_families import _FAMILIES, Params
from teamrl.tasks.sandbox.calls import (
    Call,
    CallResult,
    CallTest,
    Judgement,
    SandboxLike,
    UnjudgeableTest,
    parse_assert,
    run_calls,
)

TOP_FILE, TOP_FUNCTION = "app.py", "run"
# helper module names: none is a standard-library module the sandbox's harness could need
MODULE_NAMES = ("util", "core", "ops", "lib", "tools", "base")
# each family's (input type, output type); "pair" (two ints) only as the first of a chain
TYPES: dict[str, tuple[str, str]] = {
    "arith": ("int", "int"),
    "pick": ("pair", "int"),
    "cap": ("int", "int"),
    "dist": ("int", "int"),
    "step": ("int", "int"),
    "echo": ("str", "str"),
    "wrap": ("str", "str"),
    "total": ("list", "int"),
    "tally": ("list", "int"),
    "each": ("list", "list"),
}
MODULES = (2, 3, 4)
DIFFICULTIES = (1, 2, 3)
MAX_TESTER_TESTS = 8
_TRIES = 400


class RepoBuildError(ValueError):
    """Canonical content that makes no usable task (no bug mutation shows at the top-level call)."""


class ChangeError(ValueError):
    """A change that cannot be applied: the reason is shown to the coder (and is a format error)."""


@dataclass(frozen=True)
class RepoTest:
    """A call of one of the repository's functions and the value it must return."""

    function: str
    test: CallTest

    def text(self) -> str:
        args = ", ".join(_lit(a) for a in self.test.call.args)
        return f"assert {self.function}({args}) == {_lit(self.test.expected)}"


@dataclass(frozen=True)
class Change:
    """A whole new version of ``function`` in ``file`` (its source, a def only)."""

    file: str
    function: str
    source: str

    @property
    def location(self) -> str:
        return f"{self.file}:{self.function}"


@dataclass(frozen=True)
class RepoTask:
    """One generated repository with an issue, and what the experts need to demonstrate fixing it."""

    task_id: str
    difficulty: int
    modules: tuple[tuple[str, str], ...]  # (file name, source) in load order, app.py last
    functions: tuple[tuple[str, str], ...]  # (function, its file) for every function, run last
    bug_file: str
    bug_function: str
    issue_text: str
    repo_tests: tuple[RepoTest, ...]  # shown; the last fails on the repository as it is
    hidden_tests: tuple[RepoTest, ...]
    reference_fix: str  # the buggy function's def, fixed (what the coder should write)
    wrong_fix: str  # a plausible wrong version of it (the experts' slip)
    demo_tests: tuple[str, ...]  # a reproducing test of the issue and one at the buggy function
    split_position: float  # in [0, 1), from the fixed function only: held-out below the suite's fraction

    @property
    def files(self) -> dict[str, str]:
        return dict(self.modules)

    @property
    def location(self) -> str:
        """``file:function`` of the bug: the plan the experts write."""
        return f"{self.bug_file}:{self.bug_function}"

    @property
    def plan(self) -> str:
        return self.location

    @property
    def failing_test(self) -> str:
        return self.repo_tests[-1].text()

    @cached_property
    def fixed_modules(self) -> tuple[tuple[str, str], ...]:
        """The repository with the reference fix applied."""
        return apply_change(self.modules, Change(self.bug_file, self.bug_function, self.reference_fix))

    def brief(self) -> str:
        """The issue, every file, and the repository's tests (``test_app.py``)."""
        lines = [f"issue: {self.issue_text}"]
        for name, source in self.modules:
            lines += [f"# {name}", source.rstrip("\n")]
        lines += ["# test_app.py", *(t.text() for t in self.repo_tests)]
        return "\n".join(lines)


# ---------------------------------------------------------------- changes


_FILE_LINE = re.compile(r"^#?\s*(?:file:\s*)?([A-Za-z_]\w*\.py)\s*:?\s*$")


def _defs(source: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}


def parse_change(modules: Sequence[tuple[str, str]], text: str) -> Change:
    """The coder's message as a :class:`Change`: a first line naming the file (``# util.py``), then one
    def of a function that file defines, with the same parameters, no decorator and no annotation; nothing
    else. Raises :class:`ChangeError` saying what is wrong."""
    lines = text.strip("\n").splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    m = _FILE_LINE.match(lines[0].strip()) if lines else None
    if m is None:
        raise ChangeError("a change starts with the file it changes, e.g. '# util.py'")
    files = dict(modules)
    file = m.group(1)
    if file not in files:
        raise ChangeError(f"no file {file} in the repository ({', '.join(files)})")
    source = textwrap.dedent("\n".join(lines[1:])).strip("\n") + "\n"
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ChangeError(f"not Python: {exc}") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        raise ChangeError("a change is one def and nothing else")
    new = tree.body[0]
    old = _defs(files[file]).get(new.name)
    if old is None:
        raise ChangeError(f"{file} defines no function {new.name}")
    if new.decorator_list or new.returns is not None:
        raise ChangeError("no decorators or return annotation in a change")
    if ast.dump(new.args) != ast.dump(old.args):
        raise ChangeError(f"keep the parameters of {new.name}: ({ast.unparse(old.args)})")
    return Change(file, new.name, source)


def apply_change(modules: Sequence[tuple[str, str]], change: Change) -> tuple[tuple[str, str], ...]:
    """``modules`` with ``change``'s def in place of the function's old one."""
    out = []
    for name, source in modules:
        if name == change.file:
            old = _defs(source)[change.function]
            lines = source.splitlines(keepends=True)
            end = old.end_lineno if old.end_lineno is not None else old.lineno
            source = "".join(lines[: old.lineno - 1]) + change.source + "".join(lines[end:])
        out.append((name, source))
    return tuple(out)


# ---------------------------------------------------------------- running a repository


def _program(modules: Sequence[tuple[str, str]], file: str, function: str) -> str:
    """The trusted loader: every file becomes a module (imports between them work), then ``function`` of
    ``file`` is bound where the sandbox's harness calls it."""
    sources = [(name.removesuffix(".py"), source) for name, source in modules]
    return (
        "import sys as _sys\n"
        f"for _name, _source in {sources!r}:\n"
        "    _module = type(_sys)(_name)\n"
        "    _sys.modules[_name] = _module\n"
        "    exec(compile(_source, _name + '.py', 'exec'), _module.__dict__)\n"
        f"{function} = getattr(_sys.modules[{file.removesuffix('.py')!r}], {function!r})\n"
    )


async def judge_repo(
    sandbox: SandboxLike, modules: Sequence[tuple[str, str]], tests: Sequence[RepoTest]
) -> Judgement:
    """``modules`` against ``tests``: the tests of each function in a sandbox process of their own."""
    where = {fn: file for file, source in modules for fn in _defs(source)}
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(tests):
        groups.setdefault(t.function, []).append(i)
    results: list[CallResult] = [CallResult(error="no such function")] * len(tests)
    names = [fn for fn in groups if fn in where]
    runs = await asyncio.gather(
        *(
            run_calls(sandbox, _program(modules, where[fn], fn), fn, [tests[i].test.call for i in groups[fn]])
            for fn in names
        )
    )
    errors = []
    for fn, (found, error) in zip(names, runs, strict=True):
        for i, result in zip(groups[fn], found, strict=True):
            results[i] = result
        errors.append(error)
    passed = [r.passes(t.test) for r, t in zip(results, tests, strict=True)]
    return Judgement(passed, results, next((e for e in errors if e is not None), None))


def parse_repo_tests(
    lines: Sequence[str], functions: Sequence[str]
) -> tuple[list[RepoTest], list[tuple[str, str]]]:
    """Asserts on any of ``functions`` as :class:`RepoTest` (``teamrl.tasks.sandbox.calls.parse_assert``
    rules), and each refused line with the reason."""
    tests, refused = [], []
    for line in lines[:MAX_TESTER_TESTS]:
        called = re.findall(r"([A-Za-z_]\w*)\s*\(", line)
        name = next((c for c in called if c in functions), None)
        try:
            if name is None:
                raise UnjudgeableTest(f"calls none of the repository's functions ({', '.join(functions)})")
            tests.append(RepoTest(name, parse_assert(line, name)))
        except UnjudgeableTest as exc:
            refused.append((line, str(exc)))
    return tests, refused


@dataclass(frozen=True)
class _NamedCall(Call):
    """A call that names its own function, whichever function its text is asked for."""

    name: str = ""

    def text(self, function: str) -> str:
        return super().text(self.name)


def report_tests(tests: Sequence[RepoTest]) -> list[CallTest]:
    """``tests`` as CallTests whose text names their own function, for an execution report over several
    functions' tests (``teamrl.workflows.test_driven.execution_report`` names one)."""
    return [
        CallTest(
            _NamedCall(t.test.call.args, t.test.call.kwargs, t.function), t.test.expected, t.test.abs_tol
        )
        for t in tests
    ]


# ---------------------------------------------------------------- building repositories


def _digest(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()


def _load(modules: Sequence[tuple[str, str]]) -> dict[str, Callable[..., Any]]:
    """Every function of our own generated ``modules`` (never model output), imports resolved."""
    namespace: dict[str, Any] = {}
    for _, source in modules:
        code = "".join(line + "\n" for line in source.splitlines() if not line.startswith("from "))
        exec(code, namespace)
    return {k: v for k, v in namespace.items() if callable(v)}


@dataclass(frozen=True)
class _Raised:
    error: str

    def __str__(self) -> str:
        return self.error


def _safe(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    try:
        return function(*args)
    except Exception as exc:  # noqa: BLE001 - our own generated code on an input it does not take
        return _Raised(f"raises {type(exc).__name__}")


def _function(name: str, args: str, doc: str, body: tuple[str, ...]) -> str:
    return f"def {name}({args}):\n    # {doc}\n{_body_text(body)}"


Part = tuple[str, Params, str, str]  # (family, parameters, function name, module name)


def _modules(parts: Sequence[Part], bodies: Sequence[tuple[str, ...]]) -> tuple[tuple[str, str], ...]:
    files: dict[str, list[str]] = {}
    for (family, params, name, module), body in zip(parts, bodies, strict=True):
        shape = _FAMILIES[family].shape(params)
        files.setdefault(f"{module}.py", []).append(_function(name, shape.args, shape.text, body))
    out = [(f, "\n".join(defs)) for f, defs in files.items()]
    imports = [
        f"from {f.removesuffix('.py')} import {', '.join(p[2] for p in parts if p[3] + '.py' == f)}"
        for f in files
    ]
    args = _FAMILIES[parts[0][0]].shape(parts[0][1]).args
    expr = args
    for _, _, name, _ in parts:
        expr = f"{name}({expr})"
    out.append((TOP_FILE, "\n".join(imports) + f"\n\ndef {TOP_FUNCTION}({args}):\n    return {expr}\n"))
    return tuple(out)


def split_position(difficulty: int, family: str, params: Params) -> float:
    """A stable number in [0, 1) from the buggy function's fixed body alone (no name, file or context):
    the fix a held-out task asks for is never one a training task asks for."""
    body = _body_text(_FAMILIES[family].shape(params).body)
    return int(_digest("repo", difficulty, family, body)[:12], 16) / 16**12


@lru_cache(maxsize=4096)
def build_repo(difficulty: int, parts: tuple[Part, ...], bug: int) -> RepoTask:
    """The task of this canonical content (deterministic); :class:`RepoBuildError` where no bug mutation of
    the buggy helper shows at two of its own inputs and three top-level ones."""
    key = _digest(difficulty, parts, bug)
    rng = random.Random(key)
    family, params, bug_name, bug_module = parts[bug]
    fam = _FAMILIES[family]
    bodies = [_FAMILIES[p[0]].shape(p[1]).body for p in parts]
    modules = _modules(parts, bodies)
    ref = _load(modules)

    def inputs(fam_name: str) -> list[tuple[Any, ...]]:
        seen, out = set(), []
        for args in _FAMILIES[fam_name].inputs(rng) + _FAMILIES[fam_name].inputs(rng):
            if repr(args) not in seen:
                seen.add(repr(args))
                out.append(args)
        return out

    top_inputs = [a for a in inputs(parts[0][0]) if not isinstance(_safe(ref[TOP_FUNCTION], a), _Raised)]
    unit_inputs = inputs(family)
    want_top = [ref[TOP_FUNCTION](*a) for a in top_inputs]
    want_unit = [ref[bug_name](*a) for a in unit_inputs]
    mutants = fam.mutants(params)
    # the bug type rotates with the semantics (no names), so a renamed copy has the same bug
    start = int(_digest(difficulty, [(p[0], p[1]) for p in parts], bug)[:8], 16) % len(mutants)
    for mutant in mutants[start:] + mutants[:start]:
        buggy_body = fam.shape(mutant).body
        if buggy_body == bodies[bug]:
            continue
        buggy = _load(_modules(parts, [buggy_body if i == bug else b for i, b in enumerate(bodies)]))
        got_top = [_safe(buggy[TOP_FUNCTION], a) for a in top_inputs]
        got_unit = [_safe(buggy[bug_name], a) for a in unit_inputs]
        top_diff = [i for i, (g, w) in enumerate(zip(got_top, want_top, strict=True)) if g != w]
        unit_diff = [i for i, (g, w) in enumerate(zip(got_unit, want_unit, strict=True)) if g != w]
        if len(top_diff) >= 3 and len(unit_diff) >= 2:
            break
    else:
        raise RepoBuildError(f"no mutation of {family} {params!r} shows at the top of {parts!r}")
    shape = fam.shape(params)
    buggy_modules = _modules(parts, [buggy_body if i == bug else b for i, b in enumerate(bodies)])
    bug_file = f"{bug_module}.py"

    def test(fn: str, args: tuple[Any, ...], expected: Any) -> RepoTest:
        return RepoTest(fn, CallTest(Call(tuple(args)), expected))

    rng.shuffle(top_diff)
    rng.shuffle(unit_diff)
    top_same = [i for i in range(len(top_inputs)) if i not in top_diff]
    unit_same = [i for i in range(len(unit_inputs)) if i not in unit_diff]
    rng.shuffle(top_same)
    rng.shuffle(unit_same)
    issue_i, failing_i = top_diff[0], top_diff[1]
    call = f"{TOP_FUNCTION}({', '.join(_lit(a) for a in top_inputs[issue_i])})"
    have = got_top[issue_i]
    symptom = str(have) if isinstance(have, _Raised) else f"returns {_lit(have)}"
    issue = f"{call} {symptom} but should return {_lit(want_top[issue_i])}"

    # the repository's tests: a passing unit test of helpers (a third dropped), the failing top-level one
    shown: list[RepoTest] = []
    for i, (fam_name, _, name, _) in enumerate(parts):
        if i == bug:
            if unit_same and rng.random() < 2 / 3:
                a = unit_inputs[unit_same[0]]
                shown.append(test(name, a, ref[name](*a)))
        elif rng.random() < 2 / 3 or not shown and i == len(parts) - 1:
            a = rng.choice(inputs(fam_name))
            shown.append(test(name, a, ref[name](*a)))
    if not shown and top_same:
        shown.append(test(TOP_FUNCTION, top_inputs[top_same[0]], want_top[top_same[0]]))
    shown.append(test(TOP_FUNCTION, top_inputs[failing_i], want_top[failing_i]))

    hidden: list[RepoTest] = []
    # the experts' tests (the issue's call, unit_diff[0]) are none of the hidden ones
    hidden += [test(bug_name, unit_inputs[i], want_unit[i]) for i in unit_diff[1:4]]
    hidden += [test(TOP_FUNCTION, top_inputs[i], want_top[i]) for i in top_diff[1:4]]
    hidden += [test(bug_name, unit_inputs[i], want_unit[i]) for i in unit_same[1:2]]
    hidden += [test(TOP_FUNCTION, top_inputs[i], want_top[i]) for i in top_same[1:2]]
    for i, (fam_name, _, name, _) in enumerate(parts):
        if i != bug:
            a = rng.choice(inputs(fam_name))
            hidden.append(test(name, a, ref[name](*a)))

    # the experts' slip: another mutation (a wrong fix), else the function unchanged
    others = [m for m in mutants if fam.shape(m).body not in (bodies[bug], buggy_body)]
    wrong_body = fam.shape(rng.choice(others)).body if others else buggy_body
    unit = unit_inputs[unit_diff[0]]
    demo = (
        f"assert {call} == {_lit(want_top[issue_i])}",
        f"assert {bug_name}({', '.join(_lit(a) for a in unit)}) == {_lit(want_unit[unit_diff[0]])}",
    )
    return RepoTask(
        task_id=f"repo-d{difficulty}-m{len(modules)}-{key[:10]}",
        difficulty=difficulty,
        modules=buggy_modules,
        functions=(*((p[2], f"{p[3]}.py") for p in parts), (TOP_FUNCTION, TOP_FILE)),
        bug_file=bug_file,
        bug_function=bug_name,
        issue_text=issue,
        repo_tests=tuple(shown),
        hidden_tests=tuple(hidden),
        reference_fix=f"def {bug_name}({shape.args}):\n{_body_text(bodies[bug])}",
        wrong_fix=f"def {bug_name}({shape.args}):\n{_body_text(wrong_body)}",
        demo_tests=demo,
        split_position=split_position(difficulty, family, params),
    )


# ---------------------------------------------------------------- sampling


def _chain(rng: random.Random, n: int) -> list[str]:
    """``n`` families whose types chain (each takes what the one before returns), distinct where possible."""
    first = rng.choice(sorted(TYPES))
    chain = [first]
    while len(chain) < n:
        out = TYPES[chain[-1]][1]
        fits = sorted(f for f, (i, _) in TYPES.items() if i == out)
        fresh = [f for f in fits if f not in chain]
        chain.append(rng.choice(fresh or fits))
    return chain


def draw_repo(rng: random.Random, modules: int, difficulty: int) -> RepoTask:
    """One repository of ``modules`` files (app.py included) at ``difficulty``, drawn with ``rng``."""
    for _ in range(_TRIES):
        helpers = 2 if modules <= 3 else 3
        files = rng.sample(MODULE_NAMES, modules - 1)
        if modules == 2:
            layout = [files[0]] * helpers
        else:
            layout = files[:helpers]
        parts: list[Part] = []
        used: set[str] = set()
        for family, module in zip(_chain(rng, helpers), layout, strict=True):
            fam = _FAMILIES[family]
            name = rng.choice([n for n in fam.func_names if n not in used] or ["helper"])
            used.add(name)
            parts.append((family, rng.choice(list(fam.space(difficulty))), name, module))
        bug = rng.randrange(helpers)
        try:
            task = build_repo(difficulty, tuple(parts), bug)
        except RepoBuildError:
            continue
        return task
    raise RepoBuildError(f"no repository of {modules} modules at difficulty {difficulty} in {_TRIES} draws")


class RepoTasksConfig(TaskSettings):
    """Generated repositories with an issue (workflow repo_fix)."""

    suite: str = "repo"
    modules: tuple[int, int] = Field(
        (2, 3), description="[fewest, most] files of a repository, app.py included (2 to 4)"
    )
    difficulty: tuple[int, int] = Field(
        (1, 1), description="[lowest, highest] difficulty of its functions, 1 to 3"
    )
    heldout_fraction: float = Field(
        0.2, gt=0, lt=1, description="share of the repositories kept for held-out"
    )

    @model_validator(mode="after")
    def _ranges(self) -> RepoTasksConfig:
        for name, (lo, hi), allowed in (
            ("modules", self.modules, MODULES),
            ("difficulty", self.difficulty, DIFFICULTIES),
        ):
            if not allowed[0] <= lo <= hi <= allowed[-1]:
                raise ValueError(
                    f"{name} must be [lo, hi] with {allowed[0]} <= lo <= hi <= {allowed[-1]}, got {[lo, hi]}"
                )
        return self


class RepoSuite(TaskSuite[RepoTasksConfig]):
    """``repo``: generated repositories (see the module), train and held-out apart by their semantics."""

    Settings = RepoTasksConfig
    task_type = RepoTask

    def is_heldout(self, task: RepoTask) -> bool:
        return task.split_position < self.settings.heldout_fraction

    def sample(self, split: str, n: int, rng: random.Random) -> list[Any]:
        """``n`` repositories of ``split``, distinct where possible; size and difficulty drawn evenly."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is unknown; use one of {SPLITS}")
        s = self.settings
        tasks: list[RepoTask] = []
        seen: set[str] = set()
        while len(tasks) < n:
            for _ in range(_TRIES):
                task = draw_repo(rng, rng.randint(*s.modules), rng.randint(*s.difficulty))
                if self.is_heldout(task) == (split == "heldout") and task.task_id not in seen:
                    break
            else:
                raise RepoBuildError(
                    f"no new {split} repository in {_TRIES} draws: widen modules or difficulty"
                )
            seen.add(task.task_id)
            tasks.append(task)
        return tasks
