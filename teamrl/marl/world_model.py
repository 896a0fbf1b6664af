"""Model-based pieces for teamrl.marl (issue 21): a learned dynamics + reward model of the joint step, a
teammate model that predicts the other agents' actions, and imagined rollouts branched from real states.

* :func:`collect` plays a policy on a vectorised env and keeps its transitions (observations of every
  agent, the joint discrete action, next observations, rewards, and whether the step ended an episode; the
  next observation of an ended episode is its ``final_obs``, never the reset one).
* :class:`WorldModel`: an ensemble of MLPs on (all agents' observations, the joint action one-hot) that
  predicts the change of every observation and every agent's reward, inputs and targets normalised by
  running statistics; :meth:`WorldModel.fit` by mean squared error; :meth:`WorldModel.step` predicts with
  one member drawn per row (the model's uncertainty shows as spread between members).
* :class:`TeammateModel`: for each agent, the action distribution of each teammate given the agent's own
  observation ("if I am here, what will they do?"); :meth:`TeammateModel.accuracy` on fresh transitions, and
  :meth:`TeammateModel.needs_refresh` when it has fallen by more than ``tolerance`` since the last fit
  (teammates that learn change what it must predict).
* :func:`imagine`: ``horizon`` steps of a policy inside the world model from a batch of real observations.
  Its steps are counted apart (``Imagined.steps``); it never touches the environment, so imagined steps
  cannot enter the real-step counter (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from teamrl.marl.core import VecMultiAgentEnv, VecStep
from teamrl.marl.nets import RunningMeanStd, mlp

Policy = Callable[[VecStep], dict[str, np.ndarray]]


@dataclass
class Transitions:
    obs: np.ndarray  # [N, agents, obs_dim]
    actions: np.ndarray  # [N, agents] discrete
    next_obs: np.ndarray  # [N, agents, obs_dim]
    rewards: np.ndarray  # [N, agents]
    done: np.ndarray  # [N]

    def __len__(self) -> int:
        return len(self.actions)

    def take(self, rows: np.ndarray) -> Transitions:
        """The transitions at ``rows`` (indices or a slice)."""
        return Transitions(*(getattr(self, k)[rows] for k in FIELDS))

    @staticmethod
    def concat(parts: list[Transitions]) -> Transitions:
        return Transitions(*(np.concatenate([getattr(p, k) for p in parts]) for k in FIELDS))


FIELDS = list(Transitions.__dataclass_fields__)


def transition(
    before: VecStep,
    actions: dict[str, np.ndarray],
    after: VecStep,
    agents: list[str],
    stack: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
) -> Transitions:
    """One step of every copy: ``actions`` taken on ``before``'s observations led to ``after`` (the next
    observation of an episode that ended is its ``final_obs``, never the reset one). ``stack`` turns an
    agent -> ``[B, dim]`` dict into ``[B, agents, dim]`` (default: side by side, equal sizes)."""
    stack = stack or (lambda obs: np.stack([obs[a] for a in agents], axis=1))
    nxt = after.obs
    if after.final_obs is not None and after.done.any():
        nxt = {a: np.where(after.done[:, None], after.final_obs[a], after.obs[a]) for a in agents}
    return Transitions(
        stack(before.obs).astype(np.float32),
        np.stack([np.asarray(actions[a]) for a in agents], axis=1).astype(np.int64),
        stack(nxt).astype(np.float32),
        np.stack([after.rewards[a] for a in agents], axis=1).astype(np.float32),
        after.done.astype(bool),
    )


def collect(env: VecMultiAgentEnv, policy: Policy, steps: int, seed: int = 0) -> Transitions:
    """``steps`` steps of every copy of ``env`` under ``policy`` (agents with equal observation sizes)."""
    agents = list(env.agents)
    step = env.reset(seed=seed)
    parts = []
    for _ in range(steps):
        actions = policy(step)
        nxt = env.step(actions)
        parts.append(transition(step, actions, nxt, agents))
        step = nxt
    return Transitions.concat(parts)


def _one_hot(actions: torch.Tensor, n_actions: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(actions, n_actions).float().flatten(-2)


class WorldModel(nn.Module):
    """See the module. ``members`` MLPs of ``hidden`` layers."""

    def __init__(
        self, n_agents: int, obs_dim: int, n_actions: int, hidden: list[int] | None = None, members: int = 3
    ) -> None:
        super().__init__()
        self.n_agents, self.obs_dim, self.n_actions = n_agents, obs_dim, n_actions
        in_dim = n_agents * (obs_dim + n_actions)
        out_dim = n_agents * (obs_dim + 1)
        self.members = nn.ModuleList(
            [mlp([in_dim, *(hidden or [128, 128]), out_dim], nn.ReLU) for _ in range(members)]
        )
        self.in_norm = RunningMeanStd((n_agents * obs_dim,))
        self.out_norm = RunningMeanStd((out_dim,))

    def _inputs(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = self.in_norm.normalize(obs.flatten(1))
        return torch.cat([x, _one_hot(actions, self.n_actions)], dim=-1)

    def _targets(self, data: Transitions) -> torch.Tensor:
        delta = torch.from_numpy(data.next_obs - data.obs).flatten(1)
        return torch.cat([delta, torch.from_numpy(data.rewards)], dim=-1)

    def observe(self, data: Transitions) -> None:
        """Add ``data`` (new transitions only) to the running statistics that normalise inputs and targets."""
        self.in_norm.update(torch.from_numpy(data.obs).flatten(1))
        self.out_norm.update(self._targets(data))

    @torch.enable_grad()
    def train_steps(
        self, data: Transitions, steps: int, batch_size: int = 256, lr: float = 1e-3, seed: int = 0
    ) -> float:
        """``steps`` Adam steps of every member, each on its own random minibatch of ``data`` (an online
        bootstrap), with one optimizer kept across calls (training while the data grows, as in a
        model-based learner); the normalisers are :meth:`observe`'s. The mean loss of the steps."""
        if not hasattr(self, "_optimizer"):
            self._optimizer = torch.optim.Adam(self.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        losses = []
        for _ in range(steps):
            loss = torch.zeros(())
            for member in self.members:
                idx = torch.randint(len(data), (min(batch_size, len(data)),), generator=gen).numpy()
                part = data.take(idx)
                x = self._inputs(torch.from_numpy(part.obs), torch.from_numpy(part.actions))
                loss = loss + (member(x) - self.out_norm.normalize(self._targets(part))).square().mean()
            self._optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self._optimizer.step()
            losses.append(float(loss.detach()) / len(self.members))
        return float(np.mean(losses)) if losses else float("nan")

    @torch.enable_grad()
    def fit(
        self, data: Transitions, epochs: int = 20, batch_size: int = 256, lr: float = 1e-3, seed: int = 0
    ) -> list[float]:
        """Mean squared error (normalised targets) of every member on its own bootstrap of ``data``; the
        mean loss of each epoch."""
        obs, actions = torch.from_numpy(data.obs), torch.from_numpy(data.actions)
        self.observe(data)
        y = self.out_norm.normalize(self._targets(data))
        x = self._inputs(obs, actions)
        gen = torch.Generator().manual_seed(seed)
        boots = [torch.randint(len(x), (len(x),), generator=gen) for _ in self.members]
        optimizer = torch.optim.Adam(self.parameters(), lr=lr)
        curve = []
        for _ in range(epochs):
            losses = []
            for member, boot in zip(self.members, boots, strict=True):
                for idx in boot[torch.randperm(len(boot), generator=gen)].split(batch_size):
                    loss = (member(x[idx]) - y[idx]).square().mean()
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    losses.append(float(loss.detach()))
            curve.append(float(np.mean(losses)))
        return curve

    @torch.no_grad()
    def error(self, data: Transitions) -> float:
        """Mean squared error of the ensemble mean on ``data`` (normalised targets)."""
        x = self._inputs(torch.from_numpy(data.obs), torch.from_numpy(data.actions))
        y = self.out_norm.normalize(self._targets(data))
        pred = torch.stack([m(x) for m in self.members]).mean(0)
        return float((pred - y).square().mean())

    @torch.no_grad()
    def step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        generator: torch.Generator | None = None,
        mean: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(next observations ``[B, agents, obs_dim]``, rewards ``[B, agents]``): one member drawn per row,
        or (``mean``) the ensemble's mean prediction."""
        x = self._inputs(obs, actions)
        outs = torch.stack([m(x) for m in self.members])  # [members, B, out]
        if mean:
            out = self.out_norm.denormalize(outs.mean(0))
        else:
            pick = torch.randint(len(self.members), (len(x),), generator=generator)
            out = self.out_norm.denormalize(outs[pick, torch.arange(len(x))])
        n = self.n_agents * self.obs_dim
        return obs + out[:, :n].reshape(obs.shape), out[:, n:]


class TeammateModel(nn.Module):
    """See the module: agent i's observation -> each teammate's action distribution."""

    def __init__(self, n_agents: int, obs_dim: int, n_actions: int, hidden: list[int] | None = None) -> None:
        super().__init__()
        self.n_agents, self.n_actions = n_agents, n_actions
        self.nets = nn.ModuleList(
            [
                mlp([obs_dim, *(hidden or [64, 64]), (n_agents - 1) * n_actions], nn.ReLU)
                for _ in range(n_agents)
            ]
        )
        self.fitted_accuracy: float | None = None

    def _teammates(self, i: int) -> list[int]:
        return [j for j in range(self.n_agents) if j != i]

    def logits(self, i: int, obs_i: torch.Tensor) -> torch.Tensor:
        """``[B, teammates, n_actions]`` for agent ``i``'s observations ``[B, obs_dim]``."""
        return self.nets[i](obs_i).reshape(len(obs_i), self.n_agents - 1, self.n_actions)

    @torch.enable_grad()
    def fit(
        self, data: Transitions, epochs: int = 20, batch_size: int = 256, lr: float = 3e-3, seed: int = 0
    ) -> float:
        """Cross-entropy on ``data``; returns (and keeps as the reference for drift) the accuracy after it."""
        gen = torch.Generator().manual_seed(seed)
        obs, actions = torch.from_numpy(data.obs), torch.from_numpy(data.actions)
        optimizer = torch.optim.Adam(self.parameters(), lr=lr)
        for _ in range(epochs):
            for idx in torch.randperm(len(obs), generator=gen).split(batch_size):
                loss = torch.zeros(())
                for i in range(self.n_agents):
                    target = actions[idx][:, self._teammates(i)]
                    loss = loss + nn.functional.cross_entropy(
                        self.logits(i, obs[idx, i]).flatten(0, 1), target.flatten()
                    )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        self.fitted_accuracy = self.accuracy(data)
        return self.fitted_accuracy

    @torch.no_grad()
    def accuracy(self, data: Transitions) -> float:
        """Share of (agent, teammate, step) whose most likely predicted action is the one taken."""
        obs, actions = torch.from_numpy(data.obs), torch.from_numpy(data.actions)
        hits = 0.0
        for i in range(self.n_agents):
            pred = self.logits(i, obs[:, i]).argmax(-1)
            hits += float((pred == actions[:, self._teammates(i)]).float().sum())
        return hits / (len(obs) * self.n_agents * (self.n_agents - 1))

    def needs_refresh(self, fresh: Transitions, tolerance: float = 0.1) -> bool:
        """Whether the accuracy on ``fresh`` transitions fell by more than ``tolerance`` since the fit."""
        if self.fitted_accuracy is None:
            return True
        return self.accuracy(fresh) < self.fitted_accuracy - tolerance


@dataclass
class Imagined:
    obs: torch.Tensor  # [horizon + 1, B, agents, obs_dim]
    actions: torch.Tensor  # [horizon, B, agents]
    rewards: torch.Tensor  # [horizon, B, agents]
    steps: int  # imagined joint steps (horizon x B): never real env steps


def imagine(
    model: WorldModel, policy: Policy, agents: list[str], start: torch.Tensor, horizon: int, seed: int = 0
) -> Imagined:
    """``horizon`` steps of ``policy`` in ``model`` from real observations ``start`` ``[B, agents, dim]``."""
    gen = torch.Generator().manual_seed(seed)
    B = len(start)
    obs, acts, rews = [start], [], []
    zeros = np.zeros(B, bool)
    for _ in range(horizon):
        o = obs[-1]
        view = VecStep(
            {a: o[:, j].numpy() for j, a in enumerate(agents)},
            o.flatten(1).numpy(),
            {a: np.zeros(B, np.float32) for a in agents},
            zeros,
            zeros.copy(),
        )
        chosen = policy(view)
        a_t = torch.as_tensor(np.stack([np.asarray(chosen[a]) for a in agents], axis=1), dtype=torch.long)
        nxt, r = model.step(o, a_t, gen)
        obs.append(nxt)
        acts.append(a_t)
        rews.append(r)
    return Imagined(torch.stack(obs), torch.stack(acts), torch.stack(rews), horizon * B)
