"""MADDPG (Lowe et al. 2017): deterministic actors trained by centralised critics.

One file, read top to bottom:

* each agent ``i`` has its own actor ``mu_i(o_i)`` and its own critic ``Q_i(x, a_1, ..., a_N)``, where
  ``x`` is every agent's observation (``critic_input: all_obs``, as in the paper) or the global state;
  each critic learns its own agent's reward, so the teams may be cooperative, competitive or mixed;
* discrete actions: the actor outputs logits and acts with a Gumbel-softmax sample (Jang et al. 2017);
  the straight-through estimator makes the sample one-hot in the forward pass while the gradient
  flows through the soft probabilities (``gumbel_temperature``); greedy evaluation takes the argmax;
* continuous actions: ``tanh`` squashed into the action box, explored with Gaussian or
  Ornstein-Uhlenbeck noise;
* critics regress on ``r_i + gamma (1 - term) Q'_i(x', mu'_1(o'_1), ..., mu'_N(o'_N))`` with target
  actors / critics that follow the online ones by Polyak averaging (``tau``); actor ``i`` ascends
  ``Q_i`` with its own action replaced by ``mu_i(o_i)`` and the others' taken from the replay, plus a
  small penalty on the squared pre-activations (``actor_reg``), as in the reference code;
* transitions of all copies go to one replay buffer; a copy cut by a time limit is bootstrapped from
  its ``final_obs`` / ``final_state``.

Defaults follow the paper's MPE settings: two 64-unit ReLU layers, Adam lr 1e-2, batch 1024,
gamma 0.95, tau 0.01, an update every 100 env steps, gradient clip 0.5.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Sequence
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
from teamrl.marl.nets import mlp
from teamrl.marl.replay import (
    ReplayBuffer,
    buffer_state,
    check_keys,
    load_buffer_state,
    load_rng_state,
    rng_state,
)
from teamrl.marl.run import RunContext, episode_metrics, resume_seed

MASKED_LOGIT = -1e9


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    total_env_steps: int = Field(500_000, ge=1, description="env steps (one step of one copy) to train")
    seed: int = 0
    num_envs: int = Field(8, ge=1, description="environment copies stepped in lock step")
    gamma: float = Field(0.95, ge=0, le=1)
    actor_lr: float = Field(1e-2, gt=0)
    critic_lr: float = Field(1e-2, gt=0)
    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    batch_size: int = Field(1024, ge=1, description="transitions per gradient step")
    buffer_size: int = Field(500_000, ge=1, description="replay capacity in env steps")
    learning_starts: int = Field(10_000, ge=0, description="env steps collected before the first update")
    train_every: int = Field(100, ge=1, description="env steps between rounds of gradient steps")
    gradient_steps: int = Field(1, ge=1, description="gradient steps per agent per round")
    tau: float = Field(0.01, gt=0, le=1, description="Polyak step of the target networks per gradient step")
    critic_input: Literal["all_obs", "state"] = "all_obs"
    gumbel_temperature: float = Field(1.0, gt=0)
    actor_reg: float = Field(1e-3, ge=0, description="penalty on the actor's squared pre-activations")
    grad_clip: float = Field(0.5, gt=0)
    exploration: Literal["gaussian", "ou"] = Field("gaussian", description="noise for continuous actions")
    noise_std: float = Field(
        0.1, ge=0, description="Gaussian noise / OU sigma, as a fraction of the half range"
    )
    ou_theta: float = Field(0.15, ge=0)
    log_every: int = Field(10_000, ge=1, description="env steps between log rows")
    checkpoint_every: int = Field(250_000, ge=1, description="env steps between checkpoints")
    threads: int = Field(1, ge=1, description="torch threads")


# Per-environment defaults, applied over Config's (and under the user's overrides) by teamrl.marl.train.
ENV_PRESETS: dict[str, dict[str, Any]] = {}


# --------------------------------------------------------------------------------------------- agents
@dataclass
class AgentSpec:
    """One agent's spaces; everything ``make_actor`` needs to rebuild its actor."""

    name: str
    obs_dim: int
    discrete: bool
    act_dim: int  # number of actions (discrete, one-hot in the critic) or action dimensions
    low: list[float] | None = None
    high: list[float] | None = None


