"""PPO with a centralised critic for LLM teams: turn-level GAE per role and the clipped value loss.

A role's trajectory in an episode is the sequence of its own turns, k = 1..K. A centralised critic
(one that reads the whole team transcript) gives V_k, the role's expected return from the state
just before its k-th turn; r_k is the reward that arrives with that turn (the role's episode reward
at its last turn, or per-turn credits). Generalised advantage estimation over those K turns::

    delta_k = r_k + gamma * V_{k+1} - V_k          (V_{K+1} = 0: the role has no later turn)
    A_k     = delta_k + gamma * lambda * A_{k+1}   (A_{K+1} = 0)
    G_k     = A_k + V_k                            (the critic's regression target)

Pure tensor functions; the critic model and the team transcript live in ``teamrl.trainer.critic``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from teamrl.algorithms.grpo import LossOutput, group_relative_advantages


def _check_discount(gamma: float, lam: float) -> None:
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma={gamma} must be in [0, 1]")
    if not 0 <= lam <= 1:
        raise ValueError(f"lam={lam} must be in [0, 1]")


def gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over one role's K turns of one episode (see the module). Returns (advantages [K], returns [K]).

    rewards, values: [K], in turn order; the sequence ends the episode for this role (no bootstrap).
    """
    _check_discount(gamma, lam)
    if rewards.dim() != 1 or rewards.shape != values.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and values {tuple(values.shape)} must both be [K], one per turn"
        )
    dtype = torch.promote_types(torch.promote_types(rewards.dtype, values.dtype), torch.float32)
    rewards, values = rewards.detach().to(dtype), values.detach().to(dtype)
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros((), dtype=dtype, device=rewards.device)
    running = torch.zeros((), dtype=dtype, device=rewards.device)
    for k in range(rewards.numel() - 1, -1, -1):
        delta = rewards[k] + gamma * next_value - values[k]
        running = delta + gamma * lam * running
        advantages[k] = running
        next_value = values[k]
    return advantages, advantages + values


def per_role_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    sequence_ids: Sequence[Hashable],
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gae` over many turns at once: turns sharing a sequence id (e.g. ``(episode, role)``) form one
    sequence, in the order they appear. Returns (advantages [N], returns [N]) in the input order.

    rewards, values: [N]; sequence_ids: one id per turn.
    """
    if rewards.dim() != 1 or rewards.shape != values.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and values {tuple(values.shape)} must both be [N], one per turn"
        )
    if len(sequence_ids) != rewards.numel():
        raise ValueError(
            f"{len(sequence_ids)} sequence ids for {rewards.numel()} turns; pass one id per turn"
        )
    _check_discount(gamma, lam)
    members: dict[Hashable, list[int]] = {}
    for i, sid in enumerate(sequence_ids):
        members.setdefault(sid, []).append(i)
    dtype = torch.promote_types(torch.promote_types(rewards.dtype, values.dtype), torch.float32)
    advantages = torch.zeros(rewards.numel(), dtype=dtype, device=rewards.device)
    returns = torch.zeros_like(advantages)
    for idx in members.values():
        index = torch.tensor(idx, dtype=torch.long, device=rewards.device)
        adv, ret = gae(rewards[index], values[index], gamma, lam)
        advantages[index], returns[index] = adv, ret
    return advantages, returns


def normalize_advantages(advantages: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``(A - mean) / (std + eps)`` over the batch (unbiased std), as one group of
    :func:`~teamrl.algorithms.grpo.group_relative_advantages`: a batch whose values are all equal (a single
    element among them) gets exactly 0."""
    if advantages.dim() != 1:
        raise ValueError(f"advantages has shape {tuple(advantages.shape)}; expected [N]")
    if advantages.numel() == 0:
        return advantages
    one_group = torch.zeros(advantages.numel(), dtype=torch.long, device=advantages.device)
    return group_relative_advantages(advantages, one_group, eps=eps)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip: float | None = 0.2,
    num_items: float | None = None,
) -> LossOutput:
    """PPO's clipped value loss, ``0.5 * max((V - G)^2, (V_old + clip(V - V_old, -c, c) - G)^2)``, averaged
    over the batch (``clip=None``: the plain ``0.5 * (V - G)^2``).

    values: [B] (differentiable); old_values: [B], the critic's values when the returns were computed;
    returns: [B] targets G. ``num_items`` replaces B as the divisor, so that micro-batch losses that all
    get the full batch's size sum to the full batch's loss. Stats: ``value_loss``, ``value_clip_fraction``
    (items whose gradient the clip removed), ``value_mean``, ``return_mean`` (plain means over this batch)
    and ``num_items``.
    """
    if values.dim() != 1 or values.shape != old_values.shape or values.shape != returns.shape:
        raise ValueError(
            f"values {tuple(values.shape)}, old_values {tuple(old_values.shape)} and returns "
            f"{tuple(returns.shape)} must all be [B]"
        )
    if clip is not None and clip <= 0:
        raise ValueError(f"clip={clip} must be > 0 (or None for no clipping)")
    if num_items is not None and num_items <= 0:
        raise ValueError(f"num_items={num_items} must be > 0 (the full batch's size)")
    dtype = torch.promote_types(values.dtype, torch.float32)
    v = values.to(dtype)
    old = old_values.detach().to(dtype)
    target = returns.detach().to(dtype)
    unclipped = (v - target).square()
    if clip is None:
        per_item = 0.5 * unclipped
        clipped_out = torch.zeros_like(unclipped, dtype=torch.bool)
    else:
        v_clipped = old + (v - old).clamp(-clip, clip)
        clipped = (v_clipped - target).square()
        per_item = 0.5 * torch.maximum(unclipped, clipped)
        clipped_out = clipped > unclipped
    denom = num_items if num_items is not None else max(v.numel(), 1)
    loss = per_item.sum() / denom
    n = max(v.numel(), 1)
    with torch.no_grad():
        stats = {
            "value_loss": loss.item(),
            "value_clip_fraction": clipped_out.sum().item() / n,
            "value_mean": v.sum().item() / n,
            "return_mean": target.sum().item() / n,
            "num_items": float(v.numel()),
        }
    return LossOutput(loss=loss, stats=stats)


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """``1 - Var(target - predicted) / Var(target)``: 1 for a perfect critic, 0 for a constant one
    (nan when the targets do not vary)."""
    var = target.var(unbiased=False)
    if target.numel() < 2 or var.item() == 0:
        return float("nan")
    return float(1 - (target - predicted).var(unbiased=False) / var)
