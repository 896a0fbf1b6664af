"""The weights side of :class:`~teamrl.policies.hf.HFPolicy`: where a checkpoint is loaded from, on
which device and in which dtype, and the LoRA adapters (one per role) over its frozen base: adding,
copying, freezing, fingerprinting, saving and loading them.

Everything here is re-exported by :mod:`teamrl.policies.hf`; ``HFPolicy`` gets the adapter methods from
:class:`LoraAdapterMixin`.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shutil
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from peft.utils import load_peft_weights
from transformers import PreTrainedModel

from teamrl.atomic import atomic_directory

_ADAPTER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name


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


def _strip_adapter(param_name: str, adapter: str) -> str | None:
    """``...q_proj.lora_A.coder.weight`` -> ``...q_proj.lora_A.weight`` if it belongs to ``adapter``."""
    parts = param_name.split(".")
    for i in range(len(parts) - 1):
        if parts[i].startswith("lora_") and parts[i + 1] == adapter:
            return ".".join(parts[: i + 1] + parts[i + 2 :])
    return None


class LoraAdapterMixin:
    """The adapter methods of :class:`~teamrl.policies.hf.HFPolicy`, which sets the attributes below."""

    name: str
    base: PreTrainedModel
    model: PreTrainedModel | PeftModel
    lora: LoraSettings
    adapter_names: list[str]
    _trainable: set[str]
    _params: dict[str | None, dict[str, torch.nn.Parameter]]

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
            if (have.r, have.lora_alpha, _module_set(have.target_modules)) != (
                config.r,
                config.lora_alpha,
                _module_set(config.target_modules),
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
    def _merged(self, adapter: str | None) -> Iterator[None]:
        """Inside :meth:`_use`: the block runs on base weights with ``adapter``'s LoRA merged in and the
        adapters off (a decode step then runs one matmul per projection, not three), when
        ``merge_for_decode`` is on. The merged weights are new tensors swapped in and the originals swapped
        back: the base is untouched, bit for bit and in its in-place write counts (``weights_version``)."""
        model = self.model
        if (
            adapter is None
            or not getattr(self, "merge_for_decode", False)
            or not isinstance(model, PeftModel)
        ):
            yield
            return
        layers = [m for m in model.modules() if isinstance(m, LoraLayer) and adapter in m.lora_A]
        if any(m.lora_bias.get(adapter) or adapter in m.lora_variant for m in layers):
            yield  # a LoRA bias or variant (DoRA) is not merged here
            return
        bases = [cast(torch.nn.Linear, m.get_base_layer()) for m in layers]
        originals = [base.weight.data for base in bases]
        try:
            with torch.no_grad():
                for m, base, weight in zip(layers, bases, originals, strict=True):
                    delta = cast(Any, m).get_delta_weight(adapter)  # B @ A x scaling, as peft merges it
                    base.weight.data = weight + delta.to(weight.dtype)
            with model.disable_adapter():
                yield
        finally:
            for base, weight in zip(bases, originals, strict=True):
                base.weight.data = weight
            self._apply_trainable()  # peft's re-enabling of the adapters flips requires_grad flags

    @contextmanager
    def _use(self, adapter: str | None) -> Iterator[None]:
        """Run the block under ``adapter`` (None: the base), one thread at a time: a forward pass started
        from another thread (the engine generates in a worker thread; a role's foresight reads hidden
        states from another) never switches the adapter under a running one."""
        lock = self.__dict__.get("_use_lock") or self.__dict__.setdefault("_use_lock", threading.RLock())
        with lock:
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


def _module_set(modules: Any) -> set[str]:
    """A LoRA config's ``target_modules`` as a set: peft allows a list, a set, one name (a regex) or None, and
    its type hints changed between releases (0.21 / 0.22)."""
    if modules is None:
        return set()
    return {modules} if isinstance(modules, str) else set(modules)
