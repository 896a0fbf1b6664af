"""Built-in suite of small, procedurally generated Python programming tasks.

The texts are deliberately short and regular: a model of a few million parameters,
trained from scratch, has to learn spec -> code largely by copying names and
constants and by mapping words ("plus", "times", "above", "reversed") to code.

Every task is fully determined by its canonical content (family, difficulty,
parameters, function name, kind); examples and tests are derived from it with a
content-seeded generator, so the same task always reads the same. The train /
held-out split hashes only the *semantics* (family, difficulty and the reference
body, without the function name or the kind), so a held-out task is never a
renamed or re-kinded copy of a training task.

The task families (templates, parameter spaces, bug mutations) are in
:mod:`teamrl.tasks.programming_families`; this module builds tasks from them and samples the suite.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from typing import Any

from teamrl.tasks.programming_families import _FAMILIES, FAMILIES, Params
from teamrl.tasks.programming_families import Pred as Pred  # the parameter types, re-exported
from teamrl.tasks.programming_families import Step as Step
from teamrl.tasks.programming_families import Steps as Steps
from teamrl.tasks.sandbox.calls import CallTest, CheckFunction, parse_assert
from teamrl.tasks.suite_args import choices, difficulty_levels
from teamrl.tasks.suite_args import heldout_fraction as check_heldout_fraction

KINDS = ("write", "fix")
SPLITS = ("train", "heldout")
DIFFICULTIES = (1, 2, 3)

_N_HIDDEN = 5
_POOL_DRAWS = 4
_DISTINCT_TRIES = 50


@dataclass(frozen=True)
class ProgrammingTask:
    """One generated task, with demonstrations for every role of the team."""

    task_id: str
    kind: str
    family: str
    difficulty: int
    func_name: str
    spec: str
    examples: tuple[str, ...]
    hidden_tests: tuple[str, ...]
    reference_solution: str
    buggy_solution: str
    issue_text: str
    failing_test: str
    plan: str
    plan_keys: tuple[str, ...]
    review_comment: str
    demo_tests: tuple[str, ...]
    check: CheckFunction | None = None  # HumanEval-style tests, judged instead of hidden_tests

    @cached_property
    def hidden_calls(self) -> tuple[CallTest, ...]:
        """``hidden_tests`` as calls and expected values (what the sandbox judges)."""
        return tuple(parse_assert(test, self.func_name) for test in self.hidden_tests)

    @property
    def tests(self) -> Sequence[CallTest] | CheckFunction:
        """What a program for this task is judged on (``teamrl.tasks.sandbox.judge``)."""
        return self.check if self.check is not None else self.hidden_calls

    def brief(self) -> str:
        """The task as shown to the team: spec and examples, plus issue, test and code for "fix"."""
        lines = [f"{self.kind} {self.spec}"]
        if self.examples:
            lines.append("examples: " + "; ".join(self.examples))
        if self.kind == "fix":
            lines += [f"issue: {self.issue_text}", f"failing test: {self.failing_test}", "code:"]
            lines.append(self.buggy_solution.rstrip("\n"))
        return "\n".join(lines)


# ---------------------------------------------------------------- building tasks


def _digest(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()


def _body_text(body: tuple[str, ...]) -> str:
    return "".join(f"    {line}\n" for line in body)


def _split_position(family: str, difficulty: int, body_text: str) -> float:
    """A stable number in [0, 1) from the task's semantics only (no name, kind or seed)."""
    return int(_digest(family, difficulty, body_text)[:12], 16) / 16**12


