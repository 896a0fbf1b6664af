"""A tiny OpenAI-compatible server for tests: POST /v1/chat/completions and /v1/completions.

Runs ``http.server`` in a background thread on 127.0.0.1 (a free port). Replies are a deterministic
function of the prompt; the first ``fail_first`` requests (or all, with ``fail_always``) get HTTP 500.
Every request is recorded, and the server counts how many it was answering at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def default_reply(prompt: str) -> str:
    return f"<plan>echo {len(prompt)}</plan>"


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int


@dataclass
class OpenAIServer:
    reply: Callable[[str], str] = default_reply
    fail_first: int = 0
    fail_always: bool = False
    delay_s: float = 0.0  # per request, so that concurrent requests overlap
    usage: bool = True  # report token counts in `usage`
    requests: list[Recorded] = field(default_factory=list)
    peak_in_flight: int = 0
    _in_flight: int = 0
    _seen: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> OpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                server._handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def prompts(self) -> list[str]:
        """The prompt of every request received, in arrival order."""
        out = []
        for r in self.requests:
            msgs = r.body.get("messages")
            out.append(msgs[-1]["content"] if msgs else r.body.get("prompt", ""))
        return out

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        try:
            body = json.loads(h.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        with self._lock:
            self._seen += 1
            fail = self.fail_always or self._seen <= self.fail_first
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if h.path not in ("/v1/chat/completions", "/v1/completions"):
                status, payload = 404, {"error": {"message": f"no route {h.path}"}}
            elif fail:
                status, payload = 500, {"error": {"message": "scripted failure"}}
            else:
                status, payload = 200, self._completion(h.path, body)
        finally:
            with self._lock:
                self._in_flight -= 1
                self.requests.append(Recorded(h.path, dict(h.headers), body, status))
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _completion(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        chat = path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        text = self.reply(prompt)
        for s in body.get("stop") or []:
            if s in text:
                text = text[: text.index(s)]
        words = text.split()
        finish = "stop"
        if len(words) > body.get("max_tokens", 1 << 30):
            words, finish = words[: body["max_tokens"]], "length"
            text = " ".join(words)
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        out: dict[str, Any] = {
            "object": "chat.completion" if chat else "text_completion",
            "choices": [choice],
        }
        if self.usage:  # one "token" per whitespace-separated word
            out["usage"] = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}
        return out
