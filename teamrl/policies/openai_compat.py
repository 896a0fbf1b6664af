"""Any OpenAI-compatible endpoint as a policy: inference only, for frozen roles and judges.

The engine hands :meth:`OpenAICompatPolicy.generate` a batch of requests (from a worker thread); each
becomes one HTTP request to ``{base_url}/chat/completions`` (or ``/completions``), at most
``max_concurrency`` in flight at once. Network errors, HTTP 5xx and 429 are retried with exponential
backoff; a request that still fails comes back as a completion whose text is an error note, which the
protocol records as the turn's format error (and the reward as a format penalty) instead of stopping
the run.

The class deliberately has no training interface (``token_logprobs``, ``adapter_parameters``,
``set_trainable``, ``sft``, ...): asking for one raises :class:`InferenceOnlyError`, a ``TypeError``
that names the roles this policy serves. An endpoint returns text, not token ids, so a generation's
``prompt_ids`` / ``completion_ids`` are placeholders (``-1``) whose only meaning is their count (the
endpoint's ``usage`` when it reports one, an estimate otherwise), and ``logprobs`` is empty.

Only the standard library is used (``urllib`` in a thread pool); nothing touches the network before
the first ``generate``.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from teamrl.policies.base import Generation, GenerationRequest

log = logging.getLogger("teamrl")

ERROR_PREFIX = "endpoint error"  # starts the text of a failed turn
PLACEHOLDER_ID = -1  # an endpoint returns text, not token ids: ids are placeholders, their count is real

# What a trainer would call on a trainable policy (see HFPolicy); none of it exists here.
TRAINING_INTERFACE = frozenset(
    {
        "token_logprobs",
        "adapter_parameters",
        "set_trainable",
        "sft",
        "add_adapter",
        "copy_adapter",
        "save_adapter",
        "load_adapter",
        "backward",
    }
)


class InferenceOnlyError(TypeError, AttributeError):
    """A training method was asked of an inference-only policy.

    A ``TypeError`` (the policy is the wrong type for a trainable seat) that is also an
    ``AttributeError``, so ``hasattr`` and runtime protocol checks see that the method is absent.
    """


class EndpointError(Exception):
    """One failed attempt; ``retry`` says whether another attempt may succeed."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass
class EndpointStats:
    """Counters of one policy, for logs and tests (updated from several threads under a lock)."""

    batches: int = 0
    requests: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0


def estimate_tokens(text: str) -> int:
    """A rough token count (about 4 characters a token) for an endpoint that reports no ``usage``."""
    return math.ceil(len(text) / 4)


