"""Workflow ``self_play``: two roles of one team play a game against each other (issue 4).

``generator_judge``: the generator answers a reasoning task (``<answer>... ANSWER: 14</answer>``,
as a debater does); the judge sees the question and the generator's reply, never the label, and
ends its reply with ``VERDICT: ACCEPT`` or ``VERDICT: REJECT`` (``<answer>3 * 4 = 12, 2 + 12 = 14.
VERDICT: ACCEPT</answer>``). The judge earns 1 for a correct verdict (accepting a correct answer or
rejecting a wrong or missing one), else 0; the generator earns 1 when its answer is correct and the
judge accepts it, else 0. A malformed turn (no tags, no final answer, no verdict) is recorded on
``Turn.error`` and costs its role the format penalty.

``proposer_solver``: the proposer, shown an example question, writes a new arithmetic problem
(``<answer>PROBLEM: 12 * (3 + 4) - 5</answer>``) whose answer the framework computes itself with
:func:`evaluate_expression`, which parses with ``ast`` and evaluates integers with ``+ - * // %``
and parentheses only, within size and magnitude limits, never ``eval``. The solver sees that
problem alone and attempts it ``solver_samples`` times (K); its episode reward is its success rate
over the K attempts, less the format penalty times its share of malformed attempts. With
``solver_credit: attempt`` (the default) each attempt is also scored alone (1 if correct, less the
format penalty if malformed, in ``episode.attempt_rewards``) and GRPO ranks the K attempts against
each other, as the solver's group, so that the right answers are reinforced rather than the easy
problems; ``episode`` gives every attempt the episode's advantage. With ``anchor_samples`` A > 0 the
solver also attempts the example itself A times (scored and ranked the same way, among themselves), so
that it keeps practising the suite's distribution; these attempts do not count in the proposer's reward
or in the success rate. The proposer earns
1 - |rate - target| / max(target, 1 - target), which peaks at 1.0 when the rate hits
``target_rate``, or ``invalid_penalty`` for a malformed, unsafe or too large problem (the solver
then does not play). The problem's difficulty (operations, largest number, nesting, answer size)
goes into ``episode.verifier["difficulty"]``.

In ``teamrl train`` (``workflow: {name: self_play, game: ...}``) every role is a seat as in a debate;
:func:`self_play_metrics` adds each game's figures to the rollout and held-out summaries, and an
evaluation of ``proposer_solver`` also asks the solver alone the fixed held-out problems
(:func:`solve_alone`), so that its progress is measured on problems the proposer does not choose.
"""

from __future__ import annotations

import ast
import asyncio
import difflib
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from teamrl.engine.team import Team
from teamrl.protocol import Episode, Turn
from teamrl.tasks.reasoning import ReasoningTask
from teamrl.workflows.debate import argument, debate_prompt, final_answer
from teamrl.workflows.self_play_settings import GENERATOR, JUDGE, PROPOSER, SOLVER, SelfPlayConfig

_VERDICT = re.compile(r"\bVERDICT\s*:\s*(ACCEPT|REJECT)\b", re.IGNORECASE)
_PROBLEM = re.compile(r"\bPROBLEM\s*:[ \t]*(.*)", re.IGNORECASE)
_ALLOWED_CHARS = frozenset("0123456789+-*/%() \t")
_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


# ---------------------------------------------------------------- the safe evaluator


class UnsafeExpression(ValueError):
    """A proposed expression the framework will not evaluate; the message says why."""


@dataclass(frozen=True)
class Evaluated:
    """An expression's value and its difficulty proxies."""

    value: int
    operations: int  # binary and unary operators
    max_operand: int  # largest absolute value of a number written in it
    depth: int  # nesting depth of the operator tree (a lone number: 0)
    steps: tuple[str, ...] = ()  # its binary operations in evaluation order, "a op b = c"


