"""The built-in programming task suite: tasks are correct, bugs are real, splits never overlap."""

from __future__ import annotations

import random
from typing import Any

import pytest

from teamrl.tasks.programming import (
    DIFFICULTIES,
    FAMILIES,
    KINDS,
    ProgrammingTask,
    ProgrammingTaskSuite,
)


def _namespace(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # our own generated code
    return namespace


def _passes(code: str, tests: tuple[str, ...] | list[str]) -> list[bool]:
    namespace = _namespace(code)
    results = []
    for test in tests:
        try:
            exec(test, namespace)
            results.append(True)
        except AssertionError:
            results.append(False)
    return results


def _body(task: ProgrammingTask) -> str:
    return task.reference_solution.split("\n", 1)[1]


@pytest.fixture(scope="module")
def suite() -> ProgrammingTaskSuite:
    return ProgrammingTaskSuite(seed=3, difficulty=(1, 3))


@pytest.fixture(scope="module")
def tasks(suite: ProgrammingTaskSuite) -> list[ProgrammingTask]:
    rng = random.Random(11)
    return suite.sample("train", 500, rng) + suite.sample("heldout", 150, rng)


def test_every_family_kind_and_difficulty_appears(tasks: list[ProgrammingTask]) -> None:
    cells = {(t.family, t.kind, t.difficulty) for t in tasks}
    missing = {(f, k, d) for f in FAMILIES for k in KINDS for d in DIFFICULTIES} - cells
    assert not missing
    assert 8 <= len(FAMILIES) <= 12


def test_reference_passes_examples_hidden_and_demo_tests(tasks: list[ProgrammingTask]) -> None:
    for t in tasks:
        tests = [f"assert {e}" for e in t.examples] + list(t.hidden_tests) + list(t.demo_tests)
        assert all(_passes(t.reference_solution, tests)), t.task_id


def test_buggy_solution_fails_a_hidden_and_a_demo_test(tasks: list[ProgrammingTask]) -> None:
    for t in tasks:
        assert t.buggy_solution != t.reference_solution
        assert not all(_passes(t.buggy_solution, t.hidden_tests)), t.task_id
        assert not all(_passes(t.buggy_solution, t.demo_tests)), t.task_id


def test_fix_tasks_carry_a_real_failing_test_and_issue(tasks: list[ProgrammingTask]) -> None:
    for t in tasks:
        if t.kind == "write":
            assert t.issue_text == "" and t.failing_test == ""
            continue
        assert _passes(t.reference_solution, [t.failing_test]) == [True], t.task_id
        assert _passes(t.buggy_solution, [t.failing_test]) == [False], t.task_id
        call = t.failing_test.removeprefix("assert ").split(" == ")[0]
        assert t.issue_text.startswith(f"{call} returns ")


def test_review_comment_names_what_the_buggy_code_really_returns(tasks: list[ProgrammingTask]) -> None:
    for t in tasks:
        call, rest = t.review_comment.split(" gives ")
        got, expected = rest.split(", expected ")
        assert call.startswith(f"{t.func_name}(")
        assert eval(call, _namespace(t.buggy_solution)) == eval(got)
        assert eval(call, _namespace(t.reference_solution)) == eval(expected)
        assert eval(got) != eval(expected)


def test_hidden_tests_are_kept_back_and_informative(tasks: list[ProgrammingTask]) -> None:
    for t in tasks:
        assert 4 <= len(t.hidden_tests) <= 6 and len(set(t.hidden_tests)) == len(t.hidden_tests)
        shown = {f"assert {e}" for e in t.examples} | {t.failing_test}
        assert not shown & set(t.hidden_tests)
        assert 2 <= len(t.demo_tests) <= 3
        # A task whose hidden answers are all equal would reward a constant function.
        assert len({h.split(" == ")[1] for h in t.hidden_tests}) > 1, t.task_id


def test_no_buggy_variant_passes_every_hidden_test() -> None:
    """The verifier cannot be passed by near-miss code: every buggy variant of a task (the other comparison,
    a boundary or constant one off, min for max) that differs from the reference on some input of the
    family's input pool outside the shown examples fails one of its hidden tests. Before, 19 of 200
    held-out tasks paid such a variant as right."""
    from teamrl.tasks.programming import _FAMILIES, _body_text

    def source(t: ProgrammingTask, p: tuple[Any, ...]) -> str:
        shape = _FAMILIES[t.family].shape(p)
        return f"def {t.func_name}({shape.args}):\n{_body_text(shape.body)}"

    suite = ProgrammingTaskSuite()
    checked = passed = 0
    for t in suite.fixed_set("heldout", 200) + suite.fixed_set("train", 100):
        fam = _FAMILIES[t.family]
        params = next(p for p in fam.space(t.difficulty) if source(t, p) == t.reference_solution)
        for mutant in fam.mutants(params):
            code = source(t, mutant)
            if code == t.reference_solution:
                continue
            checked += 1
            passed += all(_passes(code, t.hidden_tests))
    assert checked > 600
    assert passed <= 0.01 * checked  # the rest tell apart only on the shown examples or outside the pool


def test_texts_stay_short_regular_and_ascii(tasks: list[ProgrammingTask]) -> None:
    for t in tasks:
        assert len(t.spec) <= 120 and t.spec.startswith(f"{t.func_name}(")
        for code in (t.reference_solution, t.buggy_solution):
            assert 2 <= code.count("\n") <= 4 and code.startswith(f"def {t.func_name}(")
        for text in (t.spec, t.plan, t.brief(), t.review_comment, *t.hidden_tests):
            assert text.isascii()
        assert t.plan_keys and all(key in t.plan for key in t.plan_keys)
        assert len(t.brief().splitlines()) <= (2 if t.kind == "write" else 9)


def test_brief_shows_the_right_material(tasks: list[ProgrammingTask]) -> None:
    for t in tasks:
        brief = t.brief()
        assert t.spec in brief and all(e in brief for e in t.examples)
        assert not any(h.removeprefix("assert ") in brief for h in t.hidden_tests)
        if t.kind == "fix":
            assert t.buggy_solution.rstrip() in brief and t.failing_test in brief and t.issue_text in brief
        else:
            assert "def " not in brief


def test_train_and_heldout_never_share_a_task(suite: ProgrammingTaskSuite) -> None:
    rng = random.Random(5)
    train = suite.sample("train", 1000, rng)
    heldout = suite.sample("heldout", 400, rng)
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    assert not {(t.spec, t.kind) for t in train} & {(t.spec, t.kind) for t in heldout}
    # Stronger: not even a renamed or re-kinded copy of the same semantics crosses over.
    assert not {(t.family, _body(t)) for t in train} & {(t.family, _body(t)) for t in heldout}
    assert not any(suite.is_heldout(t) for t in train)
    assert all(suite.is_heldout(t) for t in heldout)


def test_split_ignores_seed_and_sampling_order(suite: ProgrammingTaskSuite) -> None:
    other = ProgrammingTaskSuite(seed=99, difficulty=(1, 3))
    for t in other.sample("train", 200, random.Random(1)):
        assert not suite.is_heldout(t)
    for t in other.sample("heldout", 100, random.Random(2)):
        assert suite.is_heldout(t)


def test_task_content_is_determined_by_its_id() -> None:
    a = ProgrammingTaskSuite(seed=1).sample("train", 300, random.Random(1))
    b = ProgrammingTaskSuite(seed=2).sample("train", 300, random.Random(2))
    by_id = {t.task_id: t for t in a}
    shared = [t for t in b if t.task_id in by_id]
    assert shared
    assert all(by_id[t.task_id] == t for t in shared)


def test_fixed_set_is_deterministic() -> None:
    first = ProgrammingTaskSuite(seed=4).fixed_set("heldout", 40)
    again = ProgrammingTaskSuite(seed=4).fixed_set("heldout", 40)
    assert first == again
    assert ProgrammingTaskSuite(seed=4).fixed_set("heldout", 80)[:40] == first
    assert ProgrammingTaskSuite(seed=5).fixed_set("heldout", 40) != first


def test_sample_gives_distinct_tasks_and_respects_settings() -> None:
    tasks = ProgrammingTaskSuite(difficulty=2, kinds=("fix",)).sample("train", 300, random.Random(0))
    assert len({t.task_id for t in tasks}) == 300
    assert {t.difficulty for t in tasks} == {2} and {t.kind for t in tasks} == {"fix"}


def test_suite_is_large_enough() -> None:
    suite = ProgrammingTaskSuite()
    train, heldout = suite.count("train"), suite.count("heldout")
    print(f"distinct tasks at difficulty (1, 2): train={train} heldout={heldout}")
    assert train >= 3000 and heldout >= 300
    assert 0.1 < heldout / (train + heldout) < 0.3


@pytest.mark.parametrize(
    ("kwargs", "bad"),
    [
        ({"difficulty": 0}, "0"),
        ({"difficulty": (2, 4)}, "(2, 4)"),
        ({"difficulty": (3, 1)}, "(3, 1)"),
        ({"kinds": ("write", "debug")}, "debug"),
        ({"kinds": ()}, "()"),
        ({"heldout_fraction": 0.0}, "0.0"),
        ({"heldout_fraction": 1.5}, "1.5"),
    ],
)
def test_bad_arguments_name_the_value(kwargs: dict[str, Any], bad: str) -> None:
    with pytest.raises(ValueError, match=bad.replace("(", r"\(").replace(")", r"\)")):
        ProgrammingTaskSuite(**kwargs)


def test_bad_split_and_size_raise() -> None:
    suite = ProgrammingTaskSuite()
    with pytest.raises(ValueError, match="'test'.*'train', 'heldout'"):
        suite.sample("test", 3, random.Random(0))
    with pytest.raises(ValueError, match="'dev'"):
        suite.fixed_set("dev", 3)
    with pytest.raises(ValueError, match="-1"):
        suite.sample("train", -1, random.Random(0))
