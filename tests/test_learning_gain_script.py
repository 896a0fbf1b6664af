"""benchmarks/learning_gain.py end to end on a tiny model: team run, equal-token baseline, report."""

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "learning_gain.py"
TINY = [
    "policies.default.embedded.hidden_size=64",
    "policies.default.embedded.num_layers=2",
    "policies.default.embedded.num_heads=2",
    "policies.default.embedded.vocab_size=400",
    "policies.default.embedded.demo_episodes=10",
    "policies.default.embedded.steps=8",
    "policies.default.lora.r=4",
    "policies.default.lora.alpha=8",
    "recipe.sft.demo_episodes=4",
    "tasks.heldout_size=2",
    "algorithm.group_size=2",
    "algorithm.tasks_per_iteration=2",
    "algorithm.ppo_epochs=1",
    "recipe.iterations_per_role=1",
    "recipe.roles=[coder]",  # one team RL iteration; the baseline needs several to match its tokens
    "recipe.iterations=50",
]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learning_gain", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_one_seed_gives_per_seed_numbers_an_equal_token_baseline_and_a_plot(script, tmp_path, capsys):
    sets = [*TINY, f"policies.default.embedded.cache_dir={tmp_path / 'cache'}"]
    argv = ["--seeds", "0", "--jobs", "1", "--out-dir", str(tmp_path / "runs"), "--greedy-n", "3"]
    argv += ["--results-dir", str(tmp_path / "res")]
    assert script.main(argv + [a for s in sets for a in ("--set", s)]) == 0

    out = capsys.readouterr().out
    assert "held-out success" in out and "held-out pass fraction" in out and "n/a" in out
    result = json.loads((tmp_path / "res" / "learning_gain.json").read_text())
    (seed,) = result["per_seed"]
    team, single = seed["team"], seed["single_coder"]
    for run in (team, single):
        for key in ("sft_solved", "rl_solved", "sft_outcome", "rl_outcome"):
            assert 0.0 <= run[key] <= 1.0
        assert run["gain_solved"] == pytest.approx(run["rl_solved"] - run["sft_solved"])
        assert Path(run["run_dir"], "summary.json").exists()
        assert Path(run["run_dir"]).with_suffix(".log").stat().st_size > 0
    assert team["rl_tokens"] > 0 and single["token_budget"] == team["rl_tokens"]
    assert f"recipe.token_budget={team['rl_tokens']}" in single["command"]
    # the budget is checked before each iteration: the baseline spends it, overshooting by under one iteration
    assert team["rl_tokens"] <= single["rl_tokens"] < team["rl_tokens"] + single["last_iteration_tokens"]
    assert single["budget_reached"] and single["rl_iterations"] > 1
    assert result["aggregate"]["team.rl_solved"]["mean"] == team["rl_solved"]
    assert result["aggregate"]["team.rl_solved"]["std"] is None  # one seed: no spread
    # base build, team run, baseline run (on the same base), a greedy re-evaluation of each run
    assert len(result["commands"]) == 5
    for run in (team, single):
        assert run["greedy_tasks"] == 3 and 0.0 <= run["greedy_rl_solved"] <= 1.0
        assert run["greedy_gain_solved"] == pytest.approx(run["greedy_rl_solved"] - run["greedy_sft_solved"])
    assert "greedy decoding (3 tasks" in out and "greedy_solved" in result["team_rl_beats_sft"]
    png = (tmp_path / "res" / "learning_gain.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


def test_a_failing_run_kills_the_others_and_names_its_log(script, tmp_path):
    pid_file = tmp_path / "pid"
    programs = {
        "broken": "import sys, time; time.sleep(1); print('boom'); sys.exit(3)",
        "slow": f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)",
        "after": "pass",
    }
    jobs = [
        script.Job(
            name,
            lambda code=code: [sys.executable, "-c", code],
            tmp_path / f"{name}.log",
            deps=("broken",) if name == "after" else (),
        )
        for name, code in programs.items()
    ]
    message = r"broken failed \(exit code 3\); log: \S*broken\.log[\s\S]*boom"  # the log's tail is quoted
    with pytest.raises(script.RunFailed, match=message):
        script.run_jobs(jobs, parallel=2)
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(int(pid_file.read_text()), 0)
    assert not (tmp_path / "after.log").exists()  # its dependency failed, so it never started


def test_sample_std_and_single_seed(script):
    assert script.mean_std([0.1, 0.3]) == pytest.approx({"mean": 0.2, "std": 0.1414213562})
    assert script.mean_std([0.5]) == {"mean": 0.5, "std": None}
