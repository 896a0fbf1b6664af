"""Turn-level groups (AT-GRPO, issue 18): K candidates of a trained role's turn from one history, scored one
by one, ranked against each other; one continues the episode. Only in RL rollouts, only for trained roles."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence

import pytest
from test_learner import TablePolicy
from tiny_base import TINY_BASE

from teamrl.config import ConfigError, load_config
from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team
from teamrl.policies.base import GenerationRequest
from teamrl.policies.scripted import ScriptedPolicy
from teamrl.protocol import Candidate, Episode, Message, Turn, render_message
from teamrl.tasks.programming import ProgrammingTask, ProgrammingTaskSuite
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.trainer.build import build_workflow
from teamrl.trainer.learner import Learner
from teamrl.trainer.trainer import Trainer
from teamrl.workflows.branching import choose
from teamrl.workflows.turn_scores import hidden_pass, programming_turn_score


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(SandboxLimits())


@pytest.fixture(scope="module")
def task(sandbox: Sandbox) -> ProgrammingTask:
    """A fix task whose buggy solution passes some hidden tests, not all (a version between garbage and
    the reference), and whose demonstration tests catch it."""
    return next(
        t
        for t in ProgrammingTaskSuite(seed=0).sample("train", 80, random.Random(3))
        if t.kind == "fix"
        and len(t.demo_tests) >= 2
        and 0.0 < asyncio.run(hidden_pass(sandbox, t, t.buggy_solution)) < 1.0
    )


def code(task: ProgrammingTask, which: str) -> str:
    if which == "garbage":
        return "no tags at all"
    source = task.reference_solution if which == "reference" else task.buggy_solution
    return render_message(Message(role="coder", kind="code", content=source.strip("\n")))


def play(
    task: ProgrammingTask,
    sandbox: Sandbox,
    coder_outputs: Sequence[str],
    trained: set[str],
    *overrides: str,
) -> tuple[Episode, Engine, list[str]]:
    """One test_driven episode: the coder behind an engine (a scripted policy answering ``coder_outputs`` in
    turn), every other role its scripted expert; the team trains ``trained``."""
    cfg = load_config(None, ["workflow.name=test_driven", "workflow.max_revisions=1", *overrides])
    workflow = build_workflow(cfg, sandbox)
    experts = workflow.experts(random.Random(0))
    outputs = iter(coder_outputs)
    prompts: list[str] = []

    def respond(request: GenerationRequest) -> str:
        prompts.append(request.prompt)
        return next(outputs, "(no scripted output left)")  # a StopIteration would hang the engine

    engine = Engine({"p": ScriptedPolicy(respond)})
    seats = {r: Seat(script=experts[r]) for r in cfg.workflow.order if r != "coder"}
    seats["coder"] = Seat(policy="p", adapter=None)
    team = Team(seats, engine)
    team.train_turns(trained)
    [episode] = engine.run([lambda: workflow.play(team, task)])
    return episode, engine, prompts


K3 = ("workflow.turn_group.size=3",)


def test_a_trained_role_samples_k_candidates_from_one_history_and_the_best_continues(task, sandbox) -> None:
    outputs = [code(task, "garbage"), code(task, "buggy"), code(task, "reference")]
    episode, engine, prompts = play(task, sandbox, outputs, {"coder"}, *K3)
    assert len(prompts) == 3 and len(set(prompts)) == 1  # K samples of one prompt
    coder_turns = [j for j, t in enumerate(episode.turns) if t.role == "coder"]
    assert coder_turns == [2] and episode.turns[2].text == outputs[2]  # the reference continued
    assert [c.turn.text for c in episode.candidates] == outputs[:2]
    assert all(c.of == 2 for c in episode.candidates)
    buggy_pass = episode.candidates[1].reward
    assert episode.attempt_rewards == {2: 1.0} and episode.candidates[0].reward == 0.0 and buggy_pass < 1.0
    assert episode.verifier["solved"] and episode.verifier["code_turns"] == [2]
    # every generated token counts, the candidates' included
    assert engine.stats.generated_tokens == episode.num_generated_tokens == sum(map(len, outputs))


def test_no_candidates_when_the_role_is_not_trained_or_not_named(task, sandbox) -> None:
    reference = code(task, "reference")
    named_other = (*K3, "workflow.turn_group.roles=[tester]")
    for trained, overrides in [(set(), K3), ({"coder"}, ()), ({"coder"}, named_other), ({"tester"}, K3)]:
        episode, _, prompts = play(task, sandbox, [reference], trained, *overrides)
        assert len(prompts) == 1 and not [c for c in episode.candidates if c.turn.role == "coder"]
        tester = [c for c in episode.candidates if c.turn.role == "tester"]
        assert len(tester) == (2 if trained == {"tester"} else 0)  # a trained tester branches (size 3)
        # turn-level rewards only for the branched tester (credit_revisions' have a group key)
        turn_level = {j for j in episode.attempt_rewards if j not in episode.attempt_groups}
        assert (turn_level == set()) == (trained != {"tester"})


def test_candidates_leave_the_conversation_its_verifier_indices_and_process_scores_unchanged(
    task, sandbox
) -> None:
    # revision 0: the buggy version continues (the best of three), then the reviewer asks for a revision
    branched, _, _ = play(
        task,
        sandbox,
        [code(task, "garbage"), code(task, "buggy"), code(task, "garbage"), *[code(task, "reference")] * 3],
        {"coder"},
        *K3,
    )
    plain, _, _ = play(task, sandbox, [code(task, "buggy"), code(task, "reference")], set(), *K3)
    assert 0.0 < plain.verifier["code_pass"][0] < 1.0  # so the buggy version is the best of the first three
    assert [t.text for t in branched.turns] == [t.text for t in plain.turns]
    assert [t.role for t in plain.turns] == ["planner", "tester", "coder", "reviewer", "coder", "reviewer"]
    assert branched.verifier == plain.verifier  # code_turns, reviews, code_pass, the reports ...
    assert branched.verifier["code_turns"] == [2, 4] and branched.verifier["reviews"] == [[3, 0], [5, 1]]
    assert branched.errors == plain.errors == []
    cfg = load_config(None, ["workflow.name=test_driven", *K3])
    workflow = build_workflow(cfg, sandbox)
    assert workflow.process_scores(branched) == workflow.process_scores(plain)
    assert workflow.scored_turns(branched) == workflow.scored_turns(plain)
    assert len(branched.candidates) == 4 and {c.of for c in branched.candidates} == {2, 4}
    assert branched.num_generated_tokens > plain.num_generated_tokens


def test_turn_scores_of_the_tester_coder_and_reviewer(task, sandbox) -> None:
    def turn(kind: str, content: str, verdict: str | None = None) -> Turn:
        message = Message(role=kind, kind=kind, content=content, verdict=verdict)  # type: ignore[arg-type]
        return Turn(role=kind, prompt="p", text="", message=message)

    def score(kind: str, t: Turn, reviewed: str = "") -> float:
        return asyncio.run(programming_turn_score(kind, task, sandbox, lambda: reviewed)(t))  # type: ignore[arg-type]

    call = task.demo_tests[0].split("==")[0]
    assert score("tests", turn("tests", "\n".join(task.demo_tests))) == 1.0  # right, and catches the bug
    assert score("tests", turn("tests", f"{call}== 'surely not'")) == 0.0  # wrong on the reference
    assert score("tests", Turn(role="tester", prompt="p", text="", error="malformed")) == 0.0
    assert score("code", turn("code", task.reference_solution)) == 1.0
    assert score("code", turn("code", task.buggy_solution)) < 1.0
    ref, bug = task.reference_solution, task.buggy_solution
    assert score("review", turn("review", "", "approve"), ref) == 1.0
    assert score("review", turn("review", "x", "revise"), ref) == 0.0
    assert score("review", turn("review", "", "approve"), bug) == 0.0
    assert score("review", turn("review", "x", "revise"), bug) == 1.0


def test_the_continuing_candidate_is_the_best_with_ties_at_random_or_any_one() -> None:
    assert {choose([0.2, 0.9, 0.1], "best", random.Random(s)) for s in range(20)} == {1}
    assert {choose([0.9, 0.2, 0.9], "best", random.Random(s)) for s in range(40)} == {0, 2}
    assert {choose([0.2, 0.9, 0.1], "random", random.Random(s)) for s in range(40)} == {0, 1, 2}


def test_advantages_rank_exactly_the_k_candidates_of_one_history() -> None:
    cfg = load_config(
        None, ["workflow.name=test_driven", "algorithm.ppo_epochs=1", "algorithm.minibatches=1"]
    )

    def t(prompt: str, ids: list[int]) -> Turn:
        return Turn(role="coder", prompt=prompt, text="", completion_ids=ids, logprobs=[-1.0] * len(ids))

    episode = Episode(
        task_id="a",
        turns=[Turn(role="tester", prompt="q", text=""), t("A", [1]), t("B", [2])],
        rewards={"coder": 0.3, "tester": 0.5},
        attempt_rewards={1: 1.0, 2: 0.5},
        candidates=[
            Candidate(turn=t("A", [3]), of=1, reward=0.0),
            Candidate(turn=t("A", [4]), of=1, reward=0.5),
            Candidate(turn=t("B", [5]), of=2, reward=0.5),
        ],
    )
    other = Episode(task_id="a", group=1, turns=[t("A", [6])], rewards={"coder": 0.9})
    learner = Learner(cfg, {"default": TablePolicy()})  # type: ignore[dict-item]
    adv = learner.turn_advantages([episode, other], ("coder",))["coder"]
    # history A of episode 0: 1.0, 0.0, 0.5 -> +1, -1, 0; history B: 0.5, 0.5 -> 0; the other episode keeps
    # its episode-level advantage (0.3 vs 0.9 in task a's group)
    expected = {(0, 1): 1.0, (0, 3): -1.0, (0, 4): 0.0, (0, 2): 0.0, (0, 5): 0.0, (1, 0): 0.7071}
    assert adv == pytest.approx(expected, abs=1e-3)
    stats = learner.update([episode, other], ("coder",), step=0)
    assert stats["train/coder/turns"] == 3.0  # the continuing turn, a candidate, the other episode's turn


def test_the_settings_are_checked_and_off_by_default() -> None:
    cfg = load_config(None, ["workflow.name=test_driven"])
    assert cfg.workflow.turn_group.size == 1  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="turn_group.roles names 'judge'"):
        load_config(None, ["workflow.name=test_driven", *K3, "workflow.turn_group.roles=[judge]"])
    with pytest.raises(ConfigError, match="needs algorithm grpo or mgrpo"):
        load_config(None, ["workflow.name=test_driven", *K3, "algorithm.name=ppo_critic"])
    with pytest.raises(ConfigError, match="continues"):
        load_config(None, ["workflow.name=test_driven", "workflow.turn_group.continues=worst"])


def test_rl_rollouts_branch_the_trained_role_and_evaluation_never_does(tmp_path) -> None:  # noqa: ANN001
    cfg = load_config(
        None,
        [
            *TINY_BASE,
            "workflow.name=test_driven",
            "workflow.max_revisions=1",
            "workflow.turn_group.size=2",
            "recipe.roles=[coder]",
            "recipe.iterations_per_role=1",
            f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
        ],
    )
    trainer = Trainer(cfg, tmp_path / "run")
    seen: list[frozenset[str]] = []
    play = trainer.workflow.play

    async def spying(team, task, group=0):  # noqa: ANN001, ANN202
        seen.append(team.trained_roles)
        return await play(team, task, group)

    trainer.workflow.play = spying  # type: ignore[method-assign]
    try:
        trainer.fit()
    finally:
        trainer.close()
    assert set(seen) == {frozenset(), frozenset({"coder"})}
    assert trainer.team.trained_roles == frozenset()
    run = tmp_path / "run"
    rollout = [Episode.model_validate_json(line) for line in (run / "episodes/last_rollout.jsonl").open()]
    for e in rollout:
        coder_turns = [t for t in e.turns if t.role == "coder"]
        assert len(e.candidates) == len(coder_turns) >= 1
        assert {c.turn.role for c in e.candidates} == {"coder"}
    for name in ("eval_after_sft.jsonl", "eval_after_rl.jsonl"):
        evals = [json.loads(line) for line in (run / "episodes" / name).open()]
        assert evals and all(e["candidates"] == [] for e in evals)
        # no turn-level reward (each attempt reward is a code version's, in a group of the task's episodes)
        assert all(set(e["attempt_rewards"]) == set(e["attempt_groups"]) for e in evals)
    [row] = [json.loads(line) for line in (run / "metrics.jsonl").open() if '"rollout/solved"' in line]
    # rl tokens, counted by the engine, are the episodes' generated tokens, the candidates' included
    n = cfg.algorithm.tasks_per_iteration * cfg.algorithm.group_size
    assert row["perf/rl_tokens_total"] == pytest.approx(row["rollout/tokens_per_episode"] * n)
    assert row["rollout/turn_group/candidates"] >= 1.0 and row["rollout/turn_group/candidate_tokens"] > 0
    assert "rollout/turn_group/choice_gain" in row


def test_the_benchmark_gives_the_per_task_arm_the_turn_level_arms_tokens(tmp_path) -> None:  # noqa: ANN001
    from bench_scripts import load_script

    script = load_script("turn_groups")
    turn = tmp_path / "turn_s0"
    turn.mkdir()
    rows = [{"step": 1, "phase": "round1/coder", "perf/rl_tokens_total": 500}]
    rows += [{"step": 2, "phase": "round1/tester", "perf/rl_tokens_total": 800}]
    for row, per_episode, candidates in zip(rows, (125.0, 75.0), (75.0, 25.0), strict=True):
        row.update(
            {"rollout/tokens_per_episode": per_episode, "rollout/turn_group/candidate_tokens": candidates}
        )
    (turn / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert script.phase_tokens(turn) == {"round1/coder": 500, "round1/tester": 300}
    assert script.role_scales(turn) == {"coder": 2.5, "tester": 1.5}
    per_role = load_config(script.REPO / script.CONFIG).recipe.iterations_per_role  # the example's
    measured = script._task_argv(tmp_path / "task_s0", 0, [], turn, None)
    assert (
        f"recipe.iterations_per_role.coder={round(per_role['coder'] * 2.5)}" in measured
        and f"recipe.iterations_per_role.tester={round(per_role['tester'] * 1.5)}" in measured
    )
    argv = script._task_argv(tmp_path / "task_s0", 0, ["recipe.iterations_per_role.coder=2"], turn, 3.0)
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert "recipe.token_budget=800" in sets and "workflow.turn_group.size=1" in sets
    assert "recipe.iterations_per_role.coder=6" in sets
    assert f"recipe.iterations_per_role.tester={round(per_role['tester'] * 3.0)}" in sets
    turn_argv = script._turn_argv(turn, 0, [], 4, "best")
    assert (
        "workflow.turn_group.size=4" in turn_argv
        and argv[argv.index("train") + 1] == "examples/test_driven.yaml"
    )


def test_the_benchmark_evaluates_every_run_greedily_and_reports_both_arms(tmp_path) -> None:  # noqa: ANN001
    from bench_scripts import load_script

    script = load_script("turn_groups")
    jobs = script.plan_jobs([0], [], tmp_path, 4, "best", None, greedy_n=50)
    greedy = {j.name: j for j in jobs if j.name.startswith("greedy_")}
    assert set(greedy) == {"greedy_turn_s0", "greedy_task_s0"}
    assert greedy["greedy_task_s0"].deps == ("task_s0",)
    argv = greedy["greedy_turn_s0"].argv()
    assert "--per-role" in argv and argv[argv.index("--n") + 1] == "50" and str(tmp_path / "turn_s0") in argv
    assert not [
        j for j in script.plan_jobs([0], [], tmp_path, 4, "best", None) if j.name.startswith("greedy")
    ]
    for key, (sft, rl, g_rl) in {"turn": (0.5, 0.6, 0.7), "task": (0.5, 0.55, 0.6)}.items():
        run = tmp_path / f"{key}_s0"
        run.mkdir()
        evals = [
            {"label": "after_sft", "eval/solved": sft, "eval/outcome": sft},
            {"label": "after_rl", "eval/solved": rl, "eval/outcome": rl},
        ]
        (run / "summary.json").write_text(json.dumps({"evals": evals}))
        (run / "metrics.jsonl").write_text(
            json.dumps({"phase": "round1/coder", "perf/rl_tokens_total": 100}) + "\n"
        )
        g = {
            "sft_solved": 0.6,
            "rl_solved": g_rl,
            "gain": g_rl - 0.6,
            "tasks": 50,
            "only_rl": 3,
            "only_sft": 1,
        }
        g["per_role"] = {"coder": {"changed": 4}}
        (run / "greedy_eval.json").write_text(json.dumps({"runs": [g]}))
    (row,) = script.collect(tmp_path, [0])
    assert row["turn"]["greedy_rl_solved"] == 0.7 and row["turn"]["per_role"] == {"coder": {"changed": 4}}
    agg = script.aggregate([row])
    assert agg["turn_minus_task.greedy_rl_solved"]["mean"] == pytest.approx(0.1)
    assert agg["turn_minus_task.rl_solved"]["mean"] == pytest.approx(0.05)
