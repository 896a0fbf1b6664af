"""Crash safety of `teamrl train`: a tiny run killed with SIGKILL at named points (teamrl.trainer.faults)
and resumed, possibly killed again, ends with the metrics rows (timings aside), adapters and TensorBoard
scalars of the run that was never interrupted. Also: damaged checkpoints (flipped bytes, a truncated
file) fall back to the one before or stop with an error naming the file, a metrics.jsonl cut mid-line is
repaired, SIGTERM stops at a checkpoint with exit code 143, a second process is refused the run
directory, and a full disk stops the run with a message, its checkpoints intact.

The killed runs live in children of one driver process (tests/crash_driver.py), which pays the imports
once; each scenario still costs about a whole tiny run, hence ``slow``.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_base import TINY_BASE

from teamrl.cli import main as cli_main
from teamrl.config import dump_config, load_config
from teamrl.trainer.checkpoints import checkpoint_dirs, verify
from teamrl.trainer.run_lock import RunLock

DRIVER = Path(__file__).parent / "crash_driver.py"
# Two phases of two iterations, an evaluation every two iterations and after each phase: evaluations
# interleave with iterations, and two evaluation rows share a step.
CRASH_RUN = [
    *TINY_BASE,
    "recipe.roles=[coder,reviewer]",
    "recipe.iterations_per_role=2",
    "run.eval_every=2",
    "run.eval_each_phase=true",
    "tasks.heldout_size=2",
    "run.eval_samples=1",
]
# Checkpoints of that run: 1 after SFT (step 0), 2 and 3 after iterations 1 and 2, 4 after phase 1's
# evaluation (step 2), 5 and 6 after iterations 3 and 4, 7 at the end. Episodes: 2 per evaluation, 4 per
# iteration (the evaluation after SFT plays episodes 1-2, iteration 1 episodes 3-6, ...). Evaluations:
# 1 after SFT, 2 at step 2, 3 after phase 1, 4 at step 4, 5 after RL.
KILLS = {  # scenario -> the faults of the attempts killed one after the other; the last attempt then finishes
    "during_sft": ["sft:2"],
    "mid_rollout": ["episode:5"],
    "right_after_a_metrics_append": ["metrics_appended:5"],
    "between_checkpoint_files_after_an_evaluation": ["checkpoint_file:4"],
    "between_the_checkpoint_renames": ["checkpoint_renamed:3"],
    "right_after_an_evaluation": ["evaluated:3"],
    "after_the_sft_row_then_mid_rollout": ["metrics_appended:1", "episode:9"],
    "in_the_sft_checkpoint_then_while_pruning": ["checkpoint_file:1", "checkpoint_pruning:1"],
}
SIGNALS = {"sigterm": ("episode:17:TERM", 143), "sigint": ("episode:9:INT", 130)}


def train_argv(root: Path, cache: Path, name: str) -> list[str]:
    sets = [
        *CRASH_RUN,
        f"policies.default.embedded.cache_dir={cache}",
        f"run.out_dir={root}",
        f"run.name={name}",
    ]
    return ["train", *(arg for s in sets for arg in ("--set", s))]


def drive(root: Path, attempts: list[dict]) -> list[int]:
    """Run the attempts in the driver; their exit codes (-9: killed by SIGKILL)."""
    plan, out = root / f"plan{len(list(root.glob('plan*')))}.json", root / "codes.json"
    plan.write_text(json.dumps({"out": str(out), "attempts": attempts}))
    subprocess.run([sys.executable, str(DRIVER), str(plan)], check=True, timeout=900)
    return json.loads(out.read_text())


def learning_rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def adapters(run: Path) -> dict[str, str]:
    """sha256 of every adapter's weights in the run's newest checkpoint (from its manifest). Not of
    adapter_config.json: peft writes a set there, in an order that differs between processes."""
    files = json.loads((checkpoint_dirs(run)[0] / "manifest.json").read_text())["files"]
    return {k: v["sha256"] for k, v in files.items() if k.endswith("adapter_model.safetensors")}


def scalars(run: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def leftovers(run: Path) -> list[str]:
    """Temp files and directories killed writers left behind."""
    return sorted(str(p.relative_to(run)) for p in run.rglob(".*") if p.name != ".lock")


def assert_like_the_baseline(run: Path, baseline: Path) -> None:
    assert learning_rows(run) == learning_rows(baseline)
    assert adapters(run) == adapters(baseline)
    assert scalars(run, "rollout/solved") == scalars(baseline, "rollout/solved")
    assert [step for step, _ in scalars(run, "rollout/outcome")] == [1, 2, 3, 4]  # each step once
    assert leftovers(run) == []
    kept = checkpoint_dirs(run)
    assert len(kept) == 2 and (run / "checkpoint").resolve() == kept[0].resolve()
    assert all(verify(c) is None for c in kept)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run (``baseline``), every scenario of KILLS and SIGNALS, and a snapshot of the
    run SIGTERM stopped (``stopped``: checkpoints 4 and 5, step 3), all in one driver."""
    root = tmp_path_factory.mktemp("crash")
    cache = root / "cache"
    attempts = [{"argv": train_argv(root, cache, "baseline"), "log": str(root / "baseline.log")}]
    for name, faults in KILLS.items():
        for i, fault in enumerate([*faults, None]):
            argv = train_argv(root, cache, name) if i == 0 else ["train", "--resume", str(root / name)]
            attempts.append({"argv": argv, "fault": fault, "log": str(root / f"{name}.{i}.log")})
    for name, (fault, _) in SIGNALS.items():
        attempts.append(
            {
                "argv": train_argv(root, cache, name),
                "fault": fault,
                "log": str(root / f"{name}.0.log"),
                "run_dir": str(root / name),
                "snapshot": str(root / "stopped") if name == "sigterm" else None,
            }
        )
        attempts.append({"argv": ["train", "--resume", str(root / name)], "log": str(root / f"{name}.1.log")})
    codes = drive(root, attempts)
    (root / "codes_by_log.json").write_text(
        json.dumps({Path(a["log"]).stem: c for a, c in zip(attempts, codes, strict=True)})
    )
    return root


