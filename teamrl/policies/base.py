"""Records and protocol shared by every policy backend."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to complete with a role's adapter (or the frozen base when ``adapter`` is None)."""

    prompt: str
    adapter: str | None
    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 = greedy

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: must be at least 1")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: must be >= 0 (0 means greedy)")


@dataclass
class Generation:
    """A completion with the per-token log-probs it was sampled with.

    ``logprobs`` are under ``log_softmax(logits / temperature)`` (temperature 1 for greedy), the same
    numerics as ``HFPolicy.token_logprobs``, so a PPO ratio starts at exactly 1.
    """

    prompt_ids: list[int]
    completion_ids: list[int]  # up to and including EOS if produced
    logprobs: list[float]
    text: str  # decoded completion without special tokens
    finished: bool  # True if EOS was produced, False if max_new_tokens was hit


class Policy(Protocol):
    """Anything the rollout engine can batch generation requests to."""

    name: str

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]: ...


@contextmanager
def atomic_directory(target: Path, replace: bool = True) -> Iterator[Path]:
    """Yield a sibling temp dir to fill; on success it becomes ``target``, on error it is deleted.

    A killed writer therefore never leaves a half-written ``target`` (at worst a stale hidden temp dir).
    An existing ``target`` is swapped out when ``replace`` (leaving a brief moment where it does not
    exist), or kept and the new contents discarded when not (a concurrent writer won the race).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        if not target.exists():
            tmp.rename(target)
        elif replace:
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        # else: a concurrent writer already produced target; ours is dropped below
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
