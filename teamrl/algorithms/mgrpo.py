"""M-GRPO: the team form of GRPO, with team-level and per-role group-relative advantages, and the
hierarchical form of Hong et al. (main agent + sub-agents called a variable number of times)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from teamrl.algorithms.grpo import GroupIds, group_relative_advantages


def team_relative_advantages(
    team_rewards: torch.Tensor,
    group_ids: GroupIds,
    scale: str = "std",
    eps: float = 1e-6,
    baseline_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """M-GRPO team advantages: group-relative over the G teams (episodes) of one task.

    team_rewards: [E] one shared reward per episode; group_ids: one id per episode (e.g. its task id).
    Returns [E]; give every role's turns their episode's value with ``broadcast_episode_advantages``.
    """
    return group_relative_advantages(
        team_rewards, group_ids, scale=scale, eps=eps, baseline_mask=baseline_mask
    )


def role_relative_advantages(
    role_rewards: dict[str, torch.Tensor],
    group_ids: GroupIds,
    scale: str = "std",
    eps: float = 1e-6,
    baseline_mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Per-role GRPO: for each role separately, advantages of its reward across the episodes of a task.

    role_rewards: role name -> [E] rewards, all over the same E episodes in the same order as group_ids.
    Returns role name -> [E] advantages.
    """
    lengths = {role: tuple(r.shape) for role, r in role_rewards.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"role_rewards have differing shapes {lengths}; give every role one reward per episode"
        )
    return {
        role: group_relative_advantages(rewards, group_ids, scale=scale, eps=eps, baseline_mask=baseline_mask)
        for role, rewards in role_rewards.items()
    }


def broadcast_episode_advantages(episode_adv: torch.Tensor, turn_episode_index: torch.Tensor) -> torch.Tensor:
    """Give each turn its episode's advantage: ``episode_adv[turn_episode_index]``.

    episode_adv: [E]; turn_episode_index: [M] integer episode index of each turn. Returns [M].
    """
    if episode_adv.dim() != 1:
        raise ValueError(f"episode_adv has shape {tuple(episode_adv.shape)}; expected [E]")
    if turn_episode_index.dim() != 1:
        raise ValueError(f"turn_episode_index has shape {tuple(turn_episode_index.shape)}; expected [M]")
    if turn_episode_index.dtype.is_floating_point or turn_episode_index.dtype == torch.bool:
        raise ValueError(
            f"turn_episode_index has dtype {turn_episode_index.dtype}; pass an integer tensor (torch.long)"
        )
    num_episodes = episode_adv.numel()
    bad = (turn_episode_index < 0) | (turn_episode_index >= num_episodes)
    if bad.any():
        pos = int(torch.nonzero(bad)[0].item())
        raise ValueError(
            f"turn_episode_index[{pos}]={int(turn_episode_index[pos].item())} is out of range for "
            f"{num_episodes} episodes; indices must be in [0, {num_episodes - 1}]"
        )
    return episode_adv[turn_episode_index.to(device=episode_adv.device, dtype=torch.long)]


def align_subagent_calls(
    num_calls: Sequence[int], max_calls: int, generator: torch.Generator | None = None
) -> list[list[int]]:
    """M-GRPO trajectory alignment: pick exactly ``max_calls`` (D_max) sub-agent trajectories per rollout.

    Hong et al., "Multi-Agent Deep Research: Training Multi-Agent Systems with M-GRPO" (2025): the
    main agent of rollout k calls sub-agents d_k times, a number that varies between rollouts; to get
    fixed-size batches each rollout is aligned to D_max sub-agent trajectories. A rollout with
    d_k < D_max is padded by duplicating D_max - d_k of its own trajectories chosen at random (with
    replacement); one with d_k > D_max is trimmed to D_max chosen at random without replacement (kept
    in their original order). A rollout without a sub-agent call has nothing to duplicate and gets [].

    num_calls: d_k per rollout. Returns, per rollout, D_max indices into its 0..d_k-1 calls.
    """
    if max_calls < 1:
        raise ValueError(f"max_calls={max_calls} must be >= 1 (D_max, the sub-agent calls per rollout)")
    out: list[list[int]] = []
    for k, d in enumerate(num_calls):
        if d < 0:
            raise ValueError(f"num_calls[{k}]={d} is negative; give each rollout's number of sub-agent calls")
        if d == 0:
            out.append([])
        elif d <= max_calls:
            extra = torch.randint(d, (max_calls - d,), generator=generator).tolist()
            out.append(list(range(d)) + extra)
        else:
            keep = torch.randperm(d, generator=generator)[:max_calls]
            out.append(sorted(keep.tolist()))
    return out


