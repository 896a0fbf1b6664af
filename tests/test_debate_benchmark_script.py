"""benchmarks/debate_benchmark.py: the single agent's command, reading finished runs and the report, on
made-up run directories (nothing is trained)."""

import json
import shlex
from pathlib import Path

import pytest
from bench_scripts import load_script

from teamrl.config import load_config


@pytest.fixture(scope="module")
def script():
    return load_script("debate_benchmark")


def fake_run(run_dir: Path, sft: float, rl: float, tokens: list[int]) -> Path:
    """A finished run: one metrics row per RL iteration (cumulative RL tokens) and summary.json."""
    run_dir.mkdir(parents=True)
    rows = [{"step": i + 1, "perf/rl_tokens_total": t} for i, t in enumerate(tokens)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [
        {"label": "after_sft", "eval/solved": sft, "eval/outcome": sft},
        {"label": "after_rl", "eval/solved": rl, "eval/outcome": rl},
    ]
    (run_dir / "summary.json").write_text(json.dumps({"evals": evals}))
    return run_dir


def test_the_single_agent_is_one_debater_alone_with_the_teams_tokens_and_base(script, tmp_path):
    fake_run(tmp_path / "team_s3", 0.3, 0.4, [600, 1200])
    sets = ["workflow.debaters=5", "algorithm.group_size=4"]  # the user's sets cannot undo the single agent
    jobs = {j.name: j for j in script.plan_jobs([3], sets, tmp_path)}
    assert list(jobs) == ["build", "team_s3", "single_s3"] and jobs["single_s3"].deps == ("team_s3",)
    argv = jobs["single_s3"].argv()
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    last = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides}  # a later --set wins
    assert last["workflow.debaters"] == "1" and last["workflow.rounds"] == "0"
    assert last["recipe.token_budget"] == "1200" and last["algorithm.group_size"] == "4"
    assert last["policies.default.kind"] == "hf" and "embedded-" in last["policies.default.path"]
    assert argv[argv.index("train") + 1] == script.CONFIG and last["run.seed"] == "3"
    cfg = load_config(script.lg.REPO / script.CONFIG, [o for o in overrides if not o.startswith("policies.")])
    assert cfg.workflow.order == ["debater_0"] and cfg.recipe.token_budget == 1200  # a valid config
    team_argv = shlex.join(jobs["team_s3"].argv())
    assert "workflow.debaters=5" in team_argv and "token_budget" not in team_argv


def test_collect_aggregates_finished_seeds_and_report_writes_json_and_png(script, tmp_path, capsys):
    batch = tmp_path / "batch"
    for seed, (t, s) in enumerate([((0.30, 0.40), (0.30, 0.32)), ((0.20, 0.30), (0.20, 0.34))]):
        fake_run(batch / f"team_s{seed}", *t, [500, 1000])
        fake_run(batch / f"single_s{seed}", *s, [200, 400, 600, 800, 1000, 1200])
    fake_run(batch / "team_s7", 0.1, 0.1, [500])  # its single agent never finished: left out
    (batch / "team_s0.log").write_text("log")
    per_seed = script.collect(batch)
    assert [s["seed"] for s in per_seed] == [0, 1]
    assert per_seed[0]["single"]["budget_reached"] and per_seed[0]["single"]["rl_iterations"] == 6
    agg = script.aggregate(per_seed)
    assert agg["team.rl_solved"]["mean"] == pytest.approx(0.35)
    assert agg["team.rl_solved"]["std"] == pytest.approx(0.0707107)
    assert agg["team_minus_single.rl_solved"]["mean"] == pytest.approx((0.08 - 0.04) / 2)

    res = tmp_path / "res"
    assert script.main(["--collect", str(batch), "--results-dir", str(res)]) == 0
    out = capsys.readouterr().out
    assert "team ahead on 1/2 seed(s)" in out and "seed 1" in out and "warning" not in out
    result = json.loads((res / "debate_benchmark.json").read_text())
    assert result["single_overrides"] == ["workflow.debaters=1", "workflow.rounds=0"]
    assert len(result["per_seed"]) == 2 and result["aggregate"]["single.rl_tokens"]["mean"] == 1200
    assert (res / "debate_benchmark.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_collect_of_nothing_finished_is_a_clear_error(script, tmp_path, capsys):
    fake_run(tmp_path / "team_s0", 0.3, 0.4, [100])
    assert script.main(["--collect", str(tmp_path), "--results-dir", str(tmp_path / "r")]) == 1
    assert "holds no finished run to report" in capsys.readouterr().err
    assert script.main(["--collect", str(tmp_path / "missing")]) == 2
    assert not (tmp_path / "r").exists()
