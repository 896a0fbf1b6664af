"""``teamrl play``: a person takes one role's seat next to the agents, in the terminal (issue 19).

The person's seat is a scripted role whose script asks the person: it shows the turn's prompt (what that
role's model would read) and reads the answer, several lines ended by an empty line. The other roles are a
trained run's agents (``--run RUN_DIR``: its latest checkpoint) or, without a run, the workflow's scripted
experts. Every finished episode is verified like any other and appended to a JSONL file of episodes (the
same records as a run's ``episodes/*.jsonl``, with ``verifier["played_by"]`` naming the person's role), so
it can be read by ``teamrl report`` or used as demonstrations. End of input (Ctrl-D) or Ctrl-C ends the
session; the episodes finished before it are kept.

In a browser (``teamrl play ... --web``): :class:`WebDesk` stands between the person's seat and the page
that ``teamrl report --serve``'s server shows at ``/play`` (a text box where the role's turn would be,
beside the run's report): the seat waits for the answer the page posts; the page polls the desk's state.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import random
import sys
import threading
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


MAX_ANSWER = 20_000  # characters of one answer from the page


class WebDesk:
    """The person's seat in a browser: :meth:`ask` (the seat's script, on the play thread) publishes the
    turn and waits for :meth:`answer` (the page's POST, on a server thread). :meth:`state` is what the page
    shows: the turn waiting for an answer, the finished episodes, whether the session is over."""

    def __init__(self, seat: str, episodes: int) -> None:
        self.seat, self.episodes = seat, episodes
        self._lock = threading.Lock()
        self._answers: queue.Queue[str] = queue.Queue()
        self._turn: dict[str, Any] | None = None
        self._turns = 0
        self._finished: list[dict[str, Any]] = []
        self._status = "waiting for the agents"
        self.closed = threading.Event()

    def script(self, call: RoleCall) -> str:
        """The seat's script: the person's answer as the role's message of the turn's kind."""
        return render_message(Message(role=self.seat, kind=call.kind, content=self.ask(call)))

    def ask(self, call: RoleCall) -> str:
        with self._lock:
            self._turns += 1
            self._turn = {"id": self._turns, "role": self.seat, "kind": call.kind, "prompt": call.prompt}
        try:
            while True:
                try:
                    return self._answers.get(timeout=0.2)
                except queue.Empty:
                    if self.closed.is_set():
                        raise SessionEnded from None
        finally:
            with self._lock:
                self._turn = None

    def answer(self, turn_id: Any, text: Any) -> tuple[int, str]:
        """(HTTP status, message): 200 when ``text`` answers the turn ``turn_id`` that is waiting."""
        if not isinstance(text, str) or not text.strip():
            return 400, "the answer is empty"
        if len(text) > MAX_ANSWER:
            return 400, f"the answer is longer than {MAX_ANSWER} characters"
        with self._lock:
            if self._turn is None or self._turn["id"] != turn_id:
                return 409, "no turn of yours is waiting for this answer (reload the page)"
            self._turn = None  # answered: a second post of the same turn is refused
        self._answers.put(text.strip("\n"))
        return 200, "sent"

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "seat": self.seat,
                "episodes": self.episodes,
                "turn": dict(self._turn) if self._turn else None,
                "finished": list(self._finished),
                "status": self._status,
                "over": self.closed.is_set(),
            }

    def note(self, status: str, finished: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._status = status
            if finished is not None:
                self._finished.append(finished)


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
    desk: WebDesk | None = None,
) -> list[Episode]:
    """Play ``episodes`` episodes of ``cfg``'s workflow with a person in role ``seat`` (in the terminal, or
    through ``desk``, a browser page); return them (also appended to ``out_path``)."""
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
    played: list[Episode] = []
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
        seats[seat] = Seat(script=desk.script if desk is not None else person_seat(seat, read_line, stream))
        team = Team(seats, engine)
        for i, task in enumerate(tasks):
            print(f"\nepisode {i + 1} of {len(tasks)}: {getattr(task, 'task_id', '')}", file=stream)
            if desk is not None:
                desk.note(f"episode {i + 1} of {len(tasks)}: the agents are playing")
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
            if desk is not None:
                summary = {"episode": i + 1, "task": episode.task_id, "outcome": episode.outcome}
                desk.note(
                    f"episode {i + 1} of {len(tasks)} finished",
                    {**summary, "verifier": _short(episode.verifier)},
                )
        return played
    finally:
        if desk is not None:
            desk.note(f"session over: {len(played)} episode(s) recorded")
            desk.closed.set()
        if trainer is not None:
            trainer.close()


def _short(verifier: dict[str, Any]) -> str:
    keep = {k: v for k, v in verifier.items() if isinstance(v, (bool, int, float, str)) and k != "played_by"}
    return ", ".join(f"{k}={v}" for k, v in list(keep.items())[:6])
