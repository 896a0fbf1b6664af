"""The reasoning task suite: answers are right, splits never overlap, seeds fix everything, difficulty
shows; the answer extractor and checkers; the JSONL loader's errors name the file and line."""

from __future__ import annotations

import json
import random
import re

import pytest

from teamrl.tasks.reasoning import (
    CHECKERS,
    FAMILIES,
    ReasoningTask,
    ReasoningTaskSuite,
    TaskFileError,
    TaskFileSuite,
    answer_number,
    build_task,
    extract_answer,
    extract_int,
    load_jsonl_tasks,
    normalize_answer,
)


@pytest.fixture(scope="module")
def suite() -> ReasoningTaskSuite:
    return ReasoningTaskSuite(seed=5, difficulty=(1, 3))


@pytest.fixture(scope="module")
def tasks(suite: ReasoningTaskSuite) -> dict[str, list[ReasoningTask]]:
    rng = random.Random(2)
    return {"train": suite.sample("train", 600, rng), "heldout": suite.sample("heldout", 300, rng)}


def _key(t: ReasoningTask) -> tuple:
    return (t.family, t.difficulty, t.params)


def test_train_and_heldout_never_share_a_problem(suite, tasks) -> None:
    train, heldout = tasks["train"], tasks["heldout"]
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    assert not {t.question for t in train} & {t.question for t in heldout}
    assert not {_key(t) for t in train} & {_key(t) for t in heldout}
    assert not any(suite.is_heldout(t) for t in train) and all(suite.is_heldout(t) for t in heldout)
    # the split does not depend on the suite's seed: another seed's held-out set avoids this train set too
    other = ReasoningTaskSuite(seed=99, difficulty=(1, 3)).fixed_set("heldout", 300)
    assert not {_key(t) for t in train} & {_key(t) for t in other}
    cells = {(t.family, t.difficulty) for t in train + heldout}
    assert cells == {(f, d) for f in FAMILIES for d in (1, 2, 3)}


def test_answers_are_integers_that_the_worked_steps_and_the_question_confirm(tasks) -> None:
    for t in tasks["train"] + tasks["heldout"]:
        assert isinstance(t.answer, int) and t.checker == "exact" and t.solution, t.task_id
        for line in t.solution:
            lhs, rhs = line.split(" = ")
            assert eval(lhs) == int(rhs), (t.task_id, line)  # our own generated arithmetic
        assert int(t.solution[-1].split(" = ")[1]) == t.answer, t.task_id
        if t.family == "arith":
            assert eval(t.question.removeprefix("What is ").removesuffix("?")) == t.answer, t.question
        else:
            assert t.answer > 0, t.question  # change, ages, amounts left: never negative in a word problem
        assert t.check(str(t.answer)) and t.check(extract_answer(f"so it is 1 + 2. ANSWER: {t.answer}"))
        assert not t.check(str(t.answer + 1))


def test_everything_is_deterministic_from_the_seed() -> None:
    a = ReasoningTaskSuite(seed=1, difficulty=(1, 3)).fixed_set("train", 40)
    b = ReasoningTaskSuite(seed=1, difficulty=(1, 3)).fixed_set("train", 40)
    c = ReasoningTaskSuite(seed=2, difficulty=(1, 3)).fixed_set("train", 40)
    assert a == b and a != c
    suite = ReasoningTaskSuite(difficulty=2)
    assert suite.sample("heldout", 10, random.Random(7)) == suite.sample("heldout", 10, random.Random(7))
    t = a[0]
    assert build_task(t.family, t.difficulty, t.params) == t  # a problem always reads the same
    assert len({t.task_id for t in a}) == 40


def _largest_number(t: ReasoningTask) -> int:
    return max(abs(int(v)) for v in re.findall(r"-?\d+", t.question + " " + " ".join(t.solution)))


