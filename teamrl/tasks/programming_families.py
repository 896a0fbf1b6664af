"""The task families of the built-in programming suite (:mod:`teamrl.tasks.programming`).

A family is a task template: a parameter space per difficulty, a renderer from parameters to the
task's semantic content (signature, spec text, reference body, plan, plan keys) and bug mutations
of the parameters. Here too are the pieces the families share: arithmetic steps, predicates and
the input generators their examples and tests are drawn from.
"""

from __future__ import annotations

import itertools
import operator
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Step = tuple[str, int]  # ("add" | "sub" | "mul", constant)
Steps = tuple[Step, ...]
Pred = tuple[str, int]  # ("even" | "odd" | "above" | "below" | "equal", constant)
Params = tuple[Any, ...]

_OP_SYMBOL = {"add": "+", "sub": "-", "mul": "*"}
_OP_WORD = {"add": "plus", "sub": "minus", "mul": "times"}
_OP_APPLY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}
_OP_VERB = {"add": "add", "sub": "subtract", "mul": "multiply"}
# The wrong operator a hurried coder writes; mul -> add rather than sub so the bug looks plausible.
_OP_SWAP = {"add": "sub", "sub": "add", "mul": "add"}
_CONSTS = range(2, 10)

_PRED_CODE = {
    "even": "{v} % 2 == 0",
    "odd": "{v} % 2 == 1",
    "above": "{v} > {k}",
    "below": "{v} < {k}",
    "equal": "{v} == {k}",
}
_PRED_FLIP = {"even": "odd", "odd": "even", "above": "below", "below": "above"}
_PARITY: tuple[Pred, ...] = (("even", 0), ("odd", 0))
# 2..7 so that filters on short lists of digits 0..9 usually keep some items and drop others.
_THRESHOLDS: tuple[Pred, ...] = tuple((name, k) for name in ("above", "below") for k in range(2, 8))

_INTS = range(-3, 13)
_WORDS = ("ab", "cd", "ok", "yo", "hi", "no", "xy", "go")
# Mixed case so that upper/lower bugs show; "a" so that a palindrome gets tested too.
_STRINGS = ("Go", "cat", "Dog", "hi", "ab", "Sun", "xyz", "Moon", "a", "Tree", "no", "Yes")
_PAIRS = tuple(itertools.product(range(-2, 10), repeat=2))


# ---------------------------------------------------------------- shared pieces


def _steps(n: int) -> Iterable[Steps]:
    return itertools.product(itertools.product(_OP_SYMBOL, _CONSTS), repeat=n)


def _chain(expr: str, steps: Steps) -> str:
    """Python for applying `steps` to the atom `expr` left to right, parenthesising only where needed."""
    low = False  # whether the expression so far ends in + or -, which binds looser than *
    for op, c in steps:
        if op == "mul" and low:
            expr = f"({expr})"
        expr = f"{expr} {_OP_SYMBOL[op]} {c}"
        low = op != "mul"
    return expr


def _chain_words(steps: Steps) -> str:
    return ", then ".join(f"{_OP_WORD[op]} {c}" for op, c in steps)


def _step_plan(step: Step, target: str = "") -> str:
    op, c = step
    if op == "add":
        return f"add {c} to {target}" if target else f"add {c}"
    if op == "sub":
        return f"subtract {c} from {target}" if target else f"subtract {c}"
    return f"multiply {target} by {c}" if target else f"multiply by {c}"


def _step_keys(steps: Steps) -> tuple[str, ...]:
    return tuple(key for op, c in steps for key in (_OP_VERB[op], str(c)))


def _step_mutants(steps: Steps) -> list[Steps]:
    """Wrong operator or off-by-one constant in one step."""
    out = []
    for i, (op, c) in enumerate(steps):
        for wrong in ((_OP_SWAP[op], c), (op, c + 1)):
            out.append(steps[:i] + (wrong,) + steps[i + 1 :])
    return out


