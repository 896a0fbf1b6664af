"""Crash safety of `teamrl train`: a tiny run killed with SIGKILL at named points (teamrl.trainer.faults)
and resumed, possibly killed again, ends with the metrics rows (timings aside), adapters and TensorBoard
scalars of the run that was never interrupted. Also: damaged checkpoints (flipped bytes, a truncated
file) fall back to the one before or stop with an error naming the file, a metrics.jsonl cut mid-line is
repaired, SIGTERM stops at a checkpoint with exit code 143, a second process is refused the run
directory, and a full disk stops the run with a message, its checkpoints intact.

The runs live in children of one driver process (tests/crash_driver.py), which pays the imports once;
each chain of kills still costs a whole tiny run and its replays, hence ``slow``.
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
# evaluation (step 2), 5 and 6 after iterations 3 and 4, 7 at the end; each save but the first two deletes
# the oldest. Evaluations: after SFT, at step 2, after phase 1, at step 4, after RL; 2 episodes each, 4 an
# iteration. The fault counts below are of one attempt, a process (see each comment for where it lands).
CHAINS = {  # a run killed again and again, each attempt resuming the one before: [(fault, exit code)]
    "early": [
        ("sft:2", -9),  # SIGKILL during SFT, after its second role
        ("metrics_appended:1", -9),  # (SFT again) right after the evaluation row after SFT is appended
        ("checkpoint_file:1", -9),  # (SFT again) inside the first checkpoint, between its files
        ("episode:5", -9),  # mid-rollout of iteration 1, checkpoint 1 written
        ("checkpoint_renamed:2", -9),  # checkpoint 3 renamed into place, the `checkpoint` link not moved
        (None, 0),
    ],
    "late": [
        ("evaluated:3", -9),  # right after the evaluation that ends phase 1, before its row
        ("checkpoint_file:1", -9),  # (that evaluation again) inside its checkpoint, between files
        ("checkpoint_pruning:1", -9),  # deleting checkpoint 2 after writing checkpoint 4
        ("metrics_appended:1", -9),  # right after iteration 3's row is appended
        ("episode:6:INT", 130),  # Ctrl-C mid-rollout of iteration 4: stops at once
        (None, 0),
    ],
    "sigterm": [("episode:17:TERM", 143), (None, 0)],  # mid iteration 3: stops after its checkpoint
}


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
    """The uninterrupted run (``baseline``), the CHAINS, and a copy of the run SIGTERM stopped
    (``stopped``: checkpoints 4 and 5, step 3), all in one driver."""
    root = tmp_path_factory.mktemp("crash")
    cache = root / "cache"
    attempts = [{"argv": train_argv(root, cache, "baseline"), "log": str(root / "baseline.log")}]
    for name, chain in CHAINS.items():
        for i, (fault, _) in enumerate(chain):
            argv = train_argv(root, cache, name) if i == 0 else ["train", "--resume", str(root / name)]
            attempts.append({"argv": argv, "fault": fault, "log": str(root / f"{name}.{i}.log")})
    attempts[-2] |= {"run_dir": str(root / "sigterm"), "snapshot": str(root / "sigterm.stopped")}
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
@pytest.mark.parametrize("name", list(CHAINS))
def test_a_run_killed_again_and_again_ends_like_the_uninterrupted_one(runs, name):
    assert codes(runs, name) == [code for _, code in CHAINS[name]]
    for i, (_, code) in enumerate(CHAINS[name]):
        log = (runs / f"{name}.{i}.log").read_text()
        assert "Traceback" not in log
        if code in (130, 143):  # a signal Python handles: the command to continue
            assert f"continue with: teamrl train --resume {runs / name}" in log
    assert_like_the_baseline(runs / name, runs / "baseline")


@pytest.mark.slow
def test_sigterm_stops_after_the_iterations_checkpoint(runs):
    log = (runs / "sigterm.0.log").read_text()
    assert "stopped by SIGTERM after step 3, with a checkpoint" in log
    kept = [c.name for c in checkpoint_dirs(runs / "sigterm.stopped")]
    assert kept == ["000006-step-000003", "000005-step-000002"]  # 000001: SFT, before its evaluation


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


REVIEWER = "adapters/reviewer/adapter_model.safetensors"
NEWEST, OLDER = "checkpoints/000006-step-000003", "checkpoints/000005-step-000002"


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
        shutil.copytree(runs / "sigterm.stopped", root / name, symlinks=True)
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
        assert [c.name for c in checkpoint_dirs(run)] == ["000006-step-000003", "000005-step-000002"]
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
    return "checkpoints/000003-step-000001"


def _full_metrics(monkeypatch):
    import teamrl.atomic as run_dir_module  # where JsonlLog writes

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
    kept = checkpoint_dirs(run)  # the checkpoints before are intact (SFT, then its evaluation), the failed
    assert [c.name for c in kept] == ["000002-step-000000", "000001-step-000000"]  # one left nothing
    assert all(verify(c) is None for c in kept)
    assert not list((run / "checkpoints").glob(".*"))

    def no_sft_again(self):
        raise AssertionError("SFT redone although its checkpoint exists")

    monkeypatch.setattr(Trainer, "sft_roles", no_sft_again)
    assert cli_main(["train", "--resume", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "phase" in r) for r in rows] == [(0, False), (1, True), (2, True), (2, False)]


def test_sigterm_asks_for_a_stop_a_second_one_stops_at_once_and_the_handler_is_put_back():
    import os
    import signal
    from types import SimpleNamespace

    from teamrl.cli import _stop_on_sigterm

    reasons = []
    trainer = SimpleNamespace(request_stop=reasons.append)
    trainer.stop_requested = None
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), _stop_on_sigterm(trainer):
        os.kill(os.getpid(), signal.SIGTERM)
        assert reasons == ["SIGTERM"]  # the first: a request, training goes on
        trainer.stop_requested = "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # the second: at once
    assert signal.getsignal(signal.SIGTERM) is before
