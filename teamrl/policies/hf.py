"""A policy on any transformers checkpoint: one frozen base plus one LoRA adapter per role.

The generation core (sampling, scoring, SFT) is here; checkpoint / device / dtype resolution and the
adapter methods are in :mod:`teamrl.policies.hf_weights` and re-exported below.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from teamrl.policies.base import Generation, GenerationRequest
from teamrl.policies.hf_weights import _ADAPTER_NAME as _ADAPTER_NAME
from teamrl.policies.hf_weights import _HUB_ID as _HUB_ID
from teamrl.policies.hf_weights import LoraAdapterMixin, LoraSettings, resolve_checkpoint
from teamrl.policies.hf_weights import _strip_adapter as _strip_adapter
from teamrl.policies.hf_weights import resolve_device as resolve_device
from teamrl.policies.hf_weights import resolve_dtype as resolve_dtype
from teamrl.policies.kv_cache import preallocate
from teamrl.policies.sft import FULL_LR, SFTSettings, sft_train, tokenize_prompts

log = logging.getLogger("teamrl.policies")


class GenerationBackend(Protocol):
    """Generates in an :class:`HFPolicy`'s place (vLLM): the same requests, prompts already tokenized."""

    def generate(
        self, prompt_ids: list[list[int]], requests: list[GenerationRequest]
    ) -> list[Generation]: ...


def row_generators(seeds: list[int | None]) -> list[torch.Generator]:
    """One CPU generator per row: seeded rows from their seed, the others from the global generator."""
    return [
        torch.Generator().manual_seed(int(torch.randint(2**62, ())) if s is None else s % 2**63)
        for s in seeds
    ]


