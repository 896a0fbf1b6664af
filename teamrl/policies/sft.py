"""Supervised fine-tuning on (prompt, completion) pairs, for full models and for LoRA adapters."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

if TYPE_CHECKING:
    from peft import PeftModel

FULL_LR = 1e-3
ADAPTER_LR = 2e-3  # LoRA's low-rank updates tolerate (and need) a larger step than full weights


@dataclass(frozen=True)
class SFTSettings:
    """How long and how hard to train. ``max_steps`` (if set) overrides ``epochs``."""

    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 32
    lr: float | None = None  # None: FULL_LR for all parameters, ADAPTER_LR when given a parameter subset
    warmup_ratio: float = 0.05
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    max_length: int = 384
    seed: int = 0
    prompt_loss: bool = (
        False  # also learn to predict prompt tokens (language-model pre-training of a new base)
    )

    def __post_init__(self) -> None:
        if self.epochs < 1 and self.max_steps is None:
            raise ValueError(f"epochs={self.epochs}: must be >= 1 (or set max_steps)")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps={self.max_steps}: must be >= 1 or None")
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size}: must be >= 1")
        if self.max_length < 2:
            raise ValueError(f"max_length={self.max_length}: must be >= 2 (a context and a target token)")


@dataclass
class _Example:
    ids: list[int]
    n_prompt: int  # tokens [0, n_prompt) are context only, no loss


def tokenize_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], chat_template: bool = False
) -> list[list[int]]:
    """Each prompt's token ids as the model sees them: the raw text with the tokenizer's own special
    tokens (BOS for the embedded tokenizer), or with ``chat_template`` one user message rendered by the
    tokenizer's chat template up to the opening of the assistant's reply (an instruct checkpoint)."""
    if not prompts:
        return []
    if not chat_template:
        return [list(ids) for ids in tokenizer(list(prompts))["input_ids"]]
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in prompts
    ]
    # the template writes the special tokens itself
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def encode_examples(
    tokenizer: PreTrainedTokenizerBase, examples: Sequence[tuple[str, str]], chat_template: bool = False
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids + EOS) per pair, tokenized exactly as generation sees them.

    The prompt goes through :func:`tokenize_prompts` and the completion is tokenized separately, because
    at generation time the model continues the prompt's ids.
    """
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no eos_token: set tokenizer.eos_token")
    prompts = tokenize_prompts(tokenizer, [p for p, _ in examples], chat_template)
    completions = tokenizer([c for _, c in examples], add_special_tokens=False)["input_ids"]
    return [(p, list(c) + [tokenizer.eos_token_id]) for p, c in zip(prompts, completions, strict=True)]


def _batches(examples: list[_Example], batch_size: int, rng: random.Random) -> list[list[_Example]]:
    # Shuffle, then sort by length inside windows of 16 batches: little padding, still varied batches.
    order = examples[:]
    rng.shuffle(order)
    window = batch_size * 16
    batches: list[list[_Example]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda e: len(e.ids))
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def _collate(
    batch: list[_Example], pad_id: int, device: torch.device, prompt_loss: bool = False
) -> tuple[torch.Tensor, ...]:
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, e in enumerate(batch):
        n = len(e.ids)
        ids[row, :n] = torch.tensor(e.ids)
        first = 1 if prompt_loss else e.n_prompt
        labels[row, first:n] = ids[row, first:n]
        mask[row, :n] = 1
    return ids.to(device), labels.to(device), mask.to(device)


