"""The centralised critic of ``algorithm.name: ppo_critic`` (PPO with a centralised critic for LLM teams).

Centralised training, decentralised acting: every role still acts on its own prompt; only the critic
reads the whole team transcript (:func:`critic_state`: the task, every earlier turn of every role, and
whose turn comes next). The critic is a LoRA adapter of its own (``CRITIC_ADAPTER``) on the base model
of ``algorithm.critic.policy`` plus a linear value head on the final hidden state of the transcript's
last token, with one output per role: the role's expected return from that point on. Sharing the
roles' base costs no extra model in memory; naming a policy that no role uses makes it a separate one.

Each trained role's turns form one sequence per episode. Rewards per turn (:func:`turn_rewards`), the
critic's values at rollout time and :func:`teamrl.algorithms.per_role_gae` give every turn its own
advantage, normalised over the role's turns of the batch (``algorithm.scale: std``). The critic is then
fitted to the GAE returns with the clipped value loss, in the same update as the policies, with its own
optimizer (the roles' adapters and the critic share no trainable parameter).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from teamrl.algorithms import explained_variance, normalize_advantages, per_role_gae, value_loss
from teamrl.config import CRITIC_ADAPTER, Config, RewardConfig
from teamrl.policies.hf import HFPolicy
from teamrl.protocol import Episode
from teamrl.rewards.credit import RoleConfig, ScoredTurn, maporl_turn_credit, marti_turn_credit, scored_turns

TurnKey = tuple[int, int]
"""(episode index in the batch, turn index in the episode)."""


def critic_state(episode: Episode, turn_index: int) -> str:
    """The team transcript the critic reads before turn ``turn_index``: the first speaker's prompt (its
    SOP and the task), then every earlier turn's raw text labelled with its role, then whose turn it is."""
    turns = episode.turns
    lines = [turns[0].prompt.rstrip("\n")]
    lines += [f"[{t.role}] {t.text}" for t in turns[:turn_index]]
    lines.append(f"[next: {turns[turn_index].role}]")
    return "\n".join(lines) + "\n"


def turn_rewards(
    episode: Episode,
    reward: RewardConfig,
    scorer: Callable[[Episode], list[ScoredTurn]] | Mapping[str, RoleConfig],
) -> list[float]:
    """The reward that arrives with each turn of ``episode``, in turn order.

    With a per-turn credit strategy (``maporl``, ``marti``) each turn of role i gets its own credit
    minus the format penalty if it is malformed, divided by i's number of turns, so that i's turns sum
    to its episode reward ``episode.rewards[i]``; with the others (``hybrid``, ``shared``,
    ``counterfactual``, several functions) the role's episode reward arrives at its last turn and its
    earlier turns get 0. ``scorer``: the workflow's ``scored_turns`` (or a pipeline's roles).
    """
    turns = episode.turns
    counts: dict[str, int] = {}
    for t in turns:
        counts[t.role] = counts.get(t.role, 0) + 1
    functions = [(f.name, f.weight) for f in reward.function_list()]
    if functions in ([("maporl", 1.0)], [("marti", 1.0)]):
        scored = scorer(episode) if callable(scorer) else scored_turns(episode, scorer)
        if functions[0][0] == "maporl":
            credits = maporl_turn_credit(scored, **reward.maporl.model_dump())
        else:
            credits = marti_turn_credit(scored, episode.outcome, **reward.marti.model_dump())
        return [
            (c - reward.format_penalty * (t.error is not None)) / counts[t.role]
            for c, t in zip(credits, turns, strict=True)
        ]
    last = {t.role: j for j, t in enumerate(turns)}
    return [episode.rewards.get(t.role, 0.0) if last[t.role] == j else 0.0 for j, t in enumerate(turns)]