def exponential_race(logprobs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row of ``logprobs`` (rows, vocab): ``argmax_v logprobs_v - log E_v``, ``E_v ~ Exp(1)``
    from the row's own generator, which samples ``v`` with probability ``exp(logprobs_v)``."""
    noise = torch.empty(logprobs.shape, dtype=torch.float64)  # double: an exact 0 (log -inf) is 2^-53 rare
    for row, gen in enumerate(generators):
        noise[row].exponential_(generator=gen)
    return (logprobs.double() - noise.to(logprobs.device).log()).argmax(-1, keepdim=True)


MERGE_MAX_PARAMETERS = 50_000_000
"""Bases up to this size generate with the adapter merged in (``HFPolicy.merge_for_decode``)."""
PREFILL_WASTE = 1.25
"""A prefill chunk grows while its padded size (rows x longest prompt) stays within this factor of its
real tokens (``prefill_chunks``)."""
PREFILL_MIN_ROWS = 4
"""... and always to at least this many rows: a forward pass has a cost of its own, whatever its size."""


def prefill_chunks(lengths: list[int]) -> list[list[int]]:
    """Cut prompts of ascending ``lengths`` into consecutive chunks whose left padding wastes at most
    ``PREFILL_WASTE`` - 1 of the chunk's positions, once a chunk has ``PREFILL_MIN_ROWS`` rows."""
    chunks: list[list[int]] = []
    chunk: list[int] = []
    real = 0
    for i, n in enumerate(lengths):
        if len(chunk) >= PREFILL_MIN_ROWS and (len(chunk) + 1) * n > PREFILL_WASTE * (real + n):
            chunks.append(chunk)
            chunk, real = [], 0
        chunk.append(i)
        real += n
    if chunk:
        chunks.append(chunk)
    return chunks


class HFPolicy(LoraAdapterMixin):
    """Generation and differentiable log-probs for several roles sharing one causal LM base.

    Base weights are always frozen outside ``sft(None, ...)``. Every adapter is trainable except
    snapshots made by ``copy_adapter``; ``set_trainable`` sets the trainable set exactly. Sampling is
    plain ``softmax(logits / T)``: the checkpoint's own sampling presets (top_k, repetition_penalty, ...)
    are dropped so recorded log-probs are the true behaviour log-probs. ``generation_backend`` (vLLM),
    when set, generates instead of this process's model; scoring and training stay here. With
    ``chat_template`` every prompt (in generation and SFT alike) is one user message in the tokenizer's
    chat template, as an instruct checkpoint expects; otherwise it is raw text.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        lora: LoraSettings = LoraSettings(),  # noqa: B008 - a frozen dataclass: immutable
        name: str = "hf",
        max_batch_size: int = 64,
        gradient_checkpointing: bool = False,
        chat_template: bool = False,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size}: must be >= 1")
        if tokenizer.eos_token_id is None:
            raise ValueError(f"tokenizer of {name!r} has no eos_token: set tokenizer.eos_token before use")
        if chat_template and not tokenizer.chat_template:
            raise ValueError(
                f"policy {name!r}: chat_template is on, but its tokenizer has no chat template; "
                "turn chat_template off (prompts as raw text) or use an instruct checkpoint"
            )
        self.chat_template = chat_template
        self.name = name
        self.tokenizer = tokenizer
        self.base = model
        self.model: PreTrainedModel | PeftModel = model
        self.lora = lora
        self.max_batch_size = max_batch_size
        self.share_prefill = True  # identical prompts of a micro-batch prefilled once (False: each alone)
        # prompts of unlike lengths prefilled in chunks of like lengths (prefill_chunks), where the cache
        # is one transformers' dynamic cache can join (False: one left-padded prefill of the whole batch)
        self.chunk_prefill = True
        # the decode loop's KV cache in buffers with room for the completion (kv_cache.preallocate), where
        # it is transformers' plain dynamic cache (False: grown by concatenation at every step)
        self.preallocate_cache = True
        # generation on the base weights with the adapter merged in (hf_weights._merged), for models whose
        # LoRA-wrapped weights are small enough to keep a copy of: a tiny model's decode step is dominated
        # by the calls of the LoRA matmuls, a large one's memory by the copy
        self.merge_for_decode = sum(p.numel() for p in model.parameters()) <= MERGE_MAX_PARAMETERS
        self.adapter_names: list[str] = []
        self._trainable: set[str] = set()
        self._params: dict[str | None, dict[str, torch.nn.Parameter]] = {}
        self.generation_backend: GenerationBackend | None = None

        eos = model.generation_config.eos_token_id
        eos_list = eos if isinstance(eos, list) else [] if eos is None else [eos]
        self._eos_ids = sorted({tokenizer.eos_token_id, *eos_list})
        # Checkpoints without a pad token pad with EOS; masks keep it out of every computation.
        pad = tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else tokenizer.eos_token_id
        model.generation_config = GenerationConfig(
            bos_token_id=tokenizer.bos_token_id, eos_token_id=self._eos_ids, pad_token_id=self._pad_id
        )
        self._max_positions: int | None = getattr(model.config, "max_position_embeddings", None)
        forward_params = inspect.signature(model.forward).parameters
        self._keeps_logits = "logits_to_keep" in forward_params
        # transformers renamed past_key_values to cache (5.x); take whichever this model's forward has
        self._cache_kw = "cache" if "cache" in forward_params else "past_key_values"
        if gradient_checkpointing:
            # Non-reentrant: gradients reach the LoRA weights although the inputs need no grad.
            # transformers 5 renamed gradient_checkpointing_enable (deprecated there) to this.
            if hasattr(model, "activation_checkpointing_enable"):
                model.activation_checkpointing_enable({"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.eval()
        self._reindex()  # also freezes the base: nothing is trainable yet

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        adapters: Sequence[str] = (),
        lora: LoraSettings = LoraSettings(),  # noqa: B008 - a frozen dataclass: immutable
        name: str = "hf",
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
        max_batch_size: int = 64,
        gradient_checkpointing: bool = False,
        chat_template: bool = False,
    ) -> HFPolicy:
        """Load tokenizer and model (see :func:`resolve_checkpoint`) and add one adapter per name."""
        source, local_only = resolve_checkpoint(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
            model = AutoModelForCausalLM.from_pretrained(source, local_files_only=local_only, dtype=dtype)
        except OSError as exc:
            if local_only:
                raise
            raise FileNotFoundError(
                f"{source!r} is no local directory, and loading it as a hub id failed: {exc}\n"
                f"Where no hub is reachable, download it elsewhere (hf download {source} --local-dir DIR), "
                "copy DIR here and set path to it"
            ) from None
        model.to(device)  # type: ignore[arg-type]  # transformers' stub of the wrapped .to wants the model
        policy = cls(
            model,
            tokenizer,
            lora=lora,
            name=name,
            max_batch_size=max_batch_size,
            gradient_checkpointing=gradient_checkpointing,
            chat_template=chat_template,
        )
        for adapter in adapters:
            policy.add_adapter(adapter)
        return policy

    @property
    def eos_ids(self) -> list[int]:
        """Token ids that end a completion (the tokenizer's EOS and the checkpoint's own)."""
        return list(self._eos_ids)

    # ----- generation and scoring ---------------------------------------------------------------

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Complete every request: all at once with the generation backend when one is set, else here,
        one decode loop per (adapter, temperature, length) micro-batch."""
        for req in requests:
            self._check(req.adapter)
        prompt_ids = self.encode_prompts(requests)
        if self.generation_backend is not None:
            return self.generation_backend.generate(prompt_ids, requests)
        groups: dict[tuple[str | None, float, int], list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault((req.adapter, req.temperature, req.max_new_tokens), []).append(i)
        results: list[Generation | None] = [None] * len(requests)
        for (adapter, temperature, max_new), idxs in groups.items():
            idxs.sort(key=lambda i: len(prompt_ids[i]))  # similar lengths together: less padding
            for start in range(0, len(idxs), self.max_batch_size):
                chunk = idxs[start : start + self.max_batch_size]
                seeds = [requests[i].seed for i in chunk]
                outs = self._generate_batch(
                    [prompt_ids[i] for i in chunk], adapter, temperature, max_new, seeds
                )
                for i, out in zip(chunk, outs, strict=True):
                    results[i] = out
        return results  # type: ignore[return-value]  # every slot was filled above

    def encode_prompts(self, requests: list[GenerationRequest]) -> list[list[int]]:
        """Each request's prompt ids, cut (keeping BOS and the most recent part) to leave room for its
        completion within the model's positions."""
        prompt_ids = tokenize_prompts(self.tokenizer, [r.prompt for r in requests], self.chat_template)
        limit = self._max_positions
        for i, req in enumerate(requests):
            if limit is None or len(prompt_ids[i]) + req.max_new_tokens <= limit:
                continue
            if req.max_new_tokens >= limit:
                raise ValueError(
                    f"request {i}: max_new_tokens={req.max_new_tokens} exceeds the model's "
                    f"{limit} positions: lower max_new_tokens"
                )
            # A prompt grown long by earlier turns must not stop the run: keep its first token (BOS)
            # and its most recent part, and say so.
            keep = limit - req.max_new_tokens - 1
            log.warning(
                "policy %s: prompt of %d tokens cut to its last %d", self.name, len(prompt_ids[i]), keep
            )
            prompt_ids[i] = prompt_ids[i][:1] + prompt_ids[i][-keep:]
        return prompt_ids

    @torch.inference_mode()
    def _generate_batch(
        self,
        prompts: list[list[int]],
        adapter: str | None,
        temperature: float,
        max_new_tokens: int,
        seeds: list[int | None] | None = None,
    ) -> list[Generation]:
        """Sample (or greedily decode) one micro-batch with a KV cache.

        Unlike ``model.generate``, a row leaves the batch (and its cache rows are dropped) as soon as it
        emits EOS, so the long tail of one slow completion costs one row per step instead of the whole
        batch. Log-probs are ``log_softmax(logits / T)`` of the chosen tokens, the numerics of
        :meth:`token_logprobs`.

        When any row has a seed, every row samples from its own generator (a seedless row's generator is
        seeded from the global one) by the exponential race: ``argmax_v log p_v - log E_v`` with
        ``E_v ~ Exp(1)`` drawn from the row's generator, which picks ``v`` with probability ``p_v``. A
        seeded row's tokens then depend on its seed and its own distribution only; and two policies
        sampled with the same seeds share the noise, so where their distributions agree they pick the
        same tokens (common random numbers: the difference of two evaluations is far less noisy).
        """
        device = self.base.device
        # identical prompts (a task's group starting its episodes, an evaluation's samples) are prefilled
        # once; their rows of the cache and the logits are copied before the rows sample apart
        if self.share_prefill:
            first: dict[tuple[int, ...], int] = {}
            source = [first.setdefault(tuple(p), len(first)) for p in prompts]
            unique = [list(p) for p in first]
        else:  # every row prefilled on its own (for measuring what sharing saves)
            source, unique = list(range(len(prompts))), [list(p) for p in prompts]
        width = max(len(p) for p in prompts)

        def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
            ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, p in enumerate(rows):
                ids[row, width - len(p) :] = torch.tensor(p)
                mask[row, width - len(p) :] = 1
            return ids.to(device), mask.to(device)

        ids, mask = padded(unique)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: each row counts from its first token
        order = sorted(range(len(unique)), key=lambda i: len(unique[i]))
        chunks = prefill_chunks([len(unique[i]) for i in order]) if self.chunk_prefill else []
        sample = temperature > 0
        scale = temperature if sample else 1.0
        generators = row_generators(seeds) if sample and seeds and any(x is not None for x in seeds) else None
        eos = torch.tensor(self._eos_ids, device=device)
        keep_last = {"logits_to_keep": 1} if self._keeps_logits else {}
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finished = [False] * len(prompts)
        alive = list(range(len(prompts)))  # original row of each live batch row
        with self._use(adapter), self._merged(adapter):  # the decode loop on merged weights
            joined = None
            if len(chunks) > 1:  # prompts of unlike lengths: each chunk prefilled at its own width
                joined = self._chunked_prefill(ids, mask, positions, order, chunks, keep_last)
            if joined is not None:
                cache, logits = joined
            else:
                out = self.model(
                    input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep_last
                )
                cache = getattr(out, self._cache_kw)
                logits = out.logits[:, -1]
            if len(unique) < len(prompts):
                rows = torch.tensor(source, device=device)
                cache.batch_select_indices(rows)
                logits, mask, positions = logits[rows], mask[rows], positions[rows]
            next_pos = positions[:, -1:] + 1
            if self.preallocate_cache:
                preallocate(cache, max_new_tokens)  # written in place, not grown by concatenation
            for step in range(max_new_tokens):
                lp = F.log_softmax(logits.float() / scale, dim=-1)
                if not sample:
                    token = lp.argmax(-1, keepdim=True)
                elif generators is None:
                    token = torch.multinomial(lp.exp(), 1)
                else:
                    token = exponential_race(lp, [generators[row] for row in alive])
                chosen = lp.gather(1, token)[:, 0].tolist()
                done = torch.isin(token[:, 0], eos)
                picked = zip(alive, token[:, 0].tolist(), chosen, done.tolist(), strict=True)
                for row, tok, logp, end in picked:
                    completions[row].append(tok)
                    logprobs[row].append(logp)
                    finished[row] = end
                if step == max_new_tokens - 1 or bool(done.all()):
                    break
                if bool(done.any()):
                    live = (~done).nonzero()[:, 0]
                    cache.batch_select_indices(live)
                    mask, next_pos, token = mask[live], next_pos[live], token[live]
                    alive = [alive[i] for i in live.tolist()]
                mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
                out = self.model(
                    input_ids=token,
                    attention_mask=mask,
                    position_ids=next_pos,
                    use_cache=True,
                    **{self._cache_kw: cache},
                )
                logits = out.logits[:, -1]
                next_pos = next_pos + 1
        return [
            Generation(
                prompt_ids=list(p),
                completion_ids=completions[row],
                logprobs=logprobs[row],
                text=cast(str, self.tokenizer.decode(completions[row], skip_special_tokens=True)),  # one str
                finished=finished[row],
            )
            for row, p in enumerate(prompts)
        ]

    def _chunked_prefill(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        order: list[int],
        chunks: list[list[int]],
        keep_last: dict[str, int],
    ) -> tuple[Any, torch.Tensor] | None:
        """Prefill the left-padded rows ``ids`` chunk by chunk (``chunks``: positions in ``order``, each
        chunk's rows cut to their own longest prompt), then join the chunks' caches into one cache of the
        whole width, left-padded (the padding masked as before): the decode loop cannot tell it from one
        prefill of the whole batch, and no compute is spent on the padding of short prompts. None (and
        ``chunk_prefill`` turned off) where the model's cache is not transformers' plain dynamic cache."""
        width = ids.shape[1]
        caches, logits, rows = [], [], []
        for chunk in chunks:
            idx = [order[k] for k in chunk]
            w = int(mask[idx].sum(-1).max())
            out = self.model(
                input_ids=ids[idx, width - w :],
                attention_mask=mask[idx, width - w :],
                position_ids=positions[idx, width - w :],
                use_cache=True,
                **keep_last,
            )
            cache = getattr(out, self._cache_kw)
            layers = getattr(cache, "layers", None)
            if not layers or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
                self.chunk_prefill = False  # e.g. a sliding-window cache: one prefill of the batch
                return None
            caches.append((cache, w))
            logits.append(out.logits[:, -1])
            rows += idx
        joined = caches[0][0]
        for layer_idx, layer in enumerate(joined.layers):
            for name in ("keys", "values"):
                parts = [F.pad(getattr(c.layers[layer_idx], name), (0, 0, width - w, 0)) for c, w in caches]
                setattr(layer, name, torch.cat(parts, dim=0))
        back = torch.empty(len(rows), dtype=torch.long, device=ids.device)
        back[torch.tensor(rows, device=ids.device)] = torch.arange(len(rows), device=ids.device)
        joined.batch_select_indices(back)  # rows back in the batch's order
        return joined, torch.cat(logits)[back]

    def token_logprobs(
        self,
        adapter: str | None,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, Tc] log-probs of each completion token (right-padded, 0 at padding) and the [B, Tc] mask.

        Same numerics as ``generate`` (``log_softmax(logits / T)``, T=1 for greedy). Differentiable
        w.r.t. the adapter's LoRA weights when grad is enabled.
        """
        dist, ids, mask = self._completion_log_softmax(adapter, prompt_ids, completion_ids, temperature)
        if dist is None:
            return mask, mask.clone()
        return dist.gather(-1, ids[..., None])[..., 0] * mask, mask

    def token_logprobs_entropy(
        self,
        adapter: str | None,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As :meth:`token_logprobs`, with the [B, Tc] entropy of the next-token distribution at each
        completion position (``-sum p log p`` of ``softmax(logits / T)``; detached, 0 at padding) between
        the log-probs and the mask: where the policy hesitates (forking tokens) and where it does not."""
        dist, ids, mask = self._completion_log_softmax(adapter, prompt_ids, completion_ids, temperature)
        if dist is None:
            return mask, mask.clone(), mask.clone()
        with torch.no_grad():
            entropy = -(dist.exp() * dist).sum(-1) * mask
        return dist.gather(-1, ids[..., None])[..., 0] * mask, entropy, mask

    def _completion_log_softmax(
        self,
        adapter: str | None,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """``log_softmax(logits / T)`` [B, Tc, V] at each completion position (None when there is no
        completion token), the completion ids [B, Tc] and their float mask [B, Tc]."""
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(
                f"{len(prompt_ids)} prompts but {len(completion_ids)} completions: pass one per prompt"
            )
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("an empty prompt has no position to predict the first completion token from")
        batch = len(prompt_ids)
        width = max((len(p) for p in prompt_ids), default=0)
        tc = max((len(c) for c in completion_ids), default=0)
        device = self.base.device
        if batch == 0 or tc == 0:
            empty = torch.zeros(batch, tc, device=device)
            return None, empty.long(), empty
        # Prompts left-padded and completions right-padded so every completion starts at column `width`.
        ids = torch.full((batch, width + tc), self._pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for row, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
            ids[row, width - len(p) : width] = torch.tensor(p)
            ids[row, width : width + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[row, width - len(p) : width + len(c)] = 1
        ids, attn = ids.to(device), attn.to(device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)  # as generate derives them from the mask
        kwargs = {"logits_to_keep": tc + 1} if self._keeps_logits else {}
        with self._use(adapter):
            logits = self.model(
                input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False, **kwargs
            ).logits
        logits = logits[:, -(tc + 1) : -1].float()
        scale = temperature if temperature > 0 else 1.0
        return F.log_softmax(logits / scale, dim=-1), ids[:, width:], attn[:, width:].float()

    def last_hidden_states(self, adapter: str | None, sequences: list[list[int]]) -> torch.Tensor:
        """[B, H] the base model's final hidden state (after its last norm) at each sequence's last token,
        under ``adapter``: the input of a value head. Differentiable w.r.t. the adapter's LoRA weights when
        grad is enabled. Sequences are left-padded, with positions counted as ``generate`` counts them."""
        if not sequences or any(len(s) == 0 for s in sequences):
            raise ValueError("last_hidden_states needs at least one sequence, and no empty one")
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self._pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for row, seq in enumerate(sequences):
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            attn[row, width - len(seq) :] = 1
        ids, attn = ids.to(self.base.device), attn.to(self.base.device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        with self._use(adapter):
            # the transformer body alone (no LM head): LoRA layers live inside it, so the adapter applies
            out = self.base.base_model(
                input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False
            )
        return out.last_hidden_state[:, -1]

    def sft(
        self,
        adapter: str | None,
        examples: Sequence[tuple[str, str]],
        settings: SFTSettings,
        progress: bool = True,
        teacher: tuple[HFPolicy, str | None] | None = None,
    ) -> dict[str, float | int | list[float]]:
        """Supervised fine-tuning of one adapter only (or of the base, adapters off, when None).

        ``teacher``: ``(policy, its adapter)`` whose next-token distributions the adapter learns at the
        completion tokens (token-level distillation, KL(teacher || this)), e.g. a trained team's role into a
        smaller base; the two tokenizers must be the same."""
        self._check(adapter)
        params = list(self._params[adapter].values())
        if adapter is None and settings.lr is None:
            settings = dataclasses.replace(settings, lr=FULL_LR)
        teacher_logits = None
        if teacher is not None:
            source, source_adapter = teacher
            source._check(source_adapter)
            if source.tokenizer.get_vocab() != self.tokenizer.get_vocab():
                raise ValueError(
                    f"distillation needs one tokenizer: policy {source.name!r}'s differs from {self.name!r}'s"
                )

            def teacher_logits(input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
                with source._use(source_adapter):
                    return source.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits

        with self._use(adapter):
            return sft_train(
                self.model,
                self.tokenizer,
                examples,
                settings,
                parameters=params,
                progress=progress,
                desc=f"sft {self.name}/{adapter or 'base'}",
                chat_template=self.chat_template,
                teacher=teacher_logits,
            )
