"""The held-out table `teamrl train` and `teamrl eval` print: a row per figure, a column per checkpoint."""

import re

from teamrl.cli import _result_table
from teamrl.config import load_config

PS = ["workflow.name=self_play", "workflow.game=proposer_solver"]


def _row(out: str, name: str) -> list[str]:
    [line] = [line for line in out.splitlines() if name in line]
    return [cell.strip() for cell in re.split("[│┃]", line.strip("│┃ "))]  # header rows: ┃


def test_after_sft_and_after_rl_side_by_side_with_their_change(capsys):
    evals = [
        {
            "label": "after_sft",
            "eval/selfplay/solver_heldout_accuracy": 0.354,
            "eval/selfplay/reference_solver_rate": 0.685,
            "eval/reward/proposer": -0.1,
        },
        {"label": "step16", "eval/selfplay/solver_heldout_accuracy": 0.9},  # intermediate: not shown
        {
            "label": "after_rl",
            "eval/selfplay/solver_heldout_accuracy": 0.51,
            "eval/selfplay/reference_solver_rate": 0.549,
        },
    ]
    _result_table({"run_dir": "runs/x", "evals": evals}, load_config(None, PS))
    out = capsys.readouterr().out
    assert _row(out, "figure") == ["figure", "after_sft", "after_rl", "change"]
    fixed = "solver, fixed held-out set"
    assert _row(out, fixed) == [fixed, "0.354", "0.510", "+0.156"]
    assert _row(out, "starting solver on them") == ["starting solver on them", "0.685", "0.549", "-0.136"]
    assert _row(out, "reward: proposer") == ["reward: proposer", "-0.100", "-", "-"]  # missing after RL
    assert "valid proposals" not in out and "reward: solver" not in out and "0.900" not in out  # not measured
    assert "runs/x" in out


def test_one_evaluation_has_no_change_column(capsys):
    cfg = load_config(None, [])  # the main job: success and pass fraction
    evals = [{"label": "eval", "eval/solved": 0.25, "eval/outcome": 0.5}]
    _result_table({"run_dir": "r", "evals": evals}, cfg)
    out = capsys.readouterr().out
    assert _row(out, "figure") == ["figure", "eval"]
    assert _row(out, "success") == ["success", "0.250"]
    assert _row(out, "pass fraction") == ["pass fraction", "0.500"]
