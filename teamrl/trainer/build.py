"""Turn a validated Config into live objects: task suite, sandbox, workflow, policies, team, engine; and
the workflow's episodes, rewards and demonstrations as the trainer, the Ray workers and the benchmarks
run them. Everything here goes through the public protocols (``Workflow``, ``TaskSuite``, reward
functions): no workflow or task type is tested."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import os
import random
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from teamrl.config import Config, ConfigError, PolicyConfig, reward_functions, suite_class
from teamrl.engine.engine import Engine
from teamrl.engine.team import EpisodeSeeds, Seat, Team, derive_seed, seeded
from teamrl.policies.base import ref_adapter
from teamrl.policies.hf import HFPolicy, LoraSettings, resolve_checkpoint, resolve_device, resolve_dtype
from teamrl.policies.openai_compat import OpenAICompatPolicy
from teamrl.policies.sft import SFTSettings
from teamrl.policies.tiny import BUILD_MARKER, TinyModelConfig, build_embedded_default
from teamrl.policies.vllm_generation import VLLM_MISSING, VLLMGenerator, VLLMSettings
from teamrl.protocol import Episode
from teamrl.rewards.functions import RewardContext, combine
from teamrl.tasks.base import TaskSuite
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.tasks.sandbox.trusted import TrustedRunner
from teamrl.trainer.faults import fault_point
from teamrl.workflows.base import Rollouts, Workflow, WorkflowError, checked_episode

log = logging.getLogger("teamrl")

Task = Any  # a task of the config's suite: the workflow's business


# -- what the workflow decides: its tasks, its sandbox, how an episode is played and credited --------
def build_suite(cfg: Config) -> TaskSuite[Any]:
    """The config's task suite (``tasks.suite``: built-in or import path)."""
    try:
        suite = suite_class(cfg.tasks.suite)(cfg.tasks)
        probe = suite.sample("train", 1, random.Random(0)) + suite.fixed_set("heldout", 1)
    except (ValueError, FileNotFoundError) as exc:  # a file the suite cannot use
        raise ConfigError(f"tasks: {exc}") from None
    for task in probe:  # what every workflow, the trainer and the report rely on
        if not isinstance(getattr(task, "task_id", None), str):
            raise ConfigError(
                f"tasks.suite {cfg.tasks.suite!r}: its tasks need a `task_id` string (got a "
                f"{type(task).__name__} without one); a group's episodes and the report are keyed by it"
            )
    if not probe:
        raise ConfigError(
            f"tasks.suite {cfg.tasks.suite!r}: sample('train', 1) and fixed_set('heldout', 1) gave no task"
        )
    return suite


def sandbox_limits(cfg: Config) -> SandboxLimits:
    """The ``sandbox:`` section's limits."""
    s = cfg.sandbox
    return SandboxLimits(timeout_s=s.timeout_s, memory_mb=s.memory_mb, check_timeout_s=s.check_timeout_s)


def build_sandbox(cfg: Config) -> Sandbox | None:
    """The sandbox a workflow that runs code (``Workflow.uses_sandbox``) verifies in; None for the others.
    With the Ray backend, a pool of Ray sandbox workers that runs each check in such a sandbox."""
    if not cfg.workflow_class.uses_sandbox:
        return None
    s, limits = cfg.sandbox, sandbox_limits(cfg)
    if cfg.run.backend == "ray":
        from teamrl.distributed.ray_sandbox import RaySandbox  # imports no Ray until the pool starts

        r = cfg.ray
        return RaySandbox(limits, s.isolation, r.num_sandbox_workers, r.num_cpus_per_sandbox_worker)  # type: ignore[return-value]
    return Sandbox(limits, isolation=s.isolation)


def build_workflow(cfg: Config, sandbox: Sandbox | None) -> Workflow[Any]:
    """The config's workflow (``workflow.name``: built-in or import path), verifying in ``sandbox``."""
    return cfg.workflow_class(cfg.workflow, sandbox)


def episode_factories(
    cfg: Config,
    workflow: Workflow[Any],
    team: Team,
    tasks: list[Task],
    group_size: int,
    seed_key: str | None = None,
) -> list[Callable[[], Awaitable[Episode]]]:
    """``group_size`` episodes of every task, task by task, for ``Engine.run``. With ``seed_key`` (and
    ``run.seeded_sampling``), episode ``g`` of a task samples its turns from seeds of (``run.seed``,
    ``seed_key``, task id, ``g``): the same key plays the same samples however the engine batches them.
    The first ``algorithm.greedy_episodes`` of a task decode the trained roles' turns greedily; the others
    form a tree with ``algorithm.tree`` (its turns shared only where a role is trained: ``Team.act``)."""

    seeding = seed_key is not None and cfg.run.seeded_sampling
    rollout = derive_seed(cfg.run.seed, seed_key) if seeding else 0

    greedy = min(cfg.algorithm.greedy_episodes, group_size - 1)  # a group keeps a sampled episode
    tree = tuple(cfg.algorithm.tree)  # shared trained turns in tree-shaped groups (RL rollouts only)

    def factory(task: Task, g: int) -> Callable[[], Awaitable[Episode]]:
        seeds = EpisodeSeeds(rollout, derive_seed(rollout, task.task_id, g)) if seeding else None
        if seeds is not None and tree and g >= greedy:
            seeds.tree, seeds.leaf, seeds.leaves = tree, g - greedy, group_size - greedy

        async def play() -> Episode:
            return checked_episode(workflow, await workflow.play(team, task, group=g), task, g)

        def start() -> Awaitable[Episode]:
            fault_point("episode")  # the crash tests' kill point mid-rollout
            return seeded(play(), seeds, greedy=g < greedy)

        return start

    return [factory(t, g) for t in tasks for g in range(group_size)]


