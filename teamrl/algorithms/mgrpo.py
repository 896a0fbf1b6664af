"""M-GRPO: the team form of GRPO, with team-level and per-role group-relative advantages."""

from __future__ import annotations

import torch

from teamrl.algorithms.grpo import GroupIds, group_relative_advantages


def team_relative_advantages(
    team_rewards: torch.Tensor, group_ids: GroupIds, scale: str = "std", eps: float = 1e-6
) -> torch.Tensor:
    """M-GRPO team advantages: group-relative over the G teams (episodes) of one task.

    team_rewards: [E] one shared reward per episode; group_ids: one id per episode (e.g. its task id).
    Returns [E]; give every role's turns their episode's value with ``broadcast_episode_advantages``.
    """
    return group_relative_advantages(team_rewards, group_ids, scale=scale, eps=eps)


def role_relative_advantages(
    role_rewards: dict[str, torch.Tensor], group_ids: GroupIds, scale: str = "std", eps: float = 1e-6
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
        role: group_relative_advantages(rewards, group_ids, scale=scale, eps=eps)
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
