"""QMIX (Rashid et al. 2018) and VDN (Sunehag et al. 2018): value decomposition for cooperative teams.

One file, read top to bottom:

* every agent has a recurrent Q network (MLP -> GRU -> Q per action) over its own observation, its
  previous action (one-hot) and, when the network is shared, a one-hot agent id. Agents with the same
  observation / action spaces share one network (a *group*);
* the team's value ``Q_tot(s, a)`` mixes the chosen per-agent values: VDN sums them, QMIX feeds them
  through a one-hidden-layer network whose weights are produced from the global state by
  hypernetworks and made non-negative with ``abs``, so ``dQ_tot/dQ_i >= 0`` and the greedy joint
  action is the tuple of per-agent greedy actions;
* the team reward is the sum of the agents' rewards; the TD target is double-Q (the online network
  picks the next actions, the target network rates them), optionally a TD(lambda) return;
* replay holds whole episodes (padded to ``max_episode_steps``, with a ``filled`` mask), so the GRU is
  unrolled from each episode's first step, as in pymarl; a copy cut by a time limit is bootstrapped
  from its ``final_obs`` / ``final_state``;
* exploration is epsilon-greedy over the allowed actions, epsilon annealed linearly over env steps;
  action masks are respected when acting and in the target's max;
* target networks are copied every ``target_update_interval`` episodes (``hard``) or Polyak-averaged
  after every update (``soft``, ``tau``).

Defaults follow pymarl / EPyMARL (64-unit GRU, 32-unit mixer, 2-layer hypernetworks, batch of 32
episodes, epsilon 1 -> 0.05, target copy every 200 episodes, Adam lr 5e-4, gradient clip 10).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Literal, cast

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from teamrl.marl.core import VecMultiAgentEnv, VecStep
from teamrl.marl.nets import RunningMeanStd
from teamrl.marl.replay import (
    EpisodeBuffer,
    buffer_state,
    check_keys,
    load_buffer_state,
    load_rng_state,
    rng_state,
)
from teamrl.marl.run import RunContext, episode_metrics, resume_seed

MASKED_Q = -1e9


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    total_env_steps: int = Field(500_000, ge=1, description="env steps (one step of one copy) to train")
    seed: int = 0
    num_envs: int = Field(8, ge=1, description="environment copies stepped in lock step")
    mixer: Literal["qmix", "vdn"] = "qmix"
    gamma: float = Field(0.99, ge=0, le=1)
    lr: float = Field(5e-4, gt=0)
    batch_size: int = Field(32, ge=1, description="episodes per gradient step")
    buffer_episodes: int = Field(5000, ge=1, description="replay capacity in episodes")
    updates_per_episode: float = Field(1.0, gt=0, description="gradient steps per finished episode")
    double_q: bool = True
    td_lambda: float = Field(0.0, ge=0, le=1, description="0: one-step TD target; >0: TD(lambda) return")
    rnn_hidden: int = Field(64, ge=1)
    mixing_embed_dim: int = Field(32, ge=1)
    hypernet_embed: int = Field(64, ge=1)
    last_action: bool = Field(True, description="the agent network also sees its previous action")
    agent_id: bool = Field(True, description="one-hot agent id in the inputs of shared networks")
    target_update: Literal["hard", "soft"] = "hard"
    target_update_interval: int = Field(200, ge=1, description="hard: episodes between target copies")
    tau: float = Field(0.005, gt=0, le=1, description="soft: Polyak step per gradient step")
    epsilon_start: float = Field(1.0, ge=0, le=1)
    epsilon_finish: float = Field(0.05, ge=0, le=1)
    epsilon_anneal_steps: int = Field(50_000, ge=1, description="env steps to anneal epsilon over")
    reward_scale: float = Field(1.0, gt=0, description="the team reward is multiplied by this")
    standardise_rewards: bool = Field(
        False,
        description="learn on (r - mean) / std of the team reward (running, as EPyMARL): a constant "
        "shift per step for envs that end by time limit; it changes incentives where episodes terminate",
    )
    grad_clip: float = Field(10.0, gt=0)
    max_episode_steps: int | None = Field(
        None, ge=1, description="replay episode length; default: the env's max_steps (longer ones are cut)"
    )
    log_every: int = Field(10_000, ge=1, description="env steps between log rows")
    checkpoint_every: int = Field(250_000, ge=1, description="env steps between checkpoints")
    threads: int = Field(1, ge=1, description="torch threads")


# Per-environment defaults, applied over Config's (and under the user's overrides) by teamrl.marl.train.
# simple_spread: gamma 0.95 (MADDPG's MPE setting) and half a gradient step per episode, stable over 3 seeds
# at 300k env steps; there lr 1e-3, td_lambda 0.6 or standardise_rewards made Q_tot diverge.
ENV_PRESETS: dict[str, dict[str, Any]] = {
    "simple_spread": {"gamma": 0.95, "updates_per_episode": 0.5},
    "connect_four": {"max_episode_steps": 42},  # no time limit: the longest possible game
    "tictactoe": {"max_episode_steps": 9},
}


# --------------------------------------------------------------------------------------------- groups
@dataclass
class Group:
    """Agents that share one Q network; everything ``make_actor`` needs to rebuild it."""

    agents: list[str]
    index: list[int]  # positions of the agents in env.agents
    obs_dim: int
    n_actions: int

    @property
    def k(self) -> int:
        return len(self.agents)


def make_groups(env: VecMultiAgentEnv) -> list[Group]:
    by_key: dict[tuple[int, int], list[str]] = {}
    for a in env.agents:
        space = env.action_spaces[a]
        if not isinstance(space, spaces.Discrete):
            raise ValueError(f"QMIX / VDN need discrete actions; agent {a!r} has {space}")
        by_key.setdefault((int(np.prod(env.observation_spaces[a].shape)), int(space.n)), []).append(a)
    return [
        Group(agents, [env.agents.index(a) for a in agents], obs_dim, n_actions)
        for (obs_dim, n_actions), agents in by_key.items()
    ]


def input_dim(g: Group, cfg: Config) -> int:
    return g.obs_dim + (g.n_actions if cfg.last_action else 0) + (g.k if cfg.agent_id else 0)


def agent_inputs(g: Group, cfg: Config, obs: torch.Tensor, last_action: torch.Tensor) -> torch.Tensor:
    """``obs [..., k, obs_dim]``, ``last_action [..., k]`` (-1: none) -> network inputs ``[..., k, in]``."""
    parts = [obs]
    if cfg.last_action:
        parts.append(
            F.one_hot(last_action.clamp(min=0), g.n_actions).float() * (last_action >= 0).unsqueeze(-1)
        )
    if cfg.agent_id:
        parts.append(torch.eye(g.k).expand(*obs.shape[:-1], g.k))
    return torch.cat(parts, dim=-1)


# ------------------------------------------------------------------------------------------- networks
class RNNAgent(nn.Module):
    """Per-agent Q network: ReLU MLP layer, GRU, linear head over the actions."""

    def __init__(self, in_dim: int, hidden: int, n_actions: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_actions)
        self.hidden = hidden

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [N, T, in]``, ``h [N, hidden]`` (None: zeros) -> (Q ``[N, T, n_actions]``, last h)."""
        out, h = self.rnn(F.relu(self.fc(x)), None if h is None else h.unsqueeze(0).contiguous())
        return self.head(out), h.squeeze(0)


