"""RL algorithms as pure tensor functions: advantages and losses (imports only torch)."""

from teamrl.algorithms.grpo import (
    AGGREGATIONS,
    SCALES,
    GroupIds,
    LossOutput,
    group_relative_advantages,
    grpo_loss,
    kl_k3,
)
from teamrl.algorithms.mgrpo import (
    broadcast_episode_advantages,
    role_relative_advantages,
    team_relative_advantages,
)

__all__ = [
    "AGGREGATIONS",
    "SCALES",
    "GroupIds",
    "LossOutput",
    "broadcast_episode_advantages",
    "group_relative_advantages",
    "grpo_loss",
    "kl_k3",
    "role_relative_advantages",
    "team_relative_advantages",
]
