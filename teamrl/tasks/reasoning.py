"""Verifiable reasoning problems: a built-in generated suite, answer extraction, checkers, your own JSONL.

The built-in suite has four families: ``arith`` (multi-step arithmetic expressions) and three kinds
of short word problem, ``shopping`` (totals and change), ``ages`` and ``rates``. Difficulty 1-3
adds steps and makes the numbers larger. Every answer is an integer.

A generated problem is fully determined by its family, difficulty and numbers (its ``params``);
names and objects in the text come from a generator seeded by that content, so one problem always
reads the same. The train / held-out split hashes the same content, so the two splits never share a
problem, whatever the suite's seed.

A model's reply is scored in two steps: :func:`extract_answer` finds the final answer in its text
(after the last ``ANSWER:``, else the last number), then the task's checker (one of
:data:`CHECKERS`) compares it with the expected answer.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from teamrl.tasks.suite_args import choices, difficulty_levels
from teamrl.tasks.suite_args import heldout_fraction as check_heldout_fraction

SPLITS = ("train", "heldout")
DIFFICULTIES = (1, 2, 3)
DEFAULT_TOLERANCE = 1e-6

Answer = int | float | str | None
Params = tuple[int, ...]

_DISTINCT_TRIES = 50
_SPLIT_TRIES = 1000


@dataclass(frozen=True)
class ReasoningTask:
    """One question with its expected answer (None: no ground truth) and how to check a reply."""

    task_id: str
    question: str
    answer: Answer
    checker: str = "exact"
    tolerance: float = DEFAULT_TOLERANCE
    family: str = "user"
    difficulty: int = 0
    params: Params = ()
    solution: tuple[str, ...] = ()  # worked steps "a op b = c" of a generated problem, for demonstrations

    def brief(self) -> str:
        """The task as shown to a role."""
        return f"question: {self.question}"

    def check(self, predicted: str | None) -> bool:
        """Whether the extracted final answer ``predicted`` is right; needs a ground-truth answer."""
        if self.answer is None:
            raise ValueError(f"task {self.task_id} has no ground-truth answer to check against")
        return CHECKERS[self.checker](predicted, self.answer, self.tolerance)


# ---------------------------------------------------------------- answers

# "ANSWER: 42", "the answer is 42", "answer = 42", GSM8K's "#### 42"
_MARKER = re.compile(r"\banswer\s*(?:is\b|:|=)|####", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
# A minus sign counts only where it cannot be a binary minus ("12-5" holds 12 and 5, not -5).
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?|\d+(?:,\d{3})*(?:\.\d+)?")
_TRIM = " \t.,;:!*\"'`"


def extract_answer(text: str) -> str | None:
    """The final answer written in ``text``, or None when it gives none.

    The rest of the line after the last answer marker ("ANSWER: 42", "the answer is 42",
    "#### 42") or the last ``\\boxed{...}``, whichever comes later; without either, the last number
    in the text. A marker followed by nothing is no answer: the last number before it is reasoning.
    """
    marker = None
    for m in _MARKER.finditer(text):
        marker = m
    boxed = None
    for m in _BOXED.finditer(text):
        boxed = m
    if boxed is not None and (marker is None or boxed.start() > marker.start()):
        answer = boxed.group(1).strip(_TRIM)
        return answer or None
    if marker is not None:
        rest = text[marker.end() :].strip()  # "ANSWER:\n42" still answers 42
        answer = rest.split("\n", 1)[0].strip(_TRIM)
        return answer or None
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def answer_number(answer: str | None) -> float | None:
    """The number an answer states: "42", "-3.5", "1,200", "$12", "12 dollars"; None otherwise.

    The answer must start with the number and hold no other digits ("3 apples and 2 pears" is not
    a number)."""
    if answer is None:
        return None
    s = answer.strip(_TRIM).removeprefix("$").strip()
    m = _NUMBER.match(s)
    if m is None or any(c.isdigit() for c in s[m.end() :]):
        return None
    return float(m.group().replace(",", ""))


def extract_int(text: str) -> int | None:
    """The final answer in ``text`` as an integer ("ANSWER: 42", "42.0", "the answer is $1,200")."""
    value = answer_number(extract_answer(text))
    if value is None or not value.is_integer():
        return None
    return int(value)


def normalize_answer(answer: str) -> str:
    """A canonical form under which equal answers compare equal: numbers as "42" / "2.5", text
    lower-cased with single spaces. Used by the exact checker and by majority votes."""
    value = answer_number(answer)
    if value is not None:
        return str(int(value)) if value.is_integer() else repr(value)
    return " ".join(answer.strip(_TRIM).casefold().split())


def _check_exact(predicted: str | None, expected: Answer, tolerance: float) -> bool:
    return predicted is not None and normalize_answer(predicted) == normalize_answer(str(expected))


def _check_numeric(predicted: str | None, expected: Answer, tolerance: float) -> bool:
    got, want = answer_number(predicted), answer_number(str(expected))
    return got is not None and want is not None and abs(got - want) <= tolerance


_WORD = re.compile(r"\w+(?:[.'-]\w+)*")
CONTAINS_EXTRA_WORDS = 3


def _check_contains(predicted: str | None, expected: Answer, tolerance: float) -> bool:
    """The expected words appear together, as whole words, in an answer at most
    ``CONTAINS_EXTRA_WORDS`` words longer: "It is Paris." answers "Paris", but "comparison" does not,
    and neither does a list of every candidate ("Paris, London, Berlin, Rome, Madrid")."""
    if predicted is None:
        return False
    want, got = _WORD.findall(str(expected).casefold()), _WORD.findall(predicted.casefold())
    if not want or len(got) > len(want) + CONTAINS_EXTRA_WORDS:
        return False
    return any(got[i : i + len(want)] == want for i in range(len(got) - len(want) + 1))


Checker = Callable[[str | None, Answer, float], bool]
# (extracted answer or None, expected answer, tolerance) -> correct?
CHECKERS: dict[str, Checker] = {
    "exact": _check_exact,  # the same answer after normalize_answer
    "numeric": _check_numeric,  # numbers within the task's tolerance
    # the expected words appear in a short answer (case, spacing and punctuation ignored)
    "contains": _check_contains,
}


# ---------------------------------------------------------------- generated families


@dataclass(frozen=True)
class _Problem:
    question: str
    answer: int
    solution: tuple[str, ...]


@dataclass(frozen=True)
class _Family:
    """Draws the numbers of a problem at a difficulty, and renders numbers (+ a surface rng) as text."""

    draw: Callable[[random.Random, int], Params]
    render: Callable[[Params, int, random.Random], _Problem]


def _step(a: int, op: str, b: int) -> tuple[int, str]:
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return value, f"{a} {op} {b} = {value}"


_OPS = ("+", "-", "*")
# difficulty -> (operations, smallest operand, largest operand, largest multiplier)
_ARITH = {1: (2, 1, 9, 5), 2: (3, 2, 20, 9), 3: (4, 10, 99, 12)}


def _draw_arith(rng: random.Random, d: int) -> Params:
    steps, lo, hi, mul = _ARITH[d]
    params = [rng.randint(lo, hi)]
    for _ in range(steps):
        op = rng.randrange(len(_OPS))
        params += [op, rng.randint(2, mul) if _OPS[op] == "*" else rng.randint(lo, hi)]
    return tuple(params)


def _render_arith(p: Params, d: int, rng: random.Random) -> _Problem:
    """Operations applied left to right, written with the usual precedence: "(7 + 5) * 3 - 4"."""
    value, expr, loose, lines = p[0], str(p[0]), False, []
    for op_index, n in zip(p[1::2], p[2::2], strict=True):
        op = _OPS[op_index]
        if op == "*" and loose:
            expr = f"({expr})"
        expr, loose = f"{expr} {op} {n}", op != "*"
        value, line = _step(value, op, n)
        lines.append(line)
    return _Problem(f"What is {expr}?", value, tuple(lines))


_PEOPLE = ("Ana", "Ben", "Carla", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jo", "Kim", "Leo")
_ITEMS = ("pens", "notebooks", "apples", "cups", "books", "tickets", "plates", "candles")
_BILLS = (20, 50, 100, 200, 500, 1000)
# difficulty -> (largest quantity, smallest price, largest price)
_SHOP = {1: (6, 2, 12), 2: (9, 2, 20), 3: (9, 5, 40)}


def _draw_shopping(rng: random.Random, d: int) -> Params:
    qmax, plo, phi = _SHOP[d]
    items = 1 if d == 1 else 2
    return tuple(v for _ in range(items) for v in (rng.randint(2, qmax), rng.randint(plo, phi)))


def _render_shopping(p: Params, d: int, rng: random.Random) -> _Problem:
    name = rng.choice(_PEOPLE)
    items = rng.sample(_ITEMS, len(p) // 2)
    costs, lines, bought = [], [], []
    for item, (q, price) in zip(items, zip(p[::2], p[1::2], strict=True), strict=True):
        cost, line = _step(q, "*", price)
        costs.append(cost)
        lines.append(line)
        bought.append(f"{q} {item} at {price} dollars each")
    question = f"{name} buys {' and '.join(bought)}."
    if d == 1:
        return _Problem(f"{question} How many dollars does {name} pay?", costs[0], tuple(lines))
    total, line = _step(costs[0], "+", costs[1])
    lines.append(line)
    if d == 2:
        return _Problem(f"{question} How many dollars does {name} pay in total?", total, tuple(lines))
    bill = next(b for b in _BILLS if b > total)
    change, line = _step(bill, "-", total)
    lines.append(line)
    question += f" {name} pays with a {bill}-dollar bill. How many dollars of change does {name} get?"
    return _Problem(question, change, tuple(lines))


_RELATIVES = ("sister", "brother", "cousin", "friend")
_PARENTS = ("mother", "father", "aunt", "uncle")
_GRANDPARENTS = ("grandfather", "grandmother")


def _draw_ages(rng: random.Random, d: int) -> Params:
    if d == 1:
        older, gap = rng.randrange(2), rng.randint(1, 9)
        return older, rng.randint(gap + 2, gap + 15), gap
    age, times, years = rng.randint(3, 12), rng.randint(2, 5 if d == 2 else 4), rng.randint(2, 20)
    return (age, times, years) if d == 2 else (age, times, rng.randint(20, 35), years)


def _render_ages(p: Params, d: int, rng: random.Random) -> _Problem:
    name = rng.choice(_PEOPLE)
    if d == 1:
        older, age, gap = p
        other = rng.choice(_RELATIVES)
        value, line = _step(age, "+" if older else "-", gap)
        question = (
            f"{name} is {age} years old. {name}'s {other} is {gap} years {'older' if older else 'younger'} "
            f"than {name}. How old is {name}'s {other}?"
        )
        return _Problem(question, value, (line,))
    age, times, years = p[0], p[1], p[-1]
    parent = rng.choice(_PARENTS)
    parent_age, line = _step(age, "*", times)
    lines = [line]
    question = f"{name} is {age} years old. {name}'s {parent} is {times} times as old as {name}."
    if d == 2:
        value, line = _step(parent_age, "+", years)
        question += f" How old will {name}'s {parent} be in {years} years?"
        return _Problem(question, value, (*lines, line))
    gap, elder = p[2], rng.choice(_GRANDPARENTS)
    elder_age, line = _step(parent_age, "+", gap)
    lines.append(line)
    now = age + parent_age + elder_age
    lines.append(f"{age} + {parent_age} + {elder_age} = {now}")
    later, line = _step(3, "*", years)
    lines.append(line)
    value, line = _step(now, "+", later)
    lines.append(line)
    question += (
        f" {name}'s {elder} is {gap} years older than {name}'s {parent}."
        f" What will the sum of their three ages be in {years} years?"
    )
    return _Problem(question, value, tuple(lines))


# (one producer, what it does, the base verb, what it produces)
_PRODUCERS = (
    ("machine", "makes", "make", "bottles"),
    ("printer", "prints", "print", "pages"),
    ("baker", "bakes", "bake", "cookies"),
    ("packer", "packs", "pack", "boxes"),
)
# (container, what fills it, unit)
_CONTAINERS = (("tank", "pipes", "liters"), ("pool", "hoses", "liters"), ("barrel", "taps", "liters"))


def _draw_rates(rng: random.Random, d: int) -> Params:
    if d == 1:
        return rng.randint(2, 12), rng.randint(2, 9)
    if d == 2:
        return rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 20)
    r1, r2, minutes = rng.randint(3, 25), rng.randint(3, 25), rng.randint(5, 20)
    capacity = ((r1 + r2) * minutes // 50 + 1 + rng.randint(0, 4)) * 50  # a round size above what is filled
    return r1, r2, minutes, capacity


def _render_rates(p: Params, d: int, rng: random.Random) -> _Problem:
    if d == 1:
        rate, minutes = p
        who, does, do, unit = rng.choice(_PRODUCERS)
        value, line = _step(rate, "*", minutes)
        question = f"A {who} {does} {rate} {unit} per minute. "
        question += f"How many {unit} does the {who} {do} in {minutes} minutes?"
        return _Problem(question, value, (line,))
    r1, r2, minutes = p[:3]
    together, line = _step(r1, "+", r2)
    done, line2 = _step(together, "*", minutes)
    if d == 2:
        who, does, do, unit = rng.choice(_PRODUCERS)
        question = (
            f"One {who} {does} {r1} {unit} per minute and a second {who} {does} {r2} {unit} per minute. "
            f"How many {unit} do the two {who}s {do} together in {minutes} minutes?"
        )
        return _Problem(question, done, (line, line2))
    capacity = p[3]
    container, fillers, unit = rng.choice(_CONTAINERS)
    value, line3 = _step(capacity, "-", done)
    question = (
        f"A {container} holds {capacity} {unit}. Two {fillers} fill it, one with {r1} {unit} per minute and "
        f"the other with {r2} {unit} per minute. After {minutes} minutes, how many more {unit} does the "
        f"{container} need to be full?"
    )
    return _Problem(question, value, (line, line2, line3))


_FAMILIES: dict[str, _Family] = {
    "arith": _Family(_draw_arith, _render_arith),
    "shopping": _Family(_draw_shopping, _render_shopping),
    "ages": _Family(_draw_ages, _render_ages),
    "rates": _Family(_draw_rates, _render_rates),
}
FAMILIES = tuple(_FAMILIES)


def _digest(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()


def _split_position(family: str, difficulty: int, params: Params) -> float:
    """A stable number in [0, 1) from the problem's content only (no seed, no surface text)."""
    return int(_digest("split", family, difficulty, params)[:12], 16) / 16**12