class VDNMixer(nn.Module):
    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``q [..., n_agents]`` -> ``Q_tot [...]``: the sum."""
        return q.sum(-1)


def hypernet(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


class QMixer(nn.Module):
    """Monotonic mixer: ``Q_tot = elu(q W1 + b1) w2 + V(s)`` with ``W1 = |h1(s)|``, ``w2 = |h2(s)|``."""

    def __init__(self, n_agents: int, state_dim: int, embed: int, hypernet_embed: int) -> None:
        super().__init__()
        self.n_agents, self.embed = n_agents, embed
        # PyTorch's default (small) init, as in pymarl: large initial mixing weights make Q_tot a
        # high-gain function of the agents' Q values and the TD learning diverges
        self.hyper_w1 = hypernet(state_dim, hypernet_embed, n_agents * embed)
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.hyper_w2 = hypernet(state_dim, hypernet_embed, embed)
        self.hyper_v = hypernet(state_dim, embed, 1)

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``q [..., n_agents]``, ``state [..., state_dim]`` -> ``Q_tot [...]``."""
        lead = q.shape[:-1]
        q = q.reshape(-1, 1, self.n_agents)
        s = state.reshape(-1, state.shape[-1])
        w1 = self.hyper_w1(s).abs().view(-1, self.n_agents, self.embed)
        b1 = self.hyper_b1(s).view(-1, 1, self.embed)
        hidden = F.elu(torch.bmm(q, w1) + b1)
        w2 = self.hyper_w2(s).abs().view(-1, self.embed, 1)
        v = self.hyper_v(s).view(-1, 1, 1)
        return (torch.bmm(hidden, w2) + v).view(lead)


