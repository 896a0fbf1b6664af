"""The ``algorithm:`` section: GRPO, M-GRPO or PPO with a centralised critic, and their update's knobs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from teamrl.protocol.settings import Strict

CRITIC_ADAPTER = "value_critic"  # the centralised critic's LoRA adapter on its policy (no role may take it)


class CriticConfig(Strict):
    """algorithm ppo_critic: the centralised critic, a LoRA adapter of its own plus a linear value head
    (one output per role) on the last hidden state of a policy's base model."""

    policy: str = Field(
        "default",
        description="the entry of `policies` whose base model carries the critic; one that no role uses "
        "makes the critic a separate model",
    )
    lr: float = Field(1e-3, gt=0, description="learning rate of the critic's adapter and value head")
    value_clip: float | None = Field(
        0.2, gt=0, description="clip of the value loss around the values at rollout time (null: unclipped)"
    )


class AlgorithmConfig(Strict):
    name: Literal["grpo", "mgrpo", "ppo_critic"] = Field(
        "grpo",
        description="grpo: per-role advantages; mgrpo: team advantages; ppo_critic: turn-level GAE per role "
        "from a centralised critic that reads the whole team transcript",
    )
    group_size: int = Field(8, ge=2, description="G episodes per task")
    greedy_episodes: int = Field(
        0,
        ge=0,
        description="of each task's G training episodes, this many decode the trained roles' turns at "
        "temperature 0 (the group's greedy anchor; the frozen roles' turns are as in the others): the "
        "greedy path joins its group's comparison, pushed down where it does worse than the samples and "
        "kept where it does better, so that RL moves the greedy policy too. Learned on-policy from the "
        "learner's own log-probs (importance weight 1)",
    )
    baseline: Literal["mean", "greedy"] = Field(
        "mean",
        description="grpo, mgrpo: what a sample's reward is compared with in its task's group. mean: the "
        "group's mean (GRPO); greedy: the reward of the group's greedy episodes (greedy_episodes >= 1; "
        "ReMax, Li et al., ICML 2024), so a sample is pushed up where it beats greedy decoding and down "
        "where it loses to it, and the greedy episodes themselves carry no policy gradient. scale: std "
        "still divides by the group's std",
    )
    positive_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="grpo, mgrpo: positive advantages (samples that beat their group) are multiplied by this",
    )
    negative_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="grpo, mgrpo: negative advantages (samples that lost to their group) are multiplied by "
        "this. Both 1: plain GRPO; positive_weight < 1 leans on pushing down failures (negative-sample "
        "reinforcement, W-REINFORCE: Zhu et al. 2025), negative_weight < 1 on reinforcing the winners "
        "(sharper, less diverse); 0 drops that side's policy gradient",
    )
    tasks_per_iteration: int = Field(8, ge=1)
    lr: float = Field(5e-4, gt=0)
    clip_low: float = Field(0.2, gt=0, lt=1)
    clip_high: float = Field(0.28, gt=0)
    kl_coef: float = Field(0.01, ge=0)
    anchor_unlearned: bool = Field(
        False,
        description="turns with no advantage (a group whose rewards are all equal, or turns not learned, as "
        "test_driven's revisions with revision_credit: none) still enter the update, with the KL term to "
        "the role's SFT snapshot only (kl_coef > 0): they anchor what the role does on them while its "
        "other turns learn, instead of drifting with the shared adapter. Their tokens add KL, not weight: "
        "the policy loss is still averaged over the learned turns' tokens",
    )
    is_cap: float = Field(
        2.0,
        ge=1,
        description="truncation of the importance weights pi_prox / pi_behaviour per token, where the "
        "policy that sampled the episodes is not the one updated (run.async_rollouts > 0, or generation by "
        "vLLM): PPO's ratio starts from the learner's log-probs under the current adapter (pi_prox) and "
        "each token's loss is weighted by min(pi_prox / pi_behaviour, is_cap)",
    )
    top_entropy_quantile: float = Field(
        1.0,
        gt=0,
        le=1,
        description="the fraction of each micro-batch's learned tokens, those whose next-token distribution "
        "has the highest entropy under the policy being updated (forking tokens), whose policy gradient "
        "counts; the rest keep their KL term only. 1: every token (plain GRPO); 0.2: the high-entropy "
        "minority (Wang et al. 2025, 'Beyond the 80/20 rule'; TRL's top_entropy_quantile)",
    )
    target_kl: float | None = Field(
        None,
        gt=0,
        description="early stopping of a role's update (as Stable-Baselines3's PPO): where an optimizer "
        "step's approx_kl (mean (ratio - 1) - log ratio over its tokens, the policy against the one that "
        "sampled the turns) exceeds 1.5 x target_kl, that step and the rest of the role's update on this "
        "batch are skipped (train/<role>/stopped_at: the fraction of its steps taken). None: never",
    )
    lr_warmup_steps: int = Field(
        0,
        ge=0,
        description="each role's learning rate rises linearly over its first N optimizer steps (lr x k / N "
        "at its k-th), so Adam's first steps, which move every adapter weight by about lr whatever the "
        "gradient's size, do not throw a few tokens' log-probs far past PPO's clip. 0: the full rate at once",
    )
    ppo_epochs: int = Field(2, ge=1, description="passes over each batch of episodes")
    minibatches: int = Field(4, ge=1, description="optimizer steps per pass (the turns split evenly)")
    micro_batch: int = Field(64, ge=1)
    micro_batch_tokens: int = Field(
        0,
        ge=0,
        description="0: micro-batches of micro_batch turns in the minibatch's shuffled order; N > 0: the "
        "minibatch's turns sorted by length and cut into micro-batches of at most micro_batch turns and N "
        "padded positions (rows x longest row), so short turns are not padded to the longest; the "
        "gradient is the same sum, computed on fewer positions",
    )
    max_grad_norm: float = Field(1.0, gt=0)
    temperature: float = Field(0.7, gt=0, description="sampling temperature of rollouts and evaluations")
    scale: Literal["std", "none"] = Field(
        "std",
        description="std: advantages centred and divided by their std (grpo, mgrpo: within each task's "
        "group; ppo_critic: over each role's turns of the batch); none: grpo, mgrpo centred only, "
        "ppo_critic raw GAE",
    )
    share_frozen_turns: bool = Field(
        True,
        description="in training rollouts, sample each frozen role's turn once per group and share it, so "
        "the trained role's advantages compare its own samples under a common context",
    )
    tree: list[int] = Field(
        default_factory=list,
        description="tree-shaped groups (Tree-GRPO: Ji et al., ICLR 2026): branching factors of the trained "
        "roles' turns in a training rollout, in the order they are taken. [4]: a task's sampled episodes "
        "share 4 samples of the first trained turn (each continued by about (G - greedy_episodes) / 4 "
        "episodes); [4, 2]: each of those shares 2 samples of the next, and so on; deeper turns are every "
        "episode's own. A shared turn is generated once (its tokens count once) and learned in every "
        "episode that continues it, with that episode's advantage. Below a trained turn the k-th episode of "
        "every branch shares its frozen teammates' samples: the continuations of one shared turn differ, "
        "and the branches are compared under the same teammates where a teammate's prompt does not depend "
        "on the trained turn. [] (the default): every sampled episode's trained turns are its own",
    )
    gamma: float = Field(1.0, ge=0, le=1, description="ppo_critic: discount per turn of the role")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="ppo_critic: GAE's lambda over the role's turns")
    critic: CriticConfig = Field(default_factory=CriticConfig)

    @model_validator(mode="after")
    def _greedy_fits(self) -> AlgorithmConfig:
        if self.greedy_episodes >= self.group_size:
            raise ValueError(
                f"greedy_episodes ({self.greedy_episodes}) must be below group_size ({self.group_size}): "
                "a group needs sampled episodes beside its greedy anchor"
            )
        if self.baseline == "greedy" and (self.greedy_episodes < 1 or self.name == "ppo_critic"):
            raise ValueError(
                "algorithm.baseline=greedy compares each sample with its group's greedy episode: it needs "
                f"algorithm.greedy_episodes >= 1 (got {self.greedy_episodes}) and grpo or mgrpo (got "
                f"{self.name}: its baseline is the critic's value)"
            )
        if any(b < 2 for b in self.tree):
            raise ValueError(f"algorithm.tree {self.tree}: every branching factor must be at least 2")
        if self.tree and self.tree[0] >= self.group_size - self.greedy_episodes:
            raise ValueError(
                f"algorithm.tree {self.tree}: its first branching factor must be below the sampled episodes "
                f"of a group (group_size - greedy_episodes = {self.group_size - self.greedy_episodes}), "
                "or no sampled turn is shared"
            )
        return self
