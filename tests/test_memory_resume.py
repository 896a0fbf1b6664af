"""The memory's outer loop checkpoints and resumes (issue 19): cut anywhere, it ends with the scorer of a
run that never stopped; a checkpoint of other settings or a damaged one is a clear error; the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from teamrl.memory.learn import train_scorer
from teamrl.memory.store import Capacity

SMALL = {"batch": 4, "rounds": 12, "drift_at": 6}


class Stop(Exception):
    pass


def test_a_cut_outer_loop_resumes_to_the_same_scorer(tmp_path: Path) -> None:
    cap = Capacity(3)
    whole, whole_log = train_scorer(1, cap, iterations=6, **SMALL)  # type: ignore[arg-type]
    ckpt = tmp_path / "outer.json"

    def cut_after_3(log) -> None:  # noqa: ANN001
        if log.iteration == 2:
            raise Stop

    with pytest.raises(Stop):
        train_scorer(1, cap, iterations=6, progress=cut_after_3, checkpoint=ckpt, **SMALL)  # type: ignore[arg-type]
    assert json.loads(ckpt.read_text())["iteration"] == 3
    resumed, log = train_scorer(1, cap, iterations=6, checkpoint=ckpt, **SMALL)  # type: ignore[arg-type]
    np.testing.assert_array_equal(resumed.weights, whole.weights)
    assert resumed.stop == whole.stop
    assert [x.acceptance for x in log] == [x.acceptance for x in whole_log]
    # a finished run trained further: the same as one asked for more iterations at once
    longer, _ = train_scorer(1, cap, iterations=8, checkpoint=ckpt, **SMALL)  # type: ignore[arg-type]
    straight, _ = train_scorer(1, cap, iterations=8, **SMALL)  # type: ignore[arg-type]
    np.testing.assert_array_equal(longer.weights, straight.weights)


def test_a_checkpoint_of_other_settings_or_a_damaged_one_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "outer.json"
    train_scorer(1, Capacity(3), iterations=1, checkpoint=ckpt, **SMALL)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"other settings \(capacity\)"):
        train_scorer(1, Capacity(5), iterations=2, checkpoint=ckpt, **SMALL)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"other settings \(collaborators, seed\)"):
        train_scorer(2, Capacity(3), iterations=2, checkpoint=ckpt, batch=4, rounds=12, drift_at=7)
    ckpt.write_text('{"settings": ')
    with pytest.raises(ValueError, match="cannot read it"):
        train_scorer(1, Capacity(3), iterations=2, checkpoint=ckpt, **SMALL)  # type: ignore[arg-type]


def test_the_command_writes_a_scorer_the_workflow_reads(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from teamrl.cli import main
    from teamrl.memory.workflow import load_scorer

    out = tmp_path / "scorer.json"
    args = [
        "memory",
        "train-scorer",
        "--out",
        str(out),
        "--iterations",
        "2",
        "--batch",
        "4",
        "--rounds",
        "12",
    ]
    assert main([*args, "--drift-at", "6"]) == 0
    assert "workflow.memory.scorer=" in capsys.readouterr().out
    first = load_scorer(out)
    assert (tmp_path / "scorer.json.checkpoint").is_file()
    assert main([*args, "--drift-at", "6", "--iterations", "3"]) == 0  # resumes, one more iteration
    assert "resuming from" in capsys.readouterr().err
    assert not np.array_equal(load_scorer(out).weights, first.weights)
    assert main([*args, "--drift-at", "9"]) == 2
    err = capsys.readouterr().err
    assert "other settings (collaborators)" in err and "Traceback" not in err
