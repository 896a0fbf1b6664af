"""Records and protocol shared by every policy backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to complete with a role's adapter (or the frozen base when ``adapter`` is None)."""

    prompt: str
    adapter: str | None
    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 = greedy
    # With a seed, the sample depends on the seed alone, not on which other requests share its batch or
    # on the process's random state: an evaluation repeats exactly, and two policies sampled with the same
    # seeds are coupled (see ``HFPolicy._generate_batch``). None: the process's global generator.
    seed: int | None = None

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


@runtime_checkable
class TrainablePolicy(Protocol):
    """A policy that can sit in a trainable seat: it scores completions under a role's adapter (the
    trainer's log-probs) and exposes that adapter's parameters. ``HFPolicy`` is one; an inference-only
    endpoint (``OpenAICompatPolicy``) is not. (Methods only, so ``issubclass`` works on it too.)"""

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]: ...

    def token_logprobs(
        self,
        adapter: str | None,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float = 1.0,
    ) -> Any: ...

    def adapter_parameters(self, name: str) -> list[Any]: ...

    def set_trainable(self, names: Any) -> None: ...


def ref_adapter(role: str) -> str:
    """The name of ``role``'s frozen snapshot after SFT (the KL reference, the counterfactual baseline)."""
    return f"ref_{role}"
