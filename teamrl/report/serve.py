"""``teamrl report --serve``: serve the report on localhost and rebuild it while runs are writing.

A watcher thread looks at the runs' files every ``interval`` seconds; when one changed it rebuilds
the report and bumps a version number. The page (built with ``live_version``) polls ``/version``
and reloads itself when the number moves, keeping its scroll position and open transcripts.

With a ``desk`` (``teamrl play --web``: a person's seat, :class:`teamrl.play.WebDesk`) it also serves the
seat's page at ``/play``, its state at ``/play/state`` and takes answers at ``POST /play/answer``; without
runs to report on, ``/`` is that page.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol, cast

from teamrl.report.page import write_report
from teamrl.report.play_page import PAGE as PLAY_PAGE

log = logging.getLogger("teamrl.report")
_FIGURE = re.compile(r"^/figures/([A-Za-z0-9_.-]+\.png)$")


def fingerprint(paths: list[Path]) -> tuple:
    """(name, size, mtime) of every file a report reads, over all runs."""
    out = []
    for run in paths:
        files = [run / n for n in ("metrics.jsonl", "summary.json", "eval.json", "config.yaml")]
        episodes = run / "episodes"
        if episodes.is_dir():
            files += sorted(episodes.glob("*.jsonl"))
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            out.append((str(f), st.st_size, st.st_mtime_ns))
    return tuple(out)


class Desk(Protocol):
    """A person's seat behind the page at ``/play`` (see :class:`teamrl.play.WebDesk`)."""

    def state(self) -> dict[str, Any]: ...

    def answer(self, turn_id: Any, text: Any) -> tuple[int, str]: ...


MAX_POST = 100_000  # bytes of one posted answer


class ReportServer:
    def __init__(
        self,
        paths: list[str | Path],
        out_dir: str | Path,
        port: int = 8765,
        host: str = "127.0.0.1",
        interval: float = 2.0,
        max_episodes: int = 6,
        poll_ms: int = 3000,
        desk: Desk | None = None,
    ) -> None:
        self.desk = desk
        self.paths = [Path(p) for p in paths]
        self.out = Path(out_dir)
        self.interval = interval
        self.max_episodes = max_episodes
        self.poll_ms = poll_ms
        self.version = 0
        self._seen: tuple = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_error = ""
        self.refresh(force=True)  # raises ReportError when there is nothing to report on
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = cast(tuple[str, int], self.httpd.server_address[:2])  # an IP server: host is a str
        return f"http://{host}:{port}/"

    def refresh(self, force: bool = False) -> bool:
        """Rebuild the report if any run's files changed since the last build; True if rebuilt."""
        if not self.paths and self.desk is not None:
            return False  # a seat's page alone: no report to build
        with self._lock:
            current = fingerprint(self.paths)
            if not force and current == self._seen:
                return False
            version = self.version + 1
            try:
                write_report(
                    self.paths, self.out, self.max_episodes, live_version=version, poll_ms=self.poll_ms
                )
            except Exception as exc:
                if force:
                    raise
                message = f"report rebuild failed: {type(exc).__name__}: {exc}"
                if message != self._last_error:  # warn once per distinct failure, keep the last page
                    log.warning("%s", message)
                    self._last_error = message
                self._seen = current
                return False
            self._last_error = ""
            self._seen = current
            self.version = version
            return True

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                desk = server.desk
                if desk is not None and (path == "/play" or (path == "/" and not server.paths)):
                    self._send(200, PLAY_PAGE.encode(), "text/html; charset=utf-8")
                elif desk is not None and path == "/play/state":
                    self._send(200, json.dumps(desk.state()).encode(), "application/json")
                elif path in ("/", "/index.html"):
                    self._file(server.out / "index.html", "text/html; charset=utf-8")
                elif path == "/version":
                    self._send(200, json.dumps({"version": server.version}).encode(), "application/json")
                elif m := _FIGURE.match(path):
                    self._file(server.out / "figures" / m.group(1), "image/png")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                if server.desk is None or self.path.split("?", 1)[0] != "/play/answer":
                    self._send(404, b"not found\n", "text/plain")
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                except ValueError:
                    length = -1
                if not 0 < length <= MAX_POST:
                    self._reply(400, f"a JSON body of at most {MAX_POST} bytes is expected")
                    return
                try:
                    body = json.loads(self.rfile.read(length))
                except (ValueError, UnicodeDecodeError):
                    self._reply(400, "the body is not JSON")
                    return
                if not isinstance(body, dict):
                    self._reply(400, 'expected {"turn": ID, "text": ANSWER}')
                    return
                self._reply(*server.desk.answer(body.get("turn"), body.get("text")))

            def _reply(self, code: int, message: str) -> None:
                self._send(code, json.dumps({"message": message}).encode(), "application/json")

            def _file(self, path: Path, ctype: str) -> None:
                try:
                    data = path.read_bytes()
                except OSError:
                    self._send(404, b"not found\n", "text/plain")
                    return
                self._send(200, data, ctype)

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet by default
                log.debug("%s " + format, self.address_string(), *args)

        return Handler

    def start(self) -> None:
        """Serve and watch in background threads (returns at once)."""
        for target in (self.httpd.serve_forever, self._watch):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for t in self._threads:
            t.join(timeout=5)
