"""``teamrl play --web``: a person's seat as a page of the report's server (issue 19). The page's state and
answers go through real HTTP; the episodes are recorded like the terminal's and shown in the run's report."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from test_report import make_team_run

from teamrl.config import load_config
from teamrl.play import WebDesk, play
from teamrl.report.serve import ReportServer


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, str]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())["message"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["message"]


def _wait_turn(url: str, after: int = 0, timeout: float = 60) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        turn = json.loads(_get(url + "play/state")[1])["turn"]
        if turn is not None and turn["id"] > after:
            return turn
        time.sleep(0.05)
    raise AssertionError("no turn was published")


def _session(
    tmp_path: Path, paths: list[Path], out: Path
) -> tuple[ReportServer, WebDesk, threading.Thread, list]:
    cfg = load_config("examples/collaborate.yaml", ["workflow.rounds=2"])
    desk = WebDesk("proposer", 1)
    server = ReportServer(paths, tmp_path / "report", port=0, interval=60, desk=desk)
    server.start()
    played: list = []
    thread = threading.Thread(
        target=lambda: played.extend(play(cfg, "proposer", None, 1, "heldout", out, desk=desk))
    )
    thread.start()
    return server, desk, thread, played


def test_a_person_plays_in_the_browser_and_it_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "play.jsonl"
    server, desk, thread, played = _session(tmp_path, [], out)
    url = server.url
    try:
        status, page = _get(url)  # no run: / is the seat's page
        assert status == 200 and b"Your seat" in page and _get(url + "play")[1] == page
        turn = _wait_turn(url)
        assert turn["role"] == "proposer" and "candidates:" in turn["prompt"]
        assert _post(url + "play/answer", {"turn": turn["id"] + 5, "text": "1"})[0] == 409  # not this turn
        assert _post(url + "play/answer", {"turn": turn["id"], "text": "  \n"}) == (
            400,
            "the answer is empty",
        )
        assert _post(url + "play/answer", None, raw=b"{not json")[0] == 400
        assert _post(url + "play/answer", ["a list"])[0] == 400
        assert _post(url + "play/answer", {"turn": turn["id"], "text": "ANSWER: 1"}) == (200, "sent")
        assert _post(url + "play/answer", {"turn": turn["id"], "text": "again"})[0] == 409  # answered once
        second = _wait_turn(url, after=turn["id"])
        assert _post(url + "play/answer", {"turn": second["id"], "text": "2"})[0] == 200
        thread.join(timeout=120)
        assert not thread.is_alive()
        state = json.loads(_get(url + "play/state")[1])
        assert state["over"] and state["turn"] is None and [f["episode"] for f in state["finished"]] == [1]
    finally:
        desk.closed.set()
        server.close()
        thread.join(timeout=30)
    [episode] = played
    assert [t.message.content for t in episode.turns] == ["ANSWER: 1", "2"]
    [line] = out.read_text().splitlines()
    assert json.loads(line)["verifier"]["played_by"] == {"proposer": "person"}


def test_closing_the_page_s_server_ends_the_session_and_keeps_nothing_half_played(tmp_path: Path) -> None:
    out = tmp_path / "play.jsonl"
    server, desk, thread, played = _session(tmp_path, [], out)
    try:
        _wait_turn(server.url)
    finally:
        desk.closed.set()  # what Ctrl-C does
        thread.join(timeout=60)
        server.close()
    assert not thread.is_alive() and played == [] and not out.exists()


def test_the_played_episodes_appear_in_the_run_s_report(tmp_path: Path) -> None:
    run = make_team_run(tmp_path / "run")
    server, desk, thread, played = _session(tmp_path, [run], run / "episodes" / "play.jsonl")
    url = server.url
    try:
        assert b"Your seat" not in _get(url)[1]  # with a run, / is its report and /play the seat
        assert b"Your seat" in _get(url + "play")[1]
        for answer in ("ANSWER: 2", "1"):
            turn = _wait_turn(url, after=0 if answer.startswith("A") else 1)
            assert _post(url + "play/answer", {"turn": turn["id"], "text": answer})[0] == 200
        thread.join(timeout=120)
        assert server.refresh() is True  # the run's episodes changed
        assert b"ANSWER: 2" in _get(url)[1] and b"play" in _get(url)[1]
    finally:
        desk.closed.set()
        server.close()
        thread.join(timeout=30)


def test_cli_play_web(tmp_path: Path) -> None:
    """The command a person runs: it prints the page's address, takes the answer posted there, records the
    episode and keeps the page up until Ctrl-C, which ends it with exit code 0."""
    import re
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "play.jsonl"
    argv = [sys.executable, "-m", "teamrl.cli", "play", "examples/collaborate.yaml", "--seat", "proposer"]
    argv += ["--set", "workflow.rounds=1", "--web", "--port", str(port), "--out", str(out)]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # SIGABRT then prints every thread's stack
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).parent.parent,
        env=env,
        # Ctrl-C as in a terminal: a suite started in the background by a non-interactive shell (`&`, nohup)
        # has SIGINT ignored, which a child inherits, and then the signal below would do nothing
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(http://\S+)play", line)
        assert match, line
        url = match.group(1)
        turn = _wait_turn(url)
        assert _post(url + "play/answer", {"turn": turn["id"], "text": "ANSWER: 1"})[0] == 200
        while "recorded" not in line:
            line = proc.stdout.readline()
            assert line, "the command ended before recording"
        proc.send_signal(signal.SIGINT)
        try:  # read what it still prints while it stops: a full pipe must not hold it up
            rest, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler: where each thread is stuck
            try:
                rest, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                rest, _ = proc.communicate()
            raise AssertionError(
                f"Ctrl-C did not stop it within 60 s; it printed last: {rest[-6000:]}"
            ) from None
        assert proc.returncode == 0, rest[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads(out.read_text().splitlines()[0])["verifier"]["played_by"] == {"proposer": "person"}


def test_a_person_plays_through_the_page_in_headless_chromium(tmp_path: Path) -> None:
    """The page as a person uses it: a real browser shows the prompt, the answer is typed into the text box
    and sent with the button, twice (two rounds); the episode is recorded with the typed answers."""
    import pytest
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from teamrl.report.browser import BrowserMissing, headless_chromium

    try:  # fails (never skips) when Chromium is missing: CI installs it (scripts/setup.sh)
        browser = headless_chromium(tmp_path / "chromium-profile", console_log=True)
    except BrowserMissing as exc:
        pytest.fail(str(exc))
    out = tmp_path / "play.jsonl"
    server, desk, thread, played = _session(tmp_path, [], out)
    try:
        browser.set_page_load_timeout(30)
        browser.get(server.url + "play")
        wait = WebDriverWait(browser, 60, poll_frequency=0.1)
        for answer in ("ANSWER: 1", "2"):
            # a new turn is shown with an empty box (the previous answer stays until then)
            wait.until(
                lambda d: (
                    d.find_element(By.ID, "turn").is_displayed()
                    and d.find_element(By.ID, "answer").get_property("value") == ""
                )
            )
            prompt = browser.find_element(By.ID, "prompt").text
            assert "candidates:" in prompt
            box = browser.find_element(By.ID, "answer")
            box.send_keys(answer)
            browser.find_element(By.ID, "send").click()  # accepted: the next turn, or the episode, follows
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#finished tr")) == 1)
        row = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#finished tr td")]
        assert row[0] == "1" and 0.0 <= float(row[2]) <= 1.0
        errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        thread.join(timeout=120)
        assert not thread.is_alive()
    finally:
        desk.closed.set()
        server.close()
        thread.join(timeout=30)
        browser.quit()
    [episode] = played
    assert [t.message.content for t in episode.turns] == ["ANSWER: 1", "2"]
    [line] = out.read_text().splitlines()
    assert json.loads(line)["verifier"]["played_by"] == {"proposer": "person"}
