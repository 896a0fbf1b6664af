"""A user's own workflow, reward function and tasks (examples/custom), through every command: train,
resume, eval, report and the Ray backend; the plugin errors; the conformance checks."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_base import TINY_BASE

from teamrl.cli import main as cli_main
from teamrl.config import ConfigError, load_config
from teamrl.testing import check_reward, check_workflow
from teamrl.trainer.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom"
CONFIG = EXAMPLE / "solver_verifier.yaml"
TINY = [o for o in TINY_BASE if "demo_episodes=30" not in o] + [
    "policies.default.embedded.demo_episodes=60",
    "recipe.iterations=2",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"policies.default.embedded.cache_dir={tmp_path_factory.mktemp('base')}"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the example's config names its files relative to the repository root


def test_the_example_is_one_short_file_of_public_imports() -> None:
    source = (EXAMPLE / "flows.py").read_text()
    assert len(source.splitlines()) <= 80
    modules = {
        n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module
    } | {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in modules if m.startswith("teamrl")} == {"teamrl"}  # nothing private


def test_the_example_passes_the_conformance_checks() -> None:
    check_workflow(f"{EXAMPLE}/flows.py:SolverVerifier", tasks="reasoning")
    check_reward(f"{EXAMPLE}/flows.py:decisive", workflow=f"{EXAMPLE}/flows.py:SolverVerifier")


def test_train_resume_eval_and_report_read_the_users_workflow(cache, tmp_path, monkeypatch, capsys) -> None:
    run = tmp_path / "run"
    cfg = load_config(CONFIG, [*TINY, cache, f"run.out_dir={tmp_path}", "run.name=run"])
    assert cfg.workflow.name == f"{EXAMPLE}/flows.py:SolverVerifier"  # saved absolute
    trainer = Trainer(cfg, run)
    original, calls = trainer.update, {"n": 0}

    def dies_on_second(episodes, roles):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed mid-run
        return original(episodes, roles)

    monkeypatch.setattr(trainer, "update", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    trainer.close()
    monkeypatch.chdir(tmp_path)  # the run's own config.yaml finds the plugin and the tasks from anywhere
    assert cli_main(["train", "--resume", str(run)]) == 0
    steps = sorted({row["step"] for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())})
    assert steps == [0, 1, 2]
    assert cli_main(["eval", str(run), "--n", "3"]) == 0
    out = capsys.readouterr().out
    assert "reward: solver" in out and "reward: verifier" in out
    rows = [json.loads(line) for line in (run / "episodes" / "eval_eval.jsonl").read_text().splitlines()]
    assert rows and {t["role"] for r in rows for t in r["turns"]} == {"solver", "verifier"}
    # every reward is hybrid + 0.5 x decisive, the user's function
    for row in rows:
        v = row["verifier"]
        bonus = 0.5 * (v["verdict"] == "REJECT" and not v["correct"])
        spoke = {t["role"] for t in row["turns"]}
        assert set(row["rewards"]) == spoke
        for role in spoke:
            malformed = sum(t["error"] is not None for t in row["turns"] if t["role"] == role)
            a = 0.6
            p = row["process"][role]
            hybrid = a * row["outcome"] + (1 - a) * p - 0.5 * malformed
            assert row["rewards"][role] == pytest.approx(hybrid + (bonus if role == "verifier" else 0.0))
    assert cli_main(["report", str(run)]) == 0
    page = (run / "report" / "index.html").read_text()
    assert "verifier" in page and "solver" in page


def test_the_ray_backend_imports_the_users_workflow_in_its_workers(cache, tmp_path) -> None:
    pytest.importorskip("ray")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    args = [*TINY, cache, "recipe.iterations=1", f"run.out_dir={tmp_path}", "run.name=ray"]
    cmd = [sys.executable, "-m", "teamrl", "train", str(CONFIG), "--backend", "ray"]
    cmd += [part for a in args for part in ("--set", a)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert summary["evals"][-1]["label"] == "after_rl" and "eval/reward/verifier" in summary["evals"][-1]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("workflow.name=examples/custom/flows.py:SolverVerifer", "did you mean 'SolverVerifier'"),
        ("workflow.name=examples/custom/nope.py:X", "not found"),
        ("workflow.name=no_such_package.flows:X", "no module named 'no_such_package'"),
        ("workflow.name=examples/custom/flows.py:decisive", "is a function, not a teamrl Workflow subclass"),
        (
            "tasks.suite=examples/custom/flows.py:SolverVerifier",
            "is the class SolverVerifier, not a teamrl TaskSuite subclass",
        ),
        ("workflow.name=pipelin", "did you mean 'pipeline'"),
        ("workflow.slip_rate=lots", "workflow.slip_rate"),
        ("workflow.colour=red", "workflow.colour: unknown key"),
        ("tasks.suite=my.suites:Nope", "no module named 'my'"),
        ("reward.functions=[{name: hybrid}, {name: 'examples/custom/flows.py:nope'}]", "has no 'nope'"),
        ("reward.functions=[{name: maporl}]", "needs per-turn scores"),
        ("reward.functions=[]", "reward.functions is empty"),
        ("reward.counterfactual_budget=4", "applies to the counterfactual reward only"),
        (
            "reward.functions=[{name: 'examples/custom/flows.py:decisive', args: {bonuss: 2}}]",
            "reward.functions: reward function '/",  # the path made absolute
        ),
        (
            "reward.functions=[{name: 'examples/custom/flows.py:decisive', args: {bonuss: 2}}]",
            "flows.py:decisive' cannot take args {'bonuss': 2} (got an unexpected keyword argument 'bonuss'",
        ),
        (
            "reward.functions=[{name: 'examples/custom/flows.py:SolverVerifier'}]",
            "flows.py:SolverVerifier' is a class, not a function",
        ),
        ("recipe.iterations_per_role=3", "applies to recipe.name freeze_rotate or closed_loop only"),
        ("algorithm.gae_lambda=0.9", "applies to algorithm.name ppo_critic only"),
    ],
)
def test_a_bad_plugin_or_option_is_a_config_error_that_names_it(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_config(CONFIG, [override])


def test_a_suite_of_other_tasks_than_the_workflow_plays_is_refused() -> None:
    with pytest.raises(ConfigError, match="plays ReasoningTask tasks; set tasks.suite: reasoning"):
        load_config(ROOT / "examples" / "debate.yaml", ["tasks.suite=programming"])


def test_a_bad_plugin_on_the_command_line_exits_2_without_a_traceback(tmp_path, capsys) -> None:
    code = cli_main(
        ["train", str(CONFIG), "--set", "workflow.name=flows.py:X", "--set", f"run.out_dir={tmp_path}"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "flows.py" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # no run directory


def test_config_prints_the_resolved_config_and_dry_run_builds_without_writing(
    cache, tmp_path, capsys
) -> None:
    assert cli_main(["config", str(CONFIG), "--set", "workflow.slip_rate=0.1"]) == 0
    printed = capsys.readouterr().out
    assert "slip_rate: 0.1" in printed and f"{EXAMPLE}/flows.py:SolverVerifier" in printed
    args = [a for o in [*TINY, cache, f"run.out_dir={tmp_path}"] for a in ("--set", o)]
    assert cli_main(["train", str(CONFIG), "--dry-run", *args]) == 0
    out = capsys.readouterr().out
    assert "SolverVerifier" in out and "0.5 x" in out and "dry run" in out
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_bad_checkpoint_path_leaves_no_run_directory_behind(tmp_path, capsys) -> None:
    args = ["--set", "policies.default.kind=hf", "--set", f"policies.default.path={tmp_path / 'nope'}"]
    code = cli_main(["train", *args, "--set", f"run.out_dir={tmp_path / 'runs'}", "--set", "run.name=r"])
    assert code != 0
    assert not (tmp_path / "runs" / "r").exists()  # a retry is not blocked by a half-made run


def test_a_reward_function_that_returns_nonsense_is_named_in_the_error() -> None:
    from teamrl.protocol import Episode, Turn
    from teamrl.rewards.functions import RewardError, normalise

    episode = Episode(task_id="t", turns=[Turn(role="a", prompt="p", text="x")])
    with pytest.raises(RewardError, match="one entry per episode"):
        normalise("f", [episode], {"a": 1.0})
    with pytest.raises(RewardError, match="did not speak"):
        normalise("f", [episode], [{"b": 1.0}])
    with pytest.raises(RewardError, match="got nan"):
        normalise("f", [episode], [{"a": float("nan")}])
    assert normalise("f", [episode], [0.5]) == [{"a": 0.5}]


def test_check_reward_catches_a_reward_that_believes_the_text() -> None:
    def gullible(episodes, ctx):  # noqa: ANN001, ANN202
        return [{t.role: float("ACCEPT" in t.text) for t in e.turns} for e in episodes]

    with pytest.raises(AssertionError, match="text claiming success raised"):
        check_reward(gullible, workflow="debate")
    check_reward(gullible, workflow="debate", reads_text=True)  # declared: the shape checks still run


def test_a_plugin_that_raises_stops_the_run_with_where_and_how_to_continue(cache, tmp_path, capsys) -> None:
    from teamrl.trainer.checkpoints import checkpoint_dirs

    plugin = tmp_path / "buggy_rewards.py"
    plugin.write_text(
        "calls = []\n\n\n"
        "def explodes(episodes, ctx):\n"
        "    calls.append(len(episodes))\n"
        "    if len(calls) == 3:  # after SFT's evaluation and the first RL iteration\n"
        "        return [1 / 0 for _ in episodes]\n"
        "    return [0.0 for _ in episodes]\n"
    )
    functions = f"reward.functions=[{{name: hybrid}}, {{name: '{plugin}:explodes'}}]"
    sets = [*TINY, cache, functions, f"run.out_dir={tmp_path}", "run.name=run"]
    code = cli_main(["train", str(CONFIG), *(a for s in sets for a in ("--set", s))])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "ZeroDivisionError" in err and f"{plugin}:7 in " in err  # the line of the bug
    assert f"teamrl train --resume {tmp_path / 'run'}" in err
    assert "Traceback" in (tmp_path / "run" / "error.log").read_text()
    assert checkpoint_dirs(tmp_path / "run")  # the work before it is kept


BROKEN = """
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("solver_verifier_flows", {flows!r})
flows = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(flows)


