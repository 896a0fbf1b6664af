"""benchmarks/team_value.py: the controls' commands, reading finished runs, the verdicts and the report, on
made-up run directories (nothing is trained)."""

import json
from pathlib import Path

import pytest
from bench_scripts import load_script
from test_debate_benchmark_script import fake_run

from teamrl.config import load_config


@pytest.fixture(scope="module")
def script():
    return load_script("team_value")


def _overrides(argv: list[str]) -> dict[str, str]:
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    return {o.split("=", 1)[0]: o.split("=", 1)[1] for o in sets}  # a later --set wins


def test_the_controls_get_the_team_s_tokens_and_base_and_valid_configs(script, tmp_path, monkeypatch):
    # where the team's base lives is computed from its demonstrations (minutes for test_driven's, each run
    # sandboxed); here the controls only need to be pointed at it
    base_of: list[str] = []
    monkeypatch.setattr(
        script.lg, "_team_base_path", lambda sets, config: base_of.append(config) or "/b/embedded-x"
    )
    fake_run(tmp_path / "team_s2", 0.3, 0.4, [700, 1500])
    jobs = {j.name: j for j in script.plan_jobs([2], ["algorithm.group_size=4"], tmp_path)}
    assert set(jobs) == {
        "build",
        "team_s2",
        "coder_alone_s2",
        "one_model_s2",
        "greedy_team_s2",
        "greedy_coder_alone_s2",
        "greedy_one_model_s2",
    }
    assert jobs["one_model_s2"].deps == ("team_s2",) and jobs["greedy_one_model_s2"].deps == ("one_model_s2",)
    assert (
        "--per-role" in jobs["greedy_team_s2"].argv()
        and "--per-role" not in jobs["greedy_one_model_s2"].argv()
    )
    for arm, check in (
        ("coder_alone", lambda c: c.workflow.order == ["coder"] and c.workflow.max_revisions == 0),
        ("one_model", lambda c: c.workflow.order == ["coder"] and c.workflow.coder_writes_tests),
    ):
        argv = jobs[f"{arm}_s2"].argv()
        last = _overrides(argv)
        assert last["recipe.token_budget"] == "1500" and last["algorithm.group_size"] == "4"
        assert last["policies.default.kind"] == "hf" and "embedded-" in last["policies.default.path"]
        sets = [f"{k}={v}" for k, v in last.items() if not k.startswith("policies.")]
        cfg = load_config(script.REPO / argv[argv.index("train") + 1], sets)
        assert check(cfg) and cfg.recipe.token_budget == 1500
    assert base_of == [script.TEAM, script.TEAM]  # both controls start from the team's base


def _greedy(run: Path, sft: float, rl: float, per_role: dict | None = None) -> None:
    row = {"sft_solved": sft, "rl_solved": rl, "gain": rl - sft, "tasks": 10, "only_rl": 1, "only_sft": 0}
    if per_role is not None:
        row["per_role"] = per_role
    (run / script_greedy_file()).write_text(json.dumps({"runs": [row]}))


def script_greedy_file() -> str:
    return "greedy_eval.json"


def test_the_verdicts_read_every_seed_and_the_report_is_written(script, tmp_path, capsys):
    batch = tmp_path / "batch"
    roles = {"tester": {"outcome_changed": 3, "solved_only_rl": 2, "solved_only_sft_turns": 1}}
    for seed, team_greedy in ((0, (0.30, 0.45)), (1, (0.30, 0.35))):
        team = fake_run(batch / f"team_s{seed}", 0.3, 0.45, [500, 1000])
        _greedy(team, *team_greedy, per_role=roles)
        for arm in ("coder_alone", "one_model"):
            run = fake_run(batch / f"{arm}_s{seed}", 0.3, 0.35, [400, 800, 1200])
            _greedy(run, 0.3, 0.36)
    fake_run(batch / "team_s5", 0.1, 0.1, [500])  # its controls never finished: left out
    per_seed = script.collect(batch)
    assert [s["seed"] for s in per_seed] == [0, 1]
    assert per_seed[0]["coder_alone"]["budget_reached"] and per_seed[0]["team"]["per_role"] == roles
    v = script.verdicts(per_seed)
    assert v["team_beats_coder_alone_by_0.05_sampled"]  # 0.45 - 0.35 on both seeds
    assert not v["team_beats_coder_alone_by_0.05_greedy"]  # seed 1: 0.35 - 0.36
    assert not v["rl_lifts_team_greedy_by_0.10"]  # seed 1 gains 0.05
    assert v["every_role_changes_outcomes"]
    script.report(per_seed, {"batch_dir": str(batch)}, tmp_path / "results")
    out = capsys.readouterr().out
    assert "team minus Coder alone after RL, greedy" in out and "seed 1 tester: RL turns change 3" in out
    saved = json.loads((tmp_path / "results" / "team_value.json").read_text())
    assert saved["verdicts"] == v and (tmp_path / "results" / "team_value.png").stat().st_size > 0
    assert saved["aggregate"]["team_minus_coder_alone.rl_solved"]["mean"] == pytest.approx(0.10)
