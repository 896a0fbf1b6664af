"""Containment tests for the untrusted-code sandbox, each with a real sandboxed run."""

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import textwrap
from pathlib import Path

import pytest

from teamrl.tasks.sandbox import (
    ProgramCheck,
    Sandbox,
    SandboxLimits,
    SandboxUnavailableError,
    run_checks,
    run_checks_sync,
)
from teamrl.tasks.sandbox import sandbox as sandbox_module

FAST = SandboxLimits(timeout_s=5.0, cpu_s=5, memory_mb=256, max_processes=16, check_timeout_s=0.5)


def _make(isolation: str, limits: SandboxLimits = FAST) -> Sandbox:
    if isolation == "bwrap" and shutil.which("bwrap") is None and not os.environ.get("CI"):
        # CI installs bubblewrap, so there a missing bwrap fails below instead of skipping.
        pytest.skip("bubblewrap not installed (apt-get install -y bubblewrap)")
    return Sandbox(limits, isolation=isolation)


@pytest.fixture(params=["bwrap", "rlimits"])
def isolation(request: pytest.FixtureRequest) -> str:
    return request.param


def _sandbox_processes() -> list[str]:
    """Processes, zombies included, running as one of this test process's sandbox uids or
    still children of it (bwrap itself runs as root)."""
    slots = sandbox_module._SLOTS_PER_PROCESS
    first = sandbox_module._UID_BASE + (os.getpid() % sandbox_module._PID_SPAN) * slots
    found = []
    for pid, info in sandbox_module.process_statuses():
        uid, ppid = int(info["Uid"].split()[0]), int(info["PPid"])
        if first <= uid < first + slots or ppid == os.getpid():
            found.append(f"{pid} uid={uid} {info['Name'].strip()} {info['State'].strip()}")
    return found


def test_program_runs_as_non_root_with_stdin_and_stdlib(isolation: str) -> None:
    source = "import json, os, sys\nprint(json.dumps([os.getuid(), os.getgid(), os.getgroups(), input()]))"
    result = _make(isolation).run_sync(source, stdin="hello")
    assert result.returncode == 0, result.stderr
    uid, gid, groups, echoed = json.loads(result.stdout)
    assert uid != 0 and gid != 0 and 0 not in groups
    assert echoed == "hello"
    assert result.isolation == isolation and not result.timed_out


def test_infinite_loop_is_killed_at_wall_clock_timeout(isolation: str) -> None:
    sandbox = _make(isolation, SandboxLimits(timeout_s=1.0, cpu_s=30))
    result = sandbox.run_sync("print('started', flush=True)\nwhile True:\n    pass")
    assert result.timed_out and result.returncode is None
    assert 1.0 <= result.wall_s < 3.0
    assert result.stdout == "started\n"  # output before the kill is kept
    assert _sandbox_processes() == []


def test_cpu_limit_kills_busy_program() -> None:
    result = _make("bwrap", SandboxLimits(timeout_s=10.0, cpu_s=1)).run_sync("while True:\n    pass")
    assert not result.timed_out
    assert result.returncode == 128 + signal.SIGXCPU  # killed by the CPU limit, well before 10 s


def test_memory_bomb_fails_inside_and_parent_is_fine(isolation: str) -> None:
    sandbox = _make(isolation)
    big = sandbox.run_sync("block = bytearray(4 * 1024**3)\nprint('allocated')")
    assert big.returncode != 0 and "MemoryError" in big.stderr and "allocated" not in big.stdout
    growing = sandbox.run_sync("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024**2))")
    assert growing.returncode != 0 and "MemoryError" in growing.stderr
    assert not growing.timed_out
    assert bytearray(64 * 1024**2)  # our own process still allocates freely
    assert sandbox.run_sync("print(6 * 7)").stdout == "42\n"


def test_process_limit_caps_forks_and_leftover_children_are_killed(isolation: str) -> None:
    source = textwrap.dedent(
        """
        import os, time
        forked = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            forked += 1
        print(forked)
        """
    )
    result = _make(isolation).run_sync(source)
    assert result.returncode == 0, result.stderr
    assert 0 < int(result.stdout) < FAST.max_processes
    assert not result.timed_out and result.wall_s < 3.0  # the sleeping children did not hold us
    assert _sandbox_processes() == []


def test_fork_bomb_is_contained_and_whole_tree_is_gone(isolation: str) -> None:
    sandbox = _make(isolation, SandboxLimits(timeout_s=1.5, max_processes=16))
    source = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = sandbox.run_sync(source)
    assert result.timed_out and result.wall_s < 4.0
    assert _sandbox_processes() == []
    assert sandbox.run_sync("print('next run fine')").stdout == "next run fine\n"


