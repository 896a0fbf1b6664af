"""Runs ``teamrl train`` attempts for tests/test_crash_safety.py, each in a child forked from this
process so that the imports are paid once, each killed (or not) at a fault point (teamrl.trainer.faults).

Usage: ``python crash_driver.py PLAN.json``. PLAN: ``{"out": path, "attempts": [{"argv": [...], "fault":
"NAME:COUNT[:SIGNAL]" or null, "log": path, "snapshot": path or null, "run_dir": path}]}``; an attempt
with a snapshot copies its run directory there afterwards. Writes the attempts' exit codes (minus the
signal number for a killed child, as os.waitstatus_to_exitcode) to ``out`` as a JSON list.

Two changes to the runs, the same in every attempt: rewards differ within each group (the tiny model
solves nothing, so every advantage would be zero and no update would move an adapter), and no HTML
report is written at the end (seconds, and not what the tests check).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import traceback

import torch

torch.set_num_threads(1)
# Ctrl-C as in a terminal: a process started in the background by a non-interactive shell (CI run with
# `&`, nohup) inherits SIGINT ignored, and the attempts that send themselves SIGINT would go on training
signal.signal(signal.SIGINT, signal.default_int_handler)

import teamrl.cli as cli  # noqa: E402 - after the thread count, as a run would set it
import teamrl.trainer.trainer as trainer_module  # noqa: E402
from teamrl.trainer.faults import ENV  # noqa: E402

_score = trainer_module.score_episodes


def _distinct_rewards(cfg, workflow, episodes, counterfactual=None):  # noqa: ANN001, ANN202
    metrics = _score(cfg, workflow, episodes, counterfactual)
    for ep in episodes:
        ep.rewards = {role: value + 0.25 * ep.group for role, value in ep.rewards.items()}
    return metrics


trainer_module.score_episodes = _distinct_rewards
cli._write_run_report = lambda run_dir: None


def attempt(argv: list[str], fault: str | None, log: str) -> int:
    pid = os.fork()
    if pid == 0:  # the child: one `teamrl train`, its output in `log`
        code = 99
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.environ.pop(ENV, None)
            if fault:
                os.environ[ENV] = fault
            code = cli.main(argv)
        except BaseException:  # noqa: BLE001 - reported in the log, as the exit code 99
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    plan = json.loads(open(sys.argv[1]).read())
    codes = []
    for a in plan["attempts"]:
        codes.append(attempt(a["argv"], a.get("fault"), a["log"]))
        if a.get("snapshot"):
            shutil.copytree(a["run_dir"], a["snapshot"], symlinks=True)
    with open(plan["out"], "w") as fh:
        json.dump(codes, fh)


if __name__ == "__main__":
    main()