def _lr_factor(step: int, total: int, warmup: int, min_ratio: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def sft_train(
    model: PreTrainedModel | PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[tuple[str, str]],
    settings: SFTSettings,
    parameters: Iterable[torch.nn.Parameter] | None = None,
    progress: bool = True,
    desc: str = "sft",
    chat_template: bool = False,
    teacher: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float | int | list[float]]:
    """Train ``parameters`` (default: all of the model's) with loss on completion tokens only.

    ``teacher`` (token-level distillation): a function of ``(input_ids, attention_mask)`` returning a
    teacher's logits over the same vocabulary; the loss is then KL(teacher || model) of the next-token
    distributions at the completion tokens instead of the completions' cross-entropy.

    Every other parameter is frozen for the duration and all ``requires_grad`` flags are restored
    afterwards. Returns ``steps``, ``epoch_losses`` (token-weighted mean per epoch, the last one possibly
    partial), ``final_loss`` (mean of the last 10% of steps), ``tokens`` (non-pad tokens processed),
    ``seconds``, ``tokens_per_s``, ``truncated`` and ``skipped`` (examples longer than ``max_length``
    are cut at the right; those left without a completion token are skipped).
    """
    if not examples:
        raise ValueError("examples is empty: pass at least one (prompt, completion) pair")
    data: list[_Example] = []
    truncated = skipped = 0
    for prompt_ids, completion_ids in encode_examples(tokenizer, examples, chat_template):
        ids = prompt_ids + completion_ids
        if len(ids) > settings.max_length:
            truncated += 1
            ids = ids[: settings.max_length]
            if len(ids) <= len(prompt_ids):
                skipped += 1
                continue
        data.append(_Example(ids, len(prompt_ids)))
    if not data:
        raise ValueError(
            f"all {len(examples)} examples have prompts of >= max_length={settings.max_length} tokens: "
            "raise SFTSettings.max_length or shorten the prompts"
        )

    all_params = list(model.parameters())
    chosen = all_params if parameters is None else list(parameters)
    if not chosen:
        raise ValueError("parameters is empty: nothing to train")
    lr = settings.lr if settings.lr is not None else (FULL_LR if parameters is None else ADAPTER_LR)
    chosen_ids = {id(p) for p in chosen}
    saved_flags = [p.requires_grad for p in all_params]
    was_training = model.training

    rng = random.Random(settings.seed)
    per_epoch = math.ceil(len(data) / settings.batch_size)
    total = settings.max_steps if settings.max_steps is not None else per_epoch * settings.epochs
    warmup = max(1, round(settings.warmup_ratio * total))
    decay = [p for p in chosen if p.ndim >= 2]
    no_decay = [p for p in chosen if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": settings.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.95),
    )
    device = chosen[0].device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    step_losses: list[float] = []
    epoch_losses: list[float] = []
    tokens = 0
    start = time.perf_counter()
    try:
        for p in all_params:
            p.requires_grad_(id(p) in chosen_ids)
        model.train()
        bar = tqdm(total=total, desc=desc, disable=not progress, leave=False)
        step = 0
        while step < total:
            loss_sum = 0.0
            loss_tokens = 0
            for batch in _batches(data, settings.batch_size, rng):
                if step >= total:
                    break
                input_ids, labels, mask = _collate(batch, pad_id, device, settings.prompt_loss)
                logits = (
                    model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()
                )
                targets = labels[:, 1:]
                n = int((targets != -100).sum())
                if teacher is None:
                    flat = logits.reshape(-1, logits.shape[-1])
                    loss = F.cross_entropy(flat, targets.reshape(-1), reduction="sum") / n
                else:
                    with torch.no_grad():
                        t_logp = F.log_softmax(teacher(input_ids, mask)[:, :-1].float()[targets != -100], -1)
                    s_logp = F.log_softmax(logits[targets != -100], -1)
                    loss = (t_logp.exp() * (t_logp - s_logp)).sum() / n
                for group in optimizer.param_groups:
                    group["lr"] = lr * _lr_factor(step, total, warmup, settings.min_lr_ratio)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if settings.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(chosen, settings.grad_clip)
                optimizer.step()
                value = loss.item()
                step_losses.append(value)
                loss_sum += value * n
                loss_tokens += n
                tokens += int(mask.sum())
                step += 1
                bar.update(1)
                bar.set_postfix(loss=f"{value:.3f}")
            epoch_losses.append(loss_sum / loss_tokens)
        bar.close()
    finally:
        for p, flag in zip(all_params, saved_flags, strict=True):
            p.requires_grad_(flag)
        model.train(was_training)
    seconds = time.perf_counter() - start
    tail = step_losses[-max(1, len(step_losses) // 10) :]
    return {
        "steps": len(step_losses),
        "epoch_losses": epoch_losses,
        "final_loss": sum(tail) / len(tail),
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "truncated": truncated,
        "skipped": skipped,
    }
