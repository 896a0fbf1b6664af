"""GRPO: group-relative advantages and the clipped surrogate loss with an optional k3 KL penalty."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

GroupIds = Sequence[Hashable] | torch.Tensor
"""One group id per element: a sequence of hashables (e.g. task ids) or a 1-D tensor."""

SCALES = ("std", "none")
AGGREGATIONS = ("token_mean", "sequence_mean")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; use one of {list(allowed)}")


def _group_index(group_ids: GroupIds, n: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Map group ids to dense indices 0..G-1; returns (index [n], G)."""
    if isinstance(group_ids, torch.Tensor):
        if group_ids.dim() != 1 or group_ids.numel() != n:
            raise ValueError(
                f"group_ids has shape {tuple(group_ids.shape)}; expected a 1-D tensor of length {n}, "
                "one id per reward"
            )
        unique, index = torch.unique(group_ids, return_inverse=True)
        return index.to(device), unique.numel()
    if isinstance(group_ids, str):
        raise ValueError(f"group_ids={group_ids!r} is a string; pass a list of ids, one per reward")
    if len(group_ids) != n:
        raise ValueError(
            f"group_ids has {len(group_ids)} ids but there are {n} rewards; pass one id per reward"
        )
    dense: dict[Hashable, int] = {}
    index_list = [dense.setdefault(g, len(dense)) for g in group_ids]
    return torch.tensor(index_list, dtype=torch.long, device=device), len(dense)