def _lit(value: Any) -> str:
    """A Python literal with double-quoted strings, so code and tests read alike."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_lit(v) for v in value) + "]"
    return str(value)


def _load(code: str, func_name: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # generated from our own templates, never from model output
    return namespace[func_name]


def _differs(f: Callable[..., Any], args: tuple[Any, ...], want: Any) -> bool:
    """Whether ``f(*args)`` differs from ``want`` (raising counts as differing)."""
    try:
        return bool(f(*args) != want)
    except Exception:  # a buggy variant of our own that fails on this input
        return True


@lru_cache(maxsize=8192)
def _build(family: str, difficulty: int, params: Params, func_name: str, kind: str) -> ProgrammingTask:
    fam = _FAMILIES[family]
    key = _digest(family, difficulty, params, func_name, kind)
    rng = random.Random(key)
    shape = fam.shape(params)

    def source(p: Params) -> str:
        """The function the family writes for parameters ``p`` (the reference's, or a buggy variant's)."""
        return f"def {func_name}({shape.args}):\n{_body_text(fam.shape(p).body)}"

    reference = source(params)
    ref = _load(reference, func_name)

    pool: list[tuple[str, tuple[Any, ...]]] = []
    seen: set[str] = set()

    def draw(stream: random.Random) -> list[int]:
        """One draw of the family's inputs from ``stream``: the calls not seen yet join the pool; their
        indices."""
        new = []
        for args in fam.inputs(stream):
            call = f"{func_name}({', '.join(_lit(a) for a in args)})"
            if call not in seen:
                seen.add(call)
                pool.append((call, args))
                new.append(len(pool) - 1)
        return new

    # A rare filter can leave a random pool with nearly one answer; then draw more inputs.
    for _ in range(_POOL_DRAWS):
        draw(rng)
        if len({_lit(ref(*args)) for _, args in pool}) >= 3:
            break
    rng.shuffle(pool)
    expected = [ref(*args) for _, args in pool]

    # Rotate the start so the bug type varies across tasks instead of always being the first mutation.
    mutants = fam.mutants(params)
    start = int(key[:8], 16) % len(mutants)
    for mutant in mutants[start:] + mutants[:start]:
        buggy = source(mutant)
        if buggy == reference:
            continue
        got = [_load(buggy, func_name)(*args) for _, args in pool]
        diff = [i for i in range(len(pool)) if got[i] != expected[i]]
        if len(diff) >= 2:
            break
    else:
        raise RuntimeError(
            f"no bug mutation of family {family!r} params {params!r} fails two inputs; "
            "add a mutation or widen the family's input pool"
        )

    # One failing input is shown (examples, issue, review); another is kept back among the hidden tests.
    # The rest are picked for outputs not seen yet, so the tests cover more than one behaviour.
    shown, kept = diff[0], diff[1]
    outputs = [_lit(v) for v in expected]
    rest = [i for i in range(len(pool)) if i not in (shown, kept)]
    rest.sort(key=lambda i: outputs[i] == outputs[shown])
    example_ids = [shown, rest.pop(0)]
    hidden_ids, covered = [kept], {outputs[kept]}
    # Then inputs on which the task's other buggy variants fail, so that none of them (a boundary one off,
    # the other comparison) passes every hidden test where some input tells it apart: drawn from the rest
    # of the pool and from further inputs (their own stream: the examples above stay as they were).
    more = random.Random(f"{key}:hidden")
    for _ in range(_POOL_DRAWS):
        for i in draw(more):
            expected.append(ref(*pool[i][1]))
            outputs.append(_lit(expected[-1]))
            rest.append(i)
    caught: list[set[int]] = []  # per other buggy variant: the inputs on which it fails
    for mutant in mutants:
        variant = source(mutant)
        if variant in (reference, buggy):
            continue
        f = _load(variant, func_name)
        fails = {i for i in [kept, *rest] if _differs(f, pool[i][1], expected[i])}
        if fails:
            caught.append(fails)
    pending = [c for c in caught if kept not in c]
    while pending:
        best = max(
            (i for i in rest if i not in hidden_ids),
            key=lambda i: (sum(i in c for c in pending), outputs[i] not in covered),
        )
        hidden_ids.append(best)
        covered.add(outputs[best])
        pending = [c for c in pending if best not in c]
    for i in rest:
        if len(hidden_ids) < _N_HIDDEN and outputs[i] not in covered and i not in hidden_ids:
            hidden_ids.append(i)
            covered.add(outputs[i])
    hidden_ids += [i for i in rest if i not in hidden_ids][: max(0, _N_HIDDEN - len(hidden_ids))]
    rng.shuffle(example_ids)
    rng.shuffle(hidden_ids)

    def claim(i: int) -> str:
        return f"{pool[i][0]} == {_lit(expected[i])}"

    examples = tuple(claim(i) for i in example_ids)
    call, want, have = pool[shown][0], _lit(expected[shown]), _lit(got[shown])
    return ProgrammingTask(
        task_id=f"{family}-d{difficulty}-{kind}-{key[:10]}",
        kind=kind,
        family=family,
        difficulty=difficulty,
        func_name=func_name,
        spec=f"{func_name}({shape.args}): {shape.text}",
        examples=examples,
        hidden_tests=tuple(f"assert {claim(i)}" for i in hidden_ids),
        reference_solution=reference,
        buggy_solution=buggy,
        issue_text=f"{call} returns {have} but should return {want}" if kind == "fix" else "",
        failing_test=f"assert {call} == {want}" if kind == "fix" else "",
        plan="; ".join(shape.plan),
        plan_keys=shape.keys,
        review_comment=f"{call} gives {have}, expected {want}",
        demo_tests=tuple(f"assert {e}" for e in examples),
    )


@cache
def _semantic_space(family: str, difficulty: int) -> tuple[tuple[Params, float], ...]:
    """Every parameter tuple of a family at a difficulty, with its split position."""
    fam = _FAMILIES[family]
    return tuple(
        (p, _split_position(family, difficulty, _body_text(fam.shape(p).body))) for p in fam.space(difficulty)
    )


@cache
def plan_vocabulary() -> frozenset[str]:
    """Every key item (operation word, constant) a task of this suite can ask a plan to name."""
    return frozenset(
        key.lower()
        for fam in _FAMILIES.values()
        for d in DIFFICULTIES
        for params in fam.space(d)
        for key in fam.shape(params).keys
    )


# ---------------------------------------------------------------- the suite


class ProgrammingTaskSuite:
    """Samples write/fix tasks from all families, keeping train and held-out tasks apart."""

    def __init__(
        self,
        seed: int = 0,
        difficulty: int | tuple[int, int] = (1, 2),
        kinds: tuple[str, ...] = KINDS,
        heldout_fraction: float = 0.2,
    ) -> None:
        self.seed = seed
        self.difficulties = difficulty_levels(difficulty, DIFFICULTIES)
        self.kinds = choices("kinds", kinds, KINDS)
        self.heldout_fraction = check_heldout_fraction(heldout_fraction)
        # split -> family -> difficulty -> parameter tuples; empty entries dropped so sampling never stalls.
        self._pools: dict[str, dict[str, dict[int, list[Params]]]] = {s: {} for s in SPLITS}
        for family in FAMILIES:
            for d in self.difficulties:
                for params, position in _semantic_space(family, d):
                    split = SPLITS[position < heldout_fraction]
                    self._pools[split].setdefault(family, {}).setdefault(d, []).append(params)

    def _pool(self, split: str) -> dict[str, dict[int, list[Params]]]:
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is unknown; use one of {SPLITS}")
        pool = self._pools[split]
        if not pool:
            raise ValueError(f"split {split!r} is empty at heldout_fraction={self.heldout_fraction}; move it")
        return pool

    def sample(self, split: str, n: int, rng: random.Random) -> list[ProgrammingTask]:
        """`n` tasks of `split`, distinct where possible; family, difficulty and kind drawn evenly."""
        pool = self._pool(split)
        if n < 0:
            raise ValueError(f"n={n} must be >= 0")
        families = list(pool)
        tasks: list[ProgrammingTask] = []
        seen: set[str] = set()
        for _ in range(n):
            for _attempt in range(_DISTINCT_TRIES):
                family = rng.choice(families)
                d = rng.choice(list(pool[family]))
                task = _build(
                    family,
                    d,
                    rng.choice(pool[family][d]),
                    rng.choice(_FAMILIES[family].func_names),
                    rng.choice(self.kinds),
                )
                if task.task_id not in seen:
                    break
            seen.add(task.task_id)
            tasks.append(task)
        return tasks

    def fixed_set(self, split: str, n: int) -> list[ProgrammingTask]:
        """A deterministic evaluation set: same suite seed and settings give the same tasks in order."""
        return self.sample(split, n, random.Random(f"teamrl-programming-{self.seed}-{split}"))

    def is_heldout(self, task: ProgrammingTask) -> bool:
        body = task.reference_solution.split("\n", 1)[1]
        return _split_position(task.family, task.difficulty, body) < self.heldout_fraction

    def count(self, split: str) -> int:
        """Number of distinct tasks in `split` under this suite's difficulty and kinds."""
        pool = self._pool(split)
        return sum(
            len(params) * len(_FAMILIES[family].func_names) * len(self.kinds)
            for family, by_difficulty in pool.items()
            for params in by_difficulty.values()
        )