def _pred_code(pred: Pred, var: str) -> str:
    name, k = pred
    return _PRED_CODE[name].format(v=var, k=k)


def _pred_words(pred: Pred) -> str:
    name, k = pred
    if name in ("even", "odd"):
        return name
    return f"equal to {k}" if name == "equal" else f"{name} {k}"


def _pred_keys(pred: Pred) -> tuple[str, ...]:
    name, k = pred
    return (name,) if name in ("even", "odd") else (name, str(k))


def _pred_mutants(pred: Pred) -> list[Pred]:
    """Swapped comparison (or parity) and off-by-one threshold."""
    name, k = pred
    out = [(_PRED_FLIP[name], k)] if name in _PRED_FLIP else []
    if name not in ("even", "odd"):
        out.append((name, k + 1))
    return out


def _int_inputs(rng: random.Random) -> list[tuple[Any, ...]]:
    return [(x,) for x in _INTS]


def _pair_inputs(rng: random.Random) -> list[tuple[Any, ...]]:
    return rng.sample(_PAIRS, 24)


def _string_inputs(rng: random.Random) -> list[tuple[Any, ...]]:
    return [(s,) for s in _STRINGS]


def _list_inputs(rng: random.Random) -> list[tuple[Any, ...]]:
    return [([rng.randint(0, 9) for _ in range(rng.randint(1, 5))],) for _ in range(32)]


@dataclass(frozen=True)
class _Shape:
    """The semantic content of one task, before a function name and kind are attached."""

    args: str
    text: str
    body: tuple[str, ...]
    plan: tuple[str, ...]
    keys: tuple[str, ...]


def _shape(args: str, text: str, body: Iterable[str], plan: Iterable[str], keys: Iterable[str]) -> _Shape:
    return _Shape(args, text, tuple(body), (*plan, "return it"), tuple(dict.fromkeys(keys)))


class _Family(ABC):
    """A task template: a parameter space per difficulty, a renderer and bug mutations."""

    name: str
    func_names: tuple[str, ...]
    inputs: Callable[[random.Random], list[tuple[Any, ...]]]

    @abstractmethod
    def space(self, difficulty: int) -> Iterable[Params]: ...

    @abstractmethod
    def shape(self, p: Params) -> _Shape: ...

    @abstractmethod
    def mutants(self, p: Params) -> list[Params]: ...


# ---------------------------------------------------------------- families


class _Arith(_Family):
    """x with 1-3 constant operations applied in order: `return (x + 3) * 2`."""

    name = "arith"
    func_names = ("calc", "compute", "apply")
    inputs = staticmethod(_int_inputs)

    def space(self, difficulty: int) -> Iterable[Params]:
        return ((steps,) for steps in _steps(difficulty))

    def shape(self, p: Params) -> _Shape:
        (steps,) = p
        return _shape(
            "x",
            f"return x {_chain_words(steps)}",
            [f"return {_chain('x', steps)}"],
            [_step_plan(s) for s in steps],
            _step_keys(steps),
        )

    def mutants(self, p: Params) -> list[Params]:
        return [(m,) for m in _step_mutants(p[0])]


class _Pick(_Family):
    """Larger/smaller of two arguments, then constant operations: `return max(a * 2, b) + 3`."""

    name = "pick"
    func_names = ("pick", "choose", "select")
    inputs = staticmethod(_pair_inputs)
    _WORD = {"max": "larger", "min": "smaller"}

    def space(self, difficulty: int) -> Iterable[Params]:
        inner: list[Steps] = list(_steps(1)) if difficulty == 3 else [()]
        outer: list[Steps] = list(_steps(1)) if difficulty >= 2 else [()]
        return itertools.product(("max", "min"), inner, outer)

    def shape(self, p: Params) -> _Shape:
        which, inner, outer = p
        word = self._WORD[which]
        a_text = f"a {_chain_words(inner)}" if inner else "a"
        text = f"return the {word} of {a_text} and b" + (f", then {_chain_words(outer)}" if outer else "")
        code = _chain(f"{which}({_chain('a', inner)}, b)", outer)
        plan = [_step_plan(s, "a") for s in inner]
        plan.append(f"take the {word} of {'that' if inner else 'a'} and b")
        plan += [_step_plan(s) for s in outer]
        return _shape("a, b", text, [f"return {code}"], plan, (*_step_keys(inner), word, *_step_keys(outer)))

    def mutants(self, p: Params) -> list[Params]:
        which, inner, outer = p
        out: list[Params] = [("min" if which == "max" else "max", inner, outer)]
        out += [(which, m, outer) for m in _step_mutants(inner)]
        out += [(which, inner, m) for m in _step_mutants(outer)]
        return out


