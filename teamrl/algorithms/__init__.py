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
    align_subagent_calls,
    broadcast_episode_advantages,
    hierarchical_advantages,
    role_relative_advantages,
    subagent_relative_advantages,
    team_relative_advantages,
)
from teamrl.algorithms.ppo_critic import (
    explained_variance,
    gae,
    normalize_advantages,
    per_role_gae,
    value_loss,
)

__all__ = [
    "AGGREGATIONS",
    "SCALES",
    "GroupIds",
    "LossOutput",
    "align_subagent_calls",
    "broadcast_episode_advantages",
    "explained_variance",
    "gae",
    "group_relative_advantages",
    "grpo_loss",
    "hierarchical_advantages",
    "kl_k3",
    "normalize_advantages",
    "per_role_gae",
    "role_relative_advantages",
    "subagent_relative_advantages",
    "team_relative_advantages",
    "value_loss",
]
