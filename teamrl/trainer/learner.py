"""The learner: the policy update of the trained roles' adapters (GRPO / M-GRPO / PPO with the
centralised critic), with their optimizers and the critic.

The local trainer holds one in its own process. The Ray backend holds one inside a Ray actor
(:class:`teamrl.distributed.LearnerWorker`) and calls the same methods there, so both backends run one
code path for the algorithms.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from teamrl.algorithms import (
    group_relative_advantages,
    grpo_loss,
    role_relative_advantages,
    team_relative_advantages,
)
from teamrl.config import Config
from teamrl.policies.base import ref_adapter  # noqa: F401 - also imported from here
from teamrl.policies.hf import HFPolicy
from teamrl.policies.openai_compat import OpenAICompatPolicy
from teamrl.protocol import Episode, Turn
from teamrl.rewards.credit import team_reward
from teamrl.trainer.critic import CentralisedCritic, CriticBatch, TurnKey

_T = TypeVar("_T")

OPTIMIZERS_FILE = "optimizers.pt"
CRITIC_DIR = "critic"
LEARNER_FILES = (OPTIMIZERS_FILE, CRITIC_DIR)
"""What :meth:`Learner.save` writes into a checkpoint."""


@dataclass
class _Sample:
    """One turn to learn from, with its advantage, the behaviour log-probs PPO's ratio starts from and
    (when KL is on) reference log-probs."""

    turn: Turn
    advantage: float
    old_logprobs: list[float]
    ref_logprobs: list[float] = field(default_factory=list)
    is_weights: list[float] = field(default_factory=list)  # truncated importance weights (off-policy)


class Learner:
    """Updates the adapters of ``policies`` in place; owns one AdamW per trained role and, with
    ``ppo_critic``, the centralised critic (whose adapter it adds to its policy)."""

    def __init__(self, cfg: Config, policies: dict[str, HFPolicy | OpenAICompatPolicy]) -> None:
        self.cfg = cfg
        self.policies = policies
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.critic = (
            CentralisedCritic(policies[cfg.algorithm.critic.policy], cfg)  # type: ignore[arg-type]
            if cfg.algorithm.name == "ppo_critic"
            else None
        )

    def policy_of(self, role: str) -> HFPolicy:
        return self.policies[self.cfg.seat(role).policy]  # type: ignore[return-value]

    def optimizer(self, role: str) -> torch.optim.Optimizer:
        if role not in self.optimizers:
            params = self.policy_of(role).adapter_parameters(role)
            self.optimizers[role] = torch.optim.AdamW(params, lr=self.cfg.algorithm.lr, weight_decay=0.0)
        return self.optimizers[role]

    # -- advantages -----------------------------------------------------------------------------
    def advantages(self, episodes: list[Episode], roles: tuple[str, ...]) -> dict[str, torch.Tensor]:
        groups = [e.task_id for e in episodes]
        a = self.cfg.algorithm
        # ReMax's baseline: a group's greedy anchor (its trained turns decoded at temperature 0)
        base = (
            torch.tensor([any(t.greedy for t in e.turns) for e in episodes])
            if a.baseline == "greedy"
            else None
        )
        if a.name == "mgrpo":
            team = team_relative_advantages(
                torch.tensor([team_reward(e) for e in episodes]), groups, scale=a.scale, baseline_mask=base
            )
            return {r: team for r in roles}
        rewards = {r: torch.tensor([e.rewards.get(r, 0.0) for e in episodes]) for r in roles}
        return role_relative_advantages(rewards, groups, scale=a.scale, baseline_mask=base)

    def turn_advantages(
        self, episodes: list[Episode], roles: tuple[str, ...]
    ) -> dict[str, dict[TurnKey, float]]:
        """Per role, the advantage of each of its turns, keyed (episode index, turn index), in turn order:
        GRPO / M-GRPO give every turn of a role its episode's advantage, except the turns an episode
        scores one by one (``Episode.attempt_rewards``), whose group is the role's attempts at the same
        prompt in that episode, with the episode's candidates at that prompt (``Episode.candidates``, a
        turn-level group's turns that did not continue; keyed after the turns: index ``len(turns) + k``
        is candidate k, see :func:`learned_turn`), or, for a turn with a key in ``Episode.attempt_groups``,
        the role's turns with that key in every episode of the task."""
        adv = self.advantages(episodes, roles)
        out = {
            role: {
                (i, j): float(adv[role][i])
                for i, ep in enumerate(episodes)
                for j, t in enumerate(ep.turns)
                if t.role == role
            }
            for role in roles
        }
        for role in roles:
            keys = [
                (i, j)
                for i, ep in enumerate(episodes)
                for j in sorted(ep.attempt_rewards)
                if j < len(ep.turns) and ep.turns[j].role == role
            ]
            rewards = [episodes[i].attempt_rewards[j] for i, j in keys]
            for i, ep in enumerate(episodes):
                for k, c in enumerate(ep.candidates):
                    if c.turn.role == role:
                        keys.append((i, len(ep.turns) + k))
                        rewards.append(c.reward)
            if keys:
                groups = [
                    ("task", episodes[i].task_id, episodes[i].attempt_groups[j])
                    if j in episodes[i].attempt_groups
                    else ("episode", str(i), learned_turn(episodes[i], j).prompt)
                    for i, j in keys
                ]
                base = None
                if self.cfg.algorithm.baseline == "greedy":  # the group's greedy attempts, where it has any
                    base = torch.tensor([learned_turn(episodes[i], j).greedy for i, j in keys])
                attempt_adv = group_relative_advantages(
                    torch.tensor(rewards), groups, scale=self.cfg.algorithm.scale, baseline_mask=base
                )
                out[role].update({key: float(a) for key, a in zip(keys, attempt_adv, strict=True)})
        pos, neg = self.cfg.algorithm.positive_weight, self.cfg.algorithm.negative_weight
        if (pos, neg) != (1.0, 1.0):
            out = {
                role: {k: v * (pos if v > 0 else neg) for k, v in per.items()} for role, per in out.items()
            }
        return out

    # -- the update -----------------------------------------------------------------------------
    def update(
        self,
        episodes: list[Episode],
        roles: tuple[str, ...],
        step: int,
        ref_logprobs: dict[TurnKey, list[float]] | None = None,
    ) -> dict[str, float]:
        """GRPO / M-GRPO / PPO update of each role in ``roles`` on the turns it took in ``episodes``:
        ``ppo_epochs`` passes over the turns, each split into ``minibatches`` optimizer steps (shuffled
        from the seed ``step``); with ``ppo_critic`` the centralised critic gives each turn its advantage
        and is fitted in the same update. ``ref_logprobs``: the KL reference's log-probs of turns (keyed
        as the advantages) already computed where they were sampled (:func:`reference_logprobs`)."""
        a = self.cfg.algorithm
        critic_batch: CriticBatch | None = None
        if self.critic is not None:
            critic_batch = self.critic.prepare(episodes, roles)
            adv = critic_batch.advantages
        else:
            adv = self.turn_advantages(episodes, roles)
        stats: dict[str, float] = {"perf/learner_tokens": 0.0}
        for role in roles:
            policy = self.policy_of(role)
            turns = {key: learned_turn(episodes[key[0]], key[1]) for key in adv[role]}
            anchor = a.anchor_unlearned and a.kl_coef > 0  # zero-advantage turns kept for their KL
            keys = [
                key
                for key, value in adv[role].items()
                if turns[key].completion_ids and (abs(value) > 1e-8 or anchor)
            ]
            items = [_Sample(turns[key], adv[role][key], turns[key].logprobs) for key in keys]
            if not any(abs(s.advantage) > 1e-8 for s in items):  # equal rewards everywhere: nothing to learn
                stats[f"train/{role}/skipped"] = 1.0
                continue
            if anchor:
                stats[f"train/{role}/anchored_turns"] = float(sum(abs(s.advantage) <= 1e-8 for s in items))
            greedy = [s for s in items if s.turn.greedy]
            if greedy:
                stats[f"train/{role}/greedy_turns"] = float(len(greedy))
            if self.cfg.run.async_rollouts or policy.generation_backend is not None:
                # The episodes were sampled by another policy than the one updated: adapters some updates
                # old (async rollouts), or vLLM's kernels (before vLLM 0.10.2 also without temperature).
                stats.update(
                    {f"train/{role}/{k}": v for k, v in self._correct_off_policy(policy, role, items).items()}
                )
            elif greedy:  # a greedy anchor's log-probs are not the sampler's: PPO's ratio starts from ours
                for s, prox in zip(
                    greedy, score_turns(self.cfg, policy, role, [s.turn for s in greedy]), strict=True
                ):
                    s.old_logprobs = prox
            if a.kl_coef > 0:
                known = ref_logprobs or {}  # where the rollout worker scored them already
                missing = [s for key, s in zip(keys, items, strict=True) if key not in known]
                if missing:
                    scored = score_turns(self.cfg, policy, role, [s.turn for s in missing], ref_adapter(role))
                    for s, ref in zip(missing, scored, strict=True):
                        s.ref_logprobs = ref
                for key, s in zip(keys, items, strict=True):
                    if key in known:
                        s.ref_logprobs = known[key]
            policy.set_trainable([role])
            policy.model.train()
            opt = self.optimizer(role)
            order = random.Random(step).sample(items, len(items))
            size = -(-len(order) // min(a.minibatches, len(order)))
            minibatches = [order[i : i + size] for i in range(0, len(order), size)]
            agg: dict[str, float] = {}
            steps = a.ppo_epochs * len(minibatches)
            taken = 0
            for minibatch in [m for _ in range(a.ppo_epochs) for m in minibatches]:
                if not self._step(policy, role, opt, minibatch, agg, weight=1.0 / steps):
                    stats[f"train/{role}/stopped_at"] = taken / steps  # target_kl: the policy moved enough
                    # the means were weighted for every step: rescale them to the steps measured (the
                    # refused one's forward included), grad_norm to the steps taken
                    agg = {
                        k: v if k.endswith("_max") else v * steps / (taken if k == "grad_norm" else taken + 1)
                        for k, v in agg.items()
                    }
                    break
                taken += 1
            stats["perf/learner_tokens"] += a.ppo_epochs * sum(
                len(s.turn.prompt_ids) + len(s.turn.completion_ids) for s in items
            )
            policy.set_trainable([])
            policy.model.eval()
            stats.update({f"train/{role}/{k}": v for k, v in agg.items()})
            stats[f"train/{role}/turns"] = float(len(items))
        if self.critic is not None and critic_batch is not None:
            stats.update(self.critic.train(critic_batch, seed=step))
        return stats

    def _step(
        self,
        policy: HFPolicy,
        role: str,
        opt: torch.optim.Optimizer,
        batch: list[_Sample],
        agg: dict[str, float],
        weight: float,
    ) -> bool:
        """One optimizer step on ``batch`` (micro-batched; token-mean loss over the whole batch); False, and
        no step, where its approx_kl exceeds 1.5 x ``algorithm.target_kl``."""
        a = self.cfg.algorithm
        # the token mean runs over the learned turns' tokens: anchored turns (no advantage, KL only: see
        # AlgorithmSettings.anchor_unlearned) add their KL without diluting the others' policy gradient
        learned = [s for s in batch if abs(s.advantage) > 1e-8] or batch
        total_tokens = float(sum(len(s.turn.completion_ids) for s in learned))
        all_tokens = float(sum(len(s.turn.completion_ids) for s in batch))
        opt.zero_grad(set_to_none=True)
        moved = 0.0  # this step's approx_kl over its tokens
        for chunk in micro_batches(batch, a.micro_batch, a.micro_batch_tokens, sample_length):
            prompts, completions = [s.turn.prompt_ids for s in chunk], [s.turn.completion_ids for s in chunk]
            forks = None
            if a.top_entropy_quantile < 1:
                logp, entropy, mask = policy.token_logprobs_entropy(
                    role, prompts, completions, self.temperature(role)
                )
                forks = _forking_tokens(
                    entropy, mask, [abs(s.advantage) > 1e-8 for s in chunk], a.top_entropy_quantile
                )
                agg["entropy"] = agg.get("entropy", 0.0) + weight * float((entropy * mask).sum() / all_tokens)
            else:
                logp, mask = policy.token_logprobs(role, prompts, completions, self.temperature(role))
            width, device = logp.shape[1], logp.device
            out = grpo_loss(
                logp,
                _pad([s.old_logprobs for s in chunk], width, device),
                torch.tensor([s.advantage for s in chunk], device=device),
                mask,
                ref_logp=_pad([s.ref_logprobs for s in chunk], width, device) if a.kl_coef > 0 else None,
                is_weight=_pad([s.is_weights for s in chunk], width, device) if chunk[0].is_weights else None,
                clip_low=a.clip_low,
                clip_high=a.clip_high,
                kl_coef=a.kl_coef,
                num_tokens=total_tokens,
                policy_mask=forks,
            )
            out.loss.backward()
            # policy_loss is already this chunk's part of the batch's token mean (divided by
            # total_tokens): the chunks' values add up to it. The other stats are means over the chunk's
            # own tokens, so they are weighted by its share of the tokens.
            share = out.stats["num_tokens"] / all_tokens
            moved += out.stats["approx_kl"] * share
            for k, v in out.stats.items():
                if k.endswith("_max"):
                    agg[k] = max(agg.get(k, 0.0), v)
                elif k != "num_tokens":
                    agg[k] = agg.get(k, 0.0) + weight * (v if k == "policy_loss" else v * share)
        if a.target_kl is not None and moved > 1.5 * a.target_kl:
            opt.zero_grad(set_to_none=True)
            return False
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.adapter_parameters(role), a.max_grad_norm)
        if a.lr_warmup_steps:
            taken = max((int(st["step"]) for st in opt.state.values() if "step" in st), default=0)
            for group in opt.param_groups:
                group["lr"] = a.lr * min(1.0, (taken + 1) / a.lr_warmup_steps)
        opt.step()
        agg["grad_norm"] = agg.get("grad_norm", 0.0) + float(grad_norm) * weight
        return True

    def temperature(self, role: str) -> float:
        """The temperature ``role`` samples at (its seat's, else the algorithm's): its log-probs' too."""
        return role_temperature(self.cfg, role)

    def _correct_off_policy(self, policy: HFPolicy, role: str, items: list[_Sample]) -> dict[str, float]:
        """Decoupled PPO with truncated importance sampling: PPO's ratio starts from the learner's log-probs
        under the current adapter (pi_prox, computed here once) and each token's loss is weighted by
        min(pi_prox / pi_behaviour, is_cap), the behaviour log-probs being the generator's (a greedy
        anchor's turns are learned on-policy: weight 1). Returns the mean absolute log-prob gap per token
        (near 0 when the generator served the current adapter), the mean truncated weight, the share of
        tokens truncated and the largest raw weight."""
        cap = self.cfg.algorithm.is_cap
        gap = weights = truncated = tokens = 0.0
        largest = 0.0
        for s, prox in zip(items, score_turns(self.cfg, policy, role, [s.turn for s in items]), strict=True):
            behaviour = prox if s.turn.greedy else s.old_logprobs[: len(prox)]
            log_w = torch.tensor(prox) - torch.tensor(behaviour)
            raw = log_w.clamp(max=50.0).exp()
            w = raw.clamp(max=cap)
            gap += float(log_w.abs().sum())
            weights += float(w.sum())
            truncated += float((raw > cap).sum())
            largest = max(largest, float(raw.max()) if len(prox) else 0.0)
            tokens += len(prox)
            s.old_logprobs, s.is_weights = prox, w.tolist()
        n = max(tokens, 1.0)
        return {
            "behaviour_logprob_gap": gap / n,
            "is_weight": weights / n,
            "is_truncated": truncated / n,
            "is_weight_max": largest,
        }

    # -- checkpoints ----------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        """The optimizers (``optimizers.pt``) and the critic (``critic/``) into ``directory``; the
        adapters are the driver's to save."""
        torch.save({r: o.state_dict() for r, o in self.optimizers.items()}, directory / OPTIMIZERS_FILE)
        if self.critic is not None:
            self.critic.save(directory / CRITIC_DIR)

    def load(self, directory: Path) -> None:
        """What :meth:`save` wrote (the adapters being loaded already)."""
        saved = torch.load(directory / OPTIMIZERS_FILE, weights_only=False)
        for role, sd in saved.items():
            self.optimizer(role).load_state_dict(sd)
        if self.critic is not None:
            self.critic.load(directory / CRITIC_DIR)


