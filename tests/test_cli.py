"""The ``teamrl`` command as a shell runs it: ``python -m teamrl``, exit codes, a reader that goes away."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from teamrl.cli import main

ROOT = Path(__file__).resolve().parents[1]


def teamrl(*args: str, stdout: int = subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "teamrl", *args],
        cwd=ROOT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )


def test_python_m_teamrl_runs_the_cli_and_passes_its_exit_code_on():
    ok = teamrl("--help")
    assert ok.returncode == 0 and "usage: teamrl" in ok.stdout
    assert teamrl("nosuch").returncode == 2


def test_an_empty_config_file_stops_train_with_a_message_and_exit_code_2(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert main(["train", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"teamrl: {empty} is empty: give at least one section")


def test_a_reader_that_closes_the_pipe_gets_no_traceback():
    # `teamrl schema | head -1`: the reader takes one line and closes its end
    with subprocess.Popen(
        [sys.executable, "-m", "teamrl", "schema"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout.readline().strip() == b"{"
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        proc.wait(timeout=60)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    # the same with a reader gone before the first write, so that the write is sure to fail
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = teamrl("schema", stdout=write_end)
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 1


def test_train_without_a_working_sandbox_says_how_to_fix_it_and_makes_no_run_directory(
    tmp_path, capsys, monkeypatch
):
    import shutil

    from teamrl.tasks.sandbox import sandbox as sandbox_module

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    sandbox_module._bwrap_backend.cache_clear()
    try:
        assert main(["train", "--set", f"run.out_dir={tmp_path}", "--set", "run.name=r"]) == 2
    finally:
        sandbox_module._bwrap_backend.cache_clear()
    err = capsys.readouterr().err
    assert err.startswith("teamrl: isolation='auto' needs bubblewrap") and "sandbox.isolation: rlimits" in err
    assert "Traceback" not in err and not (tmp_path / "r").exists()