def score_episodes(
    cfg: Config,
    workflow: Workflow[Any],
    episodes: list[Episode],
    counterfactual: Callable[[list[Episode]], dict[str, float]] | None = None,
) -> dict[str, float]:
    """Per-role process scores and rewards of verified episodes: the workflow's own (per episode, then per
    batch), then the config's reward functions (``reward.functions`` / ``reward.credit``); returns the
    functions' figures. ``counterfactual``: the replayer of an RL iteration (else counterfactual credit
    falls back to the hybrid reward)."""
    for episode in episodes:
        workflow.assign_rewards(episode, cfg.reward)
    workflow.batch_rewards(episodes, cfg.reward)
    return apply_reward_functions(cfg, workflow, episodes, counterfactual)


def apply_reward_functions(
    cfg: Config,
    workflow: Workflow[Any],
    episodes: list[Episode],
    counterfactual: Callable[[list[Episode]], dict[str, float]] | None = None,
) -> dict[str, float]:
    """The config's reward functions over episodes the workflow has rewarded; their figures. Only
    ``hybrid`` at weight 1 keeps the workflow's rewards as they are."""
    functions = reward_functions(cfg.reward)
    if [(name, w, args) for name, _, w, args in functions] == [("hybrid", 1.0, {})]:
        return {}
    ctx = RewardContext(workflow=workflow, settings=cfg.reward, counterfactual=counterfactual)
    combine(episodes, ctx, functions)
    return ctx.metrics


def workflow_experts(workflow: Workflow[Any], rng: random.Random) -> dict[str, Seat]:
    """Every role of the workflow played by its scripted expert (``Workflow.experts``)."""
    return {role: Seat(script=script) for role, script in workflow.experts(rng).items()}


# -- the same by config, for scripts and tests ---------------------------------------------------------
def play_episode(
    cfg: Config, team: Team, task: Task, sandbox: Sandbox | None, group: int = 0
) -> Awaitable[Episode]:
    """One episode of the config's workflow (verified in ``sandbox``; a pipeline without one stays
    unverified)."""
    return build_workflow(cfg, sandbox).play(team, task, group=group)


def expert_seats(cfg: Config, rng: random.Random) -> dict[str, Seat]:
    """Every role of the config's workflow played by its scripted expert."""
    return workflow_experts(build_workflow(cfg, None), rng)


def assign_rewards(cfg: Config, episode: Episode) -> None:
    """One verified episode's rewards: the workflow's own, then the config's reward functions."""
    workflow = build_workflow(cfg, None)
    workflow.assign_rewards(episode, cfg.reward)
    apply_reward_functions(cfg, workflow, [episode])


def assign_batch_rewards(cfg: Config, episodes: list[Episode]) -> None:
    """The workflow's rewards that need the whole batch (``Workflow.batch_rewards``)."""
    build_workflow(cfg, None).batch_rewards(episodes, cfg.reward)


