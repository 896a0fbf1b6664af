"""benchmarks/greedy_eval.py --transfer: the tasks a finished run's RL iterations played are drawn again from
their seeds (the ones the trainer played, not off by an iteration), and each task set is scored after SFT and
after RL, greedy and over K samples."""

import json

import pytest
from bench_scripts import load_script

from teamrl.config import load_config
from teamrl.recipes import Phase
from teamrl.trainer.build import build_suite
from teamrl.trainer.overlap import iteration_tasks, plan_iteration
from teamrl.trainer.trainer import Trainer, resume_config
from tests.test_trainer import SMALL


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transfer")
    cfg = load_config(overrides=SMALL + [f"policies.default.embedded.cache_dir={tmp / 'cache'}"])
    Trainer(cfg, tmp / "run").fit()
    return tmp / "run"


def test_the_drawn_tasks_are_those_the_iteration_plays():
    cfg = load_config(overrides=SMALL)
    suite = build_suite(cfg)
    for step in (0, 1, 7):
        plan = plan_iteration(cfg, suite, Phase("p", ("coder",), 1), step)
        assert [t.task_id for t in iteration_tasks(cfg, suite, step)] == [t.task_id for t in plan.tasks]
    assert {t.task_id for t in iteration_tasks(cfg, suite, 0)} != {
        t.task_id for t in iteration_tasks(cfg, suite, 1)
    }


def test_the_played_tasks_match_the_run_and_every_set_is_scored(finished_run):
    script = load_script("greedy_eval")
    trainer = Trainer(resume_config(finished_run), finished_run, resume=True, read_only=True)
    try:
        played = script.rl_played_tasks(trainer, finished_run)
        first, last = (iteration_tasks(trainer.cfg, trainer.suite, s) for s in (0, 1))
    finally:
        trainer.close()
    expected = list({t.task_id: t for t in first + last})
    assert [t.task_id for t in played] == expected
    # the trainer's own record of its last iteration: its tasks are the last iteration's draw
    logged = {
        json.loads(line)["task_id"] for line in (finished_run / "episodes" / "last_rollout.jsonl").open()
    }
    assert logged and logged <= {t.task_id for t in last}

    result = script.greedy_eval(finished_run, 2, transfer=2)
    assert result["played_in_rl"]["tasks"] == len(played)
    assert result["train_not_played"]["tasks"] == 2 and result["heldout"]["tasks"] == 2
    for name in ("played_in_rl", "train_not_played", "heldout"):
        row = result[name]
        for label in ("sft", "rl"):
            assert 0 <= row[f"{label}_greedy"] <= 1
            assert 0 <= row[f"{label}_sampled"] <= row[f"{label}_pass_at_k"] <= 1


def test_first_versions_are_reported_and_an_expert_sits_in_both_teams(finished_run):
    script = load_script("greedy_eval")
    plain = script.greedy_eval(finished_run, 3)
    for label in ("sft", "rl"):
        assert 0 <= plain[f"{label}_first_version"] <= 1
    # the scripted coder writes the same code for a task in both teams (its first version is the buggy
    # solution or the reference, drawn per task; its revisions the reference), whatever the RL reviewer says
    with_expert = script.greedy_eval(finished_run, 3, expert="coder")
    assert with_expert["expert"] == "coder"
    assert with_expert["sft_first_version"] == with_expert["rl_first_version"]
    for label in ("sft", "rl"):
        assert with_expert[f"{label}_solved"] >= with_expert[f"{label}_first_version"]
    with pytest.raises(SystemExit, match="experts are"):
        script.greedy_eval(finished_run, 3, expert="nobody")