def evaluate_expression(
    text: str,
    *,
    max_chars: int = 200,
    max_operations: int = 12,
    max_operand: int = 10**6,
    max_value: int = 10**12,
) -> Evaluated:
    """Evaluate integer arithmetic (``+ - * // %``, unary minus, parentheses) as Python would.

    Anything else raises :class:`UnsafeExpression`: any other character (so no name, call, string
    or float reaches the parser), ``/`` and ``**``, a division by zero, more than ``max_operations``
    operators, a number above ``max_operand`` or an intermediate result above ``max_value`` in
    absolute value.
    """
    text = text.strip()
    if not text:
        raise UnsafeExpression("empty expression")
    if len(text) > max_chars:
        raise UnsafeExpression(f"{len(text)} characters, more than max_chars={max_chars}")
    bad = sorted(set(text) - _ALLOWED_CHARS)
    if bad:
        raise UnsafeExpression(f"characters {bad} are not allowed; use digits, + - * // % and parentheses")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise UnsafeExpression(f"not an arithmetic expression: {exc}") from None

    operations = 0
    largest = 0
    steps: list[str] = []

    def bounded(value: int) -> int:
        if abs(value) > max_value:
            raise UnsafeExpression(f"an intermediate result exceeds max_value={max_value}")
        return value

    def count_operator() -> None:
        nonlocal operations
        operations += 1
        if operations > max_operations:
            raise UnsafeExpression(f"more than max_operations={max_operations} operators")

    def walk(node: ast.expr) -> tuple[int, int]:  # (value, depth)
        nonlocal largest
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if node.value > max_operand:
                raise UnsafeExpression(f"the number {node.value} exceeds max_operand={max_operand}")
            largest = max(largest, node.value)
            return node.value, 0
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
            count_operator()
            value, depth = walk(node.operand)
            return bounded(-value if isinstance(node.op, ast.USub) else value), depth + 1
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            count_operator()
            left, left_depth = walk(node.left)
            right, right_depth = walk(node.right)
            if isinstance(node.op, ast.FloorDiv | ast.Mod) and right == 0:
                raise UnsafeExpression("division by zero")
            value = {
                ast.Add: lambda: left + right,
                ast.Sub: lambda: left - right,
                ast.Mult: lambda: left * right,
                ast.FloorDiv: lambda: left // right,
                ast.Mod: lambda: left % right,
            }[type(node.op)]()
            steps.append(f"{left} {_OPERATORS[type(node.op)]} {right} = {value}")
            return bounded(value), max(left_depth, right_depth) + 1
        shown = ast.unparse(node)[:40]
        raise UnsafeExpression(f"{shown!r} is not allowed; only integers, + - * // % and parentheses")

    value, depth = walk(tree.body)
    return Evaluated(value=value, operations=operations, max_operand=largest, depth=depth, steps=tuple(steps))


def proposed_problem(text: str) -> str | None:
    """The expression after the last ``PROBLEM:`` marker (the rest of its line); None without one."""
    found = None
    for m in _PROBLEM.finditer(text):
        found = m.group(1).strip()
    return found or None


def verdict_of(turn: Turn) -> str | None:
    """``"accept"`` or ``"reject"``: the last verdict of a well-formed judge turn; None otherwise."""
    if turn.message is None or turn.error is not None:
        return None
    found = None
    for m in _VERDICT.finditer(turn.message.content):
        found = m.group(1).lower()
    return found


async def answer_turn(team: Team, role: str, prompt: str, round: int, context: dict[str, Any]) -> Turn:
    """``role``'s reply, which must end with a final answer (else ``Turn.error`` says so)."""
    turn = await team.act(role, prompt, "answer", round=round, context=context)
    if turn.error is None and final_answer(turn) is None:
        turn.error = f"{role}: no final answer; end with 'ANSWER: <answer>'"
    return turn


# ---------------------------------------------------------------- game 1: generator vs judge


