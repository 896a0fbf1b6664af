"""``teamrl play``: a person takes one role's seat next to the agents, in the terminal (issue 19).

The person's seat is a scripted role whose script asks the person: it shows the turn's prompt (what that
role's model would read) and reads the answer, several lines ended by an empty line. The other roles are a
trained run's agents (``--run RUN_DIR``: its latest checkpoint) or, without a run, the workflow's scripted
experts. Every finished episode is verified like any other and appended to a JSONL file of episodes (the
same records as a run's ``episodes/*.jsonl``, with ``verifier["played_by"]`` naming the person's role), so
it can be read by ``teamrl report`` or used as demonstrations. End of input (Ctrl-D) or Ctrl-C ends the
session; the episodes finished before it are kept.
"""

from __future__ import annotations

import asyncio
import functools
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from teamrl.atomic import JsonlLog
from teamrl.engine.team import RoleCall, Seat, Team
from teamrl.protocol import Episode, Message, render_message

ReadLine = Callable[[], str]


class SessionEnded(Exception):
    """The person ended the session (end of input or Ctrl-C)."""


def person_seat(
    role: str, read_line: ReadLine | None = None, out: TextIO | None = None
) -> Callable[[RoleCall], str]:
    """A script that shows ``role``'s prompt on ``out`` and returns the person's answer, read with
    ``read_line`` until an empty line, as ``role``'s message of the turn's kind."""
    stream = out or sys.stdout
    read = read_line or (lambda: input())

    def script(call: RoleCall) -> str:
        try:
            from rich.console import Console
            from rich.panel import Panel

            Console(file=stream, force_terminal=stream.isatty(), width=100).print(
                Panel(call.prompt.rstrip(), title=f"your turn: {role} ({call.kind})", expand=False)
            )
        except ImportError:  # rich is a dependency; a bare fallback all the same
            print(f"--- your turn: {role} ({call.kind}) ---\n{call.prompt.rstrip()}", file=stream)
        print("(type your answer; an empty line sends it)", file=stream, flush=True)
        lines: list[str] = []
        while True:
            try:
                line = read()
            except (EOFError, KeyboardInterrupt):
                raise SessionEnded from None
            if not line.strip():
                if lines:
                    break
                continue
            lines.append(line)
        return render_message(Message(role=role, kind=call.kind, content="\n".join(lines)))

    return script


def play(
    cfg: Any,
    seat: str,
    run_dir: Path | None = None,
    episodes: int = 1,
    split: str = "heldout",
    out_path: Path | None = None,
    read_line: ReadLine | None = None,
    out: TextIO | None = None,
    seed: int = 0,
) -> list[Episode]:
    """Play ``episodes`` episodes of ``cfg``'s workflow with a person in role ``seat``; return them (also
    appended to ``out_path``)."""
    from teamrl.trainer.build import build_sandbox, build_suite, build_workflow

    roles = cfg.role_order()
    if seat not in roles:
        raise ValueError(f"--seat {seat!r} is not a role of this workflow; its roles: {', '.join(roles)}")
    stream = out or sys.stdout
    suite = build_suite(cfg)
    tasks = suite.sample(split, episodes, random.Random(f"play-{seed}"))
    log = JsonlLog(out_path) if out_path is not None else None
    trainer = None
    sandbox = None
    try:
        if run_dir is not None:
            from teamrl.trainer.trainer import Trainer

            trainer = Trainer(cfg, run_dir, read_only=True)
            workflow, engine = trainer.workflow, trainer.engine
            seats = dict(trainer.team.seats)
        else:
            cfg.run.backend = "local"
            sandbox = build_sandbox(cfg)
            workflow = build_workflow(cfg, sandbox)
            engine = None
            experts = workflow.experts(random.Random(seed))
            seats = {r: Seat(script=experts[r]) for r in roles if r in experts}
        seats[seat] = Seat(script=person_seat(seat, read_line, stream))
        team = Team(seats, engine)
        played: list[Episode] = []
        for i, task in enumerate(tasks):
            print(f"\nepisode {i + 1} of {len(tasks)}: {getattr(task, 'task_id', '')}", file=stream)
            try:
                if engine is not None:
                    [episode] = engine.run([functools.partial(workflow.play, team, task)])
                else:
                    episode = asyncio.run(workflow.play(team, task))
            except SessionEnded:
                print("\nsession ended; finished episodes are saved", file=stream)
                break
            episode.verifier["played_by"] = {seat: "person"}
            played.append(episode)
            if log is not None:
                log.append(episode.model_dump(mode="json"))
            print(
                f"outcome {episode.outcome:.3f}  verifier: {_short(episode.verifier)}",
                file=stream,
                flush=True,
            )
        return played
    finally:
        if trainer is not None:
            trainer.close()


def _short(verifier: dict[str, Any]) -> str:
    keep = {k: v for k, v in verifier.items() if isinstance(v, (bool, int, float, str)) and k != "played_by"}
    return ", ".join(f"{k}={v}" for k, v in list(keep.items())[:6])