def test_difficulty_adds_steps_and_makes_numbers_larger() -> None:
    rng = random.Random(0)
    for family in FAMILIES:
        steps, sizes = [], []
        for d in (1, 2, 3):
            sample = ReasoningTaskSuite(difficulty=d, families=(family,)).sample("train", 60, rng)
            assert {t.difficulty for t in sample} == {d}
            steps.append(sum(len(t.solution) for t in sample) / len(sample))
            sizes.append(sum(_largest_number(t) for t in sample) / len(sample))
        assert steps[0] < steps[1] < steps[2], (family, steps)
        assert sizes[0] < sizes[1] < sizes[2], (family, sizes)


def test_suite_options_are_checked() -> None:
    with pytest.raises(ValueError, match="difficulty"):
        ReasoningTaskSuite(difficulty=4)
    with pytest.raises(ValueError, match="families"):
        ReasoningTaskSuite(families=("poetry",))
    with pytest.raises(ValueError, match="heldout_fraction"):
        ReasoningTaskSuite(heldout_fraction=1.0)
    with pytest.raises(ValueError, match="split"):
        ReasoningTaskSuite().sample("test", 1, random.Random(0))


@pytest.mark.parametrize(
    ("text", "answer", "integer"),
    [
        ("ANSWER: 42", "42", 42),
        ("3 * 4 = 12, so 12 + 2 = 14. ANSWER: 14.", "14", 14),
        ("answer: 5\nthen I changed my mind. Answer: 6", "6", 6),  # the last marker wins
        ("The answer is $1,200.", "$1,200", 1200),
        ("Final answer = 42.0 dollars", "42.0 dollars", 42),
        ("ANSWER:\n  17", "17", 17),
        ("so x = -5", "-5", -5),
        ("12-5 leaves 7", "7", 7),  # a binary minus is not a sign; no marker: the last number
        ("#### 8", "8", 8),
        ("it is \\boxed{21}.", "21", 21),
        ("ANSWER: 2.5", "2.5", None),  # not an integer
        ("ANSWER: Paris", "Paris", None),
        ("I computed 3 + 4 but ANSWER:", None, None),  # a marker with nothing after it is no answer
        ("no idea", None, None),
        ("", None, None),
    ],
)
def test_extract_answer(text, answer, integer) -> None:
    assert extract_answer(text) == answer
    assert extract_int(text) == integer


def test_normalize_and_checkers() -> None:
    assert normalize_answer("42.0") == normalize_answer("$42") == normalize_answer("42 dollars") == "42"
    assert normalize_answer("1,200") == "1200" and normalize_answer("2.50") == "2.5"
    assert normalize_answer("  New   York. ") == "new york"
    assert answer_number("3 apples and 2 pears") is None
    exact, numeric, contains = CHECKERS["exact"], CHECKERS["numeric"], CHECKERS["contains"]
    assert exact("42.0", 42, 0.0) and exact("paris", "Paris", 0.0) and not exact("43", 42, 0.0)
    assert not exact(None, 42, 0.0)
    assert numeric("3.14", 3.14159, 0.01) and not numeric("3.2", 3.14159, 0.01) and not numeric("pi", 3, 1)
    assert contains("the city of Paris", "paris", 0.0) and not contains("London", "Paris", 0.0)
    with pytest.raises(ValueError, match="no ground-truth"):
        ReasoningTask(task_id="x", question="?", answer=None).check("1")


# ---------------------------------------------------------------- JSONL


