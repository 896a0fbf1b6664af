"""A decode loop's KV cache written in place: transformers' ``DynamicLayer`` grows by ``torch.cat`` at every
step, copying the whole cache each time (quadratic in the completion's length; a fifth of a rollout's decode
time on the embedded base). :func:`preallocate` turns the layers of a prefilled ``DynamicCache`` into layers
that keep their keys and values in a buffer with room for the completion and write each new position into
it; ``keys`` / ``values`` stay views of the filled part, so attention sees exactly what it saw before."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in buffers of ``capacity`` positions."""

    _kbuf: torch.Tensor
    _vbuf: torch.Tensor
    _length: int

    def _adopt(self, capacity: int) -> None:
        keys, values = self.keys, self.values
        assert keys is not None and values is not None  # preallocate adopts filled layers only
        self._length = keys.shape[-2]
        self._kbuf = keys.new_empty((*keys.shape[:-2], max(capacity, self._length), keys.shape[-1]))
        self._vbuf = values.new_empty((*values.shape[:-2], max(capacity, self._length), values.shape[-1]))
        self._kbuf[..., : self._length, :] = keys
        self._vbuf[..., : self._length, :] = values
        self._view()

    def _view(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Point ``keys`` / ``values`` at the filled part of the buffers, and return them."""
        keys, values = self._kbuf[..., : self._length, :], self._vbuf[..., : self._length, :]
        self.keys, self.values = keys, values
        return keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._length + key_states.shape[-2]
        if end > self._kbuf.shape[-2]:  # past the room made for it: grow (never on the decode loop's path)
            self._adopt(2 * end)
        self._kbuf[..., self._length : end, :] = key_states
        self._vbuf[..., self._length : end, :] = value_states
        self._length = end
        return self._view()

    def get_seq_length(self) -> int:
        return self._length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (one gather of each buffer)."""
        self._kbuf = self._kbuf.index_select(0, indices)
        self._vbuf = self._vbuf.index_select(0, indices)
        self._view()


def preallocate(cache: Any, extra: int) -> bool:
    """Give every layer of the prefilled ``cache`` room for ``extra`` more positions, written in place.
    False (the cache left as it was) unless every layer is transformers' plain ``DynamicLayer``."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or not layer.is_initialized for layer in layers):
        return False
    for layer in layers:
        layer.__class__ = PreallocatedLayer
        layer._adopt(layer.keys.shape[-2] + extra)
    return True
