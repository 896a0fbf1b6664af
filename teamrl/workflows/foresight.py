"""A role's teammate model on the LLM side (issue 21): before handing its turn over, a role predicts what
comes back (the execution report of its code, a teammate's verdict) from its own hidden state, and a
workflow may let it try again when it expects failure (``test_driven``'s ``imagine``).

* :func:`turn_features`: the policy's final hidden state (after its last norm) at the last token of each
  turn's prompt + completion, under the role's adapter: what the role "thought" when it finished writing;
* :class:`HiddenStateProbe`: a logistic-regression head on those features (standardised, L2), fitted on
  turns whose outcome is known (:meth:`HiddenStateProbe.fit`), saved as JSON; it changes nothing in the
  policy (a small head beside it, trained on what then happened);
* :func:`foresight`: the ``Team.foresight`` entry of a role: an async function turn -> probability, which
  computes the features in a worker thread (the policy's adapter switch is locked, so it never runs under
  a generation in progress).

Measured in ``benchmarks/foresight.py``: its accuracy against the base rate on held-out episodes, and what
``imagine`` does to held-out success and to tokens per solved task.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from teamrl.atomic import atomic_write_text
from teamrl.protocol import Turn


class HiddenStates(Protocol):
    def last_hidden_states(self, adapter: str | None, sequences: list[list[int]]) -> torch.Tensor: ...


@torch.no_grad()
def turn_features(
    policy: HiddenStates, adapter: str | None, turns: Sequence[Turn], batch: int = 16
) -> torch.Tensor:
    """``[len(turns), hidden]`` float32 (see the module); a turn without tokens (scripted) is refused."""
    rows = []
    for turn in turns:
        seq = [*turn.prompt_ids, *turn.completion_ids]
        if not seq:
            raise ValueError(f"the {turn.role} turn has no tokens (a scripted role): no hidden state to read")
        rows.append(seq)
    out = [
        policy.last_hidden_states(adapter, rows[i : i + batch]).float() for i in range(0, len(rows), batch)
    ]
    return torch.cat(out) if out else torch.zeros(0, 0)


class HiddenStateProbe:
    """``p = sigmoid(w . (x - mean) / std + b)``."""

    def __init__(self, weight: torch.Tensor, bias: float, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.weight, self.bias, self.mean, self.std = weight.float(), float(bias), mean.float(), std.float()

    @classmethod
    def fit(
        cls, features: torch.Tensor, labels: Sequence[bool], l2: float = 1e-2, steps: int = 300
    ) -> HiddenStateProbe:
        """Logistic regression by L-BFGS on standardised features; needs both outcomes among ``labels``."""
        y = torch.tensor([float(v) for v in labels])
        if len(y) != len(features) or len(y) < 2 or y.min() == y.max():
            raise ValueError(
                f"a probe needs as many labels as feature rows, with both outcomes (got {len(y)})"
            )
        mean, std = features.mean(0), features.std(0).clamp(min=1e-6)
        x = (features - mean) / std
        w = torch.zeros(x.shape[1], requires_grad=True)
        b = torch.zeros((), requires_grad=True)
        optimizer = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y) + l2 * w.square().sum()
            loss.backward()
            return loss

        with torch.enable_grad():
            optimizer.step(closure)
        return cls(w.detach(), float(b.detach()), mean, std)

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """``[N]`` probabilities."""
        return torch.sigmoid(((features.float() - self.mean) / self.std) @ self.weight + self.bias)

    def save(self, path: str | Path) -> None:
        data = {
            "weight": self.weight.tolist(),
            "bias": self.bias,
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
        }
        atomic_write_text(Path(path), json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> HiddenStateProbe:
        data: dict[str, Any] = json.loads(Path(path).read_text())
        return cls(
            torch.tensor(data["weight"]), data["bias"], torch.tensor(data["mean"]), torch.tensor(data["std"])
        )


def foresight(
    policy: HiddenStates, adapter: str | None, probe: HiddenStateProbe
) -> Callable[[Turn], Awaitable[float]]:
    """The ``Team.foresight`` entry of a role served by ``policy`` under ``adapter``."""

    async def predict(turn: Turn) -> float:
        features = await asyncio.to_thread(turn_features, policy, adapter, [turn])
        return float(probe.predict(features)[0])

    return predict


async def imagine(
    turn: Turn,
    predict: Callable[[Turn], Awaitable[float]],
    another: Callable[[int], Awaitable[Turn]],
    tries: int,
    threshold: float,
) -> tuple[int, list[Turn], list[float]]:
    """While no version so far is predicted to pass with at least ``threshold``, write ``another(k)`` (the
    k-th sample of the same prompt), ``tries`` versions in all: (index of the version predicted best, every
    version, every prediction)."""
    versions, chances = [turn], [await predict(turn)]
    while max(chances) < threshold and len(versions) < tries:
        versions.append(await another(len(versions)))
        chances.append(await predict(versions[-1]))
    return max(range(len(versions)), key=chances.__getitem__), versions, chances