def subagent_relative_advantages(
    aligned_rewards: Sequence[torch.Tensor], group_ids: GroupIds, scale: str = "std", eps: float = 1e-6
) -> list[torch.Tensor]:
    """M-GRPO sub-agent advantages: group-relative over all aligned sub-agent trajectories of a group.

    aligned_rewards: per rollout, the rewards of its D_max aligned sub-agent trajectories (a 1-D
    tensor; empty for a rollout without calls); group_ids: one id per rollout (e.g. its task id). For
    the group of a query with K rollouts, the K x D_max rewards R_S are normalised together,
    ``(R_S - mean) / (std + eps)`` (unbiased std; ``scale="none"``: centred only); a duplicated
    trajectory counts once per copy. Returns per rollout its [D_max] advantages.
    """
    if isinstance(group_ids, torch.Tensor):
        group_ids = group_ids.tolist()
    if len(group_ids) != len(aligned_rewards):
        raise ValueError(
            f"{len(group_ids)} group ids for {len(aligned_rewards)} rollouts; pass one id per rollout"
        )
    for k, r in enumerate(aligned_rewards):
        if r.dim() != 1:
            raise ValueError(f"aligned_rewards[{k}] has shape {tuple(r.shape)}; expected a 1-D tensor")
    flat_ids = [g for g, r in zip(group_ids, aligned_rewards, strict=True) for _ in range(r.numel())]
    if not flat_ids:
        return [r.float() for r in aligned_rewards]
    flat = group_relative_advantages(torch.cat(list(aligned_rewards)), flat_ids, scale=scale, eps=eps)
    return list(torch.split(flat, [r.numel() for r in aligned_rewards]))


def hierarchical_advantages(
    main_rewards: torch.Tensor,
    subagent_rewards: Sequence[torch.Tensor],
    group_ids: GroupIds,
    max_calls: int,
    scale: str = "std",
    eps: float = 1e-6,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, list[list[int]], list[torch.Tensor]]:
    """M-GRPO for a main agent and its sub-agents: separate group-relative advantages for each.

    Main agent: ``A_M = (R_M - mean) / (std + eps)`` over the K rollouts of a query (GRPO).
    Sub-agents: each rollout's d_k sub-agent rewards are aligned to D_max = ``max_calls``
    (:func:`align_subagent_calls`: duplicate to pad, random subset to trim) and normalised over the
    group's K x D_max aligned rewards (:func:`subagent_relative_advantages`). In the paper a
    sub-agent's reward R_S mixes its own format and quality scores with the main agent's outcome;
    that mix is the caller's, given in ``subagent_rewards``.

    main_rewards: [K_total]; subagent_rewards: per rollout a [d_k] tensor; group_ids: one per rollout.
    Returns (main advantages [K_total], per rollout the D_max chosen call indices, per rollout the
    [D_max] advantages of those calls, in the same order).
    """
    if main_rewards.dim() != 1 or main_rewards.numel() != len(subagent_rewards):
        raise ValueError(
            f"main_rewards has shape {tuple(main_rewards.shape)} for {len(subagent_rewards)} rollouts; "
            "give one main-agent reward per rollout"
        )
    main = group_relative_advantages(main_rewards, group_ids, scale=scale, eps=eps)
    chosen = align_subagent_calls([r.numel() for r in subagent_rewards], max_calls, generator)
    aligned = [
        r[torch.tensor(idx, dtype=torch.long)] for r, idx in zip(subagent_rewards, chosen, strict=True)
    ]
    return main, chosen, subagent_relative_advantages(aligned, group_ids, scale=scale, eps=eps)
