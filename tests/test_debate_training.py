"""The debate workflow in `teamrl train`: config validation, a tiny run, its evaluation and resume."""

import asyncio
import json
import random
from pathlib import Path

import pytest
from tiny_debate import TINY_DEBATE
from trainer_spy import killed_then_resumed, record_updates

from teamrl.cli import main as cli_main
from teamrl.config import ConfigError, dump_config, load_config
from teamrl.engine.team import Seat, Team
from teamrl.tasks.reasoning import ReasoningTask
from teamrl.trainer.build import demonstrations, play_episode
from teamrl.trainer.trainer import Trainer
from teamrl.workflows.experts import debate_experts, worked_solution

EXAMPLE = Path(__file__).parent.parent / "examples" / "debate.yaml"

TINY = [
    *TINY_DEBATE,
    "workflow.debaters=2",
    "workflow.aggregation=judge",
    "workflow.roles.debater_1.trainable=false",  # a frozen seat: it must not move
    "recipe.name=freeze_rotate",
    "recipe.iterations_per_role=1",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One embedded base for the module's runs (built by the first)."""
    return f"policies.default.embedded.cache_dir={tmp_path_factory.mktemp('cache')}"


@pytest.fixture
def tiny_cfg(cache):
    return load_config(overrides=[*TINY, cache])


# -- config ---------------------------------------------------------------------------------------
def test_the_example_and_its_judge_variant_validate():
    cfg = load_config(EXAMPLE)
    assert cfg.workflow.name == "debate" and cfg.tasks.suite == "reasoning"
    assert cfg.workflow.order == ["debater_0", "debater_1", "debater_2"]
    assert (cfg.workflow.debaters, cfg.workflow.rounds, cfg.workflow.aggregation) == (3, 1, "majority")
    assert set(cfg.workflow.roles) == set(cfg.workflow.order)  # every seat filled in with the defaults
    judged = load_config(EXAMPLE, ["workflow.aggregation=judge", "workflow.roles.judge.max_new_tokens=24"])
    assert judged.workflow.order[-1] == "judge" and judged.workflow.roles["judge"].max_new_tokens == 24
    assert judged.trained_roles() == ["debater_0", "debater_1", "debater_2", "judge"]


def test_a_debate_starts_from_its_own_defaults_and_round_trips(tmp_path):
    cfg = load_config(overrides=["workflow.name=debate", "workflow.debaters=2"])
    assert sorted(cfg.workflow.roles) == ["debater_0", "debater_1"]  # not the pipeline's roles
    assert cfg.tasks.suite == "reasoning" and cfg.tasks.families == ["arith", "shopping", "ages", "rates"]
    (tmp_path / "c.yaml").write_text(dump_config(cfg))
    assert load_config(tmp_path / "c.yaml") == cfg


def test_a_task_file_is_checked_when_the_config_loads(tmp_path):
    good = tmp_path / "mine.jsonl"
    good.write_text("".join(json.dumps({"question": f"{i} + 1?", "answer": i + 1}) + "\n" for i in range(40)))
    cfg = load_config(overrides=["workflow.name=debate", f"tasks.path={good}"])
    assert cfg.tasks.path == str(good)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "1 + 1?", "answer": 2}\n{"question": "2 + 2?"}\n')
    with pytest.raises(ConfigError, match=r"tasks.path: .*bad.jsonl:2: missing 'answer'"):
        load_config(overrides=["workflow.name=debate", f"tasks.path={bad}"])


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["workflow.name=debat"], "workflow.name: unknown workflow 'debat': did you mean 'debate'?"),
        (["workflow.debatres=2"], "workflow.debatres: unknown key; did you mean 'debaters'?"),
        (["workflow.order=[debater_0]"], "workflow.order: unknown key"),
        (["workflow.debaters=0"], "workflow.debaters: Input should be greater than or equal to 1"),
        (["workflow.aggregation=vote"], "workflow.aggregation: Input should be 'judge' or 'majority'"),
        (["workflow.visible_others=3"], "visible_others=3 exceeds the 2 other debaters"),
        (["workflow.roles.judge.trainable=false"], "roles.judge is not a role of this debate"),
        (["workflow.roles.debater_3.trainable=false"], "raise debaters or remove it"),
        (["workflow.roles.debater_0.sop=x"], "workflow.roles.debater_0.sop: unknown key"),
        (["workflow.roles.debater_0.adapter=false"], "trainable needs adapter: true"),
        (["workflow.roles.debater_0.policy=big"], "known policies: ['default']"),
        (["tasks.suite=programming"], "set tasks.suite: reasoning"),
        (["tasks.kinds=[write]"], "tasks.kinds: unknown key"),
        (["tasks.families=[algebra]"], "tasks.families: families=['algebra'] is invalid"),
        (["tasks.difficulty=[0,2]"], "1 <= lo <= hi <= 3"),
        (["tasks.path=/no/such/tasks.jsonl"], "tasks.path: /no/such/tasks.jsonl: cannot read the task file"),
        (["recipe.roles=[coder]"], "recipe.roles names 'coder'"),
    ],
)
def test_bad_debate_configs_name_the_key_and_the_fix(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["workflow.name=debate", *overrides])
    assert needle in str(err.value)


