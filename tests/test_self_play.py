"""The self_play workflow on scripted roles: who speaks when, what each sees, rewards, the evaluator."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError
from scripted_seats import scripted

from teamrl.config import load_config
from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team
from teamrl.policies.scripted import ScriptedPolicy
from teamrl.protocol import Episode, Turn
from teamrl.tasks.reasoning import ReasoningTask
from teamrl.trainer.build import assign_batch_rewards, demonstrations, rollouts
from teamrl.trainer.learner import Learner
from teamrl.workflows.self_play import (
    SelfPlayConfig,
    UnsafeExpression,
    apply_repetition_penalty,
    assign_self_play_rewards,
    evaluate_expression,
    generator_judge,
    problem_tokens,
    proposer_solver,
    self_play_metrics,
    similarity,
)
from teamrl.workflows.self_play_workflow import SelfPlay

TASK = ReasoningTask(task_id="t1", question="What is 2 + 3 * 4?", answer=14)
SEED = ReasoningTask(task_id="s1", question="What is 7 * 8 - 5?", answer=51)
GJ = SelfPlayConfig(game="generator_judge", generator_sop="Solve.", judge_sop="Judge.")
PS = SelfPlayConfig(game="proposer_solver", proposer_sop="Propose.", solver_sop="Solve.", solver_samples=4)


def reference_solver_evaluation(cfg, team, engine, episodes):  # noqa: ANN001, ANN201
    """The starting solver's rate on the proposals (the workflow's own evaluation, that part alone)."""
    return SelfPlay(cfg.workflow).reference_rate(rollouts(cfg, team, engine), episodes)


def judge_game(generator: str, judge: str, log: list | None = None, format_penalty: float = 0.5):
    seats = scripted([] if log is None else log, {"generator": [generator], "judge": [judge]})
    episode = asyncio.run(generator_judge(Team(seats), TASK, GJ))
    assign_self_play_rewards(episode, GJ, format_penalty)
    return episode


def proposer_game(proposal: str, solver: list[str], log: list | None = None, cfg: SelfPlayConfig = PS):
    seats = scripted([] if log is None else log, {"proposer": [proposal], "solver": list(solver)})
    episode = asyncio.run(proposer_solver(Team(seats), SEED, cfg))
    assign_self_play_rewards(episode, cfg, format_penalty=0.5)
    return episode


# ---------------------------------------------------------------- generator vs judge


def test_the_generator_speaks_then_the_judge_sees_its_reply_but_not_the_label() -> None:
    log: list = []
    episode = judge_game(
        "<answer>3 * 4 = 12, 2 + 12 = 14. ANSWER: 14</answer>", "<answer>VERDICT: ACCEPT</answer>", log
    )
    assert [(c.role, c.round) for c in log] == [("generator", 0), ("judge", 1)]
    assert [(t.role, t.round) for t in episode.turns] == [("generator", 0), ("judge", 1)]
    assert log[0].prompt == "### generator: Solve.\nquestion: What is 2 + 3 * 4?\n"
    assert log[1].prompt == (
        "### judge: Judge.\nquestion: What is 2 + 3 * 4?\ngenerator: 3 * 4 = 12, 2 + 12 = 14. ANSWER: 14\n"
    )
    assert log[1].context == {
        "question": "What is 2 + 3 * 4?",
        "argument": "3 * 4 = 12, 2 + 12 = 14. ANSWER: 14",
        "answer": "14",
    }
    # the label reaches the judge nowhere: a wrong answer leaves no trace of 14 in what it gets
    log = []
    judge_game("<answer>2 + 3 = 5, 5 * 4 = 20. ANSWER: 20</answer>", "<answer>VERDICT: REJECT</answer>", log)
    assert "14" not in log[1].prompt and "14" not in repr(log[1].context)
    assert not any(isinstance(v, ReasoningTask) for v in log[1].context.values())


@pytest.mark.parametrize(
    ("generator", "judge", "correct", "verdict", "rewards"),
    [
        (
            "<answer>ANSWER: 14</answer>",
            "<answer>right. VERDICT: ACCEPT</answer>",
            True,
            "accept",
            (1.0, 1.0),
        ),
        ("<answer>ANSWER: 14</answer>", "<answer>VERDICT: reject</answer>", True, "reject", (0.0, 0.0)),
        ("<answer>ANSWER: 20</answer>", "<answer>VERDICT: ACCEPT</answer>", False, "accept", (0.0, 0.0)),
        (
            "<answer>ANSWER: 20</answer>",
            "<answer>5 * 4 is wrong. VERDICT: REJECT</answer>",
            False,
            "reject",
            (0.0, 1.0),
        ),
        # malformed generator (no tags): its answer counts as wrong and it pays 0.5; rejecting it is right
        ("I think 14", "<answer>VERDICT: REJECT</answer>", False, "reject", (-0.5, 1.0)),
        # malformed judge (no verdict): not a correct verdict, and it pays 0.5
        ("<answer>ANSWER: 14</answer>", "<answer>looks fine</answer>", True, None, (0.0, -0.5)),
    ],
)
def test_rewards_of_generator_and_judge_by_hand(generator, judge, correct, verdict, rewards) -> None:
    episode = judge_game(generator, judge)
    v = episode.verifier
    assert v["correct"] is correct and v["verdict"] == verdict and v["label"] == "14"
    assert episode.outcome == float(correct) and v["solved"] is correct
    assert episode.rewards == pytest.approx({"generator": rewards[0], "judge": rewards[1]})
    assert len(episode.errors) == sum(r < 0 for r in rewards)


def test_format_errors_are_recorded_on_the_turns() -> None:
    episode = judge_game("<answer>no idea</answer>", "ACCEPT", format_penalty=0.25)
    generator, judge = episode.turns
    assert "no final answer" in generator.error and "expected '<answer>" in judge.error
    assert episode.errors == [generator.error, judge.error]
    assert episode.verifier["answer"] is None and episode.verifier["verdict"] is None
    assert episode.rewards == pytest.approx({"generator": -0.25, "judge": -0.25})
    episode = judge_game("<answer>ANSWER: 14</answer>", "<answer>fine</answer>")
    assert "no verdict" in episode.turns[1].error


def test_a_task_without_a_label_cannot_be_judged() -> None:
    seats = scripted([], {"generator": ["<answer>ANSWER: 1</answer>"], "judge": ["x"]})
    task = ReasoningTask(task_id="open", question="?", answer=None)
    with pytest.raises(ValueError, match="needs tasks with ground truth"):
        asyncio.run(generator_judge(Team(seats), task, GJ))


# ---------------------------------------------------------------- proposer vs solver


def test_the_proposer_speaks_then_the_solver_sees_only_the_problem_k_times() -> None:
    log: list = []
    episode = proposer_game(
        "<answer>Harder. PROBLEM: 12 * (3 + 4) - 5</answer>", ["<answer>ANSWER: 79</answer>"] * 4, log
    )
    assert [(c.role, c.round) for c in log] == [("proposer", 0)] + [("solver", 1)] * 4
    assert [t.role for t in episode.turns] == ["proposer"] + ["solver"] * 4
    assert log[0].prompt == "### proposer: Propose.\nexample: What is 7 * 8 - 5?\n"
    for k, call in enumerate(log[1:]):
        assert call.prompt == "### solver: Solve.\nquestion: What is 12 * (3 + 4) - 5?\n"
        assert call.context == {"problem": "12 * (3 + 4) - 5", "sample": k}
        assert "Harder" not in call.prompt and "7 * 8" not in call.prompt  # nor the proposer's words
    v = episode.verifier
    assert v["valid"] and v["label"] == "79" and v["problem"] == "What is 12 * (3 + 4) - 5?"
    assert v["difficulty"] == {"operations": 3, "max_operand": 12, "depth": 3, "answer_digits": 2}


@pytest.mark.parametrize(
    ("solved", "target", "proposer", "solver"),
    [
        (2, 0.5, 1.0, 0.5),  # rate 0.5 hits the target: 1 - 0 / 0.5
        (4, 0.5, 0.0, 1.0),  # too easy: 1 - 0.5 / 0.5
        (0, 0.5, 0.0, 0.0),  # too hard
        (3, 0.5, 0.5, 0.75),  # 1 - 0.25 / 0.5
        (1, 0.25, 1.0, 0.25),  # a target of 0.25: 1 - 0 / 0.75
        (4, 0.25, 0.0, 1.0),  # 1 - 0.75 / 0.75
        (0, 0.25, 1 - 0.25 / 0.75, 0.0),
    ],
)
def test_rewards_of_proposer_and_solver_by_hand(solved, target, proposer, solver) -> None:
    cfg = PS.model_copy(update={"target_rate": target})
    answers = ["<answer>ANSWER: 79</answer>"] * solved + ["<answer>ANSWER: 80</answer>"] * (4 - solved)
    episode = proposer_game("<answer>PROBLEM: 12*(3+4)-5</answer>", answers, cfg=cfg)
    assert episode.verifier["success_rate"] == episode.outcome == solved / 4
    assert episode.verifier["correct"] == [True] * solved + [False] * (4 - solved)
    assert episode.rewards == pytest.approx({"proposer": proposer, "solver": solver})
    assert not episode.errors


def test_a_malformed_solver_attempt_counts_wrong_and_costs_its_share_of_the_format_penalty() -> None:
    answers = ["<answer>ANSWER: 79</answer>", "79", "<answer>hmm</answer>", "<answer>ANSWER: 79</answer>"]
    episode = proposer_game("<answer>PROBLEM: 12*(3+4)-5</answer>", answers)
    assert episode.verifier["answers"] == ["79", None, None, "79"]
    assert len(episode.errors) == 2
    # rate 0.5: proposer 1.0; solver 0.5 - 0.5 * 2/4
    assert episode.rewards == pytest.approx({"proposer": 1.0, "solver": 0.25})


@pytest.mark.parametrize(
    ("proposal", "why"),
    [
        ("PROBLEM: 1 + 2", "expected '<answer>"),  # no tags
        ("<answer>1 + 2</answer>", "no problem"),  # no PROBLEM: marker
        ("<answer>PROBLEM:</answer>", "no problem"),
        ("<answer>PROBLEM: __import__('os').system('true')</answer>", "not allowed"),
        ("<answer>PROBLEM: (1 + 2</answer>", "not an arithmetic expression"),
        ("<answer>PROBLEM: 10 ** 100</answer>", "not allowed"),
        ("<answer>PROBLEM: 7 // (3 - 3)</answer>", "division by zero"),
        ("<answer>PROBLEM: 1234567 + 1</answer>", "max_operand"),
        ("<answer>PROBLEM: 1" + " + 1" * 13 + "</answer>", "max_operations"),
        ("<answer>PROBLEM: 999999 * 999999 * 999999</answer>", "max_value"),
        ("<answer>PROBLEM: " + "1+" * 150 + "1</answer>", "max_chars"),
    ],
)
def test_an_invalid_proposal_gets_the_penalty_and_the_solver_does_not_play(proposal, why) -> None:
    log: list = []
    episode = proposer_game(proposal, [], log)
    assert [c.role for c in log] == ["proposer"]
    (turn,) = episode.turns
    assert why in turn.error and episode.errors == [turn.error]
    v = episode.verifier
    assert not v["valid"] and v["invalid_reason"] == turn.error and v["difficulty"] is None
    assert v["success_rate"] == episode.outcome == 0.0 and v["solved"] is False
    assert episode.rewards == {"proposer": -1.0}
    cfg = PS.model_copy(update={"invalid_penalty": -0.3})
    assert proposer_game(proposal, [], cfg=cfg).rewards == {"proposer": -0.3}


def test_on_the_engine_the_k_attempts_of_all_episodes_are_one_batch() -> None:
    def respond(req) -> str:
        return (
            "<answer>PROBLEM: 6 * 7</answer>"
            if req.prompt.startswith("### proposer")
            else "<answer>ANSWER: 42</answer>"
        )

    policy = ScriptedPolicy(respond)
    engine = Engine({"p": policy})
    team = Team({role: Seat(policy="p") for role in PS.order}, engine)
    episodes = engine.run([lambda g=g: proposer_solver(team, SEED, PS, group=g) for g in range(3)])
    assert policy.batch_sizes == [3, 12]  # the proposers, then 3 x K = 4 solver attempts
    assert [e.group for e in episodes] == [0, 1, 2]
    assert all(e.outcome == 1.0 and len(e.turns) == 5 for e in episodes)


# ---------------------------------------------------------------- the safe evaluator


@pytest.mark.parametrize(
    ("text", "value", "operations", "depth"),
    [
        ("42", 42, 0, 0),
        (" 2 + 3 * 4 ", 14, 2, 2),
        ("(2 + 3) * 4", 20, 2, 2),
        ("-7 // 2", -4, 2, 2),  # floor division as in Python
        ("-7 % 3", 2, 2, 2),
        ("((((5))))", 5, 0, 0),
        ("100 - 2 * (3 + 4) % 5", 96, 4, 4),
    ],
)
def test_the_evaluator_accepts_integer_arithmetic(text, value, operations, depth) -> None:
    evaluated = evaluate_expression(text)
    assert (evaluated.value, evaluated.operations, evaluated.depth) == (value, operations, depth)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("__import__('os')", "characters"),
        ("open('/etc/passwd').read()", "characters"),
        ("1.5 + 2", "characters"),
        ("1_000 + 1", "characters"),
        ("x + 1", "characters"),
        ("[1, 2]", "characters"),
        ("7 / 2", "not allowed"),
        ("2 ** 64", "not allowed"),
        ("2 < 3", "characters"),
        ("1 +", "not an arithmetic expression"),
        ("()", "not allowed"),  # an empty tuple
        ("(" * 120 + "1" + ")" * 120, "max_chars"),
        ("5 % 0", "division by zero"),
        ("10 ** 7", "not allowed"),
        ("-" * 13 + "1", "max_operations"),
    ],
)
def test_the_evaluator_rejects_everything_else(text, why) -> None:
    with pytest.raises(UnsafeExpression, match=why):
        evaluate_expression(text)


def test_the_evaluator_limits_are_its_arguments() -> None:
    with pytest.raises(UnsafeExpression, match="max_operand=9"):
        evaluate_expression("10 + 1", max_operand=9)
    with pytest.raises(UnsafeExpression, match="max_value=100"):
        evaluate_expression("50 * 3 - 100", max_value=100)
    with pytest.raises(UnsafeExpression, match="max_operations=1"):
        evaluate_expression("1 + 2 + 3", max_operations=1)
    assert evaluate_expression("1 + 2 + 3", max_operations=2).value == 6


def test_config_is_checked() -> None:
    assert SelfPlayConfig().order == ["generator", "judge"]
    assert SelfPlayConfig(game="proposer_solver").order == ["proposer", "solver"]
    with pytest.raises(ValidationError, match="roles.solver is not a role of game 'generator_judge'"):
        SelfPlayConfig(roles={"solver": {}})
    with pytest.raises(ValidationError, match="game"):
        SelfPlayConfig(game="chess")
    with pytest.raises(ValidationError, match="target_rate"):
        SelfPlayConfig(target_rate=1.5)
    with pytest.raises(ValidationError, match="invalid_penalty"):
        SelfPlayConfig(invalid_penalty=0.5)


# ---------------------------------------------------------------- the solver's credit per attempt


def test_each_solver_attempt_is_scored_alone_by_default() -> None:
    answers = [
        "<answer>ANSWER: 79</answer>",
        "79",
        "<answer>ANSWER: 80</answer>",
        "<answer>ANSWER: 79</answer>",
    ]
    episode = proposer_game("<answer>PROBLEM: 12*(3+4)-5</answer>", answers)
    # turn 0 is the proposer's; attempt 2 ("79" without tags) is malformed: wrong and the 0.5 penalty
    assert episode.attempt_rewards == {1: 1.0, 2: -0.5, 3: 0.0, 4: 1.0}
    assert episode.rewards["solver"] == pytest.approx(0.5 - 0.5 * 1 / 4)  # the episode's figure unchanged
    cfg = PS.model_copy(update={"solver_credit": "episode"})
    assert proposer_game("<answer>PROBLEM: 12*(3+4)-5</answer>", answers, cfg=cfg).attempt_rewards == {}
    assert proposer_game("<answer>1 + 2</answer>", []).attempt_rewards == {}  # invalid: no attempts


def _solver_episode(task_id: str, correct: list[bool], proposer_reward: float) -> Episode:
    turns = [Turn(role="proposer", prompt="p", text="")] + [
        Turn(role="solver", round=1, prompt="q", text="")
    ] * 4
    rate = sum(correct) / len(correct)
    return Episode(
        task_id=task_id,
        turns=turns,
        rewards={"proposer": proposer_reward, "solver": rate},
        attempt_rewards={j + 1: float(ok) for j, ok in enumerate(correct)},
    )


def test_grpo_ranks_the_solver_attempts_within_their_episode_and_the_proposer_across_episodes() -> None:
    cfg = load_config(None, ["workflow.name=self_play", "workflow.game=proposer_solver"])
    learner = Learner(cfg, {})
    episodes = [
        _solver_episode("s1", [True, False, False, False], 0.5),
        _solver_episode("s1", [True, True, True, True], 0.0),
    ]
    adv = learner.turn_advantages(episodes, ("proposer", "solver"))
    # proposer: rewards 0.5 and 0.0 in one group: mean 0.25, unbiased std 0.3536 -> +-0.7071
    assert adv["proposer"] == pytest.approx({(0, 0): 0.7071, (1, 0): -0.7071}, abs=1e-3)
    # solver, episode 0: 1 0 0 0, mean 0.25, std 0.5 -> 1.5, -0.5 x 3; episode 1: all right -> 0
    # (per episode rate credit would have given episode 0's wrong attempts -0.71 and episode 1's +0.71)
    expected = {(0, 1): 1.5, (0, 2): -0.5, (0, 3): -0.5, (0, 4): -0.5}
    expected |= {(1, j): 0.0 for j in range(1, 5)}
    assert adv["solver"] == pytest.approx(expected, abs=1e-4)
    for ep in episodes:
        ep.attempt_rewards = {}
    adv = learner.turn_advantages(episodes, ("proposer", "solver"))
    assert adv["solver"][(0, 1)] == pytest.approx(-0.7071, abs=1e-3)
    assert adv["solver"][(1, 2)] == pytest.approx(0.7071, abs=1e-3)


# ---------------------------------------------------------------- the proposer's repetition penalty


def test_similarity_is_over_numbers_and_operators() -> None:
    assert problem_tokens("12*(3 + 4)") == ("12", "*", "(", "3", "+", "4", ")")
    assert similarity(problem_tokens("9 + 1 + 1"), problem_tokens("9+1+1")) == 1.0
    assert similarity(problem_tokens("9 + 1 + 1"), problem_tokens("8 + 1 + 1")) == pytest.approx(0.8)
    assert similarity(problem_tokens("9 + 1 + 1"), problem_tokens("(6 + 7) * 4")) < 0.5


def test_near_duplicates_in_the_batch_cost_the_proposer_by_hand() -> None:
    wrong = ["<answer>ANSWER: 0</answer>"] * 4  # no label is 0: all wrong, rate 0, proposer 0.0
    proposals = ["9 + 1 + 1", "9+1+1", "8 + 1 + 1", "(6 + 7) * 4", "1 +"]  # the last is invalid
    episodes = [proposer_game(f"<answer>PROBLEM: {p}</answer>", wrong) for p in proposals]
    before = [e.rewards["proposer"] for e in episodes]
    assert before == [0.0, 0.0, 0.0, 0.0, -1.0]
    apply_repetition_penalty(episodes, PS)
    # four valid problems: the first three are near-duplicates of each other (similarity 1.0 and 0.8),
    # so each has 2 of the 3 others: 1.0 * 2 / 3; the fourth has none; the invalid one is left alone
    assert [e.rewards["proposer"] for e in episodes] == pytest.approx([-2 / 3, -2 / 3, -2 / 3, 0.0, -1.0])
    assert [e.verifier.get("near_duplicates") for e in episodes] == [2, 2, 2, 0, None]
    assert all(e.process["proposer"] == 0.0 for e in episodes[:4])  # the game's score is unchanged
    assert all(e.rewards["solver"] == 0.0 for e in episodes[:4])
    metrics = self_play_metrics(episodes, "rollout/")
    assert metrics["rollout/selfplay/distinct_problems"] == pytest.approx(3 / 4)  # "9+1+1" = "9 + 1 + 1"
    assert metrics["rollout/selfplay/repetition_penalty"] == pytest.approx(0.5)


def test_the_repetition_penalty_scales_with_lambda_and_the_threshold() -> None:
    wrong = ["<answer>ANSWER: 0</answer>"] * 4

    def make() -> list[Episode]:
        return [proposer_game(f"<answer>PROBLEM: {p}</answer>", wrong) for p in ("9 + 1 + 1", "8 + 1 + 1")]

    episodes = make()
    apply_repetition_penalty(episodes, PS.model_copy(update={"repetition_penalty": 0.3}))
    assert [e.rewards["proposer"] for e in episodes] == pytest.approx([-0.3, -0.3])
    episodes = make()
    text = {"repetition_on": "text"}  # as written: 0.8 similar; as templates both are N + N + N
    apply_repetition_penalty(episodes, PS.model_copy(update={**text, "repetition_threshold": 0.9}))
    assert [e.rewards["proposer"] for e in episodes] == [0.0, 0.0]
    (alone,) = make()[:1]
    apply_repetition_penalty([alone], PS)  # one valid problem: nothing to repeat
    assert alone.rewards["proposer"] == 0.0


def test_by_shape_the_same_template_with_other_numbers_is_a_repeat() -> None:
    assert problem_tokens("(12 + 3) * 4", shape=True) == ("(", "N", "+", "N", ")", "*", "N")
    wrong = ["<answer>ANSWER: 0</answer>"] * 4
    # shape: the two N - N are each other's repeat, 1 of the 2 other valid problems: -1.0 * 1 / 2
    for on, expected in (("shape", [-0.5, -0.5, 0.0]), ("text", [0.0, 0.0, 0.0])):
        episodes = [
            proposer_game(f"<answer>PROBLEM: {p}</answer>", wrong) for p in ("2 - 8", "1 - 9", "3 * 4 + 1")
        ]
        apply_repetition_penalty(episodes, PS.model_copy(update={"repetition_on": on}))
        assert [e.rewards["proposer"] for e in episodes] == pytest.approx(expected)


def test_the_trainer_applies_the_penalty_to_a_batch_only_when_lambda_is_positive() -> None:
    wrong = ["<answer>ANSWER: 0</answer>"] * 4
    for lam, expected in ((1.0, -1.0), (0.0, 0.0)):
        cfg = load_config(
            None,
            [
                "workflow.name=self_play",
                "workflow.game=proposer_solver",
                f"workflow.repetition_penalty={lam}",
            ],
        )
        episodes = [
            proposer_game("<answer>PROBLEM: 2 * 3</answer>", wrong, cfg=cfg.workflow) for _ in range(2)
        ]
        assign_batch_rewards(cfg, episodes)
        assert [e.rewards["proposer"] for e in episodes] == [expected, expected]


# ---------------------------------------------------------------- anchors: the solver practises the example


def test_with_anchors_the_solver_also_attempts_the_example_scored_alone() -> None:
    log: list = []
    cfg = PS.model_copy(update={"anchor_samples": 2})
    answers = ["<answer>ANSWER: 79</answer>", "<answer>ANSWER: 80</answer>"] * 2  # 2 of 4 right
    answers += ["<answer>ANSWER: 51</answer>", "<answer>ANSWER: 50</answer>"]  # the example: 7 * 8 - 5
    episode = proposer_game("<answer>PROBLEM: 12*(3+4)-5</answer>", answers, log, cfg=cfg)
    assert [t.role for t in episode.turns] == ["proposer"] + ["solver"] * 6
    for call in log[5:]:  # the anchors are asked the example, with the solver's usual prompt
        assert call.prompt == "### solver: Solve.\nquestion: What is 7 * 8 - 5?\n"
        assert call.context["task"] is SEED
    v = episode.verifier
    assert v["correct"] == [True, False, True, False] and v["anchor_correct"] == [True, False]
    assert v["success_rate"] == episode.outcome == 0.5  # the proposed problem's attempts only
    assert episode.rewards == pytest.approx({"proposer": 1.0, "solver": 0.5})
    assert episode.attempt_rewards == {1: 1.0, 2: 0.0, 3: 1.0, 4: 0.0, 5: 1.0, 6: 0.0}
    assert self_play_metrics([episode], "eval/")["eval/selfplay/anchor_rate"] == 0.5
    assert proposer_game("<answer>1 + 2</answer>", [], cfg=cfg).turns[0].role == "proposer"  # invalid: no one


def test_grpo_ranks_anchor_attempts_apart_from_the_attempts_at_the_proposed_problem() -> None:
    cfg = load_config(None, ["workflow.name=self_play", "workflow.game=proposer_solver"])
    turns = [Turn(role="proposer", prompt="p", text="")]
    turns += [Turn(role="solver", round=1, prompt="problem", text="")] * 2
    turns += [Turn(role="solver", round=1, prompt="example", text="")] * 2
    episode = Episode(
        task_id="s1",
        turns=turns,
        rewards={"proposer": 1.0, "solver": 0.5},
        attempt_rewards={1: 1.0, 2: 0.0, 3: 1.0, 4: 1.0},
    )
    adv = Learner(cfg, {}).turn_advantages([episode], ("solver",))["solver"]
    # the problem's attempts 1 0: +-0.7071; the example's attempts 1 1: 0 (one group of four: 0.5, -1.5)
    assert adv == pytest.approx({(0, 1): 0.7071, (0, 2): -0.7071, (0, 3): 0.0, (0, 4): 0.0}, abs=1e-3)


def test_anchors_need_attempt_credit_and_leave_the_demonstrations_alone() -> None:
    with pytest.raises(ValidationError, match="anchor_samples needs solver_credit: attempt"):
        SelfPlayConfig(game="proposer_solver", anchor_samples=2, solver_credit="episode")
    base = ["workflow.name=self_play", "workflow.game=proposer_solver", "tasks.families=[arith]"]
    plain = demonstrations(load_config(None, base), 6, seed=3)
    anchored = demonstrations(load_config(None, [*base, "workflow.anchor_samples=4"]), 6, seed=3)
    assert anchored == plain  # the same base model and SFT data with or without anchors


# ------------------------------------------------ the proposals' difficulty for the starting solver


OVERRIDES = ["workflow.name=self_play", "workflow.game=proposer_solver"]


def _proposal(expression: str | None, group: int = 0) -> Episode:
    verifier = {"game": "proposer_solver", "valid": expression is not None, "expression": expression}
    return Episode(task_id="s1", group=group, verifier=verifier)


def test_the_starting_solver_attempts_each_valid_proposal_of_an_evaluation() -> None:
    asked: list[tuple[str | None, str]] = []

    def respond(req) -> str:  # the snapshot knows 6 * 7 only; the current adapter knows everything
        asked.append((req.adapter, req.prompt))
        if req.adapter == "ref_solver":
            return "<answer>ANSWER: 42</answer>"
        return "<answer>ANSWER: 4</answer>" if "2 + 2" in req.prompt else "<answer>ANSWER: 42</answer>"

    cfg = load_config(None, OVERRIDES)
    policy = ScriptedPolicy(respond)
    policy.adapter_names = ["proposer", "solver", "ref_solver"]  # as an HF policy holds them
    engine = Engine({"p": policy})
    team = Team({role: Seat(policy="p", adapter=role) for role in cfg.workflow.order}, engine)
    episodes = [_proposal("6 * 7"), _proposal("2 + 2", 1), _proposal(None, 2), _proposal("6*7", 3)]
    got = reference_solver_evaluation(cfg, team, engine, episodes)
    k = cfg.workflow.reference_samples
    assert k == 2 and got == pytest.approx({"eval/selfplay/reference_solver_rate": 2 / 3})
    assert len(asked) == 3 * k and {adapter for adapter, _ in asked} == {"ref_solver"}
    assert sum("What is 2 + 2?" in prompt for _, prompt in asked) == k
    assert team.seats["solver"].adapter == "solver"  # seated back after the evaluation

    off = load_config(None, [*OVERRIDES, "workflow.reference_samples=0"])
    assert reference_solver_evaluation(off, team, engine, episodes) == {}
    no_adapter = Team({role: Seat(policy="p") for role in cfg.workflow.order}, engine)
    assert reference_solver_evaluation(cfg, no_adapter, engine, episodes) == {}  # no snapshot to ask
    assert reference_solver_evaluation(cfg, team, engine, [_proposal(None)]) == {}  # nothing valid
    policy.adapter_names = ["proposer", "solver"]  # a run stopped before the snapshot was made
    assert reference_solver_evaluation(cfg, team, engine, episodes) == {}
    assert len(asked) == 3 * k


def test_a_problem_is_asked_with_the_same_seeds_in_every_evaluation() -> None:
    """Seeded sampling: attempt g at a problem draws from seeds of (run.seed, the problem, g), whatever
    else the evaluation holds and in whatever order, so a frozen proposer's problems score the same."""
    seeds: list[tuple[str, int | None]] = []

    def respond(req) -> str:
        seeds.append((req.prompt.split("What is ")[1].split("?")[0], req.seed))
        return "<answer>ANSWER: 42</answer>"

    policy = ScriptedPolicy(respond)
    policy.adapter_names = ["proposer", "solver", "ref_solver"]
    engine = Engine({"p": policy})
    cfg = load_config(None, OVERRIDES)
    team = Team({role: Seat(policy="p", adapter=role) for role in cfg.workflow.order}, engine)
    reference_solver_evaluation(cfg, team, engine, [_proposal("6 * 7"), _proposal("2 + 2", 1)])
    first = sorted(seeds)
    seeds.clear()
    reordered = [_proposal("9 - 1"), _proposal("2 + 2"), _proposal("6 * 7")]
    reference_solver_evaluation(cfg, team, engine, reordered)
    again = sorted(s for s in seeds if s[0] != "9 - 1")
    assert again == first and len({s for _, s in first}) == 4  # 2 problems x 2 attempts, all distinct
    other = load_config(None, [*OVERRIDES, "run.seed=1"])
    seeds.clear()
    reference_solver_evaluation(other, team, engine, [_proposal("6 * 7"), _proposal("2 + 2", 1)])
    assert not {s for _, s in seeds} & {s for _, s in first}  # another run, other noise
    seeds.clear()
    unseeded = load_config(None, [*OVERRIDES, "run.seeded_sampling=false"])
    reference_solver_evaluation(unseeded, team, engine, [_proposal("6 * 7")])
    assert [s for _, s in seeds] == [None, None]
