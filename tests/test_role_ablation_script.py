"""benchmarks/role_ablation.py: which roles can be taken out and how, the ablations' commands (the team's
tokens and base), reusing a batch's team runs, reading finished runs, the verdicts and the report, on made-up
run directories (nothing is trained)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from bench_scripts import load_script
from test_debate_benchmark_script import fake_run

from teamrl.config import dump_config, load_config


@pytest.fixture(scope="module")
def script():
    return load_script("role_ablation")


@pytest.fixture
def fake_base(script, monkeypatch):
    # where the team's base lives is computed from its demonstrations (minutes for test_driven's)
    monkeypatch.setattr(script.lg, "_team_base_path", lambda sets, config: "/b/embedded-x")


def _overrides(argv: list[str]) -> dict[str, str]:
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    return {o.split("=", 1)[0]: o.split("=", 1)[1] for o in sets}  # a later --set wins


def test_a_role_comes_out_of_the_order_the_recipe_and_its_iterations(script):
    # the main job names the planner in workflow.order, recipe.roles and recipe.iterations_per_role
    out = dict(o.split("=", 1) for o in script.ablated_overrides(script.TEAM, [], "planner"))
    assert set(out) == {"workflow.order", "recipe.roles", "recipe.iterations_per_role"}
    cfg = load_config(script.REPO / script.TEAM, [f"{k}={v}" for k, v in out.items()])
    assert cfg.workflow.order == ["tester", "coder"] and cfg.recipe.roles == ["coder", "tester", "coder"]
    assert cfg.recipe.iterations_per_role == {"coder": 6, "tester": 2}
    # a role the recipe leaves to its default is taken out of the order only
    sets = ["recipe.roles=null", "recipe.iterations_per_role=3"]
    assert script.ablated_overrides(script.TEAM, sets, "tester") == ["workflow.order=[planner, coder]"]


def test_roles_that_cannot_be_taken_out_are_refused_with_the_reason(script, monkeypatch, capsys):
    with pytest.raises(script.AblationError, match="'reviewer' is not in the team"):
        script.ablated_overrides(script.TEAM, [], "reviewer")
    with pytest.raises(script.AblationError, match="'coder' is not a valid config"):
        script.ablated_overrides(script.TEAM, [], "coder")  # test_driven needs a code role
    roles = script.ablated_roles(script.TEAM, [])
    assert list(roles) == ["planner", "tester"]
    assert roles["tester"] == script.ablated_overrides(script.TEAM, [], "tester")
    assert "not ablated" in capsys.readouterr().err
    monkeypatch.setenv("ROLE_ABLATION_ROLES", "tester,coder")
    with pytest.raises(script.AblationError, match="'coder'"):
        script.ablated_roles(script.TEAM, [])
    monkeypatch.setenv("ROLE_ABLATION_ROLES", "tester")
    assert list(script.ablated_roles(script.TEAM, [])) == ["tester"]


def test_a_workflow_without_an_order_is_refused(script, monkeypatch):
    import teamrl.config

    plugin = SimpleNamespace(workflow=SimpleNamespace(name="my_plugin"))  # a workflow with no order list
    monkeypatch.setattr(teamrl.config, "load_config", lambda *args, **kwargs: plugin)
    with pytest.raises(script.AblationError, match="'my_plugin' has no 'order' list"):
        script.ablated_overrides(script.TEAM, [], "judge")


def test_the_ablations_get_the_team_s_tokens_and_base(script, tmp_path, fake_base):
    fake_run(tmp_path / "team_s2", 0.3, 0.4, [700, 1500])
    jobs = {j.name: j for j in script.plan_jobs([2], ["algorithm.group_size=4"], tmp_path)}
    assert set(jobs) == {
        "build",
        "team_s2",
        "without_planner_s2",
        "without_tester_s2",
        "greedy_team_s2",
        "greedy_without_planner_s2",
        "greedy_without_tester_s2",
    }
    assert jobs["without_tester_s2"].deps == ("team_s2",)
    assert jobs["greedy_without_tester_s2"].deps == ("without_tester_s2",)
    assert all("--per-role" in jobs[f"greedy_{a}_s2"].argv() for a in ("team", "without_planner"))
    argv = jobs["without_planner_s2"].argv()
    last = _overrides(argv)
    assert last["recipe.token_budget"] == "1500" and last["algorithm.group_size"] == "4"
    assert last["policies.default.kind"] == "hf" and last["policies.default.path"] == "/b/embedded-x"
    assert last["run.seed"] == "2" and "recipe.iterations" not in last  # freeze_rotate reads rounds only
    sets = [f"{k}={v}" for k, v in last.items() if not k.startswith("policies.")]
    cfg = load_config(script.REPO / argv[argv.index("train") + 1], sets)
    assert cfg.workflow.order == ["tester", "coder"] and cfg.recipe.token_budget == 1500
    assert cfg.recipe.rounds > 1  # repeated until the team's tokens are spent


def test_a_batch_s_team_runs_are_reused(script, tmp_path, fake_base, monkeypatch):
    old = tmp_path / "old"
    saved = dump_config(load_config(script.REPO / script.TEAM))
    for seed in (0, 1):
        fake_run(old / f"team_s{seed}", 0.3, 0.4, [900])
        (old / f"team_s{seed}" / "config.yaml").write_text(saved)
    (old / "team_s0" / "greedy_eval.json").write_text("{}")  # already evaluated: not again
    monkeypatch.setenv("ROLE_ABLATION_TEAM_RUNS", str(old))
    monkeypatch.setenv("ROLE_ABLATION_ROLES", "tester")
    batch = tmp_path / "batch"
    jobs = {j.name: j for j in script.plan_jobs([0, 1], [], batch)}
    assert set(jobs) == {
        "build",
        "without_tester_s0",
        "greedy_without_tester_s0",
        "without_tester_s1",
        "greedy_without_tester_s1",
        "greedy_team_s1",
    }
    assert jobs["without_tester_s0"].deps == ("build",) and jobs["greedy_team_s1"].deps == ()
    assert (batch / "team_s0").resolve() == (old / "team_s0").resolve()
    assert _overrides(jobs["without_tester_s1"].argv())["recipe.token_budget"] == "900"
    # a team trained otherwise is refused, naming what differs
    with pytest.raises(script.AblationError, match=r"differs in algorithm\.kl_coef"):
        script.plan_jobs([0], ["algorithm.kl_coef=0.01"], tmp_path / "batch3")
    (old / "team_s0" / "config.yaml").write_text("")  # an empty config is refused, not read as a match
    with pytest.raises(script.AblationError, match="no readable config.yaml"):
        script.plan_jobs([0], [], tmp_path / "batch4")
    monkeypatch.setenv("ROLE_ABLATION_TEAM_RUNS", str(tmp_path / "nowhere"))
    with pytest.raises(script.AblationError, match="not a finished team run"):
        script.plan_jobs([0], [], tmp_path / "batch2")


def _greedy(run: Path, sft: float, rl: float, per_role: dict | None = None) -> None:
    row = {"sft_solved": sft, "rl_solved": rl, "gain": rl - sft, "tasks": 10, "only_rl": 1, "only_sft": 0}
    row["per_role"] = per_role or {}
    (run / "greedy_eval.json").write_text(json.dumps({"runs": [row]}))


def test_the_verdicts_read_every_seed_and_the_report_is_written(script, tmp_path, capsys):
    batch = tmp_path / "batch"
    roles = {"tester": {"outcome_changed": 3, "solved_only_rl": 2, "solved_only_sft_turns": 1}}
    for seed, tester_rl in ((0, 0.40), (1, 0.46)):
        team = fake_run(batch / f"team_s{seed}", 0.3, 0.45, [500, 1000])
        _greedy(team, 0.30, 0.45, per_role=roles)
        run = fake_run(batch / f"without_planner_s{seed}", 0.2, 0.30, [400, 800, 1200])
        _greedy(run, 0.2, 0.30)
        run = fake_run(batch / f"without_tester_s{seed}", 0.3, tester_rl, [400, 1000])
        _greedy(run, 0.3, 0.40)
    fake_run(batch / "team_s5", 0.1, 0.1, [500])  # no ablation finished: left out
    fake_run(batch / "without_tester_s1_extra", 0.1, 0.1, [500])  # not a run of this batch's naming
    per_seed = script.collect(batch)
    assert [s["seed"] for s in per_seed] == [0, 1]
    assert list(per_seed[0]) == ["seed", "team", "without_planner", "without_tester"]
    assert per_seed[0]["without_planner"]["budget_reached"]
    assert per_seed[0]["team"]["per_role"] == roles
    v = script.verdicts(per_seed)
    assert v == {"planner_earns_its_tokens": True, "tester_earns_its_tokens": False}  # seed 1 sampled 0.46
    script.report(per_seed, {"batch_dir": str(batch)}, tmp_path / "results")
    out = capsys.readouterr().out
    assert "team minus the team without planner, greedy" in out and "tester_earns_its_tokens: no" in out
    saved = json.loads((tmp_path / "results" / "role_ablation.json").read_text())
    assert saved["verdicts"] == v and saved["ablated"] == ["planner", "tester"]
    assert saved["aggregate"]["team_minus_without_planner.greedy_rl_solved"]["mean"] == pytest.approx(0.15)
    assert (tmp_path / "results" / "role_ablation.png").stat().st_size > 0
