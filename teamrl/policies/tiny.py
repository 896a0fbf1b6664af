"""The embedded default: a tokenizer and a few-million-parameter Llama trained locally, never downloaded."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from filelock import FileLock, Timeout
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from teamrl.atomic import atomic_directory
from teamrl.policies.sft import SFTSettings, sft_train

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
EMBEDDED_SFT = SFTSettings(epochs=3)
BUILD_MARKER = "teamrl_build.json"  # written last inside the temp dir, so its presence means "complete"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on ``texts``; any string round-trips exactly, and encoding adds BOS."""
    if vocab_size < 256 + 3:
        raise ValueError(f"vocab_size={vocab_size}: must be >= 259 (256 byte tokens + pad/bos/eos)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable, even unseen ones
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, bos_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        clean_up_tokenization_spaces=False,  # the cleanup rewrites " ," etc., breaking code round-trips
    )


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the embedded Llama (defaults: about 3.4M parameters with a 1024-token vocabulary)."""

    vocab_size: int = 1024  # BPE target; the model takes the trained tokenizer's actual size
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 688
    max_positions: int = 512
    rope_theta: float = 10000.0


def build_tiny_model(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A freshly initialised Llama sized by ``cfg``, with the tokenizer's vocabulary and special ids."""
    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(f"hidden_size={cfg.hidden_size} is not divisible by num_heads={cfg.num_heads}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=True,  # saves vocab x hidden parameters, a large share at this size
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


log = logging.getLogger("teamrl.policies")


def _is_complete(out_dir: Path) -> bool:
    return (out_dir / BUILD_MARKER).is_file()


@contextmanager
def build_lock(out_dir: Path) -> Iterator[None]:
    """Held while ``out_dir`` is built: a second process building the same base (two seeds started at once
    on a fresh machine) waits for the first and reuses its build instead of training it again."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out_dir.parent / f".{out_dir.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("another process is building %s: waiting for it", out_dir)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def build_embedded_default(
    examples: Sequence[tuple[str, str]],
    out_dir: Path,
    cfg: TinyModelConfig = TinyModelConfig(),
    sft: SFTSettings = EMBEDDED_SFT,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """Train tokenizer + tiny Llama on (prompt, completion) pairs and save both into ``out_dir``.

    Returns at once if ``out_dir`` already holds a finished build (the caller keys ``out_dir`` by corpus
    and config). The build is written to a sibling temp dir and renamed, so an interrupted build never
    leaves a partial ``out_dir``; a second process asking for the same ``out_dir`` meanwhile waits for this
    one (a file lock beside it) and reuses its build.
    """
    out_dir = Path(out_dir)
    if _is_complete(out_dir):
        return out_dir
    with build_lock(out_dir):
        return _build(examples, out_dir, cfg, sft, seed, progress)


def _build(
    examples: Sequence[tuple[str, str]],
    out_dir: Path,
    cfg: TinyModelConfig,
    sft: SFTSettings,
    seed: int,
    progress: bool,
) -> Path:
    """:func:`build_embedded_default` under its lock."""
    if _is_complete(out_dir):  # built by the process we waited for
        return out_dir
    if out_dir.exists():
        raise FileExistsError(
            f"{out_dir} exists but is not a finished teamrl build (no {BUILD_MARKER}): "
            "delete it or choose another out_dir"
        )
    if not examples:
        raise ValueError("examples is empty: the embedded default learns from (prompt, completion) pairs")
    tokenizer = train_tokenizer((text for pair in examples for text in pair), cfg.vocab_size)
    with torch.random.fork_rng(devices=[]):  # seed the init without resetting the caller's RNG
        torch.manual_seed(seed)
        model = build_tiny_model(cfg, tokenizer)
    stats = sft_train(model, tokenizer, examples, sft, progress=progress, desc="embedded default")
    model.eval()
    marker = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "examples": len(examples),
        "model": asdict(cfg),
        "sft": asdict(sft),
        "sft_stats": stats,
        "seed": seed,
    }
    bars_were_on = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()  # transformers' own "Writing model shards" bar
    try:
        with atomic_directory(out_dir, replace=False) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / BUILD_MARKER).write_text(json.dumps(marker, indent=2))
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    return out_dir