def codes(root: Path, name: str) -> list[int]:
    by_log = json.loads((root / "codes_by_log.json").read_text())
    return [code for log, code in sorted(by_log.items()) if log.rsplit(".", 1)[0] == name]


@pytest.mark.slow
def test_the_baseline_trains_every_adapter_it_should(runs):
    assert codes(runs, "baseline") == [0]
    rows = learning_rows(runs / "baseline")
    assert [(r["step"], "phase" in r, "eval/solved" in r) for r in rows] == [
        (0, False, True),
        (1, True, False),
        (2, True, True),
        (2, False, True),
        (3, True, False),
        (4, True, True),
        (4, False, True),
    ]
    files = adapters(runs / "baseline")
    for role in ("coder", "reviewer"):  # trained: moved away from the SFT snapshot
        key = "adapters/{}/adapter_model.safetensors"
        assert files[key.format(role)] != files[key.format(f"ref_{role}")]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(KILLS))
def test_a_run_killed_and_resumed_ends_like_the_uninterrupted_one(runs, scenario):
    assert codes(runs, scenario) == [-9] * len(KILLS[scenario]) + [0]
    assert_like_the_baseline(runs / scenario, runs / "baseline")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIGNALS))
def test_sigterm_and_sigint_stop_with_a_checkpoint_and_resume_exactly(runs, name):
    fault, code = SIGNALS[name]
    assert codes(runs, name) == [code, 0]
    out = (runs / f"{name}.0.log").read_text()
    assert f"continue with: teamrl train --resume {runs / name}" in out and "Traceback" not in out
    if name == "sigterm":  # it finished iteration 3, wrote its checkpoint, then stopped
        assert "stopped by SIGTERM after step 3, with a checkpoint" in out
        assert [c.name for c in checkpoint_dirs(runs / "stopped")] == [
            "000005-step-000003",
            "000004-step-000002",
        ]
    assert_like_the_baseline(runs / name, runs / "baseline")


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


REVIEWER = "adapters/reviewer/adapter_model.safetensors"
NEWEST, OLDER = "checkpoints/000005-step-000003", "checkpoints/000004-step-000002"


def cut_last_metrics_line(run: Path) -> None:
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[: len(text) - 40])  # inside iteration 3's row


def half_a_row_more(run: Path) -> None:
    with open(run / "metrics.jsonl", "a") as fh:  # a crash while appending iteration 4's row
        fh.write('{"step": 4, "phase": "round1/revi')


def as_an_older_teamrl_left_it(run: Path) -> None:
    """The single ``checkpoint/`` directory (no manifest, no row counts) and its temp leftovers."""
    newest = run / NEWEST
    (run / "checkpoint").unlink()
    shutil.copytree(newest, run / "checkpoint")
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoint" / "manifest.json").unlink()
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    for key in ("saves", "metrics_rows", "metrics_tail"):
        del state[key]
    (run / "checkpoint" / "state.json").write_text(json.dumps(state))
    (run / ".checkpoint.tmp-123-abcdef01").mkdir()


DAMAGE = {  # name -> (damage to the stopped run, exit code of its resume, what its log must say)
    "flipped_bytes": (lambda run: flip_bytes(run / NEWEST / REVIEWER), 0, f"{REVIEWER} does not match"),
    "truncated_file": (lambda run: truncate(run / NEWEST / REVIEWER), 0, f"{REVIEWER} is "),
    "missing_file": (lambda run: (run / NEWEST / "state.json").unlink(), 0, "state.json is missing"),
    "metrics_cut_mid_line": (cut_last_metrics_line, 0, "restored from the checkpoint"),
    "half_a_metrics_row": (half_a_row_more, 0, "1 row(s) logged after the checkpoint dropped"),
    "older_layout": (as_an_older_teamrl_left_it, 0, "the single checkpoint of an older teamrl"),
    "every_checkpoint_damaged": (
        lambda run: (flip_bytes(run / NEWEST / REVIEWER), truncate(run / OLDER / REVIEWER)),
        2,
        "no intact checkpoint in",
    ),
}


