"""Turn a validated Config into live objects: task suite, sandbox, policies, team, engine."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import os
import random
from pathlib import Path

from teamrl.config import Config, ConfigError, PolicyConfig
from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team
from teamrl.policies.hf import HFPolicy, LoraSettings, resolve_checkpoint, resolve_device, resolve_dtype
from teamrl.policies.openai_compat import OpenAICompatPolicy
from teamrl.policies.sft import SFTSettings
from teamrl.policies.tiny import BUILD_MARKER, TinyModelConfig, build_embedded_default
from teamrl.policies.vllm_generation import VLLM_MISSING, VLLMGenerator, VLLMSettings
from teamrl.tasks.programming import ProgrammingTaskSuite
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.workflows.experts import pipeline_experts
from teamrl.workflows.pipeline import pipeline

log = logging.getLogger("teamrl")


def build_suite(cfg: Config) -> ProgrammingTaskSuite:
    return ProgrammingTaskSuite(
        seed=cfg.tasks.seed, difficulty=tuple(cfg.tasks.difficulty), kinds=tuple(cfg.tasks.kinds)
    )


def build_sandbox(cfg: Config) -> Sandbox:
    s = cfg.sandbox
    limits = SandboxLimits(timeout_s=s.timeout_s, memory_mb=s.memory_mb, check_timeout_s=s.check_timeout_s)
    return Sandbox(limits, isolation=s.isolation)


def demonstrations(cfg: Config, n_episodes: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """(prompt, completion) pairs per role, from the real workflow played by scripted experts
    on training tasks, so that demonstration prompts are exactly the prompts of an episode."""
    suite = build_suite(cfg)
    rng = random.Random(seed)
    experts = pipeline_experts(rng)
    roles = cfg.workflow.roles
    team = Team({r: Seat(script=experts[roles[r].kind]) for r in cfg.workflow.order})
    tasks = suite.sample("train", n_episodes, rng)

    async def play() -> list:
        return [await pipeline(team, task, cfg.workflow, sandbox=None) for task in tasks]

    pairs: dict[str, list[tuple[str, str]]] = {r: [] for r in cfg.workflow.order}
    for episode in asyncio.run(play()):
        for turn in episode.turns:
            pairs[turn.role].append((turn.prompt, turn.text))
    return pairs


def _embedded_corpus(cfg: Config, pcfg: PolicyConfig) -> tuple[list[tuple[str, str]], Path]:
    """The base's training pairs and its cache directory, keyed by their content and the settings."""
    e = pcfg.embedded
    pairs = demonstrations(cfg, e.demo_episodes, seed=e.seed + 7919)
    examples = [pair for role in cfg.workflow.order for pair in pairs[role]]
    key_material = json.dumps(
        {"embedded": e.model_dump(exclude={"cache_dir"}), "examples": examples}, sort_keys=True
    ).encode()
    key = hashlib.sha256(key_material).hexdigest()[:16]
    return examples, Path(e.cache_dir).expanduser() / f"embedded-{key}"


def embedded_checkpoint_path(cfg: Config, pcfg: PolicyConfig) -> Path:
    """Where :func:`embedded_checkpoint` keeps (or will keep) this base."""
    return _embedded_corpus(cfg, pcfg)[1]


def embedded_checkpoint(cfg: Config, pcfg: PolicyConfig, progress: bool) -> Path:
    """Build (or reuse from the cache) the embedded default for this workflow and task suite."""
    e = pcfg.embedded
    examples, out_dir = _embedded_corpus(cfg, pcfg)
    model_cfg = TinyModelConfig(
        vocab_size=e.vocab_size,
        hidden_size=e.hidden_size,
        intermediate_size=e.intermediate_size,
        num_layers=e.num_layers,
        num_heads=e.num_heads,
    )
    # Loss on prompt tokens too: a new base learns the task language from all of the text, which
    # measured 2.6x the held-out coder success of completion-only loss at equal compute.
    settings = SFTSettings(max_steps=e.steps, batch_size=e.batch_size, lr=e.lr, seed=e.seed, prompt_loss=True)
    if not (out_dir / BUILD_MARKER).exists():
        log.info("building the embedded default in %s (cached for later runs)", out_dir)
    return build_embedded_default(
        examples, out_dir, cfg=model_cfg, sft=settings, seed=e.seed, progress=progress
    )


def build_policy(cfg: Config, name: str, progress: bool = True) -> HFPolicy | OpenAICompatPolicy:
    """The live policy of ``cfg.policies[name]``."""
    pcfg = cfg.policies[name]
    roles = [r for r in cfg.workflow.order if cfg.workflow.roles[r].policy == name]
    if pcfg.kind == "openai":
        api_key = None
        if pcfg.api_key_env is not None:
            api_key = os.environ.get(pcfg.api_key_env)
            if not api_key:
                raise ConfigError(
                    f"policies.{name}.api_key_env: the environment variable {pcfg.api_key_env} is not set "
                    "(or empty); export it, or remove api_key_env if the endpoint needs no key"
                )
        return OpenAICompatPolicy(
            pcfg.base_url or "",
            pcfg.model or "",
            name=name,
            api_key=api_key,
            endpoint=pcfg.endpoint,
            max_concurrency=pcfg.max_concurrency,
            timeout_s=pcfg.timeout_s,
            retries=pcfg.retries,
            stop=pcfg.stop,
            roles=roles,
        )
    # Checked before any model is built: what this machine cannot run is a config error.
    try:
        device = resolve_device(pcfg.device)
    except ValueError as exc:
        raise ConfigError(f"policies.{name}.device: {exc}") from None
    if pcfg.generation == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"policies.{name}.generation is 'vllm', but {VLLM_MISSING}")
    adapters = [r for r in roles if cfg.workflow.roles[r].adapter]
    path = embedded_checkpoint(cfg, pcfg, progress) if pcfg.kind == "embedded" else pcfg.path or ""
    lora = LoraSettings(r=pcfg.lora.r, alpha=pcfg.lora.alpha, target_modules=tuple(pcfg.lora.target_modules))
    policy = HFPolicy.from_pretrained(
        path,
        adapters=adapters,
        lora=lora,
        name=name,
        dtype=resolve_dtype(pcfg.dtype, device),
        device=device,
        gradient_checkpointing=pcfg.gradient_checkpointing,
    )
    if pcfg.generation == "vllm":
        settings = VLLMSettings(**pcfg.vllm.model_dump(), seed=cfg.run.seed)
        policy.generation_backend = VLLMGenerator.launch(policy, resolve_checkpoint(path)[0], settings)
    return policy


def build_policies(cfg: Config, progress: bool = True) -> dict[str, HFPolicy | OpenAICompatPolicy]:
    """Every policy of the config. Config validation keeps OpenAI-compatible (inference-only) policies
    out of trainable seats: only roles with ``adapter: false, trainable: false`` use them."""
    return {name: build_policy(cfg, name, progress) for name in cfg.policies}


def build_team(cfg: Config, engine: Engine, temperature: float) -> Team:
    seats = {}
    for role in cfg.workflow.order:
        r = cfg.workflow.roles[role]
        seats[role] = Seat(
            policy=r.policy,
            adapter=role if r.adapter else None,
            trainable=r.trainable,
            max_new_tokens=r.max_new_tokens,
            temperature=temperature,
        )
    return Team(seats, engine)
