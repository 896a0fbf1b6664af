"""benchmarks/town_llm.py: its jobs, reading finished runs and the bars, on made-up run directories (nothing
is trained)."""

import json
from pathlib import Path

import pytest
from bench_scripts import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("town_llm")


def fake_run(run_dir: Path, sft: tuple[float, float, float], rl: tuple[float, float, float]) -> Path:
    """A finished run's summary.json: (goals achieved, plausibility, judge noise) after SFT and after RL."""
    run_dir.mkdir(parents=True)
    evals = [
        {
            "label": label,
            "eval/outcome": g,
            "eval/town/plausibility": p,
            "eval/judge/noise": n,
            "eval/judge/auc": 1.0,
        }
        for label, (g, p, n) in (("after_sft", sft), ("after_rl", rl))
    ]
    (run_dir / "summary.json").write_text(json.dumps({"evals": evals}))
    return run_dir


def test_a_run_per_seed_after_the_base_and_finished_runs_are_not_redone(script, tmp_path):
    fake_run(tmp_path / "town_s1", (0.2, 0.6, 0.08), (0.3, 0.6, 0.08))
    jobs = script.plan([0, 1], ["workflow.weights.social=0.5"], tmp_path)
    assert [j.name for j in jobs] == ["build", "town_s0"] and jobs[1].deps == ("build",)
    argv = jobs[1].argv()
    assert "workflow.weights.social=0.5" in argv and "run.seed=0" in argv and script.CONFIG in argv


def test_collect_reads_both_evaluations_and_tells_the_bars_per_seed(script, tmp_path):
    fake_run(tmp_path / "town_s0", (0.20, 0.65, 0.08), (0.30, 0.66, 0.08))
    fake_run(tmp_path / "town_s1", (0.25, 0.65, 0.08), (0.28, 0.60, 0.08))  # plausibility down 0.05 < noise
    (tmp_path / "town_s2").mkdir()  # unfinished: no summary.json
    result = script.collect(tmp_path)
    s = result["summary"]
    assert [r["seed"] for r in result["runs"]] == [0, 1]
    assert s["after_rl"]["goals achieved"][0] == pytest.approx(0.29)
    assert s["goal_lift_per_seed"] == pytest.approx([0.10, 0.03])
    assert s["rl_beats_sft_every_seed"] and s["plausibility_within_noise_every_seed"]
    fake_run(tmp_path / "town_s3", (0.30, 0.70, 0.05), (0.29, 0.60, 0.05))  # worse goals, lost plausibility
    s = script.collect(tmp_path)["summary"]
    assert not s["rl_beats_sft_every_seed"] and not s["plausibility_within_noise_every_seed"]


def test_the_same_days_are_paired_across_the_two_evaluations(script, tmp_path):
    """RL minus SFT day by day (a town and a sample), per seed and pooled with a bootstrap interval; a day
    evaluated only once is left out."""
    for seed, (sft, rl) in enumerate([([0.5, 0.6, 0.7], [0.6, 0.6, 0.9]), ([0.4, 0.4], [0.5, 0.3])]):
        episodes = tmp_path / f"town_s{seed}" / "episodes"
        episodes.mkdir(parents=True)
        for stage, values in (("after_sft", sft), ("after_rl", rl + [1.0])):  # RL has one extra day
            rows = [
                {"task_id": f"town-{k}", "group": 0, "verifier": {"goals_achieved": v, "plausibility": 0.7}}
                for k, v in enumerate(values)
            ]
            (episodes / f"eval_{stage}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = script.paired_days(tmp_path)
    goal = out["paired_goal_diff"]
    assert goal["days"] == 5 and goal["per_seed"] == pytest.approx([0.1, 0.0])
    assert goal["mean"] == pytest.approx(0.06) and goal["ci95"][0] <= 0.06 <= goal["ci95"][1]
    assert out["paired_plausibility_diff"]["mean"] == pytest.approx(0.0)