class _Cap(_Family):
    """Bound x from above and/or below with conditionals: `return 7 if x > 7 else x`."""

    name = "cap"
    func_names = ("cap", "limit", "bound")
    inputs = staticmethod(_int_inputs)

    def space(self, difficulty: int) -> Iterable[Params]:
        if difficulty == 1:
            return (((), (pred,)) for pred in _THRESHOLDS)
        ranges = [(("below", lo), ("above", hi)) for lo in range(6) for hi in range(lo + 2, 10)]
        if difficulty == 2:
            return (((), r) for r in ranges)
        # Drop shifts that push nearly every tested x past one bound: the answer would be almost constant.
        out = []
        for steps, r in itertools.product(_steps(1), ranges):
            (op, c), ((_, lo), (_, hi)) = steps[0], r
            if len({min(max(_OP_APPLY[op](x, c), lo), hi) for x in _INTS}) >= 3:
                out.append((steps, r))
        return out

    def shape(self, p: Params) -> _Shape:
        steps, bounds = p
        limits = " and ".join(f"at {'most' if name == 'above' else 'least'} {k}" for name, k in bounds)
        text = f"return x {_chain_words(steps)}, but {limits}" if steps else f"return x, but {limits}"
        body, plan, var = [], [_step_plan(s, "x") for s in steps], "x"
        if steps:
            body.append(f"y = {_chain('x', steps)}")
            var = "y"
        for i, (name, k) in enumerate(bounds):
            cond = f"{k} if {_pred_code((name, k), var)} else {var}"
            last = i == len(bounds) - 1
            body.append(f"return {cond}" if last else f"y = {cond}")
            plan.append(f"if {'x' if var == 'x' else 'it'} is {name} {k} use {k}")
            var = "y"
        keys = [*_step_keys(steps), *(key for pred in bounds for key in _pred_keys(pred))]
        return _shape("x", text, body, plan, keys)

    def mutants(self, p: Params) -> list[Params]:
        steps, bounds = p
        out: list[Params] = [(m, bounds) for m in _step_mutants(steps)]
        for i, pred in enumerate(bounds):
            out += [(steps, bounds[:i] + (m,) + bounds[i + 1 :]) for m in _pred_mutants(pred)]
        return out


class _Dist(_Family):
    """Absolute distance from a constant: `return abs(x * 2 - 5) + 1`."""

    name = "dist"
    func_names = ("dist", "gap", "away")
    inputs = staticmethod(_int_inputs)

    def space(self, difficulty: int) -> Iterable[Params]:
        scales = range(2, 5) if difficulty == 3 else [1]
        steps: list[Steps] = list(_steps(1)) if difficulty >= 2 else [()]
        return itertools.product(scales, range(1, 10), steps)

    def shape(self, p: Params) -> _Shape:
        scale, k, steps = p
        inner = "x" if scale == 1 else f"x * {scale}"
        inner_text = "x" if scale == 1 else f"x times {scale}"
        text = f"return the distance between {inner_text} and {k}"
        if steps:
            text += f", then {_chain_words(steps)}"
        plan = [f"multiply x by {scale}", f"subtract {k}"] if scale > 1 else [f"subtract {k} from x"]
        plan += ["take the absolute value", *(_step_plan(s) for s in steps)]
        keys = [*(("multiply", str(scale)) if scale > 1 else ()), "subtract", str(k), "absolute"]
        body = [f"return {_chain(f'abs({inner} - {k})', steps)}"]
        return _shape("x", text, body, plan, [*keys, *_step_keys(steps)])

    def mutants(self, p: Params) -> list[Params]:
        scale, k, steps = p
        out: list[Params] = [(scale, k + 1, steps)]
        if scale > 1:
            out.append((scale + 1, k, steps))
        return out + [(scale, k, m) for m in _step_mutants(steps)]


