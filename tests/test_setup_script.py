"""scripts/setup.sh's two modes, run against a stand-in ``.venv`` whose python logs what it is asked to do
(no real install): ``dev`` (the default, what the test command uses) installs the package with its test
tools, ``run`` (what the quick start uses) only the package, each skipped while its install is current; pip
installs without byte-compiling and the packages are compiled once afterwards, on all cores."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Logs every call; `-c` (the script's import checks) succeeds unless FAKE_IMPORTS_FAIL is set.
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../calls.log"
if [ "$1" = -c ] && [ -n "${FAKE_IMPORTS_FAIL:-}" ]; then exit 1; fi
exit 0
"""


def _checkout(tmp_path: Path) -> Path:
    """A directory shaped like a checkout: the script, a pyproject.toml, a .venv with the fake python, and
    stand-ins for bubblewrap and Chromium on PATH (so the script never reaches for apt-get)."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    tools = tmp_path / "tools"
    tools.mkdir()
    for path, text in [(bin_dir / "python", FAKE_PYTHON)] + [
        (tools / name, "#!/bin/sh\nexit 0\n") for name in ("bwrap", "chromium", "chromedriver")
    ]:
        path.write_text(text)
        path.chmod(0o755)
    return root


def _setup(
    root: Path, mode: str | None, imports_fail: bool = False
) -> tuple[subprocess.CompletedProcess, list[str]]:
    env = {"PATH": f"{root.parent / 'tools'}:{os.environ['PATH']}", "HOME": str(root.parent)}
    if mode is not None:
        env["TEAMRL_SETUP"] = mode
    if imports_fail:
        env["FAKE_IMPORTS_FAIL"] = "1"
    log = root / ".venv" / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", str(root / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    calls = log.read_text().splitlines() if log.exists() else []
    installs = [line for line in calls if "pip install" in line or "compileall" in line]
    if installs:  # pip installs without byte-compiling; the packages are compiled once, after every install
        assert all("--no-compile" in line for line in installs[:-1]), installs
        assert installs[-1].startswith("-m compileall -q -j 0 "), installs
    return done, installs[:-1]


def test_run_mode_installs_the_package_without_its_test_tools(tmp_path):
    root = _checkout(tmp_path)
    done, installs = _setup(root, "run", imports_fail=True)
    assert done.returncode == 0, done.stderr
    assert any(line.endswith("install -q --no-compile -e .") for line in installs), installs
    assert not any("[dev]" in line for line in installs)
    assert (root / ".venv" / ".teamrl-installed-run").exists()


def test_dev_mode_is_the_default_and_installs_the_test_tools(tmp_path):
    root = _checkout(tmp_path)
    done, installs = _setup(root, None, imports_fail=True)
    assert done.returncode == 0, done.stderr
    assert any(line.endswith("install -q --no-compile -e .[dev]") for line in installs), installs
    assert (root / ".venv" / ".teamrl-installed").exists()


def test_a_current_install_is_not_repeated_and_a_dev_install_serves_a_run(tmp_path):
    root = _checkout(tmp_path)
    assert _setup(root, "dev")[1]  # no marker yet: installs
    assert _setup(root, "dev")[1] == []
    assert _setup(root, "run")[1] == []  # the dev install covers what a run needs
    now = time.time()  # the project changed since that install: install again
    os.utime(root / ".venv" / ".teamrl-installed", (now - 100, now - 100))
    os.utime(root / "pyproject.toml", (now - 50, now - 50))
    assert _setup(root, "run")[1]
    assert _setup(root, "run")[1] == []
    assert _setup(root, "dev")[1]  # a run install does not stand in for the test tools


def test_an_unknown_mode_is_one_clear_error_before_anything_is_installed(tmp_path):
    root = _checkout(tmp_path)
    done, installs = _setup(root, "full")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "setup: TEAMRL_SETUP=full: expected 'dev' (the default: the package and its test tools) or 'run'"
    )
    assert installs == []
    assert not (root / ".venv" / "calls.log").exists()  # not even the import checks ran


def test_the_quick_start_sets_up_in_run_mode_and_the_test_command_in_dev_mode():
    quick = (REPO / "scripts" / "quickstart.sh").read_text()
    tests = (REPO / "scripts" / "test.sh").read_text()
    assert "TEAMRL_SETUP=run bash scripts/setup.sh" in quick
    assert "bash scripts/setup.sh" in tests and "TEAMRL_SETUP" not in tests