@pytest.fixture(scope="module")
def damaged(runs: Path) -> Path:
    """Copies of the stopped run, each damaged as DAMAGE says, then resumed (in one driver)."""
    root = runs / "damaged"
    root.mkdir()
    attempts = []
    for name, (damage, _, _) in DAMAGE.items():
        shutil.copytree(runs / "stopped", root / name, symlinks=True)
        damage(root / name)
        attempts.append({"argv": ["train", "--resume", str(root / name)], "log": str(root / f"{name}.log")})
    codes = drive(root, attempts)
    (root / "codes.json").write_text(json.dumps(dict(zip(DAMAGE, codes, strict=True))))
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DAMAGE))
def test_a_damaged_run_resumes_from_what_is_intact_or_says_what_is_not(runs, damaged, name):
    _, code, says = DAMAGE[name]
    log = (damaged / f"{name}.log").read_text()
    assert json.loads((damaged / "codes.json").read_text())[name] == code
    assert says in log and "Traceback" not in log
    run = damaged / name
    if code == 0:
        assert_like_the_baseline(run, runs / "baseline")
    else:  # both damaged files named; nothing changed
        assert f"{NEWEST}/{REVIEWER}" in log and f"{OLDER}/{REVIEWER}" in log
        assert [c.name for c in checkpoint_dirs(run)] == ["000005-step-000003", "000004-step-000002"]
    if name in ("flipped_bytes", "truncated_file", "missing_file"):  # set aside, the older one resumed
        assert (run / f"{NEWEST}.bad").is_dir()


# -- fast: the lock and a full disk, in this process -------------------------------------------------
SMALL_RUN = [*TINY_BASE, "recipe.roles=[coder]", "recipe.iterations_per_role=2"]


def test_a_second_process_is_refused_the_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(load_config(overrides=SMALL_RUN)))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from teamrl.trainer.run_lock import RunLock; RunLock.acquire(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(120)",
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert cli_main(["train", "--resume", str(run)]) == 2
        err = capsys.readouterr().err
        assert f"run directory {run} is in use by pid {holder.pid}" in err and "Traceback" not in err
    finally:
        holder.kill()
        holder.wait()
    RunLock.acquire(run).release()  # the holder died: its lock went with it


def _full_checkpoint(monkeypatch):
    from teamrl.policies.hf import HFPolicy

    save = HFPolicy.save_adapter

    def save_adapter(self, name, directory):
        if "step-000001" in str(directory):  # the first iteration's checkpoint: the disk fills up in it
            Path(directory).mkdir(parents=True)
            (Path(directory) / "adapter_model.safetensors").write_bytes(b"x" * 100)
            raise OSError(errno.ENOSPC, "No space left on device", str(directory))
        return save(self, name, directory)

    monkeypatch.setattr(HFPolicy, "save_adapter", save_adapter)
    return "checkpoints/000002-step-000001"


def _full_metrics(monkeypatch):
    import teamrl.trainer.run_dir as run_dir_module

    opened = []

    class FullFile:  # writes half of what it is given, then the disk is full
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, text):
            self.fh.write(text[: len(text) // 2])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    def open_(path, mode="r", *args, **kwargs):
        fh = open(path, mode, *args, **kwargs)
        opened.append(path)
        return FullFile(fh) if len(opened) == 2 else fh  # the first iteration's row

    monkeypatch.setattr(run_dir_module, "open", open_, raising=False)
    return "metrics.jsonl"


@pytest.mark.parametrize("fills", [_full_checkpoint, _full_metrics], ids=["in_a_checkpoint", "in_metrics"])
def test_a_full_disk_stops_the_run_with_a_message_and_a_retry_does_not_redo_sft(
    tmp_path, monkeypatch, capsys, fills
):
    from teamrl.trainer.trainer import Trainer

    run = tmp_path / "run"
    sets = [*SMALL_RUN, f"policies.default.embedded.cache_dir={tmp_path / 'cache'}"]
    sets += [f"run.out_dir={tmp_path}", "run.name=run"]
    monkeypatch.setattr("teamrl.cli._write_run_report", lambda run_dir: None)  # seconds, not tested here
    with monkeypatch.context() as patched:
        where = fills(patched)
        assert cli_main(["train", *(arg for s in sets for arg in ("--set", s))]) == 1
    err = capsys.readouterr().err
    assert f"no space left on device while writing {run / where}" in err
    assert f"free space and resume with: teamrl train --resume {run}" in err and "Traceback" not in err
    [sft] = checkpoint_dirs(run)  # the checkpoint before is intact, the failed one left nothing
    assert sft.name == "000001-step-000000" and verify(sft) is None
    assert not list((run / "checkpoints").glob(".*"))

    def no_sft_again(self):
        raise AssertionError("SFT redone although its checkpoint exists")

    monkeypatch.setattr(Trainer, "sft_roles", no_sft_again)
    assert cli_main(["train", "--resume", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "phase" in r) for r in rows] == [(0, False), (1, True), (2, True), (2, False)]
