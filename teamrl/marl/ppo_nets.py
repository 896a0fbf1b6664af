"""IPPO / MAPPO's agent groups and networks: which agents share an actor and a critic (:class:`GroupSpec`,
:func:`make_groups`), their inputs, and the networks (MLP, the entity actor over interchangeable slots, the
GRU of recurrent runs). Imported by :mod:`teamrl.marl.ppo`, which re-exports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from teamrl.marl.core import VecMultiAgentEnv, VecStep
from teamrl.marl.nets import RunningMeanStd, mlp
from teamrl.marl.replay import check_keys

MASKED_LOGIT = -1e9
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


# --------------------------------------------------------------------------------------------- groups
@dataclass
class GroupSpec:
    """Agents that share one actor and one critic; everything ``make_actor`` needs to rebuild them."""

    name: str
    agents: list[str]
    index: list[int]  # positions of the agents in env.agents
    obs_dim: int
    discrete: bool
    n_out: int  # number of actions (discrete) or action dimensions (continuous)
    low: list[float] | None = None
    high: list[float] | None = None
    one_hot: bool = False
    entities: tuple[int, int, int] | None = None  # (start, count, width) of interchangeable obs slots
    state_dim: int = 0  # a centralised actor's input ends with the global state (0: decentralised)

    @property
    def k(self) -> int:
        return len(self.agents)

    @property
    def own_dim(self) -> int:
        """The agent's own input: its observation, then the one-hot id in a shared group."""
        return self.obs_dim + (self.k if self.one_hot else 0)

    @property
    def in_dim(self) -> int:
        """The actor's input: the own input, then the global state for a centralised actor."""
        return self.own_dim + self.state_dim


def make_groups(
    env: VecMultiAgentEnv,
    sharing: str,
    agent_id: bool,
    entity_actor: bool = False,
    centralised_actor: bool = False,
) -> list[GroupSpec]:
    def spaces_key(agent: str) -> tuple:
        act = env.action_spaces[agent]
        act_key = ("discrete", int(act.n)) if isinstance(act, spaces.Discrete) else ("box", act.shape)
        return env.observation_spaces[agent].shape, act_key

    if sharing == "per_agent":
        members = [[a] for a in env.agents]
    elif sharing == "shared":
        if len({spaces_key(a) for a in env.agents}) > 1:
            raise ValueError(
                "parameter_sharing 'shared' needs every agent to have the same observation and action "
                "spaces; use 'per_group' for teams with different spaces"
            )
        members = [list(env.agents)]
    else:
        by_key: dict[tuple, list[str]] = {}
        for a in env.agents:
            by_key.setdefault(spaces_key(a), []).append(a)
        members = list(by_key.values())

    slots: dict[str, tuple[int, int, int]] = getattr(env, "entity_slots", None) or {}
    if entity_actor and not slots:
        raise ValueError("entity_actor needs an env that declares entity_slots (e.g. simple_spread)")
    groups = []
    for agents in members:
        act: Any = env.action_spaces[agents[0]]  # a Discrete or a Box
        discrete = isinstance(act, spaces.Discrete)
        box = None if discrete else (np.asarray(act.low, np.float64), np.asarray(act.high, np.float64))
        groups.append(
            GroupSpec(
                name=agents[0] if len(agents) == 1 else f"{agents[0]}..{agents[-1]}",
                agents=agents,
                index=[env.agents.index(a) for a in agents],
                obs_dim=int(np.prod(env.observation_spaces[agents[0]].shape)),
                discrete=discrete,
                n_out=int(act.n) if discrete else int(np.prod(act.shape)),
                low=None if box is None else box[0].ravel().tolist(),
                high=None if box is None else box[1].ravel().tolist(),
                one_hot=agent_id and len(agents) > 1,
                entities=cast(tuple[int, int, int], tuple(slots[agents[0]]))
                if entity_actor and agents[0] in slots
                else None,
                state_dim=int(env.state_dim) if centralised_actor else 0,
            )
        )
    return groups


def entity_slots(env: VecMultiAgentEnv, g: GroupSpec, offset: int = 0) -> tuple[int, int, int]:
    """The group's interchangeable observation slots ``(start, count, width)`` (``env.entity_slots``),
    ``start`` moved by ``offset`` (the critic's input puts the global state first); a ValueError if the env
    declares none."""
    slots: dict[str, tuple[int, int, int]] = getattr(env, "entity_slots", None) or {}
    if g.agents[0] not in slots:
        raise ValueError(
            "entity_critic and shared_encoder need an env that declares entity_slots for every agent "
            "(e.g. simple_spread)"
        )
    start, count, width = slots[g.agents[0]]
    return start + offset, count, width