def test_the_pipeline_keeps_its_programming_tasks():
    with pytest.raises(ConfigError, match="set tasks.suite: programming"):
        load_config(overrides=["tasks.suite=reasoning"])


def test_cli_reports_a_bad_debate_config_without_a_traceback(capsys):
    assert cli_main(["train", str(EXAMPLE), "--set", "workflow.rounds=-1"]) == 2
    err = capsys.readouterr().err
    assert "workflow.rounds" in err and "Traceback" not in err


# -- experts --------------------------------------------------------------------------------------
def test_expert_demonstrations_are_the_episodes_prompts(tiny_cfg):
    pairs = demonstrations(tiny_cfg, 4, seed=1)
    assert sorted(pairs) == ["debater_0", "debater_1", "judge"]
    assert [len(p) for p in pairs.values()] == [8, 8, 4]  # two rounds of each debater, one verdict
    prompt, text = pairs["debater_0"][0]
    assert prompt.startswith("### debater_0: Solve it step by step.") and "question: " in prompt
    assert text.startswith("<answer>") and "ANSWER: " in text
    assert all(t.startswith("<answer>ANSWER: ") for _, t in pairs["judge"])


def test_the_expert_debater_errs_sometimes_and_the_judge_finds_the_right_answer():
    task = ReasoningTask("t", "What is (2 + 3) * 4?", 20, solution=("2 + 3 = 5", "5 * 4 = 20"))
    slipped, answer = worked_solution(task, random.Random(3))
    assert answer != "20" and len(slipped) == 2 and slipped[-1].endswith(f"= {answer}")
    assert slipped[-1].startswith(slipped[0].rsplit(" ", 1)[-1])  # the next step goes on from what it wrote

    cfg = load_config(overrides=["workflow.name=debate", "workflow.aggregation=judge"])
    experts = debate_experts(random.Random(0))
    team = Team({r: Seat(script=experts["judge" if r == "judge" else "debater"]) for r in cfg.workflow.order})
    episodes = [asyncio.run(play_episode(cfg, team, task, None, group=g)) for g in range(200)]
    round0 = [right for e in episodes for right in e.verifier["correct"][0]]
    assert 0.7 < sum(round0) / len(round0) < 0.9  # error_rate 0.2 in round 0
    some_right = [e for e in episodes if "20" in e.verifier["answers"][-1]]
    assert all(e.verifier["verdict"] == "20" for e in some_right)


# -- training -------------------------------------------------------------------------------------
def test_a_tiny_debate_run_trains_only_the_phase_role_and_evaluates(tiny_cfg, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    trainer = Trainer(tiny_cfg, run)
    assert trainer.sandbox is None  # a debate checks answers in-process
    seen = record_updates(trainer, monkeypatch)
    summary = trainer.fit()
    assert [e["label"] for e in summary["evals"]] == ["after_sft", "after_rl"]
    assert [roles for roles, _, _ in seen] == [("debater_0",), ("judge",)]  # debater_1 is frozen
    for roles, skipped, changed in seen:
        assert changed == set(roles) - skipped
    after_rl = summary["evals"][-1]
    assert 0.0 <= after_rl["eval/solved"] <= 1.0
    assert {"eval/reward/debater_0", "eval/reward/debater_1", "eval/reward/judge"} <= set(after_rl)
    assert (run / "checkpoint" / "adapters" / "judge" / "adapter_config.json").exists()
    episode = json.loads((run / "episodes" / "eval_after_rl.jsonl").read_text().splitlines()[0])
    assert "verdict_correct" in episode["verifier"]

    assert cli_main(["eval", str(run), "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "reward: judge" in out and "pass fraction" not in out
    rows = (run / "episodes" / "eval_eval.jsonl").read_text().splitlines()
    assert len(rows) == 2 * tiny_cfg.run.eval_samples


def test_a_joint_mgrpo_debate_run_updates_every_trainable_seat(cache, tmp_path, monkeypatch):
    cfg = load_config(
        overrides=[*TINY[:-2], cache, "recipe.name=joint", "recipe.iterations=1", "algorithm.name=mgrpo"]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    seen = record_updates(trainer, monkeypatch)
    trainer.fit()
    [(roles, skipped, changed)] = seen
    assert roles == ("debater_0", "judge") and changed == set(roles) - skipped


def test_an_update_moves_exactly_the_trained_debaters(tiny_cfg, tmp_path):
    trainer = Trainer(tiny_cfg, tmp_path / "run")
    trainer.sft_roles()
    episodes = trainer.rollout(trainer.suite.fixed_set("train", 2), 2)
    for ep in episodes:  # make the two episodes of each task differ, so advantages are non-zero
        ep.rewards = {r: float(ep.group) for r in ep.rewards}
    before = trainer.fingerprints()
    trainer.update(episodes, ("debater_0", "judge"))
    after = trainer.fingerprints()
    assert {k for k in before if before[k] != after[k]} == {"debater_0", "judge"}


def test_a_killed_debate_run_resumes(tiny_cfg, tmp_path, monkeypatch):
    resumed = killed_then_resumed(tiny_cfg, tmp_path / "run", monkeypatch)
    assert resumed.state.step == 1
    assert resumed.fit()["evals"][-1]["label"] == "after_rl"