def build_task(family: str, difficulty: int, params: Params) -> ReasoningTask:
    """The one task a family, difficulty and numbers make."""
    if family not in _FAMILIES:
        raise ValueError(f"family={family!r} is unknown; use one of {FAMILIES}")
    key = _digest(family, difficulty, params)
    problem = _FAMILIES[family].render(params, difficulty, random.Random(key))
    return ReasoningTask(
        task_id=f"{family}-d{difficulty}-{key[:10]}",
        question=problem.question,
        answer=problem.answer,
        checker="exact",
        family=family,
        difficulty=difficulty,
        params=params,
        solution=problem.solution,
    )


class ReasoningTaskSuite:
    """Samples generated problems of the chosen families and difficulties, train and held-out apart."""

    def __init__(
        self,
        seed: int = 0,
        difficulty: int | tuple[int, int] = (1, 2),
        families: tuple[str, ...] = FAMILIES,
        heldout_fraction: float = 0.2,
    ) -> None:
        self.seed = seed
        self.difficulties = difficulty_levels(difficulty, DIFFICULTIES)
        self.families = choices("families", families, tuple(_FAMILIES))
        self.heldout_fraction = check_heldout_fraction(heldout_fraction)

    def _in_split(self, family: str, difficulty: int, params: Params, split: str) -> bool:
        return (_split_position(family, difficulty, params) < self.heldout_fraction) == (split == "heldout")

    def _draw(self, split: str, rng: random.Random) -> ReasoningTask:
        family, d = rng.choice(self.families), rng.choice(self.difficulties)
        draw = _FAMILIES[family].draw
        for _ in range(_SPLIT_TRIES):
            params = draw(rng, d)
            if self._in_split(family, d, params, split):
                return build_task(family, d, params)
        raise RuntimeError(
            f"no {split} problem of family {family!r} at difficulty {d} in {_SPLIT_TRIES} draws"
        )

    def sample(self, split: str, n: int, rng: random.Random) -> list[ReasoningTask]:
        """``n`` problems of ``split``, distinct where possible; family and difficulty drawn evenly."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is unknown; use one of {SPLITS}")
        if n < 0:
            raise ValueError(f"n={n} must be >= 0")
        tasks: list[ReasoningTask] = []
        seen: set[str] = set()
        for _ in range(n):
            for _attempt in range(_DISTINCT_TRIES):
                task = self._draw(split, rng)
                if task.task_id not in seen:
                    break
            seen.add(task.task_id)
            tasks.append(task)
        return tasks

    def fixed_set(self, split: str, n: int) -> list[ReasoningTask]:
        """A deterministic set: the same suite seed and settings give the same problems in order."""
        return self.sample(split, n, random.Random(f"teamrl-reasoning-{self.seed}-{split}"))

    def is_heldout(self, task: ReasoningTask) -> bool:
        return _split_position(task.family, task.difficulty, task.params) < self.heldout_fraction


# ---------------------------------------------------------------- your own tasks


class TaskFileError(ValueError):
    """A task file that cannot be used; the one-line message names the file and line and the fix."""


_FIELDS = ("id", "question", "answer", "checker", "tolerance")
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _json_type(value: object) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _task_from_record(record: object, default_id: str) -> ReasoningTask:
    """One task from one parsed JSON line; raises ValueError with a one-line reason."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object with 'question' and 'answer', got {_json_type(record)}")
    for key in record:
        if key not in _FIELDS:
            near = difflib.get_close_matches(key, _FIELDS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"unknown field {key!r}{hint}; the fields are {', '.join(_FIELDS)}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"'question' must be a non-empty string, got {_json_type(question)}")
    if "answer" not in record:
        raise ValueError("missing 'answer' (write \"answer\": null for a question without a known answer)")
    answer = record["answer"]
    if not (answer is None or isinstance(answer, str) or _is_number(answer)):
        raise ValueError(f"'answer' must be a number, a string or null, got {_json_type(answer)}")
    checker = record.get("checker", "exact")
    if checker not in CHECKERS:
        raise ValueError(f"checker {checker!r} is unknown; use one of {', '.join(CHECKERS)}")
    if checker == "numeric" and answer is not None and answer_number(str(answer)) is None:
        raise ValueError(f"the numeric checker needs a numeric 'answer', got {answer!r}")
    tolerance = record.get("tolerance", DEFAULT_TOLERANCE)
    if "tolerance" in record and checker != "numeric":
        raise ValueError(f"'tolerance' is only used by the numeric checker, not by {checker!r}")
    if not _is_number(tolerance) or tolerance < 0:
        raise ValueError(f"'tolerance' must be a number >= 0, got {tolerance!r}")
    task_id = record.get("id", default_id)
    if isinstance(task_id, bool) or not isinstance(task_id, str | int) or not str(task_id).strip():
        raise ValueError(f"'id' must be a non-empty string or an integer, got {task_id!r}")
    return ReasoningTask(
        task_id=str(task_id), question=question, answer=answer, checker=checker, tolerance=float(tolerance)
    )


def load_jsonl_tasks(path: str | Path) -> list[ReasoningTask]:
    """Your own tasks, one JSON object a line: ``{"question": ..., "answer": ..., "checker": ...}``.

    ``answer`` is a number, a string, or null when unknown (a debate then takes its majority answer
    as the label); ``checker`` is one of :data:`CHECKERS` (default "exact"); ``tolerance`` (numeric
    checker only, default 1e-6) and ``id`` (default ``<file stem>-<line>``) are optional. Blank lines
    are skipped. A bad line raises :class:`TaskFileError` naming the file, the line and the fix.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFileError(f"{path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    except OSError as exc:
        raise TaskFileError(f"{path}: cannot read the task file ({exc.strerror or exc})") from None
    tasks: list[ReasoningTask] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            task = _task_from_record(record, default_id=f"{path.stem}-{lineno}")
            if task.task_id in first_line:
                raise ValueError(f"id {task.task_id!r} was already used on line {first_line[task.task_id]}")
        except ValueError as exc:
            raise TaskFileError(f"{path}:{lineno}: {exc}") from None
        first_line[task.task_id] = lineno
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"{path}: no tasks in the file; write one JSON object a line")
    return tasks


def split_task_file(tasks: list[ReasoningTask], heldout_fraction: float) -> dict[str, list[ReasoningTask]]:
    """A file's tasks by split, in file order: a stable hash of each id puts it in train or held-out.

    Raises :class:`TaskFileError` when a split is left empty (too few tasks for ``heldout_fraction``)."""
    check_heldout_fraction(heldout_fraction)
    splits: dict[str, list[ReasoningTask]] = {split: [] for split in SPLITS}
    for task in tasks:
        position = int(_digest("file-split", task.task_id)[:12], 16) / 16**12
        splits["heldout" if position < heldout_fraction else "train"].append(task)
    for split, chosen in splits.items():
        if not chosen:
            raise TaskFileError(
                f"the {len(tasks)} tasks leave the {split} split empty at "
                f"heldout_fraction={heldout_fraction}; add tasks or change heldout_fraction"
            )
    return splits


class TaskFileSuite:
    """Your own tasks (:func:`load_jsonl_tasks`), sampled like :class:`ReasoningTaskSuite`'s."""

    def __init__(self, path: str | Path, seed: int = 0, heldout_fraction: float = 0.2) -> None:
        self.seed = seed
        self.splits = split_task_file(load_jsonl_tasks(path), heldout_fraction)

    def sample(self, split: str, n: int, rng: random.Random) -> list[ReasoningTask]:
        """``n`` tasks of ``split``, distinct until the split runs out, then drawn again."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is unknown; use one of {SPLITS}")
        pool = self.splits[split]
        tasks: list[ReasoningTask] = []
        while len(tasks) < n:
            tasks += rng.sample(pool, min(n - len(tasks), len(pool)))
        return tasks

    def fixed_set(self, split: str, n: int) -> list[ReasoningTask]:
        """A deterministic set of at most the split's size: the same file, seed and ``n`` give the same
        tasks in order."""
        n = min(n, len(self.splits[split]))
        return self.sample(split, n, random.Random(f"teamrl-task-file-{self.seed}-{split}"))
