"""IPPO and MAPPO: PPO for teams of agents, batched over environment copies and agents.

One file, read top to bottom:

* agents are split into *groups* that share one actor and one critic (``parameter_sharing``): all
  agents (``shared``), one group per agent (``per_agent``), or one group per distinct pair of
  observation / action spaces (``per_group``: predators and prey get their own networks). Networks
  shared by several agents also see a one-hot agent id;
* IPPO's critic sees the agent's own observation; MAPPO's (``centralised_critic``) sees the global
  state plus the agent's own observation (the "agent-specific global state" of Yu et al. 2022);
  ``centralised_actor`` gives the actor the global state too (a teacher for distillation, KD-MARL);
* each agent has its own value and advantage (rewards are per agent; ``team_reward``: every agent learns
  from the team's summed reward, as the MAPPO paper's MPE runs do), computed with GAE; a copy cut by
  a time limit is bootstrapped from the value of its ``final_obs`` / ``final_state``;
* value targets are normalised by a running mean / std (``value_norm``, as in the MAPPO paper);
* action masks are applied to the logits, so masked actions are never sampled;
* ``entity_actor``: where the env declares interchangeable slots of the observation (simple_spread's
  landmarks, ``env.entity_slots``), the actor reads them as a set (attention pooling over slots), so
  it cannot learn "agent i goes to slot i" and has to choose by geometry.

A group's rollout is one tensor ``[T, B, k, ...]`` (steps, copies, agents of the group): there are no
Python loops over copies or agents in the hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any, Literal, cast

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from teamrl.marl.core import VecStep
from teamrl.marl.imagination import Imagination, ModelConfig, check_env
from teamrl.marl.ppo_nets import (  # re-exported: the networks and groups are part of this module's API
    ACTIVATIONS,
    MASKED_LOGIT,
    Actor,
    Critic,
    EntityNet,
    GroupSpec,
    RecurrentNet,
    actor_input,
    critic_input,
    entity_slots,
    env_actions,
    group_masks,
    group_obs,
    load_actors,
    load_weights,
    make_groups,
    reset_where,
    restore,
    restore_check,
)
from teamrl.marl.run import RunContext, episode_metrics, info_metrics, resume_seed

__all__ = [
    "ACTIVATIONS",
    "MASKED_LOGIT",
    "Actor",
    "actor_input",
    "Config",
    "Critic",
    "EntityNet",
    "GroupSpec",
    "RecurrentNet",
    "critic_input",
    "env_actions",
    "gae",
    "group_masks",
    "group_obs",
    "learned_rewards",
    "make_actor",
    "make_groups",
    "policy_loss",
    "reset_where",
    "restore",
    "restore_check",
    "train",
    "value_loss",
]


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    total_env_steps: int = Field(2_000_000, ge=1, description="env steps (one step of one copy) to train")
    seed: int = 0
    num_envs: int = Field(128, ge=1, description="environment copies stepped in lock step")
    rollout_steps: int = Field(25, ge=1, description="steps per copy between updates")
    epochs: int = Field(5, ge=1, description="passes over each rollout")
    minibatches: int = Field(2, ge=1, description="optimizer steps per pass")
    lr: float = Field(1e-3, gt=0)
    anneal_lr: bool = Field(True, description="decay the learning rate linearly to 0")
    gamma: float = Field(0.99, ge=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    clip: float = Field(0.2, gt=0, description="PPO ratio clip")
    value_clip: float | None = Field(
        0.2, gt=0, description="clip the value change (normalised scale) around the rollout's; null: off"
    )
    ent_coef: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(10.0, gt=0, description="clipped separately for actors and critics")
    centralised_critic: bool = Field(False, description="MAPPO: the critic sees the global state")
    centralised_actor: bool = Field(
        False,
        description="the actor also sees the global state (a centralised teacher, to distil into "
        "decentralised students with teamrl marl distill); it then needs the state to act",
    )
    parameter_sharing: Literal["shared", "per_agent", "per_group"] = Field(
        "per_group", description="per_group: agents with the same spaces share networks"
    )
    agent_id: bool = Field(True, description="one-hot agent id in the inputs of networks shared by agents")
    hidden: list[int] = Field(default_factory=lambda: [64, 64], description="actor hidden layer sizes")
    entity_actor: bool = Field(
        False,
        description="actor pools the env's interchangeable observation slots as a set (env.entity_slots)",
    )
    critic_hidden: list[int] | None = Field(None, description="critic hidden layer sizes (null: as hidden)")
    entity_critic: bool = Field(
        False,
        description="the critic reads the agent's own observation slots (env.entity_slots) as a set too, "
        "as the entity actor does (the global state, if any, goes in beside them)",
    )
    shared_encoder: bool = Field(
        False,
        description="with entity_actor: the critic's MLP reads the entity actor's pooled slot encodings "
        "(beside the global state) instead of the raw observation, and its loss trains that encoder too",
    )
    recurrent: bool = Field(
        False,
        description="GRU actors and critics (recurrent MAPPO): the first hidden layer feeds a GRU cell of "
        "the same width, whose state carries over steps and is reset where an episode ends; trained on whole "
        "rollouts (rollout_steps long) from the state each began with, minibatches over env copies",
    )
    activation: Literal["tanh", "relu"] = "relu"
    model: ModelConfig | None = Field(
        None,
        description="model-based PPO: a world model learned from the real steps, and the update also learns "
        "from imagined branches of it (teamrl/marl/imagination.py); null: model-free",
    )
    value_norm: bool = Field(True, description="running mean / std normalisation of value targets")
    team_reward: bool = Field(
        False,
        description="every agent learns from the sum of all agents' rewards (the team's return, what "
        "cooperative benchmarks score; the MAPPO paper's MPE setting), not its own; logged returns stay "
        "per agent",
    )
    checkpoint_every: int = Field(250_000, ge=1, description="env steps between checkpoints")
    threads: int = Field(1, ge=1, description="torch threads")

    @model_validator(mode="after")
    def _recurrent(self) -> Config:
        if self.recurrent and (self.entity_actor or self.entity_critic):
            raise ValueError(
                "recurrent and entity_actor / entity_critic cannot be combined yet: set one of them false"
            )
        if self.shared_encoder and (not self.entity_actor or self.entity_critic or self.centralised_actor):
            raise ValueError(
                "shared_encoder shares the entity actor's encoder: it needs entity_actor: true and neither "
                "entity_critic nor centralised_actor"
            )
        if self.recurrent and self.model is not None:
            raise ValueError("recurrent and model (imagined rollouts) cannot be combined yet: set one")
        if self.recurrent and self.minibatches > self.num_envs:
            raise ValueError(
                f"recurrent minibatches split the {self.num_envs} env copies: minibatches "
                f"({self.minibatches}) may not exceed num_envs"
            )
        return self


# Per-env defaults, over Config's, under the user's overrides (teamrl.marl.train). simple_spread: one shared
# network (no agent id) reads the landmarks as a set; gamma 0.85, lambda 1, more exploration, 32 copies, a
# critic on the actor's encoder, 3 epochs at twice the step: above the heuristic in ~4.5 CPU-min (docs).
_SPREAD = {
    "total_env_steps": 2_200_000,
    "num_envs": 32,
    "parameter_sharing": "shared",
    "agent_id": False,
    "entity_actor": True,
    "gamma": 0.85,
    "gae_lambda": 1.0,
    "ent_coef": 0.03,
    "shared_encoder": True,
    "epochs": 3,
    "lr": 0.002,
}
# Level-Based Foraging (every lbf: id): scored by the team's total, and two agents must load a food together.
# Every agent learns from the team's reward (EPyMARL's common reward) and remembers (a GRU, as EPyMARL's
# MAPPO): on Foraging-8x8-2p-3f at 1M steps, 3 seeds, sampled, 0.974 +- 0.024 against 0.934 with the team's
# reward and no memory and 0.900 with neither (EPyMARL's own MAPPO 0.993); memoryless agents that each wait
# at a different food never leave it (docs/results/marl.md, "Beside EPyMARL itself").
_LBF = {"team_reward": True, "recurrent": True}
ENV_PRESETS: dict[str, dict[str, Any]] = {
    "simple_spread": _SPREAD,
    "mpe2:simple_spread_v3": _SPREAD,
    "lbf:": _LBF,
}


# ----------------------------------------------------------------------------------------------- math
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over ``[T, ...]`` tensors; returns (advantages, returns).

    ``next_values[t]`` is the value of the state after step ``t``: of the next observation, or of the
    ``final_obs`` where the copy was truncated (anything where it terminated: it is multiplied by 0).
    ``done[t]`` (terminated or truncated) stops the advantage flowing back across episodes.
    """
    not_terminated, not_done = 1.0 - terminated.float(), 1.0 - done.float()
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * not_terminated[t] * next_values[t] - values[t]
        running = delta + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate, negated to be minimised."""
    ratio = (logp - old_logp).exp()
    return -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()


def value_loss(
    value: torch.Tensor, old_value: torch.Tensor, target: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """Half the squared error; with ``clip``, the larger of the plain and the clipped-change errors."""
    loss = (value - target).square()
    if clip is not None:
        clipped = old_value + (value - old_value).clamp(-clip, clip)
        loss = torch.max(loss, (clipped - target).square())
    return 0.5 * loss.mean()


def learned_rewards(rewards: torch.Tensor, team: bool) -> torch.Tensor:
    """The rewards the agents learn from, ``[..., n_agents]``: their own, or (``team``) every agent the
    sum over the last axis."""
    return rewards.sum(-1, keepdim=True).expand_as(rewards) if team else rewards


# ---------------------------------------------------------------------------------------------- train
def train(cfg: Config, run: RunContext) -> dict[str, Any]:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    env = run.make_env(cfg.num_envs, cfg.seed)
    B, T, n_agents = env.num_envs, cfg.rollout_steps, len(env.agents)
    groups = make_groups(env, cfg.parameter_sharing, cfg.agent_id, cfg.entity_actor, cfg.centralised_actor)
    state_dim = env.state_dim if cfg.centralised_critic else 0
    actors = nn.ModuleList([Actor(g, cfg.hidden, cfg.activation, cfg.recurrent) for g in groups])
    critic_hidden = cfg.hidden if cfg.critic_hidden is None else cfg.critic_hidden
    if cfg.shared_encoder:
        for g in groups:
            entity_slots(env, g)  # a ValueError unless every agent has slots
    critics = nn.ModuleList(
        [
            Critic(
                (cast(EntityNet, cast(Actor, a).net).feature_dim if cfg.shared_encoder else g.own_dim)
                + state_dim,
                critic_hidden,
                cfg.activation,
                cfg.recurrent,
                entity_slots(env, g, state_dim) if cfg.entity_critic else None,
                head_only=state_dim,
            )
            for g, a in zip(groups, actors, strict=True)
        ]
    )
    optimizer = torch.optim.Adam(
        [*actors.parameters(), *critics.parameters()], lr=cfg.lr, eps=1e-5, foreach=True
    )
    imag = None
    if cfg.model is not None:
        check_env(env, cfg.centralised_critic or cfg.centralised_actor)
        imag = Imagination(cfg.model, env, cfg.seed)

    def inputs(g: GroupSpec, obs: dict[str, np.ndarray], state: np.ndarray) -> tuple[torch.Tensor, ...]:
        own = group_obs(g, obs)
        x = actor_input(g, obs, state) if g.state_dim else own
        return x, critic_input(own, state if cfg.centralised_critic else None)

    def shared(i: int, critic_in: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """``shared_encoder``: the critic's input as [global state, the actor's features of the own input]."""
        if not cfg.shared_encoder:
            return critic_in
        f = cast(Actor, actors[i]).features(critic_in[..., state_dim:]) if features is None else features
        return torch.cat([critic_in[..., :state_dim], f], -1)

    def value(
        i: int, critic_in: torch.Tensor, h: torch.Tensor | None, features: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The critic's value on the return scale, and its new state (recurrent; else None)."""
        v, h = cast(Critic, critics[i]).step(shared(i, critic_in, features), h)
        return (cast(Critic, critics[i]).norm.denormalize(v) if cfg.value_norm else v), h

    def initial_state(g: GroupSpec, width: int) -> torch.Tensor | None:
        return torch.zeros(B, g.k, width) if cfg.recurrent else None

    # the GRU states of the actors and critics as the next step begins (None: feed-forward)
    h_actor = [initial_state(g, cfg.hidden[0]) for g in groups]
    h_critic = [initial_state(g, critic_hidden[0]) for g in groups]
    starts: list[dict[str, torch.Tensor]] = [{} for _ in groups]  # the states each rollout began with

    def checkpoint(env_steps: int, iteration: int) -> dict[str, Any]:
        """Everything a resumed run needs; ``iteration``: the updates done."""
        return {
            "algorithm": "mappo" if cfg.centralised_critic else "ippo",
            "config": cfg.model_dump(),
            "agents": list(env.agents),
            "groups": [asdict(g) for g in groups],
            "actors": [a.state_dict() for a in actors],
            "critics": [c.state_dict() for c in critics],
            "env_steps": env_steps,
            "iteration": iteration,
            "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            **({"world_model": imag.state_dict()} if imag is not None else {}),
        }

    # rollout storage: per group, tensors [T, B, k, ...]; per copy, terminated / done [T, B, 1]
    def storage(steps: int, copies: int) -> list[dict[str, torch.Tensor]]:
        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(steps, copies, *shape, dtype=dtype)

        return [
            {
                "actor_in": zeros(g.k, g.in_dim),
                "critic_in": zeros(g.k, g.own_dim + state_dim),
                "actions": zeros(g.k, dtype=torch.long) if g.discrete else zeros(g.k, g.n_out),
                "masks": zeros(g.k, g.n_out, dtype=torch.bool) if g.discrete else zeros(0),
                "logp": zeros(g.k),
                "values": zeros(g.k),
                "rewards": zeros(g.k),
                "final_values": zeros(g.k),  # value of final_obs, where a copy was truncated
            }
            for g in groups
        ]

    buf = storage(T, B)
    terminated, done = torch.zeros(T, B, 1), torch.zeros(T, B, 1)

    def advantage(
        b: dict[str, torch.Tensor], after: torch.Tensor, term: torch.Tensor, ended: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(normalised advantages, value targets) of one group's steps ``b`` ``[S, C, k]``, flat ``[S * C,
        k]``; ``after``: the value after the last step."""
        next_values = torch.cat([b["values"][1:], after[None]])
        cut = (ended - term).bool().expand_as(next_values)
        next_values = torch.where(cut, b["final_values"], next_values)
        adv, ret = gae(b["rewards"], b["values"], next_values, term, ended, cfg.gamma, cfg.gae_lambda)
        rows = adv.shape[0] * adv.shape[1]
        return ((adv - adv.mean()) / (adv.std() + 1e-8)).reshape(rows, -1), ret.reshape(rows, -1)

    def imagined() -> list[tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]]:
        """Per group: the flat imagined steps of this update, their advantages and value targets."""
        assert imag is not None and cfg.model is not None
        H, N = cfg.model.horizon, imag.branches(T * B)
        ibuf = storage(H, N)

        def act(obs: dict[str, np.ndarray], state: np.ndarray, t: int) -> dict[str, np.ndarray]:
            chosen: dict[str, np.ndarray] = {}
            for i, g in enumerate(groups):
                x, xc = inputs(g, obs, state)
                dist = cast(Actor, actors[i]).dist(x)
                a = dist.sample()
                b = ibuf[i]
                b["actor_in"][t], b["critic_in"][t], b["actions"][t] = x, xc, a
                b["logp"][t] = dist.log_prob(a)
                b["values"][t] = value(i, xc, None)[0]
                b["masks"][t] = True
                chosen.update(env_actions(g, a))
            return chosen

        last_obs, last_state, rewards = imag.branch(N, act)
        out, never = [], torch.zeros(H, N, 1)
        for i, g in enumerate(groups):
            ibuf[i]["rewards"] = learned_rewards(rewards, cfg.team_reward)[:, :, g.index]
            after = value(i, inputs(g, last_obs, last_state)[1], None)[0]
            adv, ret = advantage(ibuf[i], after, never, never)
            out.append(({k: v.reshape(H * N, *v.shape[2:]) for k, v in ibuf[i].items()}, adv, ret))
        return out

    def replay(i: int, g: GroupSpec, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Recurrent: the copies ``idx`` of group ``i`` replayed over the rollout from the states it began
        with, the states reset where episodes ended: (log-probs, entropies, critic outputs on the
        normalised scale), each ``[T * len(idx), k]`` in the flat rollout's order (step-major)."""
        b, actor, critic = buf[i], cast(Actor, actors[i]), cast(Critic, critics[i])
        ha: torch.Tensor | None = starts[i]["actor"][idx]
        hc: torch.Tensor | None = starts[i]["critic"][idx]
        logps, entropies, values = [], [], []
        for t in range(T):
            if t > 0:
                ha, hc = reset_where(ha, done[t - 1, idx, 0]), reset_where(hc, done[t - 1, idx, 0])
            dist, ha = actor.step(b["actor_in"][t, idx], ha, b["masks"][t, idx] if g.discrete else None)
            logps.append(dist.log_prob(b["actions"][t, idx]))
            entropies.append(dist.entropy())
            v, hc = critic.step(b["critic_in"][t, idx], hc)
            values.append(v)
        return tuple(torch.cat(x) for x in (logps, entropies, values))  # type: ignore[return-value]

    env_steps, first_iteration = 0, 0
    if run.resume is not None:  # the networks, optimizer and RNG of the checkpoint; fresh episodes
        first_iteration, env_steps = restore(run.resume, actors, critics, optimizer, env.agents)
        if imag is not None and "world_model" in run.resume:
            imag.load_state_dict(run.resume["world_model"])
    elif run.init is not None:  # fine-tuning: the given actors (and critics where they fit), step 0
        run.log(0, {"init/critics_loaded": float(load_weights(run.init, actors, critics))})
    step = env.reset(seed=cfg.seed if run.resume is None else resume_seed(cfg.seed, env_steps))
    ep_return, ep_length = np.zeros((B, n_agents)), np.zeros(B, dtype=np.int64)
    finished_returns: list[np.ndarray] = []
    finished_lengths: list[np.ndarray] = []
    finished_info: list[dict[str, float]] = []  # what the env reported about each finished episode
    iterations = -(-cfg.total_env_steps // (T * B))
    start = time.perf_counter()

    for iteration in range(first_iteration, iterations):
        if cfg.anneal_lr:
            for param_group in optimizer.param_groups:
                param_group["lr"] = cfg.lr * (1.0 - iteration / iterations)

        # ---- rollout: T steps of every copy, every agent
        with torch.no_grad():
            if cfg.recurrent:
                starts = [
                    {"actor": cast(torch.Tensor, ha).clone(), "critic": cast(torch.Tensor, hc).clone()}
                    for ha, hc in zip(h_actor, h_critic, strict=True)
                ]
            for t in range(T):
                actions: dict[str, np.ndarray] = {}
                for i, g in enumerate(groups):
                    x, xc = inputs(g, step.obs, step.state)
                    mask = group_masks(g, step)
                    actor = cast(Actor, actors[i])
                    f = actor.features(x) if cfg.shared_encoder else None  # for the action and the value
                    dist, h_actor[i] = (
                        (actor.dist_of(f, mask), None) if f is not None else actor.step(x, h_actor[i], mask)
                    )
                    a = dist.sample()
                    b = buf[i]
                    b["actor_in"][t], b["critic_in"][t], b["actions"][t] = x, xc, a
                    b["logp"][t] = dist.log_prob(a)
                    b["values"][t], h_critic[i] = value(i, xc, h_critic[i], f)
                    if g.discrete:
                        b["masks"][t] = True if mask is None else mask
                    actions.update(env_actions(g, a))
                before, step = step, env.step(actions)
                if imag is not None:
                    imag.record(before, actions, step)
                if step.info and "episode" in step.info:
                    finished_info.extend(step.info["episode"])
                rewards = np.stack([step.rewards[a] for a in env.agents], axis=1).astype(np.float32)
                terminated[t, :, 0] = torch.from_numpy(step.terminated)
                done[t, :, 0] = torch.from_numpy(step.done)
                cut = step.truncated & ~step.terminated
                learned = learned_rewards(torch.from_numpy(rewards), cfg.team_reward)
                for i, g in enumerate(groups):
                    buf[i]["rewards"][t] = learned[:, g.index]
                    if cut.any() and step.final_obs is not None:  # bootstrap from the last observation
                        _, xc = inputs(g, step.final_obs, step.final_state)
                        buf[i]["final_values"][t] = value(i, xc, h_critic[i])[0]
                    h_actor[i] = reset_where(h_actor[i], step.done)  # a new episode starts afresh
                    h_critic[i] = reset_where(h_critic[i], step.done)

                ep_return += rewards
                ep_length += 1
                if step.done.any():
                    rows = np.flatnonzero(step.done)
                    finished_returns.append(ep_return[rows].copy())
                    finished_lengths.append(ep_length[rows].copy())
                    ep_return[rows], ep_length[rows] = 0.0, 0
            env_steps += T * B

            # ---- advantages and value targets, per agent
            advantages, targets = [], []
            for i, g in enumerate(groups):
                after = value(i, inputs(g, step.obs, step.state)[1], h_critic[i])[0]
                adv, ret = advantage(buf[i], after, terminated, done)
                if cfg.value_norm:
                    cast(Critic, critics[i]).norm.update(ret)  # real returns only
                advantages.append(adv)
                targets.append(ret)
            flat = [{key: v.reshape(T * B, *v.shape[2:]) for key, v in b.items()} for b in buf]
            n_rows, minibatches = T * B, cfg.minibatches
            model_metrics = imag.end_rollout() if imag is not None else {}
            if imag is not None and imag.ready:  # the update also learns from imagined steps
                for i, (extra, adv, ret) in enumerate(imagined()):
                    flat[i] = {k: torch.cat([flat[i][k], extra[k]]) for k in flat[i]}
                    advantages[i], targets[i] = torch.cat([advantages[i], adv]), torch.cat([targets[i], ret])
                minibatches = max(1, round(cfg.minibatches * len(targets[0]) / n_rows))  # same minibatch size
                n_rows = len(targets[0])
            if imag is not None:
                model_metrics["model/imagined_steps"] = float(imag.imagined_steps)

        # ---- update: epochs x minibatches over the copy-steps (recurrent: over the copies, each replayed
        # over the whole rollout from the states it began with), every group in one loss
        stats: dict[str, list[float]] = {}
        for _ in range(cfg.epochs):
            for idx in torch.randperm(B if cfg.recurrent else n_rows).chunk(minibatches):
                loss = torch.zeros(())
                for i, g in enumerate(groups):
                    if cfg.recurrent:
                        picked = (torch.arange(T)[:, None] * B + idx[None, :]).reshape(-1)  # [T, m], flat
                        logp, entropy_all, predicted = replay(i, g, idx)
                    else:
                        picked = idx
                        actor, mask = cast(Actor, actors[i]), flat[i]["masks"][idx] if g.discrete else None
                        f = actor.features(flat[i]["actor_in"][idx]) if cfg.shared_encoder else None
                        dist = (
                            actor.dist(flat[i]["actor_in"][idx], mask)
                            if f is None
                            else actor.dist_of(f, mask)
                        )
                        logp, entropy_all = dist.log_prob(flat[i]["actions"][idx]), dist.entropy()
                        predicted = critics[i](shared(i, flat[i]["critic_in"][idx], f))
                    b = flat[i]
                    entropy = entropy_all.mean()
                    pg_loss = policy_loss(logp, b["logp"][picked], advantages[i][picked], cfg.clip)
                    target, old = targets[i][picked], b["values"][picked]
                    if cfg.value_norm:
                        norm = cast(Critic, critics[i]).norm
                        target, old = norm.normalize(target), norm.normalize(old)
                    if n_rows > T * B and not cast(ModelConfig, cfg.model).critic_targets:
                        real = picked < T * B  # the critic learns from the real steps only
                        predicted, old, target = predicted[real], old[real], target[real]
                    v_loss = value_loss(predicted, old, target, cfg.value_clip) if len(target) else 0.0 * loss
                    loss = loss + pg_loss - cfg.ent_coef * entropy + v_loss
                    with torch.no_grad():
                        log_ratio = logp - b["logp"][picked]
                        for key, val in (
                            ("loss/policy", pg_loss),
                            ("loss/value", v_loss),
                            ("entropy", entropy),
                            ("approx_kl", (log_ratio.exp() - 1 - log_ratio).mean()),
                            ("clip_frac", ((log_ratio.exp() - 1).abs() > cfg.clip).float().mean()),
                        ):
                            stats.setdefault(key, []).append(float(val))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(actors.parameters(), cfg.max_grad_norm, foreach=True)
                nn.utils.clip_grad_norm_(critics.parameters(), cfg.max_grad_norm, foreach=True)
                optimizer.step()

        # ---- log, checkpoint
        metrics = {key: float(np.mean(vals)) for key, vals in stats.items()}
        done_steps = (iteration + 1 - first_iteration) * T * B
        metrics["agent_steps_per_s"] = done_steps * n_agents / (time.perf_counter() - start)
        metrics["lr"] = optimizer.param_groups[0]["lr"]
        metrics.update(episode_metrics(finished_returns, finished_lengths, env.agents))
        metrics.update(model_metrics)
        metrics.update(info_metrics(finished_info))
        run.log(env_steps, metrics)
        run.after_update(env_steps, cfg.checkpoint_every, partial(checkpoint, env_steps, iteration + 1))

    return run.finish(env, checkpoint(env_steps, max(iterations, first_iteration)), env_steps, start)


RESUMABLE = True  # teamrl marl train --resume


# ---------------------------------------------------------------------------------------------- actor
def make_actor(
    checkpoint: dict[str, Any], deterministic: bool = True
) -> Callable[[VecStep], dict[str, np.ndarray]]:
    """Rebuild a checkpoint's actors; the returned function maps a ``VecStep`` to every agent's action."""
    Config(**checkpoint["config"])  # a checkpoint of this algorithm's settings (a clear error otherwise)
    groups, actors = load_actors(checkpoint)
    # recurrent: each group's GRU state, carried from call to call and reset where step.done says an
    # episode ended (the first call starts from zeros); a new actor for every evaluation
    states: list[torch.Tensor | None] = [None] * len(groups)

    @torch.no_grad()
    def act(step: VecStep) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i, (g, actor) in enumerate(zip(groups, actors, strict=True)):
            x, mask = actor_input(g, step.obs, step.state), group_masks(g, step)
            h = reset_where(states[i], step.done)
            if deterministic:
                a, states[i] = actor.mode_step(x, h, mask)
            else:
                dist, states[i] = actor.step(x, h, mask)
                a = dist.sample()
            out.update(env_actions(g, a))
        return out

    return act