class _Step(_Family):
    """An if statement on a threshold: `if x > 4: return x * 2` / `return x - 1`."""

    name = "step"
    func_names = ("step", "rule", "gate")
    inputs = staticmethod(_int_inputs)

    def space(self, difficulty: int) -> Iterable[Params]:
        if difficulty == 1:
            values: Iterable[tuple[Any, Any]] = itertools.permutations(range(4), 2)
        elif difficulty == 2:
            values = ((s, ()) for s in _steps(1))
        else:
            values = ((a, b) for a, b in itertools.product(_steps(1), _steps(1)) if a != b)
        return ((pred, a, b) for pred, (a, b) in itertools.product(_THRESHOLDS, values))

    @staticmethod
    def _value(v: int | Steps, words: bool) -> str:
        if isinstance(v, int):
            return str(v)
        if not v:
            return "x"
        return f"x {_chain_words(v)}" if words else _chain("x", v)

    def shape(self, p: Params) -> _Shape:
        pred, then, other = p
        cond = _pred_words(pred)
        then_text, other_text = self._value(then, True), self._value(other, True)
        body = [f"if {_pred_code(pred, 'x')}:", f"    return {self._value(then, False)}"]
        body.append(f"return {self._value(other, False)}")
        plan = [f"if x is {cond} return {then_text}", f"else return {other_text}"]
        keys = list(_pred_keys(pred))
        for v in (then, other):
            keys += [str(v)] if isinstance(v, int) else [k for op, c in v for k in (_OP_WORD[op], str(c))]
        return _Shape(
            "x",
            f"return {then_text} if x is {cond}, else {other_text}",
            tuple(body),
            tuple(plan),
            tuple(dict.fromkeys(keys)),
        )

    def mutants(self, p: Params) -> list[Params]:
        pred, then, other = p
        out: list[Params] = [(m, then, other) for m in _pred_mutants(pred)]
        out.append((pred, other, then))
        if isinstance(then, int):
            out.append((pred, then + 1, other))
        else:
            out += [(pred, m, other) for m in _step_mutants(then)]
            out += [(pred, then, m) for m in _step_mutants(other)]
        return out