def _write(tmp_path, lines: list[str]):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_loader_reads_tasks_with_defaults(tmp_path) -> None:
    path = _write(
        tmp_path,
        [
            json.dumps({"question": "2 + 2?", "answer": 4}),
            "",
            json.dumps(
                {"id": "pi", "question": "pi?", "answer": 3.14159, "checker": "numeric", "tolerance": 0.01}
            ),
            json.dumps({"question": "Capital of France?", "answer": "Paris", "checker": "contains"}),
            json.dumps({"question": "Best move?", "answer": None}),
        ],
    )
    tasks = load_jsonl_tasks(path)
    assert [t.task_id for t in tasks] == ["mine-1", "pi", "mine-4", "mine-5"]
    assert [t.checker for t in tasks] == ["exact", "numeric", "contains", "exact"]
    assert tasks[0].check("4") and tasks[1].check("3.15") and not tasks[1].check("3.2")
    assert tasks[2].check("it is paris") and tasks[3].answer is None
    assert tasks[0].brief() == "question: 2 + 2?"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"question": "2 + 2?", "answer": 4', "not valid JSON"),
        ('["2 + 2?", 4]', "expected a JSON object with 'question' and 'answer', got array"),
        ('{"answer": 4}', "'question' must be a non-empty string, got null"),
        ('{"question": "  ", "answer": 4}', "'question' must be a non-empty string"),
        ('{"question": "2 + 2?"}', "missing 'answer'"),
        (
            '{"question": "2 + 2?", "answer": true}',
            "'answer' must be a number, a string or null, got boolean",
        ),
        ('{"question": "2 + 2?", "answer": [4]}', "got array"),
        ('{"question": "2 + 2?", "anwser": 4}', "unknown field 'anwser' (did you mean 'answer'?)"),
        ('{"question": "2 + 2?", "answer": 4, "checker": "fuzzy"}', "checker 'fuzzy' is unknown"),
        ('{"question": "?", "answer": "four", "checker": "numeric"}', "numeric checker needs a numeric"),
        ('{"question": "?", "answer": 4, "tolerance": 0.1}', "'tolerance' is only used by the numeric"),
        ('{"question": "?", "answer": 4, "checker": "numeric", "tolerance": -1}', "must be a number >= 0"),
        ('{"id": "a", "question": "?", "answer": 4}', "id 'a' was already used on line 1"),
    ],
)
def test_jsonl_loader_names_file_and_line_of_a_bad_line(tmp_path, line, reason) -> None:
    path = _write(tmp_path, [json.dumps({"id": "a", "question": "1 + 1?", "answer": 2}), "", line])
    with pytest.raises(TaskFileError) as info:
        load_jsonl_tasks(path)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(f"{path}:3: ") and reason in message
    assert "\n" not in message


def test_jsonl_loader_file_errors(tmp_path) -> None:
    with pytest.raises(TaskFileError, match="cannot read the task file"):
        load_jsonl_tasks(tmp_path / "missing.jsonl")
    with pytest.raises(TaskFileError, match="no tasks"):
        load_jsonl_tasks(_write(tmp_path, ["", "  "]))
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"question": "\xff", "answer": 1}\n')
    with pytest.raises(TaskFileError, match="not UTF-8"):
        load_jsonl_tasks(binary)


def test_a_task_file_splits_by_id_and_samples_like_the_generated_suite(tmp_path) -> None:
    path = _write(tmp_path, [json.dumps({"question": f"{i} + 1?", "answer": i + 1}) for i in range(50)])
    suite = TaskFileSuite(path, seed=3, heldout_fraction=0.2)
    train, heldout = suite.splits["train"], suite.splits["heldout"]
    assert len(train) + len(heldout) == 50 and 3 <= len(heldout) <= 20
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    assert TaskFileSuite(path, seed=3, heldout_fraction=0.2).splits == suite.splits  # by id, no randomness
    drawn = suite.sample("train", 10, random.Random(0))
    assert len({t.task_id for t in drawn}) == 10 and all(t in train for t in drawn)
    assert len(suite.sample("train", 100, random.Random(0))) == 100  # drawn again once the split runs out
    assert suite.fixed_set("heldout", 1000) == suite.fixed_set("heldout", 1000)
    assert sorted(t.task_id for t in suite.fixed_set("heldout", 1000)) == sorted(t.task_id for t in heldout)


def test_a_task_file_too_small_for_both_splits_is_an_error(tmp_path) -> None:
    path = _write(tmp_path, [json.dumps({"question": "1 + 1?", "answer": 2})])
    with pytest.raises(TaskFileError, match="split empty at heldout_fraction=0.2; add tasks"):
        TaskFileSuite(path)