class BrokenSettings(flows.SolverVerifierSettings):
    mode: str = "ok"


class Broken(flows.SolverVerifier):
    Settings = BrokenSettings

    async def play(self, team, task, group=0):
        episode = await super().play(team, task, group)
        if self.settings.mode == "outcome":
            episode.outcome = 2.0
        if self.settings.mode == "none":
            return None
        return episode
"""


@pytest.fixture
def broken(tmp_path: Path) -> str:
    path = tmp_path / "broken.py"
    path.write_text(BROKEN.format(flows=str(EXAMPLE / "flows.py")))
    return f"{path}:Broken"


def test_an_episode_the_trainer_cannot_use_stops_the_run_and_sft_is_kept(
    broken, cache, tmp_path, monkeypatch, capsys
) -> None:
    from teamrl.trainer.checkpoints import checkpoint_dirs

    run = tmp_path / "run"
    sets = [*TINY, cache, f"workflow.name={broken}", "workflow.mode=outcome"]
    sets += [f"run.out_dir={tmp_path}", "run.name=run"]
    monkeypatch.setattr("teamrl.cli._write_run_report", lambda run_dir: None)  # seconds, not tested here
    assert cli_main(["train", str(CONFIG), *(a for s in sets for a in ("--set", s))]) == 1
    err = capsys.readouterr().err
    assert (
        "WorkflowError: workflow Broken.play on task" in err
        and "outcome 2.0 is not a number in [0, 1]" in err
    )
    assert (
        f"the checkpoints before it are intact: fix it and continue with: teamrl train --resume {run}" in err
    )
    assert f"edit {run / 'config.yaml'}" in err and "Traceback" not in err
    # the outcome was refused in the SFT snapshot's evaluation: SFT's checkpoint is there, written before it
    assert [c.name for c in checkpoint_dirs(run)] == ["000001-step-000000"]
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("mode: outcome", "mode: ok"))

    def no_sft_again(self):  # noqa: ANN001, ANN202
        raise AssertionError("SFT redone although its checkpoint exists")

    monkeypatch.setattr(Trainer, "sft_roles", no_sft_again)
    assert cli_main(["train", "--resume", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert [e["label"] for e in summary["evals"]] == ["after_sft", "after_rl"]


def test_a_dry_run_says_a_plugin_error_in_a_few_lines_and_writes_nothing(broken, tmp_path, capsys) -> None:
    sets = [*TINY, f"policies.default.embedded.cache_dir={tmp_path / 'cache'}", f"workflow.name={broken}"]
    sets += ["workflow.mode=none", f"run.out_dir={tmp_path / 'runs'}"]
    assert cli_main(["train", str(CONFIG), "--dry-run", *(a for s in sets for a in ("--set", s))]) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(
        "teamrl: the dry run stopped: WorkflowError: workflow Broken.demonstrate returned"
    )
    assert "a NoneType in place of an Episode" in first and "nothing was written" in err
    assert not (tmp_path / "runs").exists()


def test_the_trainer_names_every_problem_of_an_episode() -> None:
    from teamrl.protocol import Episode
    from teamrl.tasks.reasoning import ReasoningTask
    from teamrl.workflows.base import WorkflowError, checked_episode, episode_problems

    cfg = load_config(CONFIG)
    flow = cfg.workflow_class(cfg.workflow)
    task = ReasoningTask(task_id="t1", family="sum", question="1 + 1", answer="2")
    good = Episode(task_id="t1", group=2, outcome=1.0, verifier={"solved": True})
    assert checked_episode(flow, good, task, 2) is good
    assert checked_episode(flow, good.model_copy(update={"outcome": True}), task, 2).outcome is True
    bad = good.model_copy(update={"task_id": "t9", "group": 0, "outcome": "1", "verifier": {}})
    assert episode_problems(bad, task, 2) == [
        "episode.task_id 't9' is not the task's 't1'",
        "episode.group 0 is not the group asked (2)",
        "outcome '1' is not a number in [0, 1]",
        "verifier has no 'solved' (the team's success, read by every report)",
    ]
    with pytest.raises(
        WorkflowError, match=r"on task 't1' \(group 2\): play returned a dict, not an Episode"
    ):
        checked_episode(flow, {"outcome": 1.0}, task, 2)
    assert episode_problems(good.model_copy(update={"outcome": float("nan")}), task, 2) == [
        "outcome nan is not a number in [0, 1]"
    ]


def test_check_workflow_plays_a_held_out_task_too() -> None:
    from teamrl.config import suite_class

    base = load_config(CONFIG).workflow_class
    suite = suite_class("reasoning")
    held = suite(suite.Settings.model_validate({})).fixed_set("heldout", 1)[0].task_id

    class WrongOnHeldOut(base):  # type: ignore[misc, valid-type]
        async def play(self, team, task, group=0):  # noqa: ANN001, ANN202
            episode = await super().play(team, task, group)
            if task.task_id == held:  # an evaluation-only bug: training would not show it
                episode.outcome = 2.0
            return episode

    with pytest.raises(AssertionError, match=r"outcome 2.0 is not a number in \[0, 1\]"):
        check_workflow(WrongOnHeldOut, tasks="reasoning")
    check_workflow(base, tasks="reasoning")