def make_specs(env: VecMultiAgentEnv) -> list[AgentSpec]:
    specs = []
    for a in env.agents:
        act = env.action_spaces[a]
        obs_dim = int(np.prod(env.observation_spaces[a].shape))
        if isinstance(act, spaces.Discrete):
            specs.append(AgentSpec(a, obs_dim, True, int(act.n)))
        elif isinstance(act, spaces.Box) and len(act.shape) == 1:
            low = np.asarray(act.low, np.float64).ravel()
            high = np.asarray(act.high, np.float64).ravel()
            if not (np.isfinite(low).all() and np.isfinite(high).all()):
                raise ValueError(f"MADDPG needs a bounded action box; agent {a!r} has {act}")
            specs.append(AgentSpec(a, obs_dim, False, int(np.prod(act.shape)), low.tolist(), high.tolist()))
        else:
            raise ValueError(f"unsupported action space (discrete or a 1-D box) for agent {a!r}: {act}")
    return specs


# ----------------------------------------------------------------------------------------------- math
def gumbel_softmax(
    logits: torch.Tensor, temperature: float, hard: bool = True, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A sample of ``softmax((logits + Gumbel noise) / temperature)``; ``hard``: the one-hot of its argmax
    in the forward pass with the gradient of the soft sample (straight-through)."""
    u = torch.rand(logits.shape, generator=generator).clamp(1e-10, 1.0 - 1e-7)
    soft = F.softmax((logits - torch.log(-torch.log(u))) / temperature, dim=-1)
    if not hard:
        return soft
    one_hot = F.one_hot(soft.argmax(-1), logits.shape[-1]).to(soft.dtype)
    return one_hot + (soft - soft.detach())  # exactly one-hot forward, soft gradient


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau source``."""
    for t, s in zip(target.parameters(), source.parameters(), strict=True):
        t.lerp_(s, tau)


class Actor(nn.Module):
    """Logits (discrete) or a squashed action in ``[low, high]`` (continuous) from one agent's obs."""

    low: torch.Tensor  # buffers, continuous actions only
    high: torch.Tensor

    def __init__(self, spec: AgentSpec, hidden: list[int]) -> None:
        super().__init__()
        self.spec = spec
        self.net = mlp([spec.obs_dim, *hidden, spec.act_dim], nn.ReLU, out_gain=0.01)
        if not spec.discrete:
            self.register_buffer("low", torch.tensor(spec.low, dtype=torch.float32))
            self.register_buffer("high", torch.tensor(spec.high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Pre-activations: logits, or the action before ``tanh``."""
        return self.net(obs)

    def squash(self, pre: torch.Tensor) -> torch.Tensor:
        return self.low + (torch.tanh(pre) + 1.0) * 0.5 * (self.high - self.low)

    def action(
        self,
        pre: torch.Tensor,
        mask: torch.Tensor | None,
        temperature: float,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The action as the critic sees it: a straight-through Gumbel one-hot, or the squashed action."""
        if not self.spec.discrete:
            return self.squash(pre)
        if mask is not None:
            pre = pre.masked_fill(~mask, MASKED_LOGIT)
        return gumbel_softmax(pre, temperature, hard=True, generator=generator)


def step_masks(specs: list[AgentSpec], step: VecStep) -> list[torch.Tensor | None]:
    if step.action_masks is None:
        return [None] * len(specs)
    return [
        torch.from_numpy(step.action_masks[s.name]).bool() if s.name in step.action_masks else None
        for s in specs
    ]


# ---------------------------------------------------------------------------------------------- learn
def update(
    batch: dict[str, Any],
    cfg: Config,
    actors: nn.ModuleList,
    critics: nn.ModuleList,
    target_actors: nn.ModuleList,
    target_critics: nn.ModuleList,
    actor_opts: Sequence[torch.optim.Optimizer],
    critic_opts: Sequence[torch.optim.Optimizer],
    gen: torch.Generator,
) -> dict[str, float]:
    """One gradient step of every agent's critic, then its actor; then the target networks follow."""
    n = len(actors)
    masks = batch["masks"] or [None] * n
    next_masks = batch["next_masks"] or [None] * n

    def critic_in(obs: list[torch.Tensor], state: torch.Tensor, acts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([*(obs if cfg.critic_input == "all_obs" else [state]), *acts], dim=-1)

    with torch.no_grad():
        next_acts = [
            cast(Actor, target_actors[j]).action(
                target_actors[j](batch["next_obs"][j]), next_masks[j], cfg.gumbel_temperature, gen
            )
            for j in range(n)
        ]
        next_in = critic_in(batch["next_obs"], batch["next_state"], next_acts)
    x_in = critic_in(batch["obs"], batch["state"], batch["actions"])
    stats: dict[str, list[float]] = {"critic_loss": [], "actor_loss": [], "q_mean": []}
    for i in range(n):
        with torch.no_grad():
            q_next = target_critics[i](next_in).squeeze(-1)
            y = batch["rewards"][:, i] + cfg.gamma * (1.0 - batch["terminated"]) * q_next
        q = critics[i](x_in).squeeze(-1)
        critic_loss = F.mse_loss(q, y)
        critic_opts[i].zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(critics[i].parameters(), cfg.grad_clip)
        critic_opts[i].step()

        pre = actors[i](batch["obs"][i])
        acts = list(batch["actions"])
        acts[i] = cast(Actor, actors[i]).action(pre, masks[i], cfg.gumbel_temperature, gen)
        if masks[i] is not None:
            pre = pre.masked_fill(~masks[i], 0.0)  # masked logits are not penalised
        actor_loss = -critics[i](critic_in(batch["obs"], batch["state"], acts)).mean()
        actor_loss = actor_loss + cfg.actor_reg * pre.square().mean()
        actor_opts[i].zero_grad(set_to_none=True)
        actor_loss.backward()
        nn.utils.clip_grad_norm_(actors[i].parameters(), cfg.grad_clip)
        actor_opts[i].step()

        stats["critic_loss"].append(critic_loss.item())
        stats["actor_loss"].append(actor_loss.item())
        stats["q_mean"].append(q.mean().item())
    soft_update(target_actors, actors, cfg.tau)
    soft_update(target_critics, critics, cfg.tau)
    return {k: float(np.mean(v)) for k, v in stats.items()}


# ---------------------------------------------------------------------------------------------- acting
def explore(
    specs: list[AgentSpec],
    actors: nn.ModuleList,
    step: VecStep,
    cfg: Config,
    gen: torch.Generator,
    ou_state: list[torch.Tensor] | None,
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Exploratory actions: a categorical sample (the argmax of a Gumbel sample) for discrete agents, the
    actor's action plus Gaussian / OU noise for continuous ones. Returns env actions and the replay's
    representation (one-hot / continuous vectors)."""
    env_actions: dict[str, np.ndarray] = {}
    stored: list[np.ndarray] = []
    with torch.no_grad():
        for j, (spec, actor, mask) in enumerate(
            zip(specs, cast(Iterable[Actor], actors), step_masks(specs, step), strict=True)
        ):
            pre = actor(torch.from_numpy(step.obs[spec.name].reshape(len(step.state), -1)).float())
            if spec.discrete:
                one_hot = actor.action(pre, mask, cfg.gumbel_temperature, gen)
                env_actions[spec.name] = one_hot.argmax(-1).numpy()
                stored.append(one_hot.numpy())
                continue
            half = 0.5 * (actor.high - actor.low)
            if cfg.exploration == "ou" and ou_state is not None:
                ou_state[j] += -cfg.ou_theta * ou_state[j] + cfg.noise_std * torch.randn(
                    pre.shape, generator=gen
                )
                noise = ou_state[j] * half
            else:
                noise = cfg.noise_std * half * torch.randn(pre.shape, generator=gen)
            a = torch.max(torch.min(actor.squash(pre) + noise, actor.high), actor.low)
            env_actions[spec.name] = a.numpy()
            stored.append(a.numpy())
    return env_actions, stored


# ---------------------------------------------------------------------------------------------- train
def train(cfg: Config, run: RunContext) -> dict[str, Any]:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    env = run.make_env(cfg.num_envs, cfg.seed)
    B, n_agents = env.num_envs, len(env.agents)
    specs = make_specs(env)
    x_dim = sum(s.obs_dim for s in specs) if cfg.critic_input == "all_obs" else env.state_dim
    critic_dim = x_dim + sum(s.act_dim for s in specs)
    actors = nn.ModuleList(Actor(s, cfg.hidden) for s in specs)
    critics = nn.ModuleList(mlp([critic_dim, *cfg.hidden, 1], nn.ReLU) for _ in specs)
    target_actors, target_critics = copy.deepcopy(actors), copy.deepcopy(critics)
    actor_opts = [torch.optim.Adam(a.parameters(), lr=cfg.actor_lr) for a in actors]
    critic_opts = [torch.optim.Adam(c.parameters(), lr=cfg.critic_lr) for c in critics]

    def checkpoint(env_steps: int) -> dict[str, Any]:
        return {
            "algorithm": "maddpg",
            "config": cfg.model_dump(),
            "agents": list(env.agents),
            "specs": [asdict(s) for s in specs],
            "actors": [a.state_dict() for a in actors],
            "critics": [c.state_dict() for c in critics],
            "env_steps": env_steps,
            # what --resume continues from (RESUME_KEYS): the episodes in play are not kept
            "targets": {"actors": target_actors.state_dict(), "critics": target_critics.state_dict()},
            "optimizers": {
                "actors": [o.state_dict() for o in actor_opts],
                "critics": [o.state_dict() for o in critic_opts],
            },
            "replay": buffer_state(replay),
            "counters": {"last_train": last_train},
            "rng": {"numpy": rng_state(rng), "torch": torch.get_rng_state(), "explore": gen.get_state()},
        }

    env_steps = last_log = 0
    last_train = cfg.learning_starts
    resumed = run.resume
    step = env.reset(seed=cfg.seed if resumed is None else resume_seed(cfg.seed, int(resumed["env_steps"])))
    masked = step.action_masks is not None
    replay = ReplayBuffer(cfg.buffer_size, specs, env.state_dim if cfg.critic_input == "state" else 0, masked)
    if resumed is not None:  # networks, targets, optimizers, replay, counters and RNGs; fresh episodes
        restore_check(resumed)
        for nets, key in ((actors, "actors"), (critics, "critics")):
            for net, state in zip(nets, resumed[key], strict=True):
                net.load_state_dict(state)
        target_actors.load_state_dict(resumed["targets"]["actors"])
        target_critics.load_state_dict(resumed["targets"]["critics"])
        for opts, key in ((actor_opts, "actors"), (critic_opts, "critics")):
            for opt, state in zip(opts, resumed["optimizers"][key], strict=True):
                opt.load_state_dict(state)
        load_buffer_state(replay, resumed["replay"])
        last_train = int(resumed["counters"]["last_train"])
        load_rng_state(rng, resumed["rng"]["numpy"])
        torch.set_rng_state(resumed["rng"]["torch"])
        gen.set_state(resumed["rng"]["explore"])
        env_steps = last_log = int(resumed["env_steps"])
    ou_state = [torch.zeros(B, s.act_dim) for s in specs] if cfg.exploration == "ou" else None
    ep_return = np.zeros((B, n_agents))
    ep_length = np.zeros(B, dtype=np.int64)
    finished_returns: list[np.ndarray] = []
    finished_lengths: list[np.ndarray] = []
    stats: dict[str, list[float]] = {"critic_loss": [], "actor_loss": [], "q_mean": []}
    start, first_steps = time.perf_counter(), env_steps

    while env_steps < cfg.total_env_steps:
        # ---- act and store
        actions, stored = explore(specs, actors, step, cfg, gen, ou_state)
        nxt = env.step(actions)
        env_steps += B
        done = nxt.done
        next_obs = {a: o.copy() for a, o in nxt.obs.items()}
        next_state = nxt.state.copy()
        if done.any():  # the transition ends in the finished episode's last observation
            rows = np.flatnonzero(done)
            for a in env.agents:
                next_obs[a][rows] = nxt.final_obs[a][rows]
            next_state[rows] = nxt.final_state[rows]
        rewards = np.stack([nxt.rewards[a] for a in env.agents], axis=1)
        data: dict[str, Any] = {
            "obs": [step.obs[s.name].reshape(B, -1) for s in specs],
            "next_obs": [next_obs[s.name].reshape(B, -1) for s in specs],
            "actions": stored,
            "rewards": rewards,
            "terminated": nxt.terminated,
        }
        if masked:
            data["masks"] = [step.action_masks.get(s.name, np.ones((B, s.act_dim), bool)) for s in specs]
            data["next_masks"] = [
                np.where(done[:, None], True, nxt.action_masks.get(s.name, True)) for s in specs
            ]
        if cfg.critic_input == "state":
            data["state"], data["next_state"] = step.state, next_state
        replay.add(data)
        step = nxt

        ep_return += rewards
        ep_length += 1
        if done.any():
            rows = np.flatnonzero(done)
            finished_returns.append(ep_return[rows].copy())
            finished_lengths.append(ep_length[rows].copy())
            ep_return[rows] = 0.0
            ep_length[rows] = 0
            if ou_state is not None:
                for x in ou_state:
                    x[torch.from_numpy(rows)] = 0.0

        # ---- learn
        if env_steps >= cfg.learning_starts:  # gradient_steps per train_every env steps, however many copies
            rounds = (env_steps - last_train) // cfg.train_every
            last_train += rounds * cfg.train_every
            for _ in range(rounds * cfg.gradient_steps):
                info = update(
                    replay.sample(cfg.batch_size, rng),
                    cfg,
                    actors,
                    critics,
                    target_actors,
                    target_critics,
                    actor_opts,
                    critic_opts,
                    gen,
                )
                for key, value in info.items():
                    stats[key].append(value)

        # ---- log, checkpoint
        if env_steps - last_log >= cfg.log_every or env_steps >= cfg.total_env_steps:
            last_log = env_steps
            metrics = {k: float(np.mean(v)) for k, v in stats.items() if v}
            metrics["agent_steps_per_s"] = (
                (env_steps - first_steps) * n_agents / (time.perf_counter() - start)
            )
            metrics.update(episode_metrics(finished_returns, finished_lengths, env.agents))
            stats = {k: [] for k in stats}
            run.log(env_steps, metrics)
        run.after_update(env_steps, cfg.checkpoint_every, partial(checkpoint, env_steps))

    return run.finish(env, checkpoint(env_steps), env_steps, start)


RESUMABLE = True  # teamrl marl train --resume
RESUME_KEYS = ("targets", "optimizers", "replay", "counters", "rng")


def restore_check(checkpoint: dict[str, Any]) -> None:
    """ValueError unless ``checkpoint`` can be resumed from."""
    check_keys(checkpoint, RESUME_KEYS)


def make_actor(
    checkpoint: dict[str, Any], deterministic: bool = True
) -> Callable[[VecStep], dict[str, np.ndarray]]:
    """Rebuild the actors of a checkpoint: greedy (argmax / noise-free) when ``deterministic``, else
    exploring as in training (categorical samples, Gaussian noise)."""
    cfg = Config(**checkpoint["config"])
    if cfg.exploration == "ou":
        cfg = cfg.model_copy(update={"exploration": "gaussian"})
    specs = [AgentSpec(**s) for s in checkpoint["specs"]]
    actors = nn.ModuleList(Actor(s, cfg.hidden) for s in specs)
    for actor, state in zip(actors, checkpoint["actors"], strict=True):
        actor.load_state_dict(state)
    actors.eval()
    gen = torch.Generator().manual_seed(cfg.seed)

    @torch.no_grad()
    def act(step: VecStep) -> dict[str, np.ndarray]:
        if not deterministic:
            return explore(specs, actors, step, cfg, gen, None)[0]
        out: dict[str, np.ndarray] = {}
        for spec, actor, mask in zip(
            specs, cast(Iterable[Actor], actors), step_masks(specs, step), strict=True
        ):
            pre = actor(torch.from_numpy(step.obs[spec.name].reshape(len(step.state), -1)).float())
            if spec.discrete:
                if mask is not None:
                    pre = pre.masked_fill(~mask, MASKED_LOGIT)
                out[spec.name] = pre.argmax(-1).numpy()
            else:
                out[spec.name] = actor.squash(pre).numpy()
        return out

    return act