class _Echo(_Family):
    """String transforms in order: repeat, reverse, upper/lower case: `return (s * 2)[::-1]`."""

    name = "echo"
    func_names = ("echo", "shout", "mix")
    inputs = staticmethod(_string_inputs)
    _OPS = ("rep2", "rep3", "rep4", "rev", "up", "low")
    _CODE = {"rev": "[::-1]", "up": ".upper()", "low": ".lower()"}
    _WORD = {"rev": "reversed", "up": "in upper case", "low": "in lower case"}
    _PLAN = {"rev": "reverse {t}", "up": "make {t} upper case", "low": "make {t} lower case"}
    _KEYS = {"rev": ("reverse",), "up": ("upper",), "low": ("lower",)}

    @staticmethod
    def _class(op: str) -> str:
        return "case" if op in ("up", "low") else op[:3]

    def space(self, difficulty: int) -> Iterable[Params]:
        # Consecutive ops of one class (rep rep, rev rev) and two case changes are pointless.
        for ops in itertools.product(self._OPS, repeat=difficulty):
            classes = [self._class(op) for op in ops]
            if classes.count("case") <= 1 and all(a != b for a, b in itertools.pairwise(classes)):
                yield ops

    def shape(self, p: Params) -> _Shape:
        expr, binary = "s", False
        words, plan, keys = [], [], []
        for i, op in enumerate(p):
            target = "it" if i else "s"
            if op.startswith("rep"):
                expr, binary = f"{expr} * {op[3:]}", True
                words.append(f"repeated {op[3:]} times")
                plan.append(f"repeat {target} {op[3:]} times")
                keys += ["repeat", op[3:]]
                continue
            expr, binary = (f"({expr})" if binary else expr) + self._CODE[op], False
            words.append(self._WORD[op])
            plan.append(self._PLAN[op].format(t=target))
            keys += self._KEYS[op]
        return _shape("s", "return s " + ", then ".join(words), [f"return {expr}"], plan, keys)

    def mutants(self, p: Params) -> list[Params]:
        out: list[Params] = []
        for i, op in enumerate(p):
            if op.startswith("rep"):
                wrong: tuple[str, ...] = (f"rep{int(op[3:]) + 1}",)
            elif op == "rev":
                wrong = ()  # forgetting the reversal altogether
            else:
                wrong = ("low" if op == "up" else "up",)
            out.append(p[:i] + wrong + p[i + 1 :])
        return out


class _Wrap(_Family):
    """String concatenation with constants: `return "ab" + s * 2 + "cd"`."""

    name = "wrap"
    func_names = ("wrap", "join", "tag")
    inputs = staticmethod(_string_inputs)

    def space(self, difficulty: int) -> Iterable[Params]:
        if difficulty == 1:
            return [(w, 1, "") for w in _WORDS] + [("", 1, w) for w in _WORDS]
        reps = (2, 3) if difficulty == 3 else (1,)
        return ((a, k, b) for a, b in itertools.permutations(_WORDS, 2) for k in reps)

    def shape(self, p: Params) -> _Shape:
        pre, k, post = p
        core_code, core_text = ("s", "s") if k == 1 else (f"s * {k}", f"s times {k}")
        parts = [f'"{pre}"'] * bool(pre) + [core_code] + [f'"{post}"'] * bool(post)
        text_parts = [f'"{pre}"'] * bool(pre) + [core_text] + [f'"{post}"'] * bool(post)
        plan = [f"repeat s {k} times"] if k > 1 else []
        keys = ["repeat", str(k)] if k > 1 else []
        if pre:
            plan.append(f'put "{pre}" before {"it" if k > 1 else "s"}')
            keys += [pre, "before"]
        if post:
            plan.append(f'put "{post}" after {"it" if k > 1 or pre else "s"}')
            keys += [post, "after"]
        return _shape("s", "return " + " plus ".join(text_parts), [f"return {' + '.join(parts)}"], plan, keys)

    def mutants(self, p: Params) -> list[Params]:
        pre, k, post = p
        out: list[Params] = [(post, k, pre)]
        if k > 1:
            out.append((pre, k + 1, post))
        return out


class _Total(_Family):
    """An aggregate of a list, then constant operations: `return max(xs) * 2 + 1`."""

    name = "total"
    func_names = ("total", "summary", "measure")
    inputs = staticmethod(_list_inputs)
    _AGG = {
        "sum": ("the sum of xs", "sum"),
        "len": ("the number of items in xs", "number"),
        "max": ("the largest item of xs", "largest"),
        "min": ("the smallest item of xs", "smallest"),
    }
    _WRONG = {"sum": "len", "len": "sum", "max": "min", "min": "max"}

    def space(self, difficulty: int) -> Iterable[Params]:
        return itertools.product(self._AGG, _steps(difficulty - 1))

    def shape(self, p: Params) -> _Shape:
        agg, steps = p
        phrase, key = self._AGG[agg]
        text = f"return {phrase}" + (f", then {_chain_words(steps)}" if steps else "")
        plan = [f"take {phrase}", *(_step_plan(s) for s in steps)]
        return _shape("xs", text, [f"return {_chain(f'{agg}(xs)', steps)}"], plan, (key, *_step_keys(steps)))

    def mutants(self, p: Params) -> list[Params]:
        agg, steps = p
        return [(self._WRONG[agg], steps)] + [(agg, m) for m in _step_mutants(steps)]


