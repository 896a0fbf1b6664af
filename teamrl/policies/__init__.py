"""Policies: a causal LM base plus one LoRA adapter per role (generating itself or through vLLM), the
embedded tiny default, and OpenAI-compatible endpoints (inference only).

The torch/transformers/peft backed names load on first use, so importing the light records in
``teamrl.policies.base`` (as the engine does) does not pay for importing the model stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from teamrl.policies.base import Generation, GenerationRequest, Policy, TrainablePolicy

if TYPE_CHECKING:
    from teamrl.policies.hf import HFPolicy, LoraSettings
    from teamrl.policies.openai_compat import OpenAICompatPolicy
    from teamrl.policies.sft import ADAPTER_LR, FULL_LR, SFTSettings, encode_examples, sft_train
    from teamrl.policies.tiny import (
        TinyModelConfig,
        build_embedded_default,
        build_tiny_model,
        train_tokenizer,
    )
    from teamrl.policies.vllm_generation import VLLMGenerator

_LAZY = {
    "HFPolicy": "hf",
    "LoraSettings": "hf",
    "OpenAICompatPolicy": "openai_compat",
    "ADAPTER_LR": "sft",
    "FULL_LR": "sft",
    "SFTSettings": "sft",
    "encode_examples": "sft",
    "sft_train": "sft",
    "TinyModelConfig": "tiny",
    "build_embedded_default": "tiny",
    "build_tiny_model": "tiny",
    "train_tokenizer": "tiny",
    "VLLMGenerator": "vllm_generation",
}

__all__ = [
    "ADAPTER_LR",
    "FULL_LR",
    "Generation",
    "GenerationRequest",
    "HFPolicy",
    "LoraSettings",
    "OpenAICompatPolicy",
    "Policy",
    "SFTSettings",
    "TinyModelConfig",
    "TrainablePolicy",
    "VLLMGenerator",
    "build_embedded_default",
    "build_tiny_model",
    "encode_examples",
    "sft_train",
    "train_tokenizer",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'teamrl.policies' has no attribute {name!r}")
    return getattr(importlib.import_module(f"teamrl.policies.{_LAZY[name]}"), name)