def group_relative_advantages(
    rewards: torch.Tensor,
    group_ids: GroupIds,
    scale: str = "std",
    eps: float = 1e-6,
    baseline_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """GRPO advantages: ``(r_i - group mean) / (group std + eps)`` with ``scale="std"``,
    or ``r_i - group mean`` with ``scale="none"``.

    ``baseline_mask`` ([N] bool): the members whose mean reward is their group's baseline instead of the
    whole group's mean, e.g. the group's greedy episode (ReMax: Li et al., ICML 2024): a sample is then
    credited by what it did better or worse than greedy decoding, and the greedy members get 0. A group
    with no masked member keeps its mean. The std (``scale="std"``) is the group's, around its mean.

    The std is the unbiased one (as TRL's ``torch.std``). A group whose rewards are all equal (a group of
    size 1 among them) gets exactly 0, so the learner's ``|A| <= 1e-8`` filter drops it: the statistics
    are computed in float64 and such groups are found by comparing their min and max, since rounding in
    the mean would otherwise leave every member the same small nonzero advantage.
    rewards: [N] float; group_ids: one id per element (e.g. the task id of each episode). Returns [N], in
    the rewards' dtype (at least float32).
    """
    _check_choice("scale", scale, SCALES)
    if rewards.dim() != 1:
        raise ValueError(f"rewards has shape {tuple(rewards.shape)}; expected a 1-D tensor [N]")
    if eps < 0:
        raise ValueError(f"eps={eps} must be >= 0")
    out_dtype = torch.promote_types(rewards.dtype, torch.float32)
    rewards = rewards.detach().to(torch.float64)
    if not torch.isfinite(rewards).all():
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten().tolist()
        raise ValueError(f"rewards at positions {bad} are not finite; a NaN/inf would poison its whole group")
    index, num_groups = _group_index(group_ids, rewards.numel(), rewards.device)
    if baseline_mask is not None and (
        baseline_mask.dtype != torch.bool or tuple(baseline_mask.shape) != tuple(rewards.shape)
    ):
        raise ValueError(
            f"baseline_mask has shape {tuple(baseline_mask.shape)} and dtype {baseline_mask.dtype}; "
            f"expected a bool tensor of shape {tuple(rewards.shape)}, one flag per reward"
        )

    counts = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).index_add_(
        0, index, torch.ones_like(rewards)
    )
    sums = torch.zeros_like(counts).index_add_(0, index, rewards)
    lowest = torch.zeros_like(counts).scatter_reduce_(0, index, rewards, "amin", include_self=False)
    highest = torch.zeros_like(counts).scatter_reduce_(0, index, rewards, "amax", include_self=False)
    equal = (lowest == highest)[index]
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    centered = torch.where(equal, zero, rewards - (sums / counts)[index])
    shifted = centered
    if baseline_mask is not None:
        mask = baseline_mask.to(rewards.device).to(rewards.dtype)
        n_base = torch.zeros_like(counts).index_add_(0, index, mask)
        base = torch.zeros_like(counts).index_add_(0, index, rewards * mask) / n_base.clamp(min=1)
        own = (n_base > 0)[index]
        shifted = torch.where(equal, zero, torch.where(own, rewards - base[index], centered))
    if scale == "none":
        return shifted.to(out_dtype)
    sq = torch.zeros_like(counts).index_add_(0, index, centered.square())
    std = (sq / (counts - 1).clamp(min=1)).sqrt()[index]
    # where() rather than + eps alone: with eps=0 an equal group would be 0 / 0.
    return torch.where(equal, zero, shifted / (std + eps)).to(out_dtype)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): ``exp(ref - logp) - (ref - logp) - 1`` (always >= 0)."""
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"ref_logp has shape {tuple(ref_logp.shape)} but logp has {tuple(logp.shape)}; they must match"
        )
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


@dataclass
class LossOutput:
    """A loss to backpropagate plus detached float statistics for logging."""

    loss: torch.Tensor
    stats: dict[str, float]


def _check_token_tensor(name: str, t: torch.Tensor, shape: torch.Size) -> None:
    if t.shape != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)} but logp has {tuple(shape)}; they must match")


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    kl_coef: float = 0.0,
    aggregation: str = "token_mean",
    num_tokens: float | None = None,
    is_weight: torch.Tensor | None = None,
    policy_mask: torch.Tensor | None = None,
) -> LossOutput:
    """Clipped GRPO surrogate with an optional k3 KL penalty toward a reference policy.

    Per token: ``ratio = exp(logp - old_logp)``,
    ``obj = min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)``,
    ``loss = -obj + kl_coef * k3(logp, ref_logp)``. ``clip_high=None`` means ``clip_high = clip_low``.
    ``is_weight`` [B, T] (off-policy samples): each token's ``-obj`` is multiplied by it (decoupled PPO with
    truncated importance sampling: ``old_logp`` is then the proximal policy's, the weights
    ``min(pi_prox / pi_behaviour, cap)``, computed by the caller); the KL term is not weighted.
    ``policy_mask`` [B, T] bool: the tokens whose policy term counts (the others keep their KL term only,
    and still count in the divisor), as in training on the high-entropy minority of tokens (Wang et al.
    2025; TRL's ``top_entropy_quantile``).

    Shapes: logp, old_logp, ref_logp, mask [B, T] (mask bool or 0/1); advantages [B].
    aggregation: ``"token_mean"`` sums over all masked tokens and divides by their count (DAPO);
    ``"sequence_mean"`` averages each sequence over its tokens, then over the non-empty sequences
    (original GRPO). num_tokens (token_mean only) replaces the batch's own token count as divisor, so that
    summing micro-batch losses that all get the total count equals the loss of the full batch.

    Gradients flow only through ``logp``. Stats are detached floats: ``policy_loss`` (the policy part of
    ``loss``, same aggregation and divisor), and, as plain means over this batch's masked tokens, ``kl``
    (0 without ref_logp), ``clip_fraction`` (tokens whose gradient the clip removed; also split into
    ``clip_fraction_low``/``clip_fraction_high``), ``ratio_mean``, ``entropy_proxy`` (mean -logp),
    ``approx_kl`` (mean ``(ratio - 1) - log ratio``: how far the policy moved from ``old_logp``, as PPO
    implementations measure it for early stopping) and ``approx_kl_max`` (its largest token's value);
    ``num_tokens`` is this batch's masked token count; with ``policy_mask``, ``policy_token_fraction`` is the
    share of them whose policy term counted.
    """
    _check_choice("aggregation", aggregation, AGGREGATIONS)
    if logp.dim() != 2:
        raise ValueError(f"logp has shape {tuple(logp.shape)}; expected [B, T]")
    shape = logp.shape
    _check_token_tensor("old_logp", old_logp, shape)
    _check_token_tensor("mask", mask, shape)
    if ref_logp is not None:
        _check_token_tensor("ref_logp", ref_logp, shape)
    if policy_mask is not None:
        _check_token_tensor("policy_mask", policy_mask, shape)
    if is_weight is not None:
        _check_token_tensor("is_weight", is_weight, shape)
        if bool((is_weight < 0).any()):
            raise ValueError("is_weight must be >= 0 (importance weights)")
    if advantages.shape != shape[:1]:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}; expected [B] = [{shape[0]}], one per sequence"
        )
    clip_high = clip_low if clip_high is None else clip_high
    if not 0 <= clip_low < 1:
        raise ValueError(
            f"clip_low={clip_low} must be in [0, 1) so that the lower bound 1 - clip_low stays > 0"
        )
    if clip_high < 0:
        raise ValueError(f"clip_high={clip_high} must be >= 0 (or None to reuse clip_low)")
    if kl_coef < 0:
        raise ValueError(f"kl_coef={kl_coef} must be >= 0")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logp; pass the reference log-probs or set kl_coef=0")
    if num_tokens is not None:
        if aggregation != "token_mean":
            raise ValueError(
                f"num_tokens={num_tokens} only applies to aggregation='token_mean', not {aggregation!r}"
            )
        if num_tokens <= 0:
            raise ValueError(
                f"num_tokens={num_tokens} must be > 0 (the total masked tokens of the full batch)"
            )
    if mask.dtype != torch.bool:
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError(
                "mask must be bool or contain only 0/1; got other values (weights are not supported)"
            )
        mask = mask != 0

    # Low precision makes exp(logp - old_logp) noisy; compute in at least float32.
    dtype = torch.promote_types(logp.dtype, torch.float32)
    # Zero padded positions before any exp: padding may hold -inf/garbage, and where() alone would still
    # leak NaN gradients through exp of the unselected branch.
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    logp = torch.where(mask, logp.to(dtype), zero)
    old_logp = torch.where(mask, old_logp.detach().to(dtype), zero)
    adv = advantages.detach().to(dtype).unsqueeze(-1)

    ratio = torch.exp(logp - old_logp)
    clipped_ratio = ratio.clamp(1 - clip_low, 1 + clip_high)
    obj = torch.minimum(ratio * adv, clipped_ratio * adv)
    if is_weight is not None:
        obj = obj * torch.where(mask, is_weight.detach().to(dtype), zero)
    counted = mask if policy_mask is None else mask & (policy_mask != 0)
    policy_tok = torch.where(counted, -obj, zero)
    if ref_logp is not None:
        ref_logp = torch.where(mask, ref_logp.detach().to(dtype), zero)
        kl_tok = torch.where(mask, kl_k3(logp, ref_logp), zero)
    else:
        kl_tok = torch.zeros_like(policy_tok)

    def aggregate(per_token: torch.Tensor) -> torch.Tensor:
        if aggregation == "token_mean":
            denom = num_tokens if num_tokens is not None else mask.sum().clamp(min=1)
            return per_token.sum() / denom
        lengths = mask.sum(dim=-1)
        per_seq = per_token.sum(dim=-1) / lengths.clamp(min=1)
        # Empty rows (e.g. padding sequences) contribute 0 and do not dilute the mean.
        return per_seq.sum() / (lengths > 0).sum().clamp(min=1)

    policy_loss = aggregate(policy_tok)
    loss = (policy_loss + kl_coef * aggregate(kl_tok)) if kl_coef > 0 else policy_loss

    with torch.no_grad():
        n_tok = int(mask.sum().item())
        denom = max(n_tok, 1)
        moved = torch.where(mask, (ratio - 1) - (logp - old_logp), zero)
        clipped_low = mask & (ratio < 1 - clip_low) & (adv < 0)
        clipped_high = mask & (ratio > 1 + clip_high) & (adv > 0)
        stats = {
            "policy_loss": policy_loss.item(),
            "kl": kl_tok.sum().item() / denom,
            "clip_fraction": (clipped_low | clipped_high).sum().item() / denom,
            "clip_fraction_low": clipped_low.sum().item() / denom,
            "clip_fraction_high": clipped_high.sum().item() / denom,
            "ratio_mean": torch.where(mask, ratio, zero).sum().item() / denom,
            "entropy_proxy": -logp.sum().item() / denom,
            "approx_kl": moved.sum().item() / denom,
            "approx_kl_max": moved.max().item() if n_tok else 0.0,
            "num_tokens": float(n_tok),
        }
        if policy_mask is not None:
            stats["policy_token_fraction"] = counted.sum().item() / denom
    return LossOutput(loss=loss, stats=stats)
