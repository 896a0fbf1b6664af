"""A policy on any transformers checkpoint: one frozen base plus one LoRA adapter per role."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import logging
import re
import shutil
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import load_peft_weights
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from teamrl.atomic import atomic_directory
from teamrl.policies.base import Generation, GenerationRequest
from teamrl.policies.sft import FULL_LR, SFTSettings, sft_train, tokenize_prompts

_ADAPTER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name

log = logging.getLogger("teamrl.policies")


@dataclass(frozen=True)
class LoraSettings:
    """Shape of every role adapter. Dropout 0 keeps behaviour and training log-probs identical."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )

    def to_peft(self) -> LoraConfig:
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; a GPU asked for must exist."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r}: torch {torch.__version__} sees no CUDA GPU; use device: cpu (or auto)"
        )
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """``auto`` -> bfloat16 on a GPU, float32 on CPU; otherwise the named torch dtype."""
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)


def resolve_checkpoint(path: str | Path) -> tuple[str, bool]:
    """What to load and whether from local files only.

    An existing path must be a checkpoint directory (loaded from disk, never the hub). A hub id
    (``org/name``) that is no local path goes through the Hugging Face cache, which downloads it
    where a hub is reachable (``HF_HUB_OFFLINE=1`` keeps it to the cache).
    """
    local = Path(path).expanduser()
    if not local.exists() and _HUB_ID.fullmatch(str(path)):
        return str(path), False
    if not (local / "config.json").is_file():
        what = "does not exist" if not local.exists() else "has no config.json"
        raise FileNotFoundError(
            f"model directory {local} {what}: pass a checkpoint directory written by save_pretrained "
            "(e.g. the output of build_embedded_default) or a hub id such as Qwen/Qwen2.5-0.5B-Instruct"
        )
    return str(local), True


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


def _strip_adapter(param_name: str, adapter: str) -> str | None:
    """``...q_proj.lora_A.coder.weight`` -> ``...q_proj.lora_A.weight`` if it belongs to ``adapter``."""
    parts = param_name.split(".")
    for i in range(len(parts) - 1):
        if parts[i].startswith("lora_") and parts[i + 1] == adapter:
            return ".".join(parts[: i + 1] + parts[i + 2 :])
    return None


