"""Small network building blocks shared by the MARL algorithms (PPO, QMIX, MADDPG)."""

from __future__ import annotations

import math

import torch
from torch import nn


def mlp(sizes: list[int], activation: type[nn.Module] = nn.Tanh, out_gain: float = 1.0) -> nn.Sequential:
    """``sizes = [in, h1, ..., out]``; orthogonal init (gain sqrt(2) on hidden layers, ``out_gain`` on the
    last), zero biases, ``activation`` between layers and none after the last."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        last = i == len(sizes) - 2
        linear = nn.Linear(n_in, n_out)
        nn.init.orthogonal_(linear.weight, gain=out_gain if last else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(activation())
    return nn.Sequential(*layers)


class RunningMeanStd(nn.Module):
    """Running mean / variance of a stream of batches (parallel Welford / Chan et al.); buffers, so
    they travel in ``state_dict``."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = (), eps: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, *self.mean.shape).double()
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean += delta * n / total
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).to(x.dtype)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x * torch.sqrt(self.var + 1e-8) + self.mean).to(x.dtype)