def make_mixer(cfg: Config, n_agents: int, state_dim: int) -> nn.Module:
    if cfg.mixer == "vdn":
        return VDNMixer()
    return QMixer(n_agents, state_dim, cfg.mixing_embed_dim, cfg.hypernet_embed)


# ----------------------------------------------------------------------------------------------- math
def masked_max_target(
    q_online_next: torch.Tensor, q_target_next: torch.Tensor, mask_next: torch.Tensor, double_q: bool
) -> torch.Tensor:
    """Per-agent bootstrap values ``[...]`` from next-step Q ``[..., A]`` over the allowed actions:
    double-Q rates the online network's argmax with the target network; else the target's max."""
    if double_q:
        best = q_online_next.masked_fill(~mask_next, MASKED_Q).argmax(-1, keepdim=True)
        return q_target_next.gather(-1, best).squeeze(-1)
    return q_target_next.masked_fill(~mask_next, MASKED_Q).max(-1).values


def td_targets(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    filled: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Targets ``[B, T]`` for steps t = 0..T-1 of padded episodes.

    ``next_values[:, t]`` is the target mixer's value after step t. With ``lam = 0`` this is the
    one-step target ``r_t + gamma (1 - term_t) Q'_{t+1}``; otherwise the TD(lambda) return
    ``G_t = r_t + gamma (1 - term_t) ((1 - lam) Q'_{t+1} + lam G_{t+1})``, which bootstraps fully from
    ``Q'`` after an episode's last step (where ``filled[:, t+1]`` is False).
    """
    not_term = 1.0 - terminated.float()
    if lam == 0.0:
        return rewards + gamma * not_term * next_values
    T = rewards.shape[1]
    out = torch.zeros_like(rewards)
    g_next = next_values[:, -1]
    for t in reversed(range(T)):
        if t + 1 < T:
            g_next = torch.where(filled[:, t + 1], g_next, next_values[:, t])
        else:
            g_next = next_values[:, t]
        out[:, t] = rewards[:, t] + gamma * not_term[:, t] * ((1 - lam) * next_values[:, t] + lam * g_next)
        g_next = out[:, t]
    return out


@torch.no_grad()
def hard_update(target: nn.Module, source: nn.Module) -> None:
    target.load_state_dict(source.state_dict())


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau source``."""
    for t, s in zip(target.parameters(), source.parameters(), strict=True):
        t.lerp_(s, tau)


def epsilon_at(cfg: Config, env_steps: int) -> float:
    frac = min(1.0, env_steps / cfg.epsilon_anneal_steps)
    return (1.0 - frac) * cfg.epsilon_start + frac * cfg.epsilon_finish


def epsilon_greedy(q: torch.Tensor, mask: torch.Tensor, epsilon: float, gen: torch.Generator) -> torch.Tensor:
    """``q [..., A]``, ``mask [..., A]`` -> actions ``[...]``: greedy over the allowed actions, or with
    probability ``epsilon`` uniform over them."""
    greedy = q.masked_fill(~mask, MASKED_Q).argmax(-1)
    if epsilon <= 0.0:
        return greedy
    random = torch.multinomial(mask.reshape(-1, mask.shape[-1]).float(), 1, generator=gen).view(greedy.shape)
    explore = torch.rand(greedy.shape, generator=gen) < epsilon
    return torch.where(explore, random, greedy)


# ---------------------------------------------------------------------------------------------- actor
class RecurrentActor:
    """Acts (epsilon-greedy; greedy with ``epsilon = 0``) from ``VecStep`` to ``VecStep``, keeping each
    copy's GRU state and previous action. Rows whose copy has just started a new episode (``step.done``)
    are reset, and so is everything when the number of copies changes or ``reset()`` is called."""

    def __init__(
        self, groups: list[Group], nets: nn.ModuleList, cfg: Config, seed: int = 0, epsilon: float = 0.0
    ) -> None:
        self.groups, self.nets, self.cfg, self.epsilon = groups, nets, cfg, epsilon
        self.gen = torch.Generator().manual_seed(seed)
        self.h: list[torch.Tensor] | None = None
        self.last: list[torch.Tensor] = []

    def reset(self) -> None:
        self.h = None

    @torch.no_grad()
    def act(self, step: VecStep, epsilon: float = 0.0) -> tuple[dict[str, np.ndarray], list[torch.Tensor]]:
        """Returns the env actions and, per group, the actions as a ``[B, k]`` tensor."""
        B = len(step.state)
        if self.h is None or self.h[0].shape[0] != B:
            self.h = [torch.zeros(B, g.k, self.cfg.rnn_hidden) for g in self.groups]
            self.last = [torch.full((B, g.k), -1, dtype=torch.long) for g in self.groups]
        elif step.done.any():
            rows = torch.from_numpy(step.done)
            for h, last in zip(self.h, self.last, strict=True):
                h[rows] = 0.0
                last[rows] = -1
        out: dict[str, np.ndarray] = {}
        per_group = []
        for i, (g, net) in enumerate(zip(self.groups, self.nets, strict=True)):
            obs = torch.from_numpy(np.stack([step.obs[a].reshape(B, -1) for a in g.agents], 1)).float()
            x = agent_inputs(g, self.cfg, obs, self.last[i])
            q, h = net(x.view(B * g.k, 1, -1), self.h[i].view(B * g.k, -1))
            self.h[i] = h.view(B, g.k, -1)
            a = epsilon_greedy(q.view(B, g.k, -1), group_masks(g, step), epsilon, self.gen)
            self.last[i] = a
            per_group.append(a)
            out.update({agent: a[:, j].numpy() for j, agent in enumerate(g.agents)})
        return out, per_group

    def __call__(self, step: VecStep) -> dict[str, np.ndarray]:
        return self.act(step, self.epsilon)[0]


def group_masks(g: Group, step: VecStep, final: bool = False) -> torch.Tensor:
    """``[B, k, A]`` allowed actions (all True when the env has no masks; after an episode's last step
    no mask is given, and its bootstrap value is then a max over all actions)."""
    B = len(step.state)
    if final or step.action_masks is None or g.agents[0] not in step.action_masks:
        return torch.ones(B, g.k, g.n_actions, dtype=torch.bool)
    return torch.from_numpy(np.stack([step.action_masks[a] for a in g.agents], 1)).bool()


# --------------------------------------------------------------------------------------------- replay
# ---------------------------------------------------------------------------------------------- learn
def unroll(g: Group, cfg: Config, net: RNNAgent, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Q values ``[B, L+1, k, A]`` over padded episodes ``obs [B, L+1, k, d]``, ``actions [B, L, k]``,
    the GRU started from zeros at each episode's first step (padding only follows the valid steps)."""
    B, L1 = obs.shape[:2]
    last = torch.cat([torch.full((B, 1, g.k), -1, dtype=torch.long), actions], dim=1)
    x = agent_inputs(g, cfg, obs, last)  # [B, L+1, k, in]
    q, _ = net(x.transpose(1, 2).reshape(B * g.k, L1, -1))
    return q.view(B, g.k, L1, -1).transpose(1, 2)


def qmix_loss(
    batch: dict[str, Any],
    groups: list[Group],
    cfg: Config,
    nets: nn.ModuleList,
    target_nets: nn.ModuleList,
    mixer: nn.Module,
    target_mixer: nn.Module,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Masked mean squared TD error of ``Q_tot`` over the valid steps of a batch of episodes."""
    chosen, bootstrap = [], []
    for i, g in enumerate(groups):
        q = unroll(g, cfg, cast(RNNAgent, nets[i]), batch["obs"][i], batch["actions"][i])
        chosen.append(q[:, :-1].gather(-1, batch["actions"][i].unsqueeze(-1)).squeeze(-1))
        with torch.no_grad():
            q_target = unroll(g, cfg, cast(RNNAgent, target_nets[i]), batch["obs"][i], batch["actions"][i])
            bootstrap.append(
                masked_max_target(q[:, 1:].detach(), q_target[:, 1:], batch["masks"][i][:, 1:], cfg.double_q)
            )
    order = np.argsort(np.concatenate([g.index for g in groups]))  # back to env.agents order
    chosen_q = torch.cat(chosen, dim=-1)[..., order]  # [B, L, n_agents]
    next_q = torch.cat(bootstrap, dim=-1)[..., order]
    state = batch["state"]
    q_tot = mixer(chosen_q, state[:, :-1])
    with torch.no_grad():
        next_tot = target_mixer(next_q, state[:, 1:])
        target = td_targets(
            batch["reward"],
            batch["terminated"],
            batch["filled"],
            next_tot,
            cfg.gamma,
            cfg.td_lambda,
        )
    filled = batch["filled"].float()
    loss = ((q_tot - target).square() * filled).sum() / filled.sum()
    n_valid = filled.sum() * chosen_q.shape[-1]
    stats = {
        "q_taken_mean": float((chosen_q.detach() * filled.unsqueeze(-1)).sum() / n_valid),
        "target_mean": float((target * filled).sum() / filled.sum()),
    }
    return loss, stats


# ---------------------------------------------------------------------------------------------- train
def train(cfg: Config, run: RunContext) -> dict[str, Any]:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    env = run.make_env(cfg.num_envs, cfg.seed)
    B, n_agents = env.num_envs, len(env.agents)
    T = cfg.max_episode_steps or env.max_steps
    if T is None:
        raise ValueError("the env has no max_steps; set max_episode_steps (the replay episode length)")
    groups = make_groups(env)
    nets = nn.ModuleList(RNNAgent(input_dim(g, cfg), cfg.rnn_hidden, g.n_actions) for g in groups)
    mixer = make_mixer(cfg, n_agents, env.state_dim)
    target_nets, target_mixer = copy.deepcopy(nets), copy.deepcopy(mixer)
    params = [*nets.parameters(), *mixer.parameters()]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    actor = RecurrentActor(groups, nets, cfg, seed=cfg.seed)

    def checkpoint(env_steps: int) -> dict[str, Any]:
        return {
            "algorithm": cfg.mixer,
            "config": cfg.model_dump(),
            "agents": list(env.agents),
            "groups": [asdict(g) for g in groups],
            "state_dim": env.state_dim,
            "agent_nets": [n.state_dict() for n in nets],
            "mixer": mixer.state_dict(),
            "env_steps": env_steps,
            # what --resume continues from (RESUME_KEYS): the episodes in play are not kept
            "targets": {"nets": target_nets.state_dict(), "mixer": target_mixer.state_dict()},
            "optimizer": optimizer.state_dict(),
            "replay": buffer_state(replay),
            "counters": {"episodes": episodes, "last_target_copy": last_target_copy, "credit": update_credit},
            "reward_stats": reward_stats.state_dict(),
            "rng": {"numpy": rng_state(rng), "torch": torch.get_rng_state(), "actor": actor.gen.get_state()},
        }

    replay = EpisodeBuffer(cfg.buffer_episodes, T, groups, env.state_dim)
    stage = EpisodeBuffer(B, T, groups, env.state_dim)  # the episodes being played, one row per copy
    t_ep = np.zeros(B, dtype=np.int64)

    def stage_obs(step: VecStep, rows: np.ndarray, final: bool) -> None:
        # a step that ends episodes carries their final obs / state
        obs = cast(dict[str, np.ndarray], step.final_obs if final else step.obs)
        state = cast(np.ndarray, step.final_state if final else step.state)
        for i, g in enumerate(groups):
            stage.obs[i][rows, t_ep[rows]] = np.stack(
                [obs[a][rows].reshape(len(rows), -1) for a in g.agents], 1
            )
            stage.masks[i][rows, t_ep[rows]] = group_masks(g, step, final).numpy()[rows]
        stage.state[rows, t_ep[rows]] = state[rows]

    env_steps = episodes = last_log = last_target_copy = 0
    update_credit = 0.0
    reward_stats = RunningMeanStd()  # of the (scaled) team reward, for standardise_rewards
    if run.resume is not None:  # networks, targets, optimizer, replay, counters and RNGs; fresh episodes
        r = run.resume
        restore_check(r)
        for net, state in zip(nets, r["agent_nets"], strict=True):
            net.load_state_dict(state)
        mixer.load_state_dict(r["mixer"])
        target_nets.load_state_dict(r["targets"]["nets"])
        target_mixer.load_state_dict(r["targets"]["mixer"])
        optimizer.load_state_dict(r["optimizer"])
        load_buffer_state(replay, r["replay"])
        c = r["counters"]
        episodes, last_target_copy, update_credit = (
            int(c["episodes"]),
            int(c["last_target_copy"]),
            c["credit"],
        )
        reward_stats.load_state_dict(r["reward_stats"])
        load_rng_state(rng, r["rng"]["numpy"])
        torch.set_rng_state(r["rng"]["torch"])
        actor.gen.set_state(r["rng"]["actor"])
        env_steps = last_log = int(r["env_steps"])
    step = env.reset(seed=cfg.seed if run.resume is None else resume_seed(cfg.seed, env_steps))
    all_rows = np.arange(B)
    stage_obs(step, all_rows, final=False)
    ep_return = np.zeros((B, n_agents))
    ep_length = np.zeros(B, dtype=np.int64)
    finished_returns: list[np.ndarray] = []
    finished_lengths: list[np.ndarray] = []
    stats: dict[str, list[float]] = {"loss": [], "q_taken_mean": [], "target_mean": [], "grad_norm": []}
    start, first_steps = time.perf_counter(), env_steps

    while env_steps < cfg.total_env_steps:
        # ---- act and store
        epsilon = epsilon_at(cfg, env_steps)
        actions, per_group = actor.act(step, epsilon)
        step = env.step(actions)
        env_steps += B
        for i in range(len(groups)):
            stage.actions[i][all_rows, t_ep] = per_group[i].numpy()
        rewards = np.stack([step.rewards[a] for a in env.agents], axis=1)
        stage.reward[all_rows, t_ep] = rewards.sum(1)
        reward_stats.update(torch.from_numpy(rewards.sum(1) * cfg.reward_scale))
        stage.terminated[all_rows, t_ep] = step.terminated
        stage.filled[all_rows, t_ep] = True
        t_ep += 1
        done = step.done
        live = np.flatnonzero(~done)
        if len(live):
            stage_obs(step, live, final=False)
        if done.any():
            stage_obs(step, np.flatnonzero(done), final=True)
        ep_return += rewards
        ep_length += 1
        if done.any():
            rows = np.flatnonzero(done)
            finished_returns.append(ep_return[rows].copy())
            finished_lengths.append(ep_length[rows].copy())
            ep_return[rows] = 0.0
            ep_length[rows] = 0
        # an episode is stored when it ends, or cut (and continued in a new row) when it fills T steps
        ended = np.flatnonzero(done | (t_ep >= T))
        if len(ended):
            replay.add(stage, ended)
            stage.clear_rows(ended)
            t_ep[ended] = 0
            stage_obs(step, ended, final=False)
            episodes += len(ended)
            update_credit += cfg.updates_per_episode * len(ended)

        # ---- learn
        if replay.size >= cfg.batch_size:
            while update_credit >= 1.0:
                update_credit -= 1.0
                batch = replay.sample(cfg.batch_size, rng)
                batch["reward"] = batch["reward"] * cfg.reward_scale
                if cfg.standardise_rewards:
                    batch["reward"] = reward_stats.normalize(batch["reward"])
                loss, info = qmix_loss(batch, groups, cfg, nets, target_nets, mixer, target_mixer)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                optimizer.step()
                if cfg.target_update == "soft":
                    soft_update(target_nets, nets, cfg.tau)
                    soft_update(target_mixer, mixer, cfg.tau)
                stats["loss"].append(loss.item())
                stats["grad_norm"].append(float(grad_norm))
                for key, value in info.items():
                    stats[key].append(value)
        else:
            update_credit = 0.0
        if cfg.target_update == "hard" and episodes - last_target_copy >= cfg.target_update_interval:
            hard_update(target_nets, nets)
            hard_update(target_mixer, mixer)
            last_target_copy = episodes

        # ---- log, checkpoint
        if env_steps - last_log >= cfg.log_every or env_steps >= cfg.total_env_steps:
            last_log = env_steps
            metrics = {k: float(np.mean(v)) for k, v in stats.items() if v}
            metrics["epsilon"] = epsilon
            metrics["episodes"] = episodes
            metrics["agent_steps_per_s"] = (
                (env_steps - first_steps) * n_agents / (time.perf_counter() - start)
            )
            metrics.update(episode_metrics(finished_returns, finished_lengths, env.agents))
            stats = {k: [] for k in stats}
            run.log(env_steps, metrics)
        run.after_update(env_steps, cfg.checkpoint_every, partial(checkpoint, env_steps))

    return {**run.finish(env, checkpoint(env_steps), env_steps, start), "episodes": episodes}


RESUMABLE = True  # teamrl marl train --resume
RESUME_KEYS = ("targets", "optimizer", "replay", "counters", "reward_stats", "rng")


def restore_check(checkpoint: dict[str, Any]) -> None:
    """ValueError unless ``checkpoint`` can be resumed from."""
    check_keys(checkpoint, RESUME_KEYS)


def make_actor(
    checkpoint: dict[str, Any], deterministic: bool = True
) -> Callable[[VecStep], dict[str, np.ndarray]]:
    """Rebuild the agent networks of a checkpoint. The returned actor is greedy (``deterministic``) or
    epsilon-greedy with ``epsilon_finish``, and keeps each copy's GRU state between calls: rows are reset
    where ``step.done``; call ``actor.reset()`` (or make a new actor) after an ``env.reset()``."""
    cfg = Config(**checkpoint["config"])
    groups = [Group(**g) for g in checkpoint["groups"]]
    nets = nn.ModuleList(RNNAgent(input_dim(g, cfg), cfg.rnn_hidden, g.n_actions) for g in groups)
    nets.load_state_dict(
        {f"{i}.{k}": v for i, sd in enumerate(checkpoint["agent_nets"]) for k, v in sd.items()}
    )
    nets.eval()
    return RecurrentActor(
        groups, nets, cfg, seed=cfg.seed, epsilon=0.0 if deterministic else cfg.epsilon_finish
    )
