"""The self_play workflow in `teamrl train`: config validation, experts, metrics, tiny runs of both games."""

import asyncio
import itertools
import json
import random
from pathlib import Path

import pytest
from scripted_seats import scripted
from tiny_base import TINY_BASE
from trainer_spy import killed_then_resumed, record_updates

from teamrl.cli import main as cli_main
from teamrl.config import ConfigError, SelfPlayConfig, dump_config, load_config
from teamrl.engine.engine import Engine
from teamrl.engine.team import RoleCall, Seat, Team
from teamrl.policies.scripted import ScriptedPolicy
from teamrl.tasks.reasoning import ReasoningTask
from teamrl.trainer.build import demonstrations, expert_seats
from teamrl.trainer.trainer import Trainer, summarize
from teamrl.workflows.experts import self_play_experts
from teamrl.workflows.self_play import (
    assign_self_play_rewards,
    evaluate_expression,
    generator_judge,
    proposer_solver,
    self_play_metrics,
    solve_alone,
)
from teamrl.workflows.self_play_workflow import SelfPlay

EXAMPLES = Path(__file__).parent.parent / "examples"
GJ_EXAMPLE = EXAMPLES / "self_play_generator_judge.yaml"
PS_EXAMPLE = EXAMPLES / "self_play_proposer_solver.yaml"

TINY = [
    "workflow.name=self_play",
    *TINY_BASE,
]
TASK = ReasoningTask("t", "What is (2 + 3) * 4?", 20, solution=("2 + 3 = 5", "5 * 4 = 20"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One directory of embedded bases for the module's runs (one base per game)."""
    return f"policies.default.embedded.cache_dir={tmp_path_factory.mktemp('cache')}"


# -- config ---------------------------------------------------------------------------------------
def test_the_examples_validate_with_their_games_roles():
    gj, ps = load_config(GJ_EXAMPLE), load_config(PS_EXAMPLE)
    assert (gj.workflow.name, gj.workflow.game, gj.tasks.suite) == (
        "self_play",
        "generator_judge",
        "reasoning",
    )
    assert gj.workflow.order == ["generator", "judge"] and set(gj.workflow.roles) == {"generator", "judge"}
    assert ps.workflow.game == "proposer_solver" and ps.trained_roles() == ["proposer", "solver"]


def test_self_play_starts_from_its_own_defaults_and_round_trips(tmp_path):
    cfg = load_config(overrides=["workflow.name=self_play", "workflow.game=proposer_solver"])
    assert sorted(cfg.workflow.roles) == ["proposer", "solver"]  # not the pipeline's roles
    assert cfg.tasks.suite == "reasoning" and cfg.reward.credit == "hybrid"
    (tmp_path / "c.yaml").write_text(dump_config(cfg))
    assert load_config(tmp_path / "c.yaml") == cfg
    frozen = load_config(overrides=["workflow.name=self_play", "workflow.roles.judge.trainable=false"])
    assert frozen.trained_roles() == ["generator"] and frozen.workflow.roles["generator"].trainable


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["workflow.game=chess"], "workflow.game: Input should be 'generator_judge' or 'proposer_solver'"),
        (["workflow.gmae=x"], "workflow.gmae: unknown key; did you mean 'game'?"),
        (["workflow.roles.solver.trainable=false"], "roles.solver is not a role of game 'generator_judge'"),
        (["workflow.roles.judge.adapter=false"], "trainable needs adapter: true"),
        (["workflow.roles.judge.policy=big"], "known policies: ['default']"),
        (
            ["workflow.solver_samples=0"],
            "workflow.solver_samples: Input should be greater than or equal to 1",
        ),
        (["tasks.suite=programming"], "set tasks.suite: reasoning"),
        (["reward.credit=shared"], "workflow self_play rewards each role by the rules of its game"),
        (["recipe.roles=[solver]"], "recipe.roles names 'solver', not in workflow.order"),
    ],
)
def test_bad_self_play_configs_name_the_key_and_the_fix(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["workflow.name=self_play", *overrides])
    assert needle in str(err.value)