async def generator_judge(team: Team, task: ReasoningTask, cfg: SelfPlayConfig, group: int = 0) -> Episode:
    """The generator answers ``task``, the judge accepts or rejects that answer; then verify it."""
    if task.answer is None:
        raise ValueError(
            f"task {task.task_id} has no answer: generator_judge rewards the judge against the label, "
            "so it needs tasks with ground truth"
        )
    episode = Episode(task_id=task.task_id, group=group)
    prompt = debate_prompt(GENERATOR, cfg.generator_sop, task, [])
    generated = await answer_turn(team, GENERATOR, prompt, round=0, context={"task": task})
    answer = final_answer(generated)

    shown = argument(generated)
    prompt = debate_prompt(JUDGE, cfg.judge_sop, task, [(GENERATOR, shown)])
    context = {"question": task.question, "argument": shown, "answer": answer}  # never the label
    judged = await team.act(JUDGE, prompt, "answer", round=1, context=context)
    if judged.error is None and verdict_of(judged) is None:
        judged.error = f"{JUDGE}: no verdict; end with 'VERDICT: ACCEPT' or 'VERDICT: REJECT'"
    verdict = verdict_of(judged)

    episode.turns = [generated, judged]
    episode.errors = [t.error for t in episode.turns if t.error is not None]
    correct = task.check(answer)
    verdict_correct = verdict == ("accept" if correct else "reject")
    episode.outcome = float(correct)
    episode.verifier = {
        "game": "generator_judge",
        "answer": answer,
        "correct": correct,
        "verdict": verdict,
        "verdict_correct": verdict_correct,
        "accepted_and_correct": correct and verdict == "accept",
        "solved": correct,  # the team's success, as every workflow reports it
        "label": str(task.answer),
    }
    return episode


# ---------------------------------------------------------------- game 2: proposer vs solver


def evaluate_proposal(expression: str, cfg: SelfPlayConfig) -> Evaluated:
    """:func:`evaluate_expression` within the game's limits (``max_chars``, ``max_operations``, ...)."""
    return evaluate_expression(
        expression,
        max_chars=cfg.max_chars,
        max_operations=cfg.max_operations,
        max_operand=cfg.max_operand,
        max_value=cfg.max_value,
    )


def proposed_task(task_id: str, expression: str, evaluated: Evaluated) -> ReasoningTask:
    """A proposed expression as the problem the solver is asked."""
    return ReasoningTask(
        task_id=task_id, question=f"What is {expression}?", answer=evaluated.value, family="proposed"
    )


async def proposer_solver(team: Team, seed: ReasoningTask, cfg: SelfPlayConfig, group: int = 0) -> Episode:
    """The proposer writes a problem after the example ``seed``; the solver attempts it K times."""
    episode = Episode(task_id=seed.task_id, group=group)
    prompt = f"### {PROPOSER}: {cfg.proposer_sop}\nexample: {seed.question}\n"
    proposed = await team.act(PROPOSER, prompt, "answer", round=0, context={"example": seed.question})
    episode.turns.append(proposed)
    expression = proposed_problem(proposed.message.content) if proposed.message is not None else None
    evaluated: Evaluated | None = None
    if proposed.error is None and expression is None:
        proposed.error = f"{PROPOSER}: no problem; write 'PROBLEM: <expression>'"
    elif expression is not None:
        try:
            evaluated = evaluate_proposal(expression, cfg)
        except UnsafeExpression as exc:
            proposed.error = f"{PROPOSER}: invalid problem {expression[:60]!r}: {exc}"

    answers: list[str | None] = []
    correct: list[bool] = []
    anchor_correct: list[bool] = []  # the solver's attempts at the example itself (anchor_samples)
    problem: ReasoningTask | None = None
    if evaluated is not None:
        assert expression is not None
        problem = proposed_task(f"{seed.task_id}-proposed-{group}", expression, evaluated)
        prompt = debate_prompt(SOLVER, cfg.solver_sop, problem, [])
        anchor_prompt = debate_prompt(SOLVER, cfg.solver_sop, seed, [])
        anchored = cfg.anchor_samples if seed.answer is not None else 0
        turns = await asyncio.gather(
            *(
                answer_turn(team, SOLVER, prompt, round=1, context={"problem": expression, "sample": k})
                for k in range(cfg.solver_samples)
            ),
            *(
                answer_turn(team, SOLVER, anchor_prompt, round=1, context={"task": seed, "sample": k})
                for k in range(anchored)
            ),
        )
        attempts, anchors = turns[: cfg.solver_samples], turns[cfg.solver_samples :]
        episode.turns += [*attempts, *anchors]
        answers = [final_answer(t) for t in attempts]
        correct = [problem.check(a) for a in answers]
        anchor_correct = [seed.check(final_answer(t)) for t in anchors]

    episode.errors = [t.error for t in episode.turns if t.error is not None]
    rate = sum(correct) / len(correct) if correct else 0.0
    episode.outcome = rate
    episode.verifier = {
        "game": "proposer_solver",
        "problem": problem.question if problem is not None else None,
        "expression": expression if evaluated is not None else None,
        "valid": evaluated is not None,
        "invalid_reason": proposed.error if evaluated is None else None,
        "label": str(evaluated.value) if evaluated is not None else None,
        "difficulty": difficulty(evaluated) if evaluated is not None else None,
        "answers": answers,
        "correct": correct,
        "success_rate": rate,
        "anchor_correct": anchor_correct,
        "target_rate": cfg.target_rate,
        "solved": any(correct),
    }
    return episode