class HFPolicy:
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
        lora: LoraSettings = LoraSettings(),
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
        lora: LoraSettings = LoraSettings(),
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

    # ----- adapters -----------------------------------------------------------------------------

    def _reindex(self) -> None:
        # Parameter names normalised so that a copy and its source (and the base before and after peft
        # wrapping) index identically; fingerprints and copies rely on that.
        index: dict[str | None, dict[str, torch.nn.Parameter]] = {a: {} for a in [None, *self.adapter_names]}
        for pname, param in self.model.named_parameters():
            for adapter in self.adapter_names:
                key = _strip_adapter(pname, adapter)
                if key is not None:
                    index[adapter][key] = param
                    break
            else:
                key = pname.removeprefix("base_model.model.").replace(".base_layer.", ".")
                index[None][key] = param
        self._params = index
        self._apply_trainable()

    def _apply_trainable(self) -> None:
        wanted = {id(p) for a in self._trainable for p in self._params[a].values()}
        for param in self.model.parameters():
            param.requires_grad_(id(param) in wanted)

    def _check(self, adapter: str | None) -> None:
        if adapter is not None and adapter not in self.adapter_names:
            raise KeyError(f"policy {self.name!r} has no adapter {adapter!r}; it has {self.adapter_names}")

    def _add(self, name: str, config: LoraConfig) -> None:
        if not _ADAPTER_NAME.match(name) or name in "lora_" or name == "default":
            raise ValueError(
                f"adapter name {name!r} is invalid: use letters, digits, '_' or '-', starting with a letter "
                "(and not 'default' or a substring of 'lora_')"
            )
        if name in self.adapter_names:
            raise ValueError(f"policy {self.name!r} already has an adapter {name!r}: pick another name")
        if isinstance(self.model, PeftModel):
            self.model.add_adapter(name, config)
        else:
            with warnings.catch_warnings():
                # peft probes a transformers attribute that v5 deprecated; nothing for us to act on.
                warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
                self.model = get_peft_model(self.base, config, adapter_name=name)
        self.model.eval()  # fresh LoRA modules start in train mode
        self.adapter_names.append(name)

    def add_adapter(self, name: str) -> None:
        """A new trainable LoRA adapter (initialised as a no-op: LoRA's B starts at zero)."""
        self._add(name, self.lora.to_peft())
        self._trainable.add(name)
        self._reindex()

    def copy_adapter(self, src: str, dst: str) -> None:
        """Snapshot ``src`` into a new frozen adapter ``dst`` (e.g. a KL reference)."""
        self._check(src)
        self._add(dst, copy.deepcopy(cast(LoraConfig, self.model.peft_config[src])))  # all adapters are LoRA
        self._reindex()
        with torch.no_grad():
            for key, param in self._params[dst].items():
                param.copy_(self._params[src][key])

    def adapter_parameters(self, name: str) -> list[torch.nn.Parameter]:
        """The LoRA parameters of adapter ``name`` only."""
        self._check(name)
        return list(self._params[name].values())

    def set_trainable(self, names: Iterable[str]) -> None:
        """``requires_grad`` True exactly for these adapters' parameters, False for everything else."""
        names = set(names)
        for adapter in names:
            self._check(adapter)
        self._trainable = names
        self._apply_trainable()

    def weights_version(self, name: str | None) -> int:
        """A number that grows whenever an adapter's (None: the base's) weights change in place.

        Torch counts in-place writes per tensor (optimizer steps, ``copy_``, ``add_``), so a backend that
        serves copies of the weights (vLLM) learns of every update without the trainer telling it, and
        without hashing the weights as :meth:`fingerprint` does.
        """
        self._check(name)
        return sum(param._version for param in self._params[name].values())

    def fingerprint(self, name: str | None) -> str:
        """Hash of an adapter's (or, for None, the base's) parameter values."""
        self._check(name)
        digest = hashlib.sha256()
        for key, param in sorted(self._params[name].items()):
            digest.update(key.encode())
            digest.update(param.detach().reshape(-1).contiguous().view(torch.uint8).cpu().numpy().tobytes())
        return digest.hexdigest()[:16]

    def save_adapter(self, name: str, directory: Path) -> None:
        """Write adapter ``name`` in peft's format (``PeftModel.from_pretrained`` loads it), atomically."""
        self._check(name)
        with atomic_directory(Path(directory)) as tmp:
            staging = tmp / "peft"
            # save_embedding_layers=False: "auto" may ask the hub about the base when its path moved.
            self.model.save_pretrained(str(staging), selected_adapters=[name], save_embedding_layers=False)
            for file in (staging / name).iterdir():
                file.rename(tmp / file.name)
            shutil.rmtree(staging)

    def load_adapter(self, name: str, directory: Path) -> None:
        """Load (or overwrite) adapter ``name`` from a directory written by ``save_adapter``/peft."""
        directory = Path(directory)
        needed = ("adapter_config.json", "adapter_model.safetensors")
        if not all((directory / f).is_file() for f in needed):
            # Checked here because peft falls back to the hub for anything missing locally.
            raise FileNotFoundError(
                f"{directory} is not a saved adapter (needs {', '.join(needed)}): "
                "pass a directory written by HFPolicy.save_adapter"
            )
        config = LoraConfig.from_pretrained(str(directory))
        if name not in self.adapter_names:
            self._add(name, config)
            self._trainable.add(name)
            self._reindex()
        else:
            have = cast(LoraConfig, self.model.peft_config[name])
            # peft's stub allows str | None; an adapter made here always has its modules (a set)
            if (have.r, have.lora_alpha, set(have.target_modules)) != (  # type: ignore[arg-type]
                config.r,
                config.lora_alpha,
                set(config.target_modules),
            ):
                raise ValueError(
                    f"adapter in {directory} (r={config.r}, alpha={config.lora_alpha}) does not match the "
                    f"adapter {name!r} (r={have.r}, alpha={have.lora_alpha}): load it under a new name"
                )
        weights = load_peft_weights(str(directory), device=str(self.base.device))
        self._copy_weights(name, weights, source=str(directory))

    def adapter_state_dict(self, name: str) -> dict[str, torch.Tensor]:
        """A CPU copy of adapter ``name``'s LoRA weights, keyed as peft saves them: what a Ray rollout
        worker is sent (:meth:`load_adapter_state_dict` on a policy with the same base loads it)."""
        self._check(name)
        return {key: param.detach().cpu().clone() for key, param in self._params[name].items()}

    def load_adapter_state_dict(self, name: str, weights: dict[str, torch.Tensor]) -> None:
        """Overwrite the existing adapter ``name`` with weights from :meth:`adapter_state_dict`."""
        self._check(name)
        self._copy_weights(name, weights, source="the state dict")

    def _copy_weights(self, name: str, weights: dict[str, torch.Tensor], source: str) -> None:
        params = self._params[name]
        missing, unexpected = params.keys() - weights.keys(), weights.keys() - params.keys()
        if missing or unexpected:
            raise ValueError(
                f"adapter weights in {source} do not fit adapter {name!r}: missing {sorted(missing)[:3]}, "
                f"unexpected {sorted(unexpected)[:3]}; was it saved from the same base model?"
            )
        with torch.no_grad():
            for key, param in params.items():
                if weights[key].shape != param.shape:
                    raise ValueError(
                        f"{source}: {key} has shape {tuple(weights[key].shape)}, "
                        f"adapter {name!r} expects {tuple(param.shape)}"
                    )
                param.copy_(weights[key])

    @contextmanager
    def _use(self, adapter: str | None) -> Iterator[None]:
        self._check(adapter)
        if adapter is None:
            if isinstance(self.model, PeftModel):
                with self.model.disable_adapter():
                    yield
            else:
                yield
            return
        if self.model.active_adapter != adapter:
            self.model.set_adapter(adapter)
            self._apply_trainable()  # peft's set_adapter flips requires_grad to "active adapter only"
        yield

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
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: each row counts from its first token
        sample = temperature > 0
        scale = temperature if sample else 1.0
        generators = row_generators(seeds) if sample and seeds and any(x is not None for x in seeds) else None
        eos = torch.tensor(self._eos_ids, device=device)
        keep_last = {"logits_to_keep": 1} if self._keeps_logits else {}
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finished = [False] * len(prompts)
        alive = list(range(len(prompts)))  # original row of each live batch row
        with self._use(adapter):
            out = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep_last
            )
            cache = getattr(out, self._cache_kw)
            next_pos = positions[:, -1:] + 1
            for step in range(max_new_tokens):
                lp = F.log_softmax(out.logits[:, -1].float() / scale, dim=-1)
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
            return torch.zeros(batch, tc, device=device), torch.zeros(batch, tc, device=device)
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
        mask = attn[:, width:].float()
        lp = F.log_softmax(logits / scale, dim=-1).gather(-1, ids[:, width:, None])[..., 0]
        return lp * mask, mask

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
    ) -> dict[str, float | int | list[float]]:
        """Supervised fine-tuning of one adapter only (or of the base, adapters off, when None)."""
        self._check(adapter)
        params = list(self._params[adapter].values())
        if adapter is None and settings.lr is None:
            settings = dataclasses.replace(settings, lr=FULL_LR)
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
            )