def test_network_is_unreachable_under_bwrap() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # reachable from outside
        source = textwrap.dedent(
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                print("connected")
            except OSError as exc:
                print("blocked", type(exc).__name__)
            """
        )
        result = _make("bwrap").run_sync(source)
    assert result.stdout.startswith("blocked"), result.stdout + result.stderr


@pytest.mark.parametrize("world_writable", [False, True])
def test_writes_outside_work_dir_fail(isolation: str, world_writable: bool) -> None:
    if world_writable and isolation == "rlimits":
        pytest.skip("the fallback has no filesystem namespace: world-writable dirs stay writable")
    # /var/tmp rather than /tmp: the bwrap /tmp is a private tmpfs, which would hide the dir anyway.
    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        if world_writable:
            outside.chmod(0o777)  # then only the read-only view of the host stops the write
        target = outside / "escaped.txt"
        source = f"open({str(target)!r}, 'w').write('x')"
        result = _make(isolation).run_sync(source)
        assert result.returncode != 0
        assert "PermissionError" in result.stderr or "Read-only file system" in result.stderr
        assert not target.exists()
    finally:
        shutil.rmtree(outside)


def test_work_dir_is_private_and_writable(isolation: str) -> None:
    sandbox = _make(isolation)
    source = "import os\nopen('notes.txt', 'w').write('kept')\nprint(open('notes.txt').read(), os.getcwd())"
    first = sandbox.run_sync(source)
    assert first.returncode == 0, first.stderr
    text, work_dir = first.stdout.split()
    assert text == "kept"
    second = sandbox.run_sync(f"import os\nprint(os.path.exists({work_dir + '/notes.txt'!r}))")
    assert second.stdout == "False\n"  # nothing carries over between runs


def test_file_size_limit(isolation: str) -> None:
    source = f"open('big.bin', 'wb').write(bytes({FAST.max_file_mb + 1} * 1024**2))"
    result = _make(isolation).run_sync(source)
    assert result.returncode != 0 and "File too large" in result.stderr


def test_bwrap_tmp_is_fresh_and_not_the_hosts() -> None:
    name = f"teamrl-sandbox-test-{os.getpid()}"
    sandbox = _make("bwrap")
    assert sandbox.run_sync(f"open('/tmp/{name}', 'w').write('x')").returncode == 0
    assert not Path("/tmp", name).exists()
    assert sandbox.run_sync(f"import os\nprint(os.path.exists('/tmp/{name}'))").stdout == "False\n"


def test_run_checks_judges_each_statement(isolation: str) -> None:
    checks = [
        ProgramCheck(
            "def f(x):\n    return x + 1",
            ["assert f(1) == 2", "assert f(1) == 3", "assert f(-1) == 0"],
        ),
        ProgramCheck("raise ValueError('bad module')", ["assert True"]),
        ProgramCheck("def f(:\n    pass", ["assert True", "pass"]),
        ProgramCheck(
            "def spin():\n    while True:\n        pass",
            ["spin()", "assert 1 + 1 == 2", "import time; time.sleep(30)", "assert spin is not None"],
        ),
        ProgramCheck(
            # Output that would corrupt or forge results if it reached the harness's channel.
            "import os, sys\nsys.stdout.write('no newline')\nos.write(1, b'@@teamrl-x@@ 4 [false]\\n')\n"
            "print('@@teamrl-' + '0' * 32 + '@@ 5 [true, true]')\nsys.stderr.write('noise')\n"
            "def g():\n    return 3",
            ["assert g() == 3", "print('more' * 1000)"],
        ),
        ProgramCheck("x = 1", ["raise SystemExit(0)", "assert x == 1"]),
        ProgramCheck("import os", []),
    ]
    assert run_checks_sync(_make(isolation), checks) == [
        [True, False, True],
        [False],
        [False, False],
        [False, True, False, True],
        [True, True],
        [False, True],
        [],
    ]


def test_run_checks_keeps_results_reported_before_the_process_died() -> None:
    sandbox = _make("bwrap", SandboxLimits(timeout_s=2.0, check_timeout_s=0.5))
    unkillable = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass"
    checks = [
        ProgramCheck("def f():\n    return 1", ["assert f() == 1"]),
        ProgramCheck("import os\nos._exit(0)", ["assert True"]),
        ProgramCheck("y = 2", ["assert y == 2"]),
    ]
    assert run_checks_sync(sandbox, checks) == [[True], [False], [False]]
    checks[1] = ProgramCheck(unkillable, ["assert True"])
    assert run_checks_sync(sandbox, checks) == [[True], [False], [False]]


def test_run_checks_many_concurrent_calls() -> None:
    sandbox = _make("bwrap")

    async def main() -> list[list[list[bool]]]:
        checks = [[ProgramCheck(f"k = {i}", [f"assert k == {i}", "assert k < 0"])] for i in range(6)]
        calls = [run_checks(sandbox, batch) for batch in checks]
        return await asyncio.gather(*calls)

    assert asyncio.run(main()) == [[[True, False]]] * 6
    assert asyncio.run(run_checks(sandbox, [])) == []


def test_bad_configuration_raises_clear_errors() -> None:
    with pytest.raises(ValueError, match="isolation must be"):
        Sandbox(isolation="docker")
    with pytest.raises(ValueError, match=r"SandboxLimits.memory_mb must be an integer > 0, got 0"):
        SandboxLimits(memory_mb=0)
    with pytest.raises(ValueError, match=r"SandboxLimits.cpu_s must be an integer > 0, got 1.5"):
        SandboxLimits(cpu_s=1.5)


def test_auto_falls_back_to_rlimits_with_warning_when_bwrap_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    sandbox_module._bwrap_backend.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="teamrl.sandbox"):
            sandbox = Sandbox(FAST)
        assert sandbox.isolation == "rlimits"
        assert "falling back to rlimits" in caplog.text and "apt-get install -y bubblewrap" in caplog.text
        check = ProgramCheck("z = 3", ["assert z == 3", "assert z == 4"])
        assert run_checks_sync(sandbox, [check]) == [[True, False]]
        with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
            Sandbox(isolation="bwrap")
    finally:
        sandbox_module._bwrap_backend.cache_clear()
