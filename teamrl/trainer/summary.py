"""What a set of episodes scored: the metrics logged for every rollout and evaluation."""

from __future__ import annotations

from typing import Any

from teamrl.protocol import Episode
from teamrl.workflows.base import Workflow

__all__ = ["summarize"]


def summarize(
    episodes: list[Episode], prefix: str, workflow: Workflow[Any] | None = None
) -> dict[str, float]:
    """Team success, outcome, per-role reward / process / format-error means and the workflow's own
    figures (``Workflow.metrics``)."""
    n = max(len(episodes), 1)
    out = {
        f"{prefix}solved": sum(bool(e.verifier.get("solved")) for e in episodes) / n,
        f"{prefix}outcome": sum(e.outcome for e in episodes) / n,
        f"{prefix}tokens_per_episode": sum(e.num_generated_tokens for e in episodes) / n,
    }
    roles = dict.fromkeys(r for e in episodes for r in e.rewards)
    for role in roles:
        eps = [e for e in episodes if role in e.rewards]
        out[f"{prefix}reward/{role}"] = sum(e.rewards[role] for e in eps) / len(eps)
        out[f"{prefix}process/{role}"] = sum(e.process.get(role, 0.0) for e in eps) / len(eps)
        turns = [t for e in eps for t in e.turns_of(role)]
        out[f"{prefix}format_error/{role}"] = sum(t.error is not None for t in turns) / max(len(turns), 1)
    if workflow is not None:
        out.update(workflow.metrics(episodes, prefix))
    return out