def test_a_judge_needs_labelled_tasks_a_proposer_does_not(tmp_path):
    path = tmp_path / "open.jsonl"
    rows = [{"question": f"What is {i} + 1?", "answer": i + 1} for i in range(20)] + [
        {"id": "why", "question": "Why?", "answer": None}
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"1 task\(s\) of .*open.jsonl have no answer \(first: 'why'\)"):
        load_config(overrides=["workflow.name=self_play", f"tasks.path={path}"])
    cfg = load_config(
        overrides=["workflow.name=self_play", "workflow.game=proposer_solver", f"tasks.path={path}"]
    )
    assert cfg.tasks.path == str(path)


def test_cli_reports_a_bad_self_play_config_without_a_traceback(capsys):
    assert cli_main(["train", str(PS_EXAMPLE), "--set", "workflow.target_rate=2"]) == 2
    err = capsys.readouterr().err
    assert "workflow.target_rate" in err and "Traceback" not in err


# -- experts --------------------------------------------------------------------------------------
def _call(role: str, **context) -> RoleCall:
    return RoleCall(role, "", "answer", 0, context)


def test_the_expert_judge_checks_every_step_and_rejects_at_the_first_wrong_one():
    judge = self_play_experts(random.Random(0), judge_noise=0.0)["judge"]
    right = _call("judge", argument="Steps: 2 + 3 = 5. 5 * 4 = 20. ANSWER: 20", answer="20")
    assert judge(right) == "<answer>Check: 2 + 3 = 5. 5 * 4 = 20. VERDICT: ACCEPT</answer>"
    slipped = _call("judge", argument="Steps: 2 + 3 = 6. 6 * 4 = 24. ANSWER: 24", answer="24")
    assert judge(slipped) == "<answer>Check: 2 + 3 = 5, not 6. VERDICT: REJECT</answer>"
    assert judge(_call("judge", argument="(none)", answer=None)) == "<answer>VERDICT: REJECT</answer>"
    noisy = self_play_experts(random.Random(0), judge_noise=0.3)["judge"]
    verdicts = [noisy(right).endswith("ACCEPT</answer>") for _ in range(400)]
    assert 0.6 < sum(verdicts) / len(verdicts) < 0.8


def test_the_expert_proposer_writes_valid_problems_of_varied_difficulty_from_the_example():
    proposer = self_play_experts(random.Random(1))["proposer"]
    example = "What is (12 + 15) * 3 - 40?"
    operations = []
    for _ in range(200):
        text = proposer(_call("proposer", example=example))
        assert text.startswith("<answer>PROBLEM: ") and text.endswith("</answer>")
        operations.append(evaluate_expression(text[len("<answer>PROBLEM: ") : -len("</answer>")]).operations)
    assert min(operations) == 1 and max(operations) >= 4  # trivial ones and harder ones
    assert 0.35 < operations.count(3) / len(operations) < 0.75  # mostly as many as the example's


def test_the_expert_solver_works_a_proposed_problem_and_slips_more_on_longer_ones():
    solver = self_play_experts(random.Random(2), slip_per_step=0.1)["solver"]
    clean = self_play_experts(random.Random(2), slip_per_step=0.0)["solver"]
    assert clean(_call("solver", problem="(2 + 3) * 4 - 6", sample=0)) == (
        "<answer>Steps: 2 + 3 = 5. 5 * 4 = 20. 20 - 6 = 14. ANSWER: 14</answer>"
    )
    assert clean(_call("solver", task=TASK)) == "<answer>Steps: 2 + 3 = 5. 5 * 4 = 20. ANSWER: 20</answer>"

    def right(problem: str) -> float:
        value = evaluate_expression(problem).value
        texts = [solver(_call("solver", problem=problem, sample=0)) for _ in range(600)]
        return sum(t.endswith(f"ANSWER: {value}</answer>") for t in texts) / len(texts)

    assert right("2 + 3") > right("2 + 3 + 4 + 5 + 6 + 7") + 0.15  # 0.9 vs 0.9 ** 5


def test_expert_demonstrations_are_the_episodes_prompts(cache):
    gj = load_config(overrides=[*TINY, cache])
    pairs = demonstrations(gj, 5, seed=1)
    assert [len(pairs[r]) for r in ("generator", "judge")] == [5, 5]
    assert (
        pairs["judge"][0][0].startswith("### judge: Is the answer correct?")
        and "\ngenerator: " in pairs["judge"][0][0]
    )
    assert all("VERDICT: " in text for _, text in pairs["judge"])
    ps = load_config(overrides=[*TINY, cache, "workflow.game=proposer_solver", "workflow.solver_samples=3"])
    pairs = demonstrations(ps, 5, seed=1)
    # 3 attempts at each proposed problem, plus the solver alone on each example itself
    assert [len(pairs[r]) for r in ("proposer", "solver")] == [5, 5 * 3 + 5]
    assert all(text.startswith("<answer>PROBLEM: ") for _, text in pairs["proposer"])