def role_temperature(cfg: Config, role: str) -> float:
    """The temperature ``role`` samples at (its seat's, else the algorithm's): its log-probs' too."""
    seat = cfg.seat(role).temperature
    return seat if seat is not None else cfg.algorithm.temperature


@torch.no_grad()
def score_turns(
    cfg: Config, policy: HFPolicy, role: str, turns: list[Turn], adapter: str | None = None
) -> list[list[float]]:
    """Log-probs of each of ``role``'s ``turns``' completion under ``adapter`` (default: the role's own;
    e.g. its frozen SFT snapshot, the KL reference), at the role's temperature, micro-batched as the
    learner's update is."""
    a = cfg.algorithm
    scores: dict[int, list[float]] = {}
    for chunk in micro_batches(list(enumerate(turns)), a.micro_batch, a.micro_batch_tokens, _turn_length):
        logp, _ = policy.token_logprobs(
            adapter if adapter is not None else role,
            [t.prompt_ids for _, t in chunk],
            [t.completion_ids for _, t in chunk],
            role_temperature(cfg, role),
        )
        for row, (i, t) in enumerate(chunk):
            scores[i] = logp[row, : len(t.completion_ids)].tolist()
    return [scores[i] for i in range(len(turns))]


def reference_logprobs(
    cfg: Config, policy_of: Callable[[str], HFPolicy], episodes: list[Episode], roles: Iterable[str]
) -> dict[TurnKey, list[float]]:
    """The KL reference's (each role's SFT snapshot, ``ref_adapter``) log-probs of the turns of ``roles``
    in ``episodes`` (candidates included), keyed as :meth:`Learner.turn_advantages` keys them: computed
    once where the episodes were sampled (the reference is frozen), so the update need not."""
    out: dict[TurnKey, list[float]] = {}
    for role in roles:
        keys = [
            (i, j)
            for i, ep in enumerate(episodes)
            for j in range(len(ep.turns) + len(ep.candidates))
            if learned_turn(ep, j).role == role and learned_turn(ep, j).completion_ids
        ]
        if not keys:
            continue
        turns = [learned_turn(episodes[i], j) for i, j in keys]
        scored = score_turns(cfg, policy_of(role), role, turns, ref_adapter(role))
        out.update(zip(keys, scored, strict=True))
    return out


