"""Recipe closed_loop: the pick follows the measured figures, decisions are logged and resumed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from test_trainer import SMALL
from trainer_spy import record_updates

import teamrl.recipes.closed_loop as closed_loop
from teamrl.config import ConfigError, load_config
from teamrl.protocol import Episode
from teamrl.recipes import phases_for
from teamrl.recipes.closed_loop import ClosedLoop, Measurement, pick_weakest
from teamrl.trainer.trainer import Trainer, TrainerState

ROLES = ["planner", "coder", "reviewer"]


def test_the_weakest_role_is_the_one_whose_swap_costs_least():
    m = Measurement(
        success=0.5,
        outcome=0.6,
        process={"planner": 0.9, "coder": 0.2, "reviewer": 0.4},
        baseline_success={"planner": 0.25, "coder": 0.5, "reviewer": 0.5},
        baseline_outcome={"planner": 0.3, "coder": 0.4, "reviewer": 0.5},
    )
    # coder and reviewer both cost 0 success; the reviewer's pass-fraction difference (.1) is smaller
    assert pick_weakest(m, ROLES, "contribution") == "reviewer"
    assert pick_weakest(m, ROLES, "process") == "coder"
    m.baseline_outcome["reviewer"] = 0.4  # a tie on both differences: the lower process score
    assert pick_weakest(m, ROLES, "contribution") == "coder"
    m.process["reviewer"] = 0.2  # a full tie: the earlier role
    assert pick_weakest(m, ["reviewer", "coder"], "contribution") == "reviewer"
    with pytest.raises(ValueError, match="select='best'"):
        pick_weakest(m, ROLES, "best")


def test_a_role_whose_swap_changes_no_episode_is_not_picked_while_another_can_be():
    m = Measurement(
        success=0.5,
        outcome=0.6,
        process={"coder": 0.3, "reviewer": 0.4, "tester": 0.0},
        baseline_success={"coder": 0.0, "reviewer": 0.55, "tester": 0.5},  # contributions .5, -.05, 0
        baseline_outcome={"coder": 0.1, "reviewer": 0.62, "tester": 0.6},
        changed={"coder": 9, "reviewer": 3, "tester": 0},
    )
    # the reviewer costs the team 0.05 (contribution -0.05): it is the weakest of those that can move
    # the outcome; the tester's 0 comes from having no say, not from doing well
    assert pick_weakest(m, ["coder", "reviewer", "tester"], "contribution") == "reviewer"
    m.baseline_success["reviewer"] = 0.25  # contribution +0.25: the coder's +0.5 is larger
    assert pick_weakest(m, ["coder", "reviewer", "tester"], "contribution") == "reviewer"
    m.baseline_success["coder"] = 0.4  # +0.1: now the coder
    assert pick_weakest(m, ["coder", "reviewer", "tester"], "contribution") == "coder"
    assert m.influential(["coder", "reviewer", "tester"]) == ["coder", "reviewer"]
    m.changed = {"coder": 0, "reviewer": 0, "tester": 0}  # nobody moved anything: every role is a candidate
    assert m.influential(["coder", "tester"]) == ["coder", "tester"]
    assert pick_weakest(m, ["coder", "reviewer", "tester"], "contribution") == "tester"


def test_changed_counts_the_probe_episodes_that_ended_differently():
    def ep(task, group, solved, outcome):
        return Episode(task_id=task, group=group, verifier={"solved": solved}, outcome=outcome)

    before = [ep("a", 0, True, 1.0), ep("a", 1, False, 0.5), ep("b", 0, False, 0.0)]
    after = [ep("b", 0, False, 0.0), ep("a", 1, False, 0.25), ep("a", 0, False, 0.5)]  # any order
    assert closed_loop._changed(before, after) == 2
    assert closed_loop._changed(before, list(before)) == 0


@pytest.mark.parametrize(
    "override,needle",
    [
        (["recipe.roles=[coder,coder]"], "recipe.roles lists ['coder'] more than once; closed_loop picks"),
        (
            [f"workflow.roles.{r}.trainable=false" for r in ("planner", "coder", "reviewer", "tester")],
            "recipe closed_loop needs at least one trainable role",
        ),
        (["recipe.closed_loop.select=worst"], "recipe.closed_loop.select: Input should be 'contribution'"),
        (["recipe.closed_loop.probe_tasks=0"], "recipe.closed_loop.probe_tasks: Input should be greater"),
        (["recipe.closed_loop.probs=3"], "recipe.closed_loop.probs: unknown key; did you mean"),
    ],
)
def test_bad_closed_loop_settings_name_the_key_and_the_fix(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["recipe.name=closed_loop", *override])
    assert needle in str(err.value)


def test_a_fixed_schedule_is_not_asked_of_closed_loop():
    with pytest.raises(ValueError, match="decides its phases as it runs"):
        phases_for(load_config(overrides=["recipe.name=closed_loop"]))


def closed_loop_cfg(tmp_path, *overrides: str):
    return load_config(
        overrides=SMALL
        + [
            f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
            "recipe.name=closed_loop",
            "run.eval_each_phase=false",
            *overrides,
        ]
    )


def test_each_round_trains_the_role_the_measurement_found_weakest(tmp_path, monkeypatch):
    cfg = closed_loop_cfg(tmp_path, "recipe.roles=[coder,reviewer,tester]", "recipe.rounds=2")
    trainer = Trainer(cfg, tmp_path / "run")
    # round 1: the tester's swap costs nothing; round 2: the reviewer's process score is lowest of all,
    # but select is contribution, so the coder (lowest contribution) is next
    scripted = [
        Measurement(
            success=0.5,
            outcome=0.5,
            process={"coder": 0.5, "reviewer": 0.5, "tester": 0.5},
            baseline_success={"coder": 0.0, "reviewer": 0.25, "tester": 0.5},  # contributions .5, .25, 0
            baseline_outcome={"coder": 0.0, "reviewer": 0.2, "tester": 0.5},
        ),
        Measurement(
            success=0.75,
            outcome=0.8,
            process={"coder": 0.9, "reviewer": 0.1, "tester": 0.9},
            baseline_success={"coder": 0.75, "reviewer": 0.25, "tester": 0.5},  # contributions 0, .5, .25
            baseline_outcome={"coder": 0.8, "reviewer": 0.2, "tester": 0.5},
        ),
    ]
    calls = []

    def measure(trainer_, roles):
        calls.append((trainer_.state.step, list(roles)))
        return scripted[len(calls) - 1]

    monkeypatch.setattr(closed_loop, "measure_roles", measure)
    seen = record_updates(trainer, monkeypatch)
    summary = trainer.fit()

    assert calls == [(0, ["coder", "reviewer", "tester"]), (1, ["coder", "reviewer", "tester"])]
    assert [roles for roles, _, _ in seen] == [("tester",), ("coder",)]
    for roles, skipped, changed in seen:  # the picked role moved (unless all its advantages were 0), no other
        assert changed == set(roles) - skipped
    assert summary["evals"][-1]["label"] == "after_rl"

    run = tmp_path / "run"
    decisions = [json.loads(line) for line in (run / "closed_loop.jsonl").read_text().splitlines()]
    assert [d["picked"] for d in decisions] == ["tester", "coder"]
    assert decisions[0]["roles"]["tester"]["contribution"] == 0.0
    assert decisions[0]["roles"]["reviewer"]["contribution"] == 0.25
    assert decisions[1]["previous"] == {
        "role": "tester",
        "contribution_before": 0.0,
        "contribution_after": 0.25,
        "success_before": 0.5,
        "success_after": 0.75,
    }
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "closed_loop/picked" in r]
    assert [(r["step"], r["closed_loop/picked"]) for r in logged] == [(0, "tester"), (1, "coder")]
    assert logged[1]["closed_loop/contribution/coder"] == 0.0
    assert [r["phase"] for r in rows if "phase" in r] == ["round1/tester", "round2/coder"]


@pytest.mark.parametrize(
    "baseline,picks",
    [
        ("reference", ["tester", "reviewer"]),  # the untrained reviewer stays a candidate; the tester is out
        ("empty", ["tester", "tester"]),  # nobody changed anything: every role a candidate, the tie order
    ],
)
def test_with_the_sft_baseline_an_untrained_role_stays_a_candidate(tmp_path, monkeypatch, baseline, picks):
    cfg = closed_loop_cfg(
        tmp_path,
        "recipe.roles=[coder,reviewer,tester]",
        "recipe.rounds=2",
        f"recipe.closed_loop.baseline={baseline}",
    )
    trainer = Trainer(cfg, tmp_path / "run")

    def measure(trainer_, roles):  # every swap changes nothing: what an untrained team shows
        return Measurement(
            success=0.5,
            outcome=0.5,
            process={"coder": 0.5, "reviewer": 0.3, "tester": 0.0},
            baseline_success=dict.fromkeys(roles, 0.5),
            baseline_outcome=dict.fromkeys(roles, 0.5),
            changed=dict.fromkeys(roles, 0),
        )

    monkeypatch.setattr(closed_loop, "measure_roles", measure)
    loop = ClosedLoop(trainer)
    assert loop[0].roles == (picks[0],)
    assert loop[1].roles == (picks[1],)
    second = loop.decisions[1]
    if baseline == "reference":
        assert second["no_influence"] == ["tester"]
        assert second["roles"]["coder"]["changed_episodes"] is None  # not judged: never trained
    else:
        assert second["no_influence"] == []


@pytest.mark.parametrize(
    "max_repeats,picks",
    [
        ("2", ["tester", "tester", "reviewer", "tester"]),
        ("1", ["tester", "reviewer", "tester", "reviewer"]),
        ("null", ["tester"] * 4),
    ],
)
def test_a_role_picked_max_repeats_rounds_in_a_row_sits_the_next_one_out(
    tmp_path, monkeypatch, max_repeats, picks
):
    cfg = closed_loop_cfg(
        tmp_path,
        "recipe.roles=[coder,reviewer,tester]",
        "recipe.rounds=4",
        f"recipe.closed_loop.max_repeats={max_repeats}",
    )

    def measure(trainer_, roles):  # the same figures every round: training moved nothing
        return Measurement(
            success=0.5,
            outcome=0.5,
            process={"coder": 0.5, "reviewer": 0.3, "tester": 0.0},
            baseline_success={"coder": 0.0, "reviewer": 0.25, "tester": 0.5},  # contributions .5, .25, 0
            baseline_outcome={"coder": 0.0, "reviewer": 0.25, "tester": 0.5},
            changed={"coder": 9, "reviewer": 4, "tester": 2},
        )

    monkeypatch.setattr(closed_loop, "measure_roles", measure)
    loop = ClosedLoop(Trainer(cfg, tmp_path / "run"))
    assert [loop[k].roles[0] for k in range(4)] == picks
    rested = [d.get("rested") for d in loop.decisions]
    if max_repeats == "2":
        assert rested == [None, None, "tester", None]


def test_a_resumed_closed_loop_reads_its_decisions_back(tmp_path, monkeypatch):
    cfg = closed_loop_cfg(tmp_path, "recipe.rounds=3", "recipe.iterations_per_role={coder: 5}")
    (tmp_path / "run").mkdir()
    logged = [
        {"round": 1, "picked": "planner", "iterations": 4},
        {"round": 2, "picked": "coder", "iterations": 5},
    ]
    (tmp_path / "run" / "closed_loop.jsonl").write_text("".join(json.dumps(d) + "\n" for d in logged))
    # in round 2, after a checkpoint of its first iteration
    fake = SimpleNamespace(cfg=cfg, run_dir=tmp_path / "run", state=TrainerState(phase=1, phase_iteration=1))

    def no_measuring(*_):
        raise AssertionError("a logged decision must not be measured again")

    monkeypatch.setattr(closed_loop, "measure_roles", no_measuring)
    loop = ClosedLoop(fake)  # type: ignore[arg-type]
    assert len(loop) == 3
    assert (loop[0].name, loop[0].roles, loop[0].iterations) == ("round1/planner", ("planner",), 4)
    assert (loop[1].name, loop[1].roles, loop[1].iterations) == ("round2/coder", ("coder",), 5)
    with pytest.raises(IndexError, match="no round 4"):
        loop[3]


def test_a_decision_made_after_the_last_checkpoint_logs_its_metrics_row_again(tmp_path, monkeypatch):
    """Killed after deciding round 2 but before a checkpoint of it: the resume cut metrics.jsonl back to
    the checkpoint, so the decision read back logs its row again (the later, stray decision goes)."""
    cfg = closed_loop_cfg(tmp_path, "recipe.rounds=3")
    (tmp_path / "run").mkdir()
    logged = [
        {"round": r, "picked": "coder", "iterations": 4, "success": 0.25, "outcome": 0.5, "probe_tokens": 7}
        | {"roles": {"planner": {"process": 0.5}, "coder": {"process": 0.125}}}
        for r in (1, 2, 3)
    ]
    (tmp_path / "run" / "closed_loop.jsonl").write_text("".join(json.dumps(d) + "\n" for d in logged))
    rows = []
    fake = SimpleNamespace(
        cfg=cfg, run_dir=tmp_path / "run", state=TrainerState(phase=1, step=4), log_metrics=rows.append
    )
    monkeypatch.setattr(closed_loop, "measure_roles", lambda *_: pytest.fail("measured again"))
    loop = ClosedLoop(fake)  # type: ignore[arg-type]
    assert loop[0].name == "round1/coder" and rows == []  # covered by the checkpoint
    assert loop[1].name == "round2/coder"
    assert rows == [
        {
            "step": 4,
            "closed_loop/round": 2.0,
            "closed_loop/success": 0.25,
            "closed_loop/outcome": 0.5,
            "closed_loop/probe_tokens": 7.0,
            "closed_loop/picked": "coder",
            "closed_loop/process/planner": 0.5,
            "closed_loop/process/coder": 0.125,
        }
    ]
    assert loop[1].name == "round2/coder" and len(rows) == 1  # once
    kept = (tmp_path / "run" / "closed_loop.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in kept] == [1, 2]


def test_one_real_round_measures_every_role_and_trains_the_weakest(tmp_path, monkeypatch):
    cfg = closed_loop_cfg(
        tmp_path,
        "recipe.roles=[planner,coder]",
        "recipe.closed_loop.probe_tasks=2",
        "recipe.closed_loop.probe_samples=1",
    )
    trainer = Trainer(cfg, tmp_path / "run")
    seen = record_updates(trainer, monkeypatch)
    trainer.fit()
    (decision,) = [
        json.loads(line) for line in (tmp_path / "run" / "closed_loop.jsonl").read_text().splitlines()
    ]
    figures = decision["roles"]
    assert set(figures) == {"planner", "coder"} and decision["probe_tokens"] > 0
    for figs in figures.values():
        assert figs["contribution"] == pytest.approx(decision["success"] - figs["baseline_success"])
        assert 0.0 <= figs["process"] <= 1.0
    weakest = min(
        ["planner", "coder"],
        key=lambda r: (figures[r]["contribution"], figures[r]["contribution_outcome"], figures[r]["process"]),
    )
    assert decision["picked"] == weakest
    assert [roles for roles, _, _ in seen] == [(weakest,)]
    assert seen[0][2] <= {weakest}


def test_the_example_config_loads():
    from pathlib import Path

    cfg = load_config(Path(__file__).parents[1] / "examples" / "pipeline_closed_loop.yaml")
    assert cfg.recipe.name == "closed_loop" and cfg.recipe.closed_loop.select == "contribution"
    assert cfg.recipe.closed_loop.baseline == "empty"