def demonstrations(cfg: Config, n_episodes: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """(prompt, completion) pairs per role, from the real workflow played by scripted experts
    on training tasks, so that demonstration prompts are exactly the prompts of an episode."""
    suite = build_suite(cfg)
    rng = random.Random(seed)
    # the experts' code runs where the workflow's prompts show runs: no model wrote it (the task's
    # reference, the generator's own bugs, tests from the reference), so by default it is forked from warm
    # interpreters instead of contained (TrustedRunner: the same results, a fraction of the CPU)
    local: Sandbox | TrustedRunner | None = None
    if cfg.workflow_class.demonstrations_need_sandbox:
        limits = sandbox_limits(cfg)
        trusted = cfg.sandbox.trust_demonstrations
        local = TrustedRunner(limits) if trusted else Sandbox(limits, isolation=cfg.sandbox.isolation)
    try:
        workflow = build_workflow(cfg, local)  # type: ignore[arg-type]  # a SandboxLike, as RaySandbox is
        team = Team(workflow_experts(workflow, rng))
        tasks = workflow.demonstration_tasks(suite.sample("train", n_episodes, rng))
        episodes = asyncio.run(workflow.demonstrate(team, tasks))
        wrong = [e for e in episodes if not isinstance(e, Episode)]
        if wrong:
            raise WorkflowError(
                f"workflow {type(workflow).__name__}.demonstrate returned a {type(wrong[0]).__name__} in "
                f"place of an Episode ({len(wrong)} of {len(episodes)}; its default plays each task with "
                "play())"
            )
    finally:
        if isinstance(local, TrustedRunner):
            local.close()
    return turn_pairs(episodes, cfg.role_order())


def turn_pairs(episodes: list[Episode], roles: Sequence[str] = ()) -> dict[str, list[tuple[str, str]]]:
    """Every turn of ``episodes`` as a (prompt, completion) pair, per role (``roles`` first, each listed
    even without a turn): SFT data, from demonstrations or from a trained team's own episodes."""
    pairs: dict[str, list[tuple[str, str]]] = {r: [] for r in roles}
    for episode in episodes:
        for turn in episode.turns:
            pairs.setdefault(turn.role, []).append((turn.prompt, turn.text))
    return pairs


def rollouts(cfg: Config, team: Team, engine: Engine) -> Rollouts:
    """What ``Workflow.evaluate`` may run: this process's engine and team, seeds of (``run.seed``, a key,
    the parts it names), and the frozen snapshots of roles (when loaded)."""

    def seeds(seed_key: str, *parts: object) -> EpisodeSeeds | None:
        if not cfg.run.seeded_sampling:
            return None
        rollout = derive_seed(cfg.run.seed, seed_key)
        return EpisodeSeeds(rollout, derive_seed(rollout, *parts))

    def reference_adapter(role: str) -> str | None:
        seat = team.seats.get(role)
        if seat is None or seat.adapter is None or seat.script is not None:
            return None
        policy = engine.policies.get(seat.policy)
        name = ref_adapter(role)
        return (
            name if name in getattr(policy, "adapter_names", ()) else None
        )  # no snapshot yet, or no weights

    return Rollouts(team=team, run=engine.run, seeds=seeds, reference_adapter=reference_adapter)


# -- live objects -------------------------------------------------------------------------------
def _embedded_corpus(cfg: Config, pcfg: PolicyConfig) -> tuple[list[tuple[str, str]], Path]:
    """The base's training pairs and its cache directory, keyed by their content and the settings."""
    e = pcfg.embedded
    pairs = demonstrations(cfg, e.demo_episodes, seed=e.seed + 7919)
    examples = [pair for role in cfg.role_order() for pair in pairs[role]]
    key_material = json.dumps(
        # threads: 1 (the default) stays out of the key, so bases built before the setting keep theirs
        {
            "embedded": e.model_dump(exclude={"cache_dir"} | ({"threads"} if e.threads == 1 else set())),
            "examples": examples,
        },
        sort_keys=True,
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
    threads = torch.get_num_threads()
    torch.set_num_threads(e.threads)
    try:
        return build_embedded_default(
            examples, out_dir, cfg=model_cfg, sft=settings, seed=e.seed, progress=progress
        )
    finally:
        torch.set_num_threads(threads)


def build_policy(cfg: Config, name: str, progress: bool = True) -> HFPolicy | OpenAICompatPolicy:
    """The live policy of ``cfg.policies[name]``."""
    pcfg = cfg.policies[name]
    roles = [r for r in cfg.role_order() if cfg.seat(r).policy == name]
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
    adapters = [r for r in roles if cfg.seat(r).adapter]
    path = embedded_checkpoint(cfg, pcfg, progress) if pcfg.kind == "embedded" else pcfg.path or ""
    lora = LoraSettings(r=pcfg.lora.r, alpha=pcfg.lora.alpha, target_modules=tuple(pcfg.lora.target_modules))
    # The adapters' random initialisation (LoRA's A) from run.seed and the policy's name: the same in every
    # process and whether or not the base was just built, so one seed gives one run.
    torch.manual_seed(derive_seed(cfg.run.seed, "adapters", name))
    try:
        policy = HFPolicy.from_pretrained(
            path,
            adapters=adapters,
            lora=lora,
            name=name,
            dtype=resolve_dtype(pcfg.dtype, device),
            device=device,
            gradient_checkpointing=pcfg.gradient_checkpointing,
            chat_template=pcfg.chat_template,
        )
    except ValueError as exc:  # a setting this checkpoint cannot take (chat_template without a template)
        raise ConfigError(f"policies.{name}: {exc}") from None
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
    for role in cfg.role_order():
        r = cfg.seat(role)
        seats[role] = Seat(
            policy=r.policy,
            adapter=role if r.adapter else None,
            trainable=r.trainable,
            max_new_tokens=r.max_new_tokens,
            temperature=r.temperature if r.temperature is not None else temperature,
        )
    return Team(seats, engine)
