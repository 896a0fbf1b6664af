"""Adapter weights between the driver and its Ray actors: what changed since an actor was last sent
them (torch's in-place write counters, ``HFPolicy.weights_version``), and the LoRA state dicts sent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch

from teamrl.policies.hf import HFPolicy
from teamrl.policies.openai_compat import OpenAICompatPolicy

Policies = dict[str, HFPolicy | OpenAICompatPolicy]
AdapterKey = tuple[str, str]
"""(policy name, adapter name)."""
AdapterWeights = dict[str, dict[str, dict[str, torch.Tensor]]]
"""policy name -> adapter name -> that adapter's LoRA state dict (``HFPolicy.adapter_state_dict``)."""


def hf_policy(policies: Policies, name: str) -> HFPolicy:
    return cast(HFPolicy, policies[name])  # config validation keeps adapters off openai endpoints


def adapter_versions(policies: Policies, keys: Iterable[AdapterKey]) -> dict[AdapterKey, int]:
    return {(p, a): hf_policy(policies, p).weights_version(a) for p, a in keys}


def adapter_weights(policies: Policies, keys: Iterable[AdapterKey]) -> AdapterWeights:
    out: AdapterWeights = {}
    for policy, adapter in keys:
        out.setdefault(policy, {})[adapter] = hf_policy(policies, policy).adapter_state_dict(adapter)
    return out


def load_adapter_weights(policies: Policies, weights: AdapterWeights) -> None:
    """Overwrite each adapter named in ``weights`` (it must exist) with its state dict."""
    for policy, adapters in weights.items():
        for adapter, state in adapters.items():
            hf_policy(policies, policy).load_adapter_state_dict(adapter, state)


def adapter_fingerprints(policies: Policies) -> dict[str, str]:
    """``policy/adapter`` -> hash of every adapter's weights, as this process holds them."""
    return {
        f"{name}/{adapter}": p.fingerprint(adapter)
        for name, p in policies.items()
        if isinstance(p, HFPolicy)
        for adapter in p.adapter_names
    }
