"""Tiny transformers checkpoints built locally for tests: a byte-level BPE tokenizer trained on the
pipeline's own prompts and a randomly initialised Llama of a chosen size, written by save_pretrained
(the layout of any hub checkpoint). Nothing is downloaded."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from teamrl.config import load_config
from teamrl.policies import TinyModelConfig, build_tiny_model, train_tokenizer
from teamrl.trainer.build import demonstrations


@functools.cache
def pipeline_texts(n_episodes: int = 12) -> tuple[str, ...]:
    """Prompts and completions of expert-played pipeline episodes (what the models will read)."""
    pairs = demonstrations(load_config(), n_episodes, seed=0)
    return tuple(p + c for role_pairs in pairs.values() for p, c in role_pairs)


def tiny_checkpoint(
    directory: Path, hidden: int = 32, layers: int = 2, heads: int = 2, vocab: int = 400, seed: int = 0
) -> Path:
    """A Llama with ``hidden`` x ``layers`` (MLP 2 x hidden) and its tokenizer, saved in ``directory``."""
    tokenizer = train_tokenizer(pipeline_texts(), vocab_size=vocab)
    torch.manual_seed(seed)
    shape = TinyModelConfig(
        hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=2 * hidden
    )
    build_tiny_model(shape, tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