class OpenAICompatPolicy:
    """Generate with an OpenAI-compatible chat-completions or completions endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        name: str = "openai",
        api_key: str | None = None,
        endpoint: Literal["chat", "completions"] = "chat",
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        retries: int = 2,
        stop: Sequence[str] | None = None,
        backoff_s: float = 0.5,
        roles: Sequence[str] = (),
    ) -> None:
        if endpoint not in ("chat", "completions"):
            raise ValueError(f"endpoint={endpoint!r}: use 'chat' or 'completions'")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency={max_concurrency}: must be at least 1")
        if retries < 0:
            raise ValueError(f"retries={retries}: must be >= 0")
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.model_name = model  # the endpoint's model name (not a module: nothing here is trainable)
        self.endpoint = endpoint
        self.url = f"{self.base_url}/{'chat/completions' if endpoint == 'chat' else 'completions'}"
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.stop = list(stop) if stop else None
        self.backoff_s = backoff_s
        self.roles = tuple(roles)  # the roles this policy serves, named in errors
        self.stats = EndpointStats()
        self._api_key = api_key  # kept out of repr, logs and error texts
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # started on the first generate

    def __repr__(self) -> str:
        return f"OpenAICompatPolicy(name={self.name!r}, url={self.url!r}, model={self.model_name!r})"

    def __getattr__(self, attr: str) -> Any:
        # Only reached for attributes that do not exist; name the training ones clearly.
        if attr in TRAINING_INTERFACE:
            roles: tuple[str, ...] = self.__dict__.get("roles") or ()
            who = f"role {roles[0]!r}" if len(roles) == 1 else f"roles {list(roles)}" if roles else "a role"
            raise InferenceOnlyError(
                f"{who} cannot be trained: policy {self.__dict__.get('name')!r} is an OpenAI-compatible "
                f"endpoint (inference only) and has no {attr}(); set trainable: false and adapter: false "
                "for its roles, or serve them with an embedded or hf policy"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    # ----- generation -------------------------------------------------------------------------------

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Complete every request (concurrently, in order of ``requests``); never raises for HTTP."""
        for i, req in enumerate(requests):
            if req.adapter is not None:
                raise ValueError(
                    f"request {i} asks for adapter {req.adapter!r}, but policy {self.name!r} is an "
                    "OpenAI-compatible endpoint without adapters: give its roles adapter: false"
                )
        with self._lock:
            self.stats.batches += 1
            self.stats.requests += len(requests)
            if self._pool is None:
                prefix = f"openai-{self.name}"
                self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=prefix)
            pool = self._pool
        return list(pool.map(self._complete, requests))

    def close(self) -> None:
        """Stop the worker threads (a later ``generate`` starts new ones)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def payload(self, req: GenerationRequest) -> dict[str, Any]:
        """The JSON body of one request."""
        body: dict[str, Any] = {"model": self.model_name}
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": req.prompt}]
        else:
            body["prompt"] = req.prompt
        body["max_tokens"] = req.max_new_tokens
        body["temperature"] = req.temperature  # 0 is greedy, as in GenerationRequest
        if req.seed is not None:
            body["seed"] = req.seed % 2**31  # best-effort reproducible sampling; some servers want an int32
        if self.stop:
            body["stop"] = self.stop
        return body

    def _complete(self, req: GenerationRequest) -> Generation:
        body = json.dumps(self.payload(req)).encode()
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._parse(req, self._post(body))
            except EndpointError as exc:
                if not exc.retry or attempt > self.retries:
                    error = str(exc)
                    break
            with self._lock:
                self.stats.retries += 1
            time.sleep(self.backoff_s * 2 ** (attempt - 1))
        tries = f"{attempt} attempt{'s' if attempt > 1 else ''}"
        with self._lock:
            self.stats.failures += 1
        log.warning("policy %s: request to %s failed after %s: %s", self.name, self.url, tries, error)
        return Generation(
            prompt_ids=self._placeholders(req.prompt, None),
            completion_ids=[],
            logprobs=[],
            text=f"{ERROR_PREFIX} after {tries}: {error}",
            finished=False,
        )

    def _post(self, body: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with self._lock:
            self.stats.attempts += 1
            self.stats.in_flight += 1
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace").strip()
            retry = exc.code >= 500 or exc.code == 429
            raise EndpointError(f"HTTP {exc.code}: {detail or exc.reason}", retry) from None
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short
            reason = getattr(exc, "reason", exc)
            raise EndpointError(f"network error: {reason}", True) from None
        finally:
            with self._lock:
                self.stats.in_flight -= 1
        try:
            data = json.loads(raw)
        except ValueError:
            raise EndpointError(f"response is not JSON: {raw[:80]!r}", False) from None
        if not isinstance(data, dict):
            raise EndpointError(f"response is not a JSON object: {raw[:80]!r}", False)
        return data

    def _parse(self, req: GenerationRequest, data: dict[str, Any]) -> Generation:
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"] if self.endpoint == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"response has no choices[0] completion: {str(data)[:80]}", False) from None
        text = text or ""  # a chat message's content may be null
        raw_usage = data.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        n_completion = usage.get("completion_tokens")
        if not isinstance(n_completion, int) or n_completion < 0:
            n_completion = estimate_tokens(text)
        return Generation(
            prompt_ids=self._placeholders(req.prompt, usage.get("prompt_tokens")),
            completion_ids=[PLACEHOLDER_ID] * n_completion,
            logprobs=[],
            text=text,
            finished=choice.get("finish_reason") != "length",
        )

    @staticmethod
    def _placeholders(prompt: str, reported: Any) -> list[int]:
        n = reported if isinstance(reported, int) and reported >= 0 else estimate_tokens(prompt)
        return [PLACEHOLDER_ID] * n
