"""The trusted runner (teamrl/tasks/sandbox/trusted.py): the demonstrations' experts' code forked from warm
interpreters gives what the sandbox gives (output, exit codes, timeouts, rlimits), run by run and for the
whole demonstrations; runs at once do not mix; a closed runner says so."""

from __future__ import annotations

import asyncio

import pytest

from teamrl.config import load_config
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.tasks.sandbox.calls import clear_cache, judge_sync, parse_asserts
from teamrl.tasks.sandbox.trusted import TrustedRunner
from teamrl.trainer.build import demonstrations

# the wall-clock timeout well above the CPU limit, so the busy loop meets RLIMIT_CPU first even when the
# machine is shared (1.5 s flaked with four busy processes on 2 cores: the loop had 1 CPU-second in 1.5 s)
LIMITS = SandboxLimits(timeout_s=4, cpu_s=1, memory_mb=256)

PROGRAMS = [
    ("import sys\nprint('read', sys.stdin.read()[:5])", "stdin-data"),
    ("raise ValueError('broken')", ""),
    ("import sys\nsys.exit(3)", ""),
    ("import sys\nsys.exit('bye')", ""),
    ("while True:\n    pass", ""),  # RLIMIT_CPU: SIGXCPU after 1 CPU-second
    ("import time\ntime.sleep(30)", ""),  # the wall-clock timeout
    ("import os\nos.kill(os.getpid(), 9)", ""),
    ("print('a' * 300000)", ""),
    ("x = bytearray(1024 ** 3)", ""),  # RLIMIT_AS
    ("def f(:\n    pass", ""),  # does not compile
    ("import sys\nsys.stdout.write('x' * 200000)\nsys.stdout.close()", ""),
]


@pytest.fixture(scope="module")
def runners():
    trusted = TrustedRunner(LIMITS, workers=2)
    yield trusted, Sandbox(LIMITS)
    trusted.close()


def _seen(result):  # noqa: ANN001, ANN202
    return (result.returncode, result.timed_out, result.stdout, result.stderr.strip().splitlines()[-1:])


@pytest.mark.parametrize(("source", "stdin"), PROGRAMS)
def test_a_trusted_run_ends_as_the_sandboxed_run_does(runners, source, stdin):  # noqa: ANN001
    trusted, sandbox = runners
    got, want = trusted.run_blocking(source, stdin), sandbox.run_sync(source, stdin)
    assert _seen(got) == _seen(want)
    assert got.isolation == "trusted"


def test_judging_through_it_gives_the_sandboxs_judgement(runners):  # noqa: ANN001
    trusted, sandbox = runners
    tests, _ = parse_asserts(["assert f(1) == 2", "assert f(2) == 5", "assert f(0) == 0"], "f")
    code = "def f(x):\n    if x == 0:\n        raise KeyError(x)\n    return 2 * x  # trusted-runner test"
    assert judge_sync(trusted, code, "f", tests) == judge_sync(sandbox, code + " ", "f", tests)


def test_runs_at_once_do_not_mix(runners):  # noqa: ANN001
    trusted, _ = runners

    async def main() -> list[str]:
        results = await asyncio.gather(
            *(trusted.run(f"import sys\nprint({i} * int(sys.stdin.read()))", str(i)) for i in range(24))
        )
        return [r.stdout for r in results]

    assert asyncio.run(main()) == [f"{i * i}\n" for i in range(24)]
    assert len(trusted._all) <= 2  # at most one warm interpreter per worker


def test_a_closed_runner_refuses_to_run():
    runner = TrustedRunner(LIMITS, workers=1)
    assert runner.run_blocking("print(1)").stdout == "1\n"
    zygote = runner._all[0]
    runner.close()
    assert zygote.process.poll() is not None  # the warm interpreter is gone
    with pytest.raises(RuntimeError, match="closed"):
        runner.run_blocking("print(1)")


def test_the_demonstrations_are_the_same_with_the_experts_code_trusted_or_sandboxed():
    sets = ["workflow.name=test_driven", "workflow.order=[planner, tester, coder]"]
    trusted = load_config(None, sets)
    sandboxed = load_config(None, [*sets, "sandbox.trust_demonstrations=false"])
    assert trusted.sandbox.trust_demonstrations and not sandboxed.sandbox.trust_demonstrations
    clear_cache()  # each way runs every program itself: judgements are cached across runners
    pairs = demonstrations(trusted, 40, seed=3)
    assert sum("FAIL" in prompt for prompt, _ in pairs["coder"])  # real reports of failing versions
    clear_cache()
    assert pairs == demonstrations(sandboxed, 40, seed=3)


def test_the_overhead_benchmark_times_the_demonstrations_both_ways():
    from bench_scripts import load_script

    result = load_script("sandbox_overhead").demonstrations_both_ways(30)
    assert result["same_pairs"] is True and result["episodes"] == 30
    assert result["speedup"] == result["sandboxed_s"] / result["trusted_s"] > 0