async def solve_alone(team: Team, task: ReasoningTask, cfg: SelfPlayConfig, group: int = 0) -> Episode:
    """The solver alone on ``task``, with the prompt it gets for a proposed problem: how evaluations
    measure it on a fixed set of problems, whatever the proposer writes."""
    if task.answer is None:
        raise ValueError(f"task {task.task_id} has no answer: the solver's accuracy needs the label")
    episode = Episode(task_id=task.task_id, group=group)
    prompt = debate_prompt(SOLVER, cfg.solver_sop, task, [])
    turn = await answer_turn(team, SOLVER, prompt, round=1, context={"task": task})
    episode.turns = [turn]
    episode.errors = [turn.error] if turn.error is not None else []
    answer = final_answer(turn)
    correct = task.check(answer)
    episode.outcome = float(correct)
    episode.verifier = {
        "game": "solve",
        "answer": answer,
        "correct": correct,
        "solved": correct,
        "label": str(task.answer),
    }
    return episode


def proposals(episodes: list[Episode], cfg: SelfPlayConfig) -> list[ReasoningTask]:
    """The valid problems the proposer wrote in ``episodes`` (proposer_solver), as tasks to solve again."""
    tasks = []
    for e in episodes:
        if e.verifier.get("game") == "proposer_solver" and e.verifier.get("valid"):
            expression = str(e.verifier["expression"])
            evaluated = evaluate_proposal(expression, cfg)
            tasks.append(proposed_task(f"{e.task_id}-proposed-{e.group}", expression, evaluated))
    return tasks


def difficulty(evaluated: Evaluated) -> dict[str, int]:
    """The problem's difficulty proxies, for a benchmark to follow as training goes on."""
    return {
        "operations": evaluated.operations,
        "max_operand": evaluated.max_operand,
        "depth": evaluated.depth,
        "answer_digits": len(str(abs(evaluated.value))),
    }


# ---------------------------------------------------------------- rewards


