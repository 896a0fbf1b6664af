"""The replay memories of the off-policy learners, and what a resumed run needs to continue them.

:class:`EpisodeBuffer` (QMIX / VDN: whole episodes padded to ``T`` steps) and :class:`ReplayBuffer`
(MADDPG: single transitions) are rings of numpy arrays. :func:`buffer_state` / :func:`load_buffer_state`
put one in a checkpoint and take it back (the filled rows only, shapes checked), so ``teamrl marl train
--resume`` of an off-policy run learns from the same memory it had; :func:`rng_state` /
:func:`load_rng_state` do the same for a numpy generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


class EpisodeBuffer:
    """Whole episodes padded to ``T`` steps: per group ``obs [N, T+1, k, d]``, ``actions [N, T, k]``,
    ``masks [N, T+1, k, A]``; shared ``state [N, T+1, S]``, ``reward``/``terminated``/``filled [N, T]``.
    Step ``t`` of an episode of length ``L`` is valid for ``t < L``; ``obs[:, L]`` is its last observation."""

    def __init__(self, capacity: int, T: int, groups: Sequence[Any], state_dim: int) -> None:
        self.capacity, self.T = capacity, T
        self.obs = [np.zeros((capacity, T + 1, g.k, g.obs_dim), np.float32) for g in groups]
        self.actions = [np.zeros((capacity, T, g.k), np.int64) for g in groups]
        self.masks = [np.ones((capacity, T + 1, g.k, g.n_actions), bool) for g in groups]
        self.state = np.zeros((capacity, T + 1, state_dim), np.float32)
        self.reward = np.zeros((capacity, T), np.float32)
        self.terminated = np.zeros((capacity, T), bool)
        self.filled = np.zeros((capacity, T), bool)
        self.size = self.pos = 0

    def fields(self) -> list[np.ndarray]:
        return [*self.obs, *self.actions, *self.masks, self.state, self.reward, self.terminated, self.filled]

    def clear_rows(self, rows: np.ndarray) -> None:
        for arr in self.fields():
            arr[rows] = 0
        for masks in self.masks:
            masks[rows] = True

    def add(self, other: EpisodeBuffer, rows: np.ndarray) -> None:
        """Copy episodes ``rows`` of a staging buffer into the ring."""
        for r in rows:
            for dst, src in zip(self.fields(), other.fields(), strict=True):
                dst[self.pos] = src[r]
            self.pos = (self.pos + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, Any]:
        idx = rng.integers(0, self.size, size=n)
        L = max(1, int(self.filled[idx].sum(1).max()))  # the longest episode in the batch
        return {
            "obs": [torch.from_numpy(o[idx, : L + 1]) for o in self.obs],
            "actions": [torch.from_numpy(a[idx, :L]) for a in self.actions],
            "masks": [torch.from_numpy(m[idx, : L + 1]) for m in self.masks],
            "state": torch.from_numpy(self.state[idx, : L + 1]),
            "reward": torch.from_numpy(self.reward[idx, :L]),
            "terminated": torch.from_numpy(self.terminated[idx, :L]),
            "filled": torch.from_numpy(self.filled[idx, :L]),
        }


class ReplayBuffer:
    """A ring of transitions: per agent obs / next obs / action (one-hot for discrete) / reward, the
    termination flag, and (when the env masks actions) the masks of both observations, and the
    global state when the critics use it."""

    def __init__(self, capacity: int, specs: Sequence[Any], state_dim: int, masked: bool) -> None:
        self.capacity, self.masked = capacity, masked
        n = len(specs)
        self.obs = [np.zeros((capacity, s.obs_dim), np.float32) for s in specs]
        self.next_obs = [np.zeros((capacity, s.obs_dim), np.float32) for s in specs]
        self.actions = [np.zeros((capacity, s.act_dim), np.float32) for s in specs]
        self.masks = [np.ones((capacity, s.act_dim), bool) for s in specs] if masked else []
        self.next_masks = [np.ones((capacity, s.act_dim), bool) for s in specs] if masked else []
        self.state = np.zeros((capacity, state_dim), np.float32)
        self.next_state = np.zeros((capacity, state_dim), np.float32)
        self.rewards = np.zeros((capacity, n), np.float32)
        self.terminated = np.zeros(capacity, np.float32)
        self.size = self.pos = 0

    def add(self, data: dict[str, Any]) -> None:
        """``data``: the same fields, each batched over copies (``[B, ...]``)."""
        B = len(data["rewards"])
        idx = (self.pos + np.arange(B)) % self.capacity
        for key, value in data.items():
            target = getattr(self, key)
            if isinstance(target, list):
                for arr, v in zip(target, value, strict=True):
                    arr[idx] = v
            else:
                target[idx] = value
        self.pos = (self.pos + B) % self.capacity
        self.size = min(self.size + B, self.capacity)

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, Any]:
        idx = rng.integers(0, self.size, size=n)
        per_agent = ("obs", "next_obs", "actions", "masks", "next_masks")
        out: dict[str, Any] = {
            key: [torch.from_numpy(v[idx]) for v in getattr(self, key)] for key in per_agent
        }
        for key in ("state", "next_state", "rewards", "terminated"):
            out[key] = torch.from_numpy(getattr(self, key)[idx])
        return out


def _arrays(buffer: Any) -> dict[str, np.ndarray | list[np.ndarray]]:
    return {
        k: v
        for k, v in vars(buffer).items()
        if isinstance(v, np.ndarray) or (isinstance(v, list) and all(isinstance(x, np.ndarray) for x in v))
    }


def buffer_state(buffer: Any) -> dict[str, Any]:
    """A ring buffer's filled rows (as tensors: a checkpoint loaded with ``torch.load(mmap=True)``, as the
    evaluation does, maps them instead of reading them), position and size."""
    n = int(buffer.size)

    def rows_of(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x[:n].copy())

    rows = {
        k: [rows_of(x) for x in v] if isinstance(v, list) else rows_of(v) for k, v in _arrays(buffer).items()
    }
    return {"size": n, "pos": int(buffer.pos), "capacity": int(buffer.capacity), "arrays": rows}


def load_buffer_state(buffer: Any, state: dict[str, Any]) -> None:
    """Fill ``buffer`` (built for the same run) with :func:`buffer_state`'s rows; ValueError when its
    fields or shapes differ (another env, another config)."""
    mine = _arrays(buffer)
    saved = state["arrays"]
    if set(saved) != set(mine) or int(state["capacity"]) != int(buffer.capacity):
        raise ValueError(
            f"the checkpoint's replay ({sorted(saved)}, capacity {state['capacity']}) is not this run's "
            f"({sorted(mine)}, capacity {buffer.capacity})"
        )
    n = int(state["size"])
    for key, target in mine.items():
        pairs = zip(target, saved[key], strict=True) if isinstance(target, list) else [(target, saved[key])]
        for dst, src in pairs:
            if tuple(src.shape[1:]) != dst.shape[1:] or len(src) != n:
                raise ValueError(
                    f"the checkpoint's replay field {key} has shape {tuple(src.shape)}, not [{n}, "
                    f"{', '.join(map(str, dst.shape[1:]))}]"
                )
            dst[:n] = src.numpy() if isinstance(src, torch.Tensor) else src
    buffer.size, buffer.pos = n, int(state["pos"])


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    return dict(rng.bit_generator.state)


def load_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    rng.bit_generator.state = state


def check_keys(checkpoint: dict[str, Any], keys: Sequence[str]) -> None:
    """ValueError unless ``checkpoint`` holds ``keys`` (one written before its algorithm could resume)."""
    missing = [k for k in keys if k not in checkpoint]
    if missing:
        raise ValueError(
            f"the checkpoint has no {', '.join(missing)} (written by an older teamrl): it can be evaluated, "
            "not resumed"
        )