class _Tally(_Family):
    """Count or sum the items matching a condition: `return len([v for v in xs if v > 4])`."""

    name = "tally"
    func_names = ("tally", "how_many", "score")
    inputs = staticmethod(_list_inputs)

    def space(self, difficulty: int) -> Iterable[Params]:
        if difficulty == 1:
            return (("len", ("equal", k), ()) for k in range(10))
        steps: list[Steps] = list(_steps(1)) if difficulty == 3 else [()]
        return itertools.product(("len", "sum"), _PARITY + _THRESHOLDS, steps)

    def shape(self, p: Params) -> _Shape:
        agg, pred, steps = p
        cond = _pred_words(pred)
        plan = [f"keep the items of xs that are {cond}"]
        if agg == "len":
            text, agg_key = f"return how many items of xs are {cond}", "count"
            plan.append("count them")
        else:
            text, agg_key = f"return the sum of the items of xs that are {cond}", "sum"
            plan.append("take the sum of them")
        if steps:
            text += f", then {_chain_words(steps)}"
        plan += [_step_plan(s) for s in steps]
        code = _chain(f"{agg}([v for v in xs if {_pred_code(pred, 'v')}])", steps)
        return _shape("xs", text, [f"return {code}"], plan, (*_pred_keys(pred), agg_key, *_step_keys(steps)))

    def mutants(self, p: Params) -> list[Params]:
        agg, pred, steps = p
        out: list[Params] = [(agg, m, steps) for m in _pred_mutants(pred)]
        if pred[0] != "equal":
            out.append(("sum" if agg == "len" else "len", pred, steps))
        return out + [(agg, pred, m) for m in _step_mutants(steps)]


class _Each(_Family):
    """A list comprehension that filters and/or maps: `return [v * 2 + 1 for v in xs if v > 4]`."""

    name = "each"
    func_names = ("each", "map_all", "change")
    inputs = staticmethod(_list_inputs)

    def space(self, difficulty: int) -> Iterable[Params]:
        # Difficulty counts operations: the filter is one, each map step is one.
        if difficulty < 3:
            yield from ((None, s) for s in _steps(difficulty))
        yield from itertools.product(_PARITY + _THRESHOLDS, _steps(difficulty - 1))

    def shape(self, p: Params) -> _Shape:
        pred, steps = p
        text = "return each item of xs"
        code = f"{_chain('v', steps)} for v in xs"
        plan = ["go over each item of xs"]
        keys: list[str] = []
        if pred is not None:
            text += f" that is {_pred_words(pred)}" + ("," if steps else "")
            code += f" if {_pred_code(pred, 'v')}"
            plan.append(f"keep it only if it is {_pred_words(pred)}")
            keys += _pred_keys(pred)
        if steps:
            text += f" {_chain_words(steps)}"
            plan += [_step_plan(s) for s in steps]
        plan.append("collect the results in a list")
        return _shape("xs", text, [f"return [{code}]"], plan, [*keys, *_step_keys(steps)])

    def mutants(self, p: Params) -> list[Params]:
        pred, steps = p
        out: list[Params] = [(m, steps) for m in _pred_mutants(pred)] if pred is not None else []
        return out + [(pred, m) for m in _step_mutants(steps)]


_FAMILY_LIST: tuple[_Family, ...] = (
    _Arith(),
    _Pick(),
    _Cap(),
    _Dist(),
    _Step(),
    _Echo(),
    _Wrap(),
    _Total(),
    _Tally(),
    _Each(),
)
_FAMILIES = {f.name: f for f in _FAMILY_LIST}
FAMILIES = tuple(_FAMILIES)