def group_obs(g: GroupSpec, obs: dict[str, np.ndarray]) -> torch.Tensor:
    """The actor's input ``[B, k, in_dim]``: observations, then the one-hot id in a shared group."""
    x = torch.from_numpy(np.stack([obs[a].reshape(len(obs[a]), -1) for a in g.agents], axis=1)).float()
    if g.one_hot:
        x = torch.cat([x, torch.eye(g.k).expand(x.shape[0], g.k, g.k)], dim=-1)
    return x


def actor_input(g: GroupSpec, obs: dict[str, np.ndarray], state: np.ndarray | None) -> torch.Tensor:
    """The actor's input ``[B, k, in_dim]``: :func:`group_obs`, then the global state for a centralised
    actor (``g.state_dim``; ``state`` is then required)."""
    x = group_obs(g, obs)
    if not g.state_dim:
        return x
    if state is None:
        raise ValueError("a centralised actor needs the env's global state")
    s = torch.from_numpy(state).float().reshape(len(state), 1, -1).expand(-1, g.k, -1)
    return torch.cat([x, s], dim=-1)


def critic_input(actor_in: torch.Tensor, state: np.ndarray | None) -> torch.Tensor:
    """IPPO (``state`` None): ``actor_in`` (the agent's own input, :func:`group_obs`); MAPPO: the global
    state, then ``actor_in``."""
    if state is None:
        return actor_in
    s = torch.from_numpy(state).float().unsqueeze(1).expand(-1, actor_in.shape[1], -1)
    return torch.cat([s, actor_in], dim=-1)


def group_masks(g: GroupSpec, step: VecStep) -> torch.Tensor | None:
    """``[B, k, n_actions]`` bool (True = allowed), or None when the env gives no masks."""
    if not g.discrete or step.action_masks is None or g.agents[0] not in step.action_masks:
        return None
    return torch.from_numpy(np.stack([step.action_masks[a] for a in g.agents], axis=1)).bool()


def env_actions(g: GroupSpec, actions: torch.Tensor) -> dict[str, np.ndarray]:
    """``[B, k]`` discrete / ``[B, k, d]`` continuous actions -> the env's per-agent arrays (clipped)."""
    a = actions.numpy()
    if not g.discrete:
        a = np.clip(a, np.asarray(g.low, np.float32), np.asarray(g.high, np.float32))
    return {agent: a[:, j] for j, agent in enumerate(g.agents)}