# -- metrics --------------------------------------------------------------------------------------
def test_the_held_out_figures_of_known_transcripts():
    gj = SelfPlayConfig()
    judged = [  # (generator, judge): right+accept, right+reject, wrong+reject, wrong+accept, wrong+reject
        ("<answer>ANSWER: 20</answer>", "<answer>VERDICT: ACCEPT</answer>"),
        ("<answer>ANSWER: 20</answer>", "<answer>VERDICT: REJECT</answer>"),
        ("<answer>ANSWER: 21</answer>", "<answer>VERDICT: REJECT</answer>"),
        ("<answer>ANSWER: 21</answer>", "<answer>VERDICT: ACCEPT</answer>"),
        ("no tags", "<answer>VERDICT: REJECT</answer>"),
    ]
    episodes = []
    for generator, judge in judged:
        team = Team(scripted([], {"generator": [generator], "judge": [judge]}))
        episodes.append(asyncio.run(generator_judge(team, TASK, gj)))
    assert self_play_metrics(episodes, "eval/") == pytest.approx(
        {
            "eval/selfplay/generator_accuracy": 2 / 5,
            "eval/selfplay/judge_accuracy": 3 / 5,
            "eval/selfplay/judge_accepts_correct": 1 / 2,
            "eval/selfplay/judge_rejects_wrong": 2 / 3,
        }
    )

    ps = SelfPlayConfig(game="proposer_solver", solver_samples=2)
    games = [  # (proposal, attempts): 2 + 3 * 4 half solved, 7 * (8 - 5) solved twice, an invalid one
        (
            "<answer>PROBLEM: 2 + 3 * 4</answer>",
            ["<answer>ANSWER: 14</answer>", "<answer>ANSWER: 20</answer>"],
        ),
        ("<answer>PROBLEM: 7 * (8 - 5)</answer>", ["<answer>ANSWER: 21</answer>"] * 2),
        ("<answer>PROBLEM: 2 ** 9</answer>", []),
    ]
    episodes = []
    for proposal, attempts in games:
        team = Team(scripted([], {"proposer": [proposal], "solver": list(attempts)}))
        episodes.append(asyncio.run(proposer_solver(team, TASK, ps)))
    solo = []
    for reply in ("<answer>ANSWER: 20</answer>", "<answer>ANSWER: 19</answer>", "20"):
        solo.append(asyncio.run(solve_alone(Team(scripted([], {"solver": [reply]})), TASK, ps)))
    assert self_play_metrics(episodes + solo, "eval/") == pytest.approx(
        {
            "eval/selfplay/valid_rate": 2 / 3,
            "eval/selfplay/solver_rate": (0.5 + 1.0) / 2,
            "eval/selfplay/difficulty/operations": 2.0,
            "eval/selfplay/difficulty/max_operand": (4 + 8) / 2,
            "eval/selfplay/difficulty/depth": 2.0,
            "eval/selfplay/difficulty/answer_digits": 2.0,
            "eval/selfplay/distinct_problems": 1.0,  # two valid problems, two expressions
            "eval/selfplay/solver_heldout_accuracy": 1 / 3,  # the third reply has no tags
        }
    )
    for e in episodes:
        assign_self_play_rewards(e, ps, 0.5)
    summary = summarize(episodes, "rollout/", SelfPlay(ps))
    assert summary["rollout/selfplay/valid_rate"] == pytest.approx(2 / 3)