def assign_self_play_rewards(episode: Episode, cfg: SelfPlayConfig, format_penalty: float) -> None:
    """Fill ``episode.rewards`` (and ``episode.process``, the same figures before penalties) for every
    role that spoke, by the rules of the episode's game (needs the verifier results)."""
    v = episode.verifier
    process: dict[str, float] = {}
    if v["game"] == "generator_judge":
        process[GENERATOR] = float(v["accepted_and_correct"])  # type: ignore[arg-type]
        process[JUDGE] = float(v["verdict_correct"])  # type: ignore[arg-type]
    elif v["valid"]:
        rate: float = v["success_rate"]  # type: ignore[assignment]
        target = cfg.target_rate
        process[PROPOSER] = 1 - abs(rate - target) / max(target, 1 - target)
        process[SOLVER] = rate
    else:  # a malformed proposal is an invalid one: the invalid penalty alone, no format penalty on top
        episode.process = {PROPOSER: cfg.invalid_penalty}
        episode.rewards = {PROPOSER: cfg.invalid_penalty}
        return
    rewards = {}
    for role, score in process.items():
        turns = episode.turns_of(role)
        malformed = sum(t.error is not None for t in turns) / len(turns)
        rewards[role] = score - format_penalty * malformed
    episode.process = process
    episode.rewards = rewards
    if v["game"] == "proposer_solver" and cfg.solver_credit == "attempt":
        attempts = [j for j, t in enumerate(episode.turns) if t.role == SOLVER]
        scores = [*v["correct"], *v.get("anchor_correct", [])]  # type: ignore[misc]
        episode.attempt_rewards = {
            j: float(ok) - format_penalty * (episode.turns[j].error is not None)
            for j, ok in zip(attempts, scores, strict=True)
        }


_TOKEN = re.compile(r"\d+|\S")


def problem_tokens(expression: str, shape: bool = False) -> tuple[str, ...]:
    """An expression's numbers and operator characters: ``"12*(3 + 4)"`` -> ``12 * ( 3 + 4 )``; with
    ``shape`` every number is ``N``: ``N * ( N + N )``, the problem's template."""
    tokens = _TOKEN.findall(expression)
    return tuple("N" if shape and t.isdigit() else t for t in tokens)