@dataclass
class CriticBatch:
    """One update's turns of the trained roles: the critic's inputs and targets, and each turn's advantage."""

    keys: list[TurnKey]
    input_ids: list[list[int]]
    role_index: torch.Tensor  # [N] the value-head output of each turn's role
    old_values: torch.Tensor  # [N] values at rollout time (the clip's centre)
    returns: torch.Tensor  # [N] GAE returns: the critic's targets
    advantages: dict[str, dict[TurnKey, float]] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)


class CentralisedCritic:
    """A value adapter + linear head on ``policy``'s base; one value per role of the workflow."""

    def __init__(self, policy: HFPolicy, cfg: Config) -> None:
        self.policy = policy
        self.cfg = cfg
        self.roles = list(dict.fromkeys(cfg.role_order()))
        self.scorer = cfg.workflow_class(cfg.workflow).scored_turns
        policy.add_adapter(CRITIC_ADAPTER)
        hidden = int(policy.base.config.hidden_size)
        # Zero init: every value starts at 0, so the first advantages are the plain returns.
        self.head = torch.nn.Linear(hidden, len(self.roles)).to(policy.base.device)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=cfg.algorithm.critic.lr, weight_decay=0.0)
        self.max_positions: int | None = getattr(policy.base.config, "max_position_embeddings", None)

    def parameters(self) -> list[torch.nn.Parameter]:
        return self.policy.adapter_parameters(CRITIC_ADAPTER) + list(self.head.parameters())

    def fingerprint(self) -> str:
        """Hash of the critic's adapter and value head."""
        digest = hashlib.sha256(self.policy.fingerprint(CRITIC_ADAPTER).encode())
        for param in self.head.parameters():
            digest.update(param.detach().float().cpu().numpy().tobytes())
        return digest.hexdigest()[:16]

    # -- values ---------------------------------------------------------------------------------
    def encode(self, states: list[str]) -> list[list[int]]:
        """Token ids of each transcript; one longer than the model's positions keeps its first half (the
        task) and its most recent half (the turns just before the point valued), dropping the middle."""
        ids = [list(x) for x in self.policy.tokenizer(states)["input_ids"]] if states else []
        limit = self.max_positions
        if limit is not None:
            head = limit // 2
            ids = [x if len(x) <= limit else x[:head] + x[len(x) - (limit - head) :] for x in ids]
        return ids

    def values(self, input_ids: list[list[int]], role_index: torch.Tensor) -> torch.Tensor:
        """[N] the value of each transcript for its role (differentiable when grad is enabled)."""
        mb = self.cfg.algorithm.micro_batch
        out = []
        for start in range(0, len(input_ids), mb):
            hidden = self.policy.last_hidden_states(CRITIC_ADAPTER, input_ids[start : start + mb])
            values = self.head(hidden.float())
            index = role_index[start : start + mb].to(values.device)
            out.append(values.gather(1, index[:, None])[:, 0])
        return torch.cat(out) if out else torch.zeros(0)

    # -- the update -----------------------------------------------------------------------------
    @torch.no_grad()
    def prepare(self, episodes: list[Episode], roles: tuple[str, ...]) -> CriticBatch:
        """Values, GAE returns and normalised advantages of every turn of ``roles`` in ``episodes``."""
        a = self.cfg.algorithm
        keys: list[TurnKey] = []
        rewards: list[float] = []
        for i, ep in enumerate(episodes):
            per_turn = turn_rewards(ep, self.cfg.reward, self.scorer)
            for j, turn in enumerate(ep.turns):
                if turn.role in roles:
                    keys.append((i, j))
                    rewards.append(per_turn[j])
        turn_role = [episodes[i].turns[j].role for i, j in keys]
        input_ids = self.encode([critic_state(episodes[i], j) for i, j in keys])
        role_index = torch.tensor([self.roles.index(r) for r in turn_role], dtype=torch.long)
        self.policy.model.eval()
        old_values = self.values(input_ids, role_index).cpu()
        raw, returns = per_role_gae(
            torch.tensor(rewards),
            old_values,
            [(i, r) for (i, _), r in zip(keys, turn_role, strict=True)],
            gamma=a.gamma,
            lam=a.gae_lambda,
        )
        batch = CriticBatch(keys, input_ids, role_index, old_values, returns.float())
        for role in roles:
            rows = [n for n, r in enumerate(turn_role) if r == role]
            adv = raw[rows]
            if a.scale == "std":
                adv = normalize_advantages(adv)
            batch.advantages[role] = {keys[n]: float(x) for n, x in zip(rows, adv, strict=True)}
        if keys:
            batch.stats = {
                "critic/value_mean": float(old_values.mean()),
                "critic/return_mean": float(returns.mean()),
                "critic/explained_variance": explained_variance(old_values, returns),
                "critic/advantage_std": float(raw.std()) if raw.numel() > 1 else 0.0,
            }
        return batch

    def train(self, batch: CriticBatch, seed: int) -> dict[str, float]:
        """Fit the critic to ``batch.returns``: ``ppo_epochs`` passes of ``minibatches`` optimizer steps of
        the clipped value loss. Returns its stats."""
        a = self.cfg.algorithm
        n = len(batch.keys)
        if n == 0:
            return dict(batch.stats)
        order = random.Random(seed).sample(range(n), n)
        size = -(-n // min(a.minibatches, n))
        minibatches = [order[k : k + size] for k in range(0, n, size)]
        steps = a.ppo_epochs * len(minibatches)
        agg: dict[str, float] = {}
        self.policy.set_trainable([CRITIC_ADAPTER])
        self.policy.model.train()
        try:
            for _ in range(a.ppo_epochs):
                for rows in minibatches:
                    self.optimizer.zero_grad(set_to_none=True)
                    mb_stats: dict[str, float] = {}
                    for start in range(0, len(rows), a.micro_batch):
                        chunk = rows[start : start + a.micro_batch]
                        index = torch.tensor(chunk, dtype=torch.long)
                        values = self.values([batch.input_ids[k] for k in chunk], batch.role_index[index])
                        out = value_loss(
                            values,
                            batch.old_values[index].to(values.device),
                            batch.returns[index].to(values.device),
                            clip=a.critic.value_clip,
                            num_items=float(len(rows)),
                        )
                        out.loss.backward()
                        share = len(chunk) / len(rows)
                        for key, weight in (("value_loss", 1.0), ("value_clip_fraction", share)):
                            mb_stats[key] = mb_stats.get(key, 0.0) + out.stats[key] * weight
                    norm = torch.nn.utils.clip_grad_norm_(self.parameters(), a.max_grad_norm)
                    self.optimizer.step()
                    mb_stats["grad_norm"] = float(norm)
                    for k, v in mb_stats.items():
                        agg[k] = agg.get(k, 0.0) + v / steps
        finally:
            self.policy.set_trainable([])
            self.policy.model.eval()
        return {**batch.stats, **{f"critic/{k}": v for k, v in agg.items()}, "critic/turns": float(n)}

    # -- checkpoints ----------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        """The adapter in peft's format (``directory/adapter``); the head and optimizer in ``critic.pt``."""
        directory = Path(directory)
        self.policy.save_adapter(CRITIC_ADAPTER, directory / "adapter")
        state = {"roles": self.roles, "head": self.head.state_dict()}
        torch.save({**state, "optimizer": self.optimizer.state_dict()}, directory / "critic.pt")

    def load(self, directory: Path) -> None:
        directory = Path(directory)
        saved = torch.load(directory / "critic.pt", weights_only=True)
        if saved["roles"] != self.roles:
            raise ValueError(
                f"the critic in {directory} values roles {saved['roles']}, this run has {self.roles}: "
                "resume with the run's own config"
            )
        self.policy.load_adapter(CRITIC_ADAPTER, directory / "adapter")
        self.head.load_state_dict(saved["head"])
        self.optimizer.load_state_dict(saved["optimizer"])