# ------------------------------------------------------------------------------------------- networks
class EntityNet(nn.Module):
    """An MLP whose ``count`` slots of ``width`` inputs at ``start`` form a set: each slot, together with
    the rest of the input, is encoded by one shared MLP; the encodings are pooled by softmax attention
    and by max; a head MLP maps the pools and the rest to the output. Permuting the slots permutes
    nothing in the output. The first ``head_only`` inputs (a critic's global state) go to the head alone,
    not into every slot's encoding."""

    def __init__(
        self,
        in_dim: int,
        slots: tuple[int, int, int],
        hidden: list[int],
        n_out: int,
        activation: str,
        out_gain: float = 0.01,
        head_only: int = 0,
    ) -> None:
        super().__init__()
        self.start, self.count, self.width = slots
        self.head_only = head_only
        if self.start < head_only or self.count < 1 or self.start + self.count * self.width > in_dim:
            raise ValueError(f"entity slots {slots} do not fit an input of {in_dim} after {head_only}")
        act, h = ACTIVATIONS[activation], hidden[0]
        rest = in_dim - self.count * self.width - head_only
        self.encode = mlp([self.width + rest, h, h], act)
        self.score = nn.Linear(h, 1)
        self.feature_dim = 2 * h + rest + head_only
        widths = [self.feature_dim, *hidden[1:], n_out]
        self.head = mlp(widths if len(hidden) > 1 else [widths[0], n_out], act, out_gain=out_gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """What the head reads ``[..., feature_dim]``: the pooled slot encodings, the rest of the input and
        the head-only inputs (a critic may read them too: ``ppo.Config.shared_encoder``)."""
        end = self.start + self.count * self.width
        tokens = x[..., self.start : end].unflatten(-1, (self.count, self.width))
        rest = torch.cat([x[..., self.head_only : self.start], x[..., end:]], dim=-1)
        h = torch.relu(
            self.encode(torch.cat([tokens, rest.unsqueeze(-2).expand(*tokens.shape[:-1], -1)], -1))
        )
        attn = torch.softmax(self.score(h), dim=-2)
        return torch.cat([(attn * h).sum(-2), h.amax(-2), rest, x[..., : self.head_only]], dim=-1)


class RecurrentNet(nn.Module):
    """``x -> Linear + activation -> GRU cell -> MLP head``: :meth:`step` maps an input and the previous
    state ``[..., width]`` to the output and the new state (any leading dims)."""

    def __init__(self, in_dim: int, hidden: list[int], n_out: int, activation: str, out_gain: float) -> None:
        super().__init__()
        self.width = hidden[0]
        self.embed = nn.Sequential(
            mlp([in_dim, self.width], ACTIVATIONS[activation]), ACTIVATIONS[activation]()
        )
        self.gru = nn.GRUCell(self.width, self.width)
        self.head = mlp([self.width, *hidden[1:], n_out], ACTIVATIONS[activation], out_gain=out_gain)

    def step(self, x: torch.Tensor, h: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        lead = x.shape[:-1]
        e = self.embed(x).reshape(-1, self.width)
        h_in = None if h is None else h.reshape(-1, self.width)
        h_out = self.gru(e, h_in).reshape(*lead, self.width)
        return self.head(h_out), h_out


class Actor(nn.Module):
    """Categorical over (masked) logits, or a diagonal Gaussian with a learned state-independent std.
    Recurrent (``recurrent``): :meth:`step` takes and returns the GRU state; :meth:`dist` and :meth:`mode`
    are for feed-forward actors."""

    def __init__(
        self, g: GroupSpec, hidden: list[int], activation: str = "relu", recurrent: bool = False
    ) -> None:
        super().__init__()
        self.discrete = g.discrete
        self.recurrent = recurrent
        if recurrent:
            self.rnn = RecurrentNet(g.in_dim, hidden, g.n_out, activation, out_gain=0.01)
        elif g.entities is not None:
            self.net: nn.Module = EntityNet(g.in_dim, g.entities, hidden, g.n_out, activation)
        else:
            self.net = mlp([g.in_dim, *hidden, g.n_out], ACTIVATIONS[activation], out_gain=0.01)
        if not g.discrete:
            self.log_std = nn.Parameter(torch.full((g.n_out,), -0.5))

    def step(
        self, x: torch.Tensor, h: torch.Tensor | None, mask: torch.Tensor | None = None
    ) -> tuple[torch.distributions.Distribution, torch.Tensor | None]:
        """(the action distribution, the new state): one step of a recurrent actor, or :meth:`dist`."""
        if not self.recurrent:
            return self.dist(x, mask), None
        out, h = self.rnn.step(x, h)
        return self._dist(out, mask), h

    def dist(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.distributions.Distribution:
        return self._dist(self.net(x), mask)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """An entity actor's pooled features of ``x`` (:meth:`EntityNet.features`); see :meth:`dist_of`."""
        if not isinstance(self.net, EntityNet):
            raise ValueError("only an entity actor (entity_actor: true, not recurrent) has pooled features")
        return self.net.features(x)

    def dist_of(
        self, features: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.distributions.Distribution:
        """The distribution from :meth:`features`' output: ``dist(x) == dist_of(features(x))``."""
        return self._dist(cast(EntityNet, self.net).head(features), mask)

    def _dist(self, out: torch.Tensor, mask: torch.Tensor | None) -> torch.distributions.Distribution:
        if self.discrete:
            if mask is not None:
                out = out.masked_fill(~mask, MASKED_LOGIT)
            return torch.distributions.Categorical(logits=out, validate_args=False)
        normal = torch.distributions.Normal(out, self.log_std.exp(), validate_args=False)
        return torch.distributions.Independent(normal, 1, validate_args=False)

    def mode(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, h: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The most likely action (the deterministic policy); recurrent: from state ``h`` (see
        :meth:`mode_step`)."""
        return self.mode_step(x, h, mask)[0]

    def mode_step(
        self, x: torch.Tensor, h: torch.Tensor | None, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the most likely action, the new state; None for a feed-forward actor)."""
        if self.recurrent:
            out, h = self.rnn.step(x, h)
        else:
            out, h = self.net(x), None
        if not self.discrete:
            return out, h
        if mask is not None:
            out = out.masked_fill(~mask, MASKED_LOGIT)
        return out.argmax(-1), h


class Critic(nn.Module):
    """One value per agent, on the normalised scale of ``norm`` (the running statistics of targets).
    Recurrent: :meth:`step` takes and returns the GRU state. ``entities``: slots of the input read as a set
    (an :class:`EntityNet`), as the entity actor reads them."""

    def __init__(
        self,
        in_dim: int,
        hidden: list[int],
        activation: str = "relu",
        recurrent: bool = False,
        entities: tuple[int, int, int] | None = None,
        head_only: int = 0,
    ) -> None:
        super().__init__()
        self.recurrent = recurrent
        if recurrent:
            self.rnn = RecurrentNet(in_dim, hidden, 1, activation, out_gain=1.0)
        elif entities is not None:  # the input is [global state, own input]: the state goes to the head
            self.net: nn.Module = EntityNet(
                in_dim, entities, hidden, 1, activation, out_gain=1.0, head_only=head_only
            )
        else:
            self.net = mlp([in_dim, *hidden, 1], ACTIVATIONS[activation], out_gain=1.0)
        self.norm = RunningMeanStd()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)

    def step(self, x: torch.Tensor, h: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.recurrent:
            return self(x), None
        out, h = self.rnn.step(x, h)
        return out.squeeze(-1), h


def reset_where(h: torch.Tensor | None, done: np.ndarray | torch.Tensor) -> torch.Tensor | None:
    """``h`` ``[B, k, width]`` with the rows of the copies where ``done`` zeroed (a new episode begins)."""
    if h is None:
        return None
    keep = 1.0 - torch.as_tensor(done, dtype=h.dtype).reshape(-1, 1, 1)
    return h * keep


def load_actors(checkpoint: dict[str, Any]) -> tuple[list[GroupSpec], list[Actor]]:
    """A checkpoint's groups and their actors, weights loaded, in eval mode (its ``config`` needs
    ``hidden``; ``activation`` and ``recurrent`` default as in ``ppo.Config``)."""
    cfg = checkpoint["config"]
    groups = [
        GroupSpec(**{**g, "entities": tuple(g["entities"]) if g.get("entities") else None})
        for g in checkpoint["groups"]
    ]
    actors = []
    for g, state in zip(groups, checkpoint["actors"], strict=True):
        actor = Actor(g, cfg["hidden"], cfg.get("activation", "relu"), bool(cfg.get("recurrent", False)))
        actor.load_state_dict(state)
        actors.append(actor.eval())
    return groups, actors


def load_weights(checkpoint: dict[str, Any], actors: nn.ModuleList, critics: nn.ModuleList) -> bool:
    """Start a new run from ``checkpoint``'s weights (fine-tuning): its actors, which must fit this run's
    (a ValueError names the first that does not), and its critics (value normalisers included) where every
    one fits; True when the critics were loaded, False when they start fresh."""
    given_actors = checkpoint.get("actors") or []
    if len(given_actors) != len(actors):
        raise ValueError(f"the initial weights have {len(given_actors)} actor(s); this run has {len(actors)}")
    for i, (module, state) in enumerate(zip(actors, given_actors, strict=True)):
        try:
            module.load_state_dict(state)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[-1].strip()
            raise ValueError(f"the initial actor {i} does not fit this run's actor: {first}") from None

    def fits(module: nn.Module, state: dict[str, torch.Tensor]) -> bool:
        own = module.state_dict()
        return own.keys() == state.keys() and all(own[k].shape == state[k].shape for k in own)

    given = checkpoint.get("critics") or []
    if len(given) != len(critics) or not all(fits(m, s) for m, s in zip(critics, given, strict=True)):
        return False
    for module, state in zip(critics, given, strict=True):
        module.load_state_dict(state)
    return True


# ------------------------------------------------------------------------------------------- resume
def restore_check(checkpoint: dict[str, Any]) -> None:
    """ValueError unless ``checkpoint`` can be resumed from (one written before resuming was possible has
    no optimizer)."""
    check_keys(checkpoint, ("optimizer", "iteration", "torch_rng"))


def restore(
    checkpoint: dict[str, Any],
    actors: nn.ModuleList,
    critics: nn.ModuleList,
    optimizer: Any,
    agents: list[str],
) -> tuple[int, int]:
    """Load a checkpoint's networks (value normalisers included), optimizer and torch RNG; (updates done,
    env steps done). A checkpoint written before resuming was possible has no optimizer: refused."""
    restore_check(checkpoint)
    if list(checkpoint["agents"]) != list(agents):
        raise ValueError(f"the checkpoint's agents {checkpoint['agents']} are not the env's {list(agents)}")
    for module, state in zip(actors, checkpoint["actors"], strict=True):
        module.load_state_dict(state)
    for module, state in zip(critics, checkpoint["critics"], strict=True):
        module.load_state_dict(state)
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["torch_rng"])
    return int(checkpoint["iteration"]), int(checkpoint["env_steps"])