def learned_turn(episode: Episode, j: int) -> Turn:
    """The learner's turn ``j`` of ``episode``: its turn ``j``, or past them, candidate ``j - len(turns)``."""
    n = len(episode.turns)
    return episode.turns[j] if j < n else episode.candidates[j - n].turn


def sample_length(s: _Sample) -> tuple[int, int]:
    """The padded shape a turn needs: prompt tokens (left-padded) and completion tokens (right-padded)."""
    return len(s.turn.prompt_ids), len(s.turn.completion_ids)


def _turn_length(item: tuple[int, Turn]) -> tuple[int, int]:
    return len(item[1].prompt_ids), len(item[1].completion_ids)


def micro_batches(
    rows: list[_T], size: int, max_tokens: int, length: Callable[[_T], tuple[int, int]]
) -> list[list[_T]]:
    """``rows`` cut into micro-batches of at most ``size``. With ``max_tokens`` > 0 the rows are sorted by
    their (prompt, completion) ``length`` and a micro-batch also ends before its padded size, rows x
    (longest prompt + longest completion), would pass ``max_tokens`` (a row longer than that alone is a
    micro-batch of its own)."""
    if max_tokens <= 0:
        return [rows[i : i + size] for i in range(0, len(rows), size)]
    out: list[list[_T]] = []
    chunk: list[_T] = []
    width = tail = 0
    for row in sorted(rows, key=length):
        p, c = length(row)
        w, t = max(width, p), max(tail, c)
        if chunk and (len(chunk) == size or (len(chunk) + 1) * (w + t) > max_tokens):
            out.append(chunk)
            chunk, w, t = [], p, c
        chunk.append(row)
        width, tail = w, t
    if chunk:
        out.append(chunk)
    return out


def _forking_tokens(
    entropy: torch.Tensor, mask: torch.Tensor, learned: list[bool], quantile: float
) -> torch.Tensor:
    """[B, T] bool: of the learned rows' tokens, the ``quantile`` fraction with the highest entropy (ties at
    the threshold kept); rows not learned (anchored turns) get none."""
    rows = torch.tensor(learned, dtype=torch.bool, device=mask.device)[:, None]
    candidates = (mask != 0) & rows
    if not bool(candidates.any()):
        return candidates
    threshold = torch.quantile(entropy[candidates].float(), 1.0 - quantile)
    return candidates & (entropy >= threshold)


def _pad(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row[:width])
    return out.to(device)