def test_a_frozen_solvers_k_attempts_stay_k_samples_when_turns_are_shared():
    counter = itertools.count()

    def respond(req) -> str:
        if req.prompt.startswith("### proposer"):
            return "<answer>PROBLEM: 6 * 7</answer>"
        return f"<answer>ANSWER: {next(counter)}</answer>"

    cfg = SelfPlayConfig(game="proposer_solver", solver_samples=3)
    engine = Engine({"p": ScriptedPolicy(respond)})
    team = Team({role: Seat(policy="p") for role in cfg.order}, engine)
    team.share_turns({"solver"})
    episodes = engine.run([lambda g=g: proposer_solver(team, TASK, cfg, group=g) for g in range(2)])
    first, second = ([t.text for t in e.turns_of("solver")] for e in episodes)
    assert len(set(first)) == 3 and first == second  # 3 samples, shared across the group


# -- training -------------------------------------------------------------------------------------
def test_a_tiny_generator_judge_run_trains_each_role_in_its_phase_and_evaluates(
    cache, tmp_path, monkeypatch, capsys
):
    cfg = load_config(overrides=[*TINY, cache, "recipe.name=freeze_rotate", "recipe.iterations_per_role=1"])
    run = tmp_path / "run"
    trainer = Trainer(cfg, run)
    assert trainer.sandbox is None
    seen = record_updates(trainer, monkeypatch)
    summary = trainer.fit()
    assert [e["label"] for e in summary["evals"]] == ["after_sft", "after_rl"]
    assert [roles for roles, _, _ in seen] == [("generator",), ("judge",)]
    for roles, skipped, changed in seen:
        assert changed == set(roles) - skipped
    after_rl = summary["evals"][-1]
    assert after_rl["eval/selfplay/generator_accuracy"] == after_rl["eval/solved"]
    assert 0.0 <= after_rl["eval/selfplay/judge_accuracy"] <= 1.0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("rollout/selfplay/judge_accuracy" in r for r in rows if "phase" in r)

    assert cli_main(["eval", str(run), "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert "judge accuracy" in out and "reward: judge" in out and "pass fraction" not in out


def test_a_tiny_proposer_solver_run_logs_difficulty_and_the_fixed_set_accuracy(cache, tmp_path, monkeypatch):
    cfg = load_config(
        overrides=[
            *TINY,
            cache,
            "workflow.game=proposer_solver",
            "workflow.solver_samples=2",
            "workflow.roles.proposer.trainable=false",  # an expert proposer: the solver gets valid problems
            "recipe.name=joint",
            "recipe.iterations=1",
            "algorithm.name=mgrpo",
        ]
    )
    run = tmp_path / "run"
    trainer = Trainer(cfg, run)
    experts = self_play_experts(random.Random(0))
    trainer.team.seats["proposer"] = Seat(script=experts["proposer"])
    seen = record_updates(trainer, monkeypatch)
    summary = trainer.fit()
    [(roles, skipped, changed)] = seen
    assert roles == ("solver",) and changed == set(roles) - skipped
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    [rl] = [r for r in rows if "phase" in r]
    assert rl["rollout/selfplay/valid_rate"] == 1.0 and rl["rollout/selfplay/difficulty/operations"] >= 1
    assert 0.0 <= rl["rollout/selfplay/solver_rate"] <= 1.0
    after_rl = summary["evals"][-1]
    assert {"eval/selfplay/valid_rate", "eval/selfplay/solver_heldout_accuracy"} <= set(after_rl)
    assert 0.0 <= after_rl["eval/selfplay/reference_solver_rate"] <= 1.0  # the expert's problems, ref_solver
    solo = (run / "episodes" / "eval_after_rl_solver.jsonl").read_text().splitlines()
    assert len(solo) == cfg.tasks.heldout_size * cfg.run.eval_samples
    assert json.loads(solo[0])["verifier"]["game"] == "solve"


def test_a_killed_self_play_run_resumes(cache, tmp_path, monkeypatch):
    cfg = load_config(
        overrides=[*TINY, cache, "workflow.game=proposer_solver", "workflow.solver_samples=2"]
        + ["recipe.name=freeze_rotate", "recipe.iterations_per_role=1"]
    )
    resumed = killed_then_resumed(cfg, tmp_path / "run", monkeypatch)
    assert resumed.state.step == 1
    assert resumed.fit()["evals"][-1]["label"] == "after_rl"


def test_expert_seats_cover_both_games():
    for game in ("generator_judge", "proposer_solver"):
        cfg = load_config(overrides=["workflow.name=self_play", f"workflow.game={game}"])
        assert sorted(expert_seats(cfg, random.Random(0))) == sorted(cfg.workflow.order)
