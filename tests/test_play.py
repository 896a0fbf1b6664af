"""teamrl play: a person in a role's seat, driven through a real terminal (issue 19)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


class Terminal:
    """A child process on a pseudo-terminal: what a person at a terminal sees and types."""

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env)
        os.close(slave)
        self.seen = ""
        self.pos = 0

    def expect(self, text: str, timeout: float = 60.0) -> None:
        """Wait until ``text`` is shown after what the previous expect matched; consume up to it."""
        end = time.monotonic() + timeout
        while text not in self.seen[self.pos :]:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{text!r} not shown within {timeout} s; the terminal shows:\n{self.seen}"
                )
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                self.seen += chunk.decode(errors="replace")
        found = self.seen.find(text, self.pos)
        assert found >= 0, f"{text!r} not shown; the terminal shows:\n{self.seen}"
        self.pos = found + len(text)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:  # never leave a child behind a failed test
                self.proc.kill()
            os.close(self.master)


def _play(tmp_path: Path, *extra: str) -> Terminal:
    return Terminal(
        [
            sys.executable,
            "-m",
            "teamrl.cli",
            "play",
            "examples/collaborate.yaml",
            "--seat",
            "proposer",
            "--set",
            "workflow.rounds=2",
            "--out",
            str(tmp_path / "play.jsonl"),
            *extra,
        ]
    )


def test_a_person_plays_a_session_at_a_terminal_and_it_is_recorded(tmp_path: Path) -> None:
    term = _play(tmp_path)
    term.expect("your turn: proposer")
    term.expect("candidates:")
    term.expect("an empty line sends it")
    term.type("ANSWER: 1\n\n")
    term.expect("your turn: proposer")  # the second episode of the session
    term.expect("an empty line sends it")
    term.type("2\n\n")
    term.expect("episode(s) recorded")
    assert term.close() == 0
    [line] = (tmp_path / "play.jsonl").read_text().splitlines()
    episode = json.loads(line)
    assert episode["verifier"]["played_by"] == {"proposer": "person"}
    assert [t["message"]["content"] for t in episode["turns"]] == ["ANSWER: 1", "2"]
    assert episode["verifier"]["invalid_proposals"] == 0 and len(episode["verifier"]["accepted"]) == 2
    assert 0.0 <= episode["outcome"] <= 1.0


def test_end_of_input_ends_the_session_cleanly(tmp_path: Path) -> None:
    term = _play(tmp_path, "--episodes", "2")
    term.expect("your turn: proposer")
    term.type("\x04")  # Ctrl-D at the prompt
    term.expect("session ended")
    term.expect("0 episode(s) recorded")
    assert term.close() == 0
    assert "Traceback" not in term.seen


def test_a_seat_that_is_not_a_role_is_refused_plainly(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "teamrl.cli", "play", "examples/collaborate.yaml", "--seat", "coder"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "not a role of this workflow" in out.stderr and "proposer" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_person_plays_beside_the_experts_in_a_team(tmp_path: Path) -> None:
    """In the test-driven team a person takes the Tester's seat; the Planner and Coder are the experts."""
    from teamrl.config import load_config
    from teamrl.play import play

    cfg = load_config(None, ["workflow.name=test_driven", "workflow.order=[planner, tester, coder]"])
    answers = iter(["assert 1 == 1", ""])
    import io

    shown = io.StringIO()
    [episode] = play(cfg, "tester", None, 1, "heldout", tmp_path / "p.jsonl", lambda: next(answers), shown)
    assert "your turn: tester" in shown.getvalue()
    tester = [t for t in episode.turns if t.role == "tester"]
    assert tester and tester[0].message is not None and "assert 1 == 1" in tester[0].message.content
    assert episode.verifier["played_by"] == {"tester": "person"}
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 1
    with pytest.raises(ValueError, match="its roles: planner, tester, coder"):
        play(cfg, "reviewer", None, 1)