def similarity(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """difflib's ratio of two token sequences: 2 * matched tokens / all tokens, 1.0 when equal."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def apply_repetition_penalty(episodes: list[Episode], cfg: SelfPlayConfig) -> None:
    """proposer_solver over one iteration's batch: each valid problem's near-duplicates (other valid
    problems of the batch whose :func:`similarity` is at least ``cfg.repetition_threshold``, compared as
    templates with ``repetition_on: shape``, as written with ``text``) cost the proposer
    ``cfg.repetition_penalty * duplicates / (valid problems - 1)``; a problem unlike the others loses
    nothing, one that every other problem repeats loses the whole lambda.

    As R-Zero's repetition penalty (there: BLEU-distance clusters over the batch, penalty |cluster| / B),
    counted per problem over its neighbours, so no clustering cut is needed. Without it a proposer can
    settle on one template the solver half-solves (``a - b`` with a negative answer, for a small
    solver), and the solver then practises that template alone.
    Sets ``verifier["near_duplicates"]`` and ``verifier["repetition_penalty"]`` and lowers
    ``episode.rewards["proposer"]`` (``episode.process`` keeps the game's score). Needs rewards assigned.
    """
    valid = [e for e in episodes if e.verifier.get("game") == "proposer_solver" and e.verifier.get("valid")]
    tokens = [
        problem_tokens(str(e.verifier["expression"]), shape=cfg.repetition_on == "shape") for e in valid
    ]
    counts = Counter(tokens)  # compare each distinct template once: a collapsed batch has few
    neighbours = {
        t: sum(n for other, n in counts.items() if similarity(t, other) >= cfg.repetition_threshold)
        for t in counts
    }
    for episode, t in zip(valid, tokens, strict=True):
        duplicates = neighbours[t] - 1  # itself
        penalty = cfg.repetition_penalty * duplicates / (len(valid) - 1) if len(valid) > 1 else 0.0
        episode.verifier["near_duplicates"] = duplicates
        episode.verifier["repetition_penalty"] = penalty
        episode.rewards[PROPOSER] -= penalty


# ---------------------------------------------------------------- metrics


DIFFICULTY_KEYS = ("operations", "max_operand", "depth", "answer_digits")

# each game's held-out figures as people read them, (label, metric): the rows of the held-out table that
# `teamrl train` and `teamrl eval` print, and the lines of the report's self-play chart
HELD_OUT_FIGURES = {
    "generator_judge": [
        ("generator accuracy", "eval/selfplay/generator_accuracy"),
        ("judge accuracy", "eval/selfplay/judge_accuracy"),
        ("judge accepts right answers", "eval/selfplay/judge_accepts_correct"),
        ("judge rejects wrong answers", "eval/selfplay/judge_rejects_wrong"),
    ],
    "proposer_solver": [
        ("valid proposals", "eval/selfplay/valid_rate"),
        ("solver on the proposals", "eval/selfplay/solver_rate"),
        ("starting solver on them", "eval/selfplay/reference_solver_rate"),  # the solver before RL
        ("operations per proposal", "eval/selfplay/difficulty/operations"),
        ("largest number", "eval/selfplay/difficulty/max_operand"),
        ("solver, fixed held-out set", "eval/selfplay/solver_heldout_accuracy"),
    ],
}


def self_play_metrics(episodes: list[Episode], prefix: str) -> dict[str, float]:
    """Each game's own figures over ``episodes`` (episodes of other workflows add none), keyed
    ``{prefix}selfplay/...``; a figure whose episodes are missing (no valid problem, no wrong answer) is
    left out rather than reported as 0.

    generator_judge: ``generator_accuracy``, ``judge_accuracy`` (verdicts right), ``judge_accepts_correct``
    and ``judge_rejects_wrong`` (a judge that always rejects a weak generator scores a high accuracy, not
    both of these). proposer_solver: ``valid_rate``, ``solver_rate`` (the solver's success on the valid
    problems), ``anchor_rate`` (its success on the examples, with ``anchor_samples``),
    ``difficulty/<proxy>`` (means over the valid problems), ``distinct_problems`` (distinct
    expressions over valid problems) and ``repetition_penalty`` (its mean, once applied). Episodes of
    :func:`solve_alone`: ``solver_heldout_accuracy``.
    """
    out: dict[str, float] = {}

    def share(name: str, flags: list[bool]) -> None:
        if flags:
            out[f"{prefix}selfplay/{name}"] = sum(flags) / len(flags)

    def mean(name: str, values: list[float]) -> None:
        if values:
            out[f"{prefix}selfplay/{name}"] = sum(values) / len(values)

    by_game: dict[str, list[dict]] = {}
    for e in episodes:
        game = e.verifier.get("game")
        if isinstance(game, str):
            by_game.setdefault(game, []).append(e.verifier)
    judged = by_game.get("generator_judge", [])
    share("generator_accuracy", [bool(v["correct"]) for v in judged])
    share("judge_accuracy", [bool(v["verdict_correct"]) for v in judged])
    share("judge_accepts_correct", [v["verdict"] == "accept" for v in judged if v["correct"]])
    share("judge_rejects_wrong", [v["verdict"] == "reject" for v in judged if not v["correct"]])
    proposed = by_game.get("proposer_solver", [])
    valid = [v for v in proposed if v["valid"]]
    share("valid_rate", [bool(v["valid"]) for v in proposed])
    mean("solver_rate", [float(v["success_rate"]) for v in valid])
    share("anchor_rate", [bool(ok) for v in valid for ok in v.get("anchor_correct", [])])
    for key in DIFFICULTY_KEYS:
        mean(f"difficulty/{key}", [float(v["difficulty"][key]) for v in valid])
    if valid:  # distinct problems: collapse onto a few shows here before it shows in the rewards
        distinct = {problem_tokens(str(v["expression"])) for v in valid}
        out[f"{prefix}selfplay/distinct_problems"] = len(distinct) / len(valid)
    mean("repetition_penalty", [float(v["repetition_penalty"]) for v in valid if "repetition_penalty" in v])
    share("solver_heldout_accuracy", [bool(v["correct"]) for v in by_game.get("solve", [])])
    return out
