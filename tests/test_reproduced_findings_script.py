"""benchmarks/reproduced_findings.py: reading runs, trends, free-riding, planning and reports, on made-up
run directories (nothing is trained)."""

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
ROLES = ("planner", "coder", "reviewer", "tester")


@pytest.fixture(scope="module")
def script() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the script imports learning_gain from its own directory
    try:
        spec = importlib.util.spec_from_file_location("reproduced_findings", BENCH / "reproduced_findings.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def _eval(label: str, solved: float, process: dict[str, float]) -> dict:
    row = {"label": label, "eval/solved": solved, "eval/outcome": solved + 0.05}
    for role in ROLES:
        row[f"eval/process/{role}"] = process[role]
        row[f"eval/reward/{role}"] = solved
    return row


def fake_run(
    run_dir: Path, outcome: list[float], process: dict[str, list[float]], sft=0.25, rl=0.30, argv=None
) -> Path:
    """A finished run: metrics.jsonl with one rollout row per iteration, summary.json, and its .cmd."""
    run_dir.mkdir(parents=True)
    rows = [{"step": 0, "eval/solved": sft}]
    for i, o in enumerate(outcome):
        row = {"step": i + 1, "phase": "joint", "rollout/outcome": o, "rollout/solved": o / 2}
        row["perf/rl_tokens_total"] = 1000 * (i + 1)
        for role in ROLES:
            row[f"rollout/process/{role}"] = process[role][i]
            row[f"rollout/reward/{role}"] = o
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = {role: p[0] for role, p in process.items()}
    last = {role: p[-1] for role, p in process.items()}
    evals = [_eval("after_sft", sft, first), _eval("after_rl", rl, last)]
    (run_dir / "summary.json").write_text(json.dumps({"evals": evals}))
    if argv is not None:
        run_dir.with_suffix(".cmd").write_text(json.dumps(argv[1:]))
    return run_dir


FLAT = [0.5] * 6
FALLING = [0.8, 0.8, 0.6, 0.6, 0.4, 0.4]


def test_trends_and_roughness(script):
    assert script.thirds_trend([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]) == pytest.approx(
        0.4
    )  # (0.5 + 0.6) / 2 - (0.1 + 0.2) / 2
    assert script.thirds_trend([0.3, 0.3]) is None
    assert script.roughness([0.2, 0.2, 0.2, 0.2]) == 0.0
    assert script.roughness([0.0, 1.0, 0.0, 1.0]) > script.roughness([0.0, 0.1, 0.2, 0.3])
    assert script.eval_stderr(0.25, 128) == pytest.approx((0.25 * 0.75 / 128) ** 0.5)


def test_run_summary_reads_curves_roles_and_held_out(script, tmp_path):
    process = {"planner": FALLING, "coder": [0.2, 0.2, 0.3, 0.3, 0.5, 0.5], "reviewer": FLAT, "tester": FLAT}
    run = script.run_summary(fake_run(tmp_path / "r", [0.3, 0.35, 0.3, 0.4, 0.35, 0.45], process))
    assert run["gain_solved"] == pytest.approx(0.05)
    assert run["curves"]["outcome"][-1] == 0.45 and len(run["curves"]["process/planner"]) == 6
    assert run["outcome_trend"] == pytest.approx(0.4 - 0.325)
    assert run["roles"]["planner"]["process_trend"] == pytest.approx(-0.4)
    assert run["roles"]["coder"]["process_trend"] == pytest.approx(0.3)
    assert run["roles"]["reviewer"]["process_trend"] == pytest.approx(0.0)
    assert (
        run["roles"]["planner"]["eval_process_sft"] == 0.8
        and run["roles"]["planner"]["eval_process_rl"] == 0.4
    )
    assert run["rl_tokens"] == 6000 and run["rl_iterations"] == 6


def test_free_riding_needs_a_falling_process_score_and_a_holding_outcome(script, tmp_path):
    falls = {"planner": FALLING, "coder": FLAT, "reviewer": FLAT, "tester": FLAT}
    holds = [script.run_summary(fake_run(tmp_path / f"h{i}", [0.3 + 0.01 * i] * 6, falls)) for i in range(3)]
    agg = script.aggregate_variant(holds)
    assert agg["roles"]["planner"]["process_trend"]["mean"] == pytest.approx(-0.4)
    assert agg["rl_solved"]["std"] == 0.0 and len(agg["mean_curves"]["outcome"]) == 6
    assert script.free_riding(agg) == ["planner"]
    drops = script.run_summary(fake_run(tmp_path / "d", [0.5, 0.5, 0.4, 0.4, 0.2, 0.2], falls))
    assert script.free_riding(script.aggregate_variant([drops])) == []  # the team fell too: not free-riding
    steady = {role: FLAT for role in ROLES}
    assert (
        script.free_riding(
            script.aggregate_variant([script.run_summary(fake_run(tmp_path / "s", FLAT, steady))])
        )
        == []
    )


def test_plan_trains_a_shared_variant_once_and_skips_finished_runs(script, tmp_path):
    findings = [script.FINDINGS[n] for n in ("ppo_critic", "joint", "closed_loop")]
    names = [j.name for j in script.plan(findings, [0, 1], [], tmp_path)]
    assert names[0] == "build_team"
    assert names.count("freeze_rotate_grpo_s0") == 1 and names.count("freeze_rotate_grpo_s1") == 1
    assert len(names) == 1 + 2 * 5  # grpo, ppo_critic, joint, closed loop x 2 baselines per seed

    variant = script.GRPO_FR
    argv = script.train_argv(variant, tmp_path / "freeze_rotate_grpo_s0", 0, [])
    assert "recipe.iterations_per_role=3" in argv and "algorithm.tasks_per_iteration=4" in argv
    fake_run(tmp_path / "freeze_rotate_grpo_s0", FLAT, {r: FLAT for r in ROLES}, argv=argv)
    names = [j.name for j in script.plan(findings, [0, 1], [], tmp_path)]
    assert "freeze_rotate_grpo_s0" not in names and "freeze_rotate_grpo_s1" in names
    # another --set is another command: the finished run no longer counts
    names = [j.name for j in script.plan(findings, [0], ["algorithm.lr=1e-3"], tmp_path)]
    assert "freeze_rotate_grpo_s0" in names
    only = [j.name for j in script.plan([script.FINDINGS["joint"]], [0], [], tmp_path)]
    assert only == ["build_team", "joint_grpo_s0"]


def test_main_reports_a_finding_from_finished_runs(script, tmp_path, capsys):
    runs, res = tmp_path / "runs", tmp_path / "res"
    finding = script.FINDINGS["credit"]
    for k, variant in enumerate(finding.variants):
        for seed in (0, 1):
            run_dir = runs / f"{variant.name}_s{seed}"
            planner = FALLING if variant.name == "joint_shared" else FLAT
            fake_run(
                run_dir,
                [0.3 + 0.02 * seed] * 6,
                {"planner": planner, "coder": FLAT, "reviewer": FLAT, "tester": FLAT},
                rl=0.3 + 0.01 * k + 0.02 * seed,
                argv=script.train_argv(variant, run_dir, seed, []),
            )
    argv = ["credit", "--seeds", "0", "1", "--out-dir", str(runs), "--results-dir", str(res)]
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    assert "0 run(s) to train" in out and "free-riding roles" in out and "standard error" in out
    result = json.loads((res / "findings_credit.json").read_text())
    by_name = {v["name"]: v for v in result["variants"]}
    assert by_name["joint_shared"]["free_riding"] == ["planner"]
    assert by_name["joint_hybrid05"]["free_riding"] == []
    hybrid07 = by_name["joint_hybrid07"]["aggregate"]["rl_solved"]
    assert hybrid07["mean"] == pytest.approx(0.33) and hybrid07["std"] == pytest.approx(0.0141421356)
    assert result["seeds"] == [0, 1] and result["eval_episodes"] == 96
    png = (res / "findings_credit.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


def test_team_vs_single_reads_the_learning_gain_json(script, tmp_path, capsys):
    res = tmp_path / "res"
    assert script.main(["team_vs_single", "--results-dir", str(res)]) == 1  # no learning_gain.json yet
    assert "run benchmarks/learning_gain.py first" in capsys.readouterr().err
    lg = script.lg
    per_seed = []
    for seed, (t, c) in enumerate(((0.30, 0.32), (0.28, 0.35))):
        team = {
            "sft_solved": 0.25,
            "rl_solved": t,
            "gain_solved": t - 0.25,
            "rl_tokens": 100,
            "wall_min": 1.0,
        }
        single = {"sft_solved": 0.27, "rl_solved": c, "gain_solved": c - 0.27, "rl_tokens": 101}
        for run in (team, single):
            run.update(sft_outcome=0.3, rl_outcome=0.35, gain_outcome=0.05)
        per_seed.append({"seed": seed, "team": team, "single_coder": single})
    res.mkdir()
    (res / "learning_gain.json").write_text(
        json.dumps({"seeds": [0, 1], "per_seed": per_seed, "aggregate": lg.aggregate(per_seed)})
    )
    assert script.main(["team_vs_single", "--results-dir", str(res)]) == 0
    out = capsys.readouterr().out
    assert "not retrained" in out and "-0.045" in out  # team minus coder: (-0.02 - 0.07) / 2
    result = json.loads((res / "findings_team_vs_single.json").read_text())
    assert result["aggregate"]["team_minus_coder.rl_solved"]["mean"] == pytest.approx(-0.045)
    assert (res / "findings_team_vs_single.png").read_bytes().startswith(b"\x89PNG")


def test_no_train_reports_the_finished_seeds_and_names_the_missing_runs(script, tmp_path, capsys):
    runs, res = tmp_path / "runs", tmp_path / "res"
    for variant in script.FINDINGS["ppo_critic"].variants:
        run_dir = runs / f"{variant.name}_s0"
        steady = {role: FLAT for role in ROLES}
        fake_run(run_dir, FLAT, steady, argv=script.train_argv(variant, run_dir, 0, []))
    argv = ["ppo_critic", "--no-train", "--out-dir", str(runs), "--results-dir", str(res)]
    assert script.main(argv) == 0  # seeds 1 and 2 never ran: nothing is trained, they are left out
    assert "not finished, left out: freeze_rotate_grpo_s1, freeze_rotate_grpo_s2" in capsys.readouterr().out
    result = json.loads((res / "findings_ppo_critic.json").read_text())
    assert result["seeds"] == [0] and len(result["missing"]) == 4 and "batch" not in result
