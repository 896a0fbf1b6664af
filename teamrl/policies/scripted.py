"""A rule-based policy behind the engine: answers each request with a function of its prompt.

Used by tests and benchmarks to exercise batching and workflows without a model. Token ids are
the characters' code points, so token counts are real counts of something.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from teamrl.policies.base import Generation, GenerationRequest


class ScriptedPolicy:
    def __init__(
        self,
        respond: Callable[[GenerationRequest], str],
        name: str = "scripted",
        seconds_per_batch: float = 0.0,
    ) -> None:
        self.name = name
        self.respond = respond
        self.seconds_per_batch = seconds_per_batch  # simulated latency of one batched forward
        self.batch_sizes: list[int] = []

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.batch_sizes.append(len(requests))
        if self.seconds_per_batch:
            time.sleep(self.seconds_per_batch)
        out = []
        for req in requests:
            text = self.respond(req)
            ids = [ord(c) for c in text]
            out.append(Generation([ord(c) for c in req.prompt], ids, [0.0] * len(ids), text, True))
        return out
