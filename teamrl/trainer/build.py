"""Turn a validated Config into live objects: task suite, sandbox, policies, team, engine."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import random
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import torch

from teamrl.config import (
    JUDGE,
    SOLVER,
    Config,
    ConfigError,
    DebateConfig,
    PolicyConfig,
    ReasoningTasksConfig,
    SelfPlayConfig,
)
from teamrl.engine.engine import Engine
from teamrl.engine.team import EpisodeSeeds, Seat, Team, derive_seed, seeded
from teamrl.policies.hf import HFPolicy, LoraSettings, resolve_checkpoint, resolve_device, resolve_dtype
from teamrl.policies.openai_compat import OpenAICompatPolicy
from teamrl.policies.sft import SFTSettings
from teamrl.policies.tiny import BUILD_MARKER, TinyModelConfig, build_embedded_default
from teamrl.policies.vllm_generation import VLLM_MISSING, VLLMGenerator, VLLMSettings
from teamrl.protocol import Episode
from teamrl.rewards.credit import apply_credit, assign_hybrid_rewards
from teamrl.tasks.programming import ProgrammingTask, ProgrammingTaskSuite
from teamrl.tasks.reasoning import ReasoningTask, ReasoningTaskSuite, TaskFileSuite
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.trainer.faults import fault_point
from teamrl.trainer.learner import ref_adapter
from teamrl.workflows.debate import assign_debate_rewards, debate
from teamrl.workflows.experts import debate_experts, pipeline_experts, self_play_experts
from teamrl.workflows.pipeline import pipeline
from teamrl.workflows.self_play import (
    apply_repetition_penalty,
    assign_self_play_rewards,
    generator_judge,
    proposals,
    proposer_solver,
    self_play_metrics,
    solve_alone,
)

log = logging.getLogger("teamrl")

Task = ProgrammingTask | ReasoningTask
Suite = ProgrammingTaskSuite | ReasoningTaskSuite | TaskFileSuite


# -- what the workflow decides: its tasks, its sandbox, how an episode is played and credited --------
def build_suite(cfg: Config) -> Suite:
    t = cfg.tasks
    if isinstance(t, ReasoningTasksConfig):
        if t.path is not None:
            return TaskFileSuite(Path(t.path).expanduser(), seed=t.seed, heldout_fraction=t.heldout_fraction)
        return ReasoningTaskSuite(
            seed=t.seed,
            difficulty=tuple(t.difficulty),
            families=tuple(t.families),
            heldout_fraction=t.heldout_fraction,
        )
    return ProgrammingTaskSuite(seed=t.seed, difficulty=tuple(t.difficulty), kinds=tuple(t.kinds))


def build_sandbox(cfg: Config) -> Sandbox | None:
    """The sandbox the pipeline runs code in; None for a debate or self-play, which check answers
    in-process. With the Ray backend, a pool of Ray sandbox workers that runs each check in such a
    sandbox."""
    if isinstance(cfg.workflow, DebateConfig | SelfPlayConfig):
        return None
    s = cfg.sandbox
    limits = SandboxLimits(timeout_s=s.timeout_s, memory_mb=s.memory_mb, check_timeout_s=s.check_timeout_s)
    if cfg.run.backend == "ray":
        from teamrl.distributed.ray_sandbox import RaySandbox  # imports no Ray until the pool starts

        r = cfg.ray
        return RaySandbox(limits, s.isolation, r.num_sandbox_workers, r.num_cpus_per_sandbox_worker)  # type: ignore[return-value]
    return Sandbox(limits, isolation=s.isolation)


def play_episode(
    cfg: Config, team: Team, task: Task, sandbox: Sandbox | None, group: int = 0
) -> Coroutine[Any, Any, Episode]:
    """One verified episode of the config's workflow (a pipeline without a sandbox stays unverified)."""
    if isinstance(cfg.workflow, DebateConfig):
        return debate(team, task, cfg.workflow, group=group)  # type: ignore[arg-type]
    if isinstance(cfg.workflow, SelfPlayConfig):
        game = generator_judge if cfg.workflow.game == "generator_judge" else proposer_solver
        return game(team, task, cfg.workflow, group=group)  # type: ignore[arg-type]
    return pipeline(team, task, cfg.workflow, sandbox, group=group)  # type: ignore[arg-type]


def episode_factories(
    cfg: Config,
    team: Team,
    tasks: list[Task],
    group_size: int,
    sandbox: Sandbox | None,
    seed_key: str | None = None,
) -> list[Callable[[], Awaitable[Episode]]]:
    """``group_size`` episodes of every task, task by task, for ``Engine.run``. With ``seed_key`` (and
    ``run.seeded_sampling``), episode ``g`` of a task samples its turns from seeds of (``run.seed``,
    ``seed_key``, task id, ``g``): the same key plays the same samples however the engine batches them."""

    seeding = seed_key is not None and cfg.run.seeded_sampling
    rollout = derive_seed(cfg.run.seed, seed_key) if seeding else 0

    def factory(task: Task, g: int) -> Callable[[], Awaitable[Episode]]:
        seeds = EpisodeSeeds(rollout, derive_seed(rollout, task.task_id, g)) if seeding else None

        def start() -> Awaitable[Episode]:
            fault_point("episode")  # the crash tests' kill point mid-rollout
            return seeded(play_episode(cfg, team, task, sandbox, group=g), seeds)

        return start

    return [factory(t, g) for t in tasks for g in range(group_size)]


def assign_rewards(cfg: Config, episode: Episode) -> None:
    """Per-role process scores and rewards of a verified episode, by the workflow's credit rules."""
    r = cfg.reward
    if isinstance(cfg.workflow, SelfPlayConfig):  # the game's rules are its credit (config: hybrid only)
        assign_self_play_rewards(episode, cfg.workflow, r.format_penalty)
        return
    if isinstance(cfg.workflow, DebateConfig):
        assign_debate_rewards(episode, r.alpha, r.format_penalty)
    else:
        assign_hybrid_rewards(episode, cfg.workflow.roles, r.alpha, r.format_penalty, r.role_alpha)
    apply_credit(episode, r, None if isinstance(cfg.workflow, DebateConfig) else cfg.workflow.roles)


def assign_batch_rewards(cfg: Config, episodes: list[Episode]) -> None:
    """Credit that needs the whole batch, after :func:`assign_rewards` of each episode: proposer_solver's
    repetition penalty (``workflow.repetition_penalty``)."""
    wf = cfg.workflow
    if isinstance(wf, SelfPlayConfig) and wf.game == "proposer_solver" and wf.repetition_penalty > 0:
        apply_repetition_penalty(episodes, wf)


def expert_seats(cfg: Config, rng: random.Random) -> dict[str, Seat]:
    """Every role of the workflow played by its scripted expert (teamrl/workflows/experts.py)."""
    if isinstance(cfg.workflow, DebateConfig):
        experts = debate_experts(rng)
        return {r: Seat(script=experts["judge" if r == JUDGE else "debater"]) for r in cfg.workflow.order}
    if isinstance(cfg.workflow, SelfPlayConfig):
        experts = self_play_experts(rng)
        return {r: Seat(script=experts[r]) for r in cfg.workflow.order}
    experts = pipeline_experts(rng)
    roles = cfg.workflow.roles
    return {r: Seat(script=experts[roles[r].kind]) for r in cfg.workflow.order}


def demonstrations(cfg: Config, n_episodes: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """(prompt, completion) pairs per role, from the real workflow played by scripted experts
    on training tasks, so that demonstration prompts are exactly the prompts of an episode."""
    suite = build_suite(cfg)
    rng = random.Random(seed)
    if isinstance(cfg.workflow, SelfPlayConfig) and cfg.workflow.anchor_samples:
        # the examples' own solutions are demonstrated below (solve_alone) whether or not the solver
        # practises them in RL: the base and SFT data stay those of the same game without anchors
        cfg = cfg.model_copy(update={"workflow": cfg.workflow.model_copy(update={"anchor_samples": 0})})
    team = Team(expert_seats(cfg, rng))
    tasks: list[Task] = suite.sample("train", n_episodes, rng)
    solver_alone = isinstance(cfg.workflow, SelfPlayConfig) and cfg.workflow.game == "proposer_solver"
    if isinstance(cfg.workflow, DebateConfig | SelfPlayConfig) and not solver_alone:
        tasks = _with_answers(tasks)

    async def play() -> list[Episode]:
        episodes = [await play_episode(cfg, team, task, sandbox=None) for task in tasks]
        if solver_alone:  # the solver also learns the suite's own problems, which evaluations ask it
            known = [t for t in tasks if isinstance(t, ReasoningTask) and t.answer is not None]
            episodes += [await solve_alone(team, t, cfg.workflow) for t in known]  # type: ignore[arg-type]
        return episodes

    pairs: dict[str, list[tuple[str, str]]] = {r: [] for r in cfg.workflow.order}
    for episode in asyncio.run(play()):
        for turn in episode.turns:
            pairs[turn.role].append((turn.prompt, turn.text))
    return pairs


def solve_alone_factories(
    cfg: Config, team: Team, tasks: list[ReasoningTask], samples: int, seed_key: str
) -> list[Callable[[], Awaitable[Episode]]]:
    """The solver alone on each of ``tasks``, ``samples`` times, for ``Engine.run``; with
    ``run.seeded_sampling`` attempt ``g`` at a problem samples from seeds of (``run.seed``, ``seed_key``,
    the question, ``g``), so every evaluation asks a problem with the same noise and two evaluations
    differ only where the solver (or the problem) did."""
    wf = cfg.workflow
    assert isinstance(wf, SelfPlayConfig)
    rollout = derive_seed(cfg.run.seed, seed_key)
    seeding = cfg.run.seeded_sampling

    def factory(task: ReasoningTask, g: int) -> Callable[[], Awaitable[Episode]]:
        seeds = EpisodeSeeds(rollout, derive_seed(rollout, task.question, g)) if seeding else None
        return lambda: seeded(solve_alone(team, task, wf, group=g), seeds)

    return [factory(t, g) for t in tasks for g in range(samples)]


def solver_heldout_evaluation(
    cfg: Config, team: Team, engine: Engine, tasks: list[Task], samples: int
) -> tuple[dict[str, float], list[Episode]]:
    """proposer_solver: the solver alone on the held-out problems themselves, ``samples`` times each: its
    accuracy on a fixed set, whatever the proposer writes (``eval/selfplay/solver_heldout_accuracy``) and
    those episodes. Every other workflow: nothing. Played by this process's engine, Ray backend or not."""
    wf = cfg.workflow
    if not isinstance(wf, SelfPlayConfig) or wf.game != "proposer_solver":
        return {}, []
    known = [t for t in tasks if isinstance(t, ReasoningTask) and t.answer is not None]
    episodes = engine.run(solve_alone_factories(cfg, team, known, samples, "eval-solver"))
    return self_play_metrics(episodes, prefix="eval/"), episodes


def reference_solver_evaluation(
    cfg: Config, team: Team, engine: Engine, episodes: list[Episode]
) -> dict[str, float]:
    """proposer_solver with ``workflow.reference_samples`` and a solver adapter: the solver as it started
    (its snapshot before RL, ``ref_solver``) attempts each valid proposal of the evaluation's ``episodes``
    that many times. Its success rate, ``eval/selfplay/reference_solver_rate``, is the proposals'
    difficulty for a solver that does not learn: unlike ``solver_rate`` it falls only when the proposer's
    problems get harder. Every other case (no snapshot yet: a run stopped before it was made): nothing."""
    wf = cfg.workflow
    if not isinstance(wf, SelfPlayConfig) or wf.game != "proposer_solver" or not wf.reference_samples:
        return {}
    seat = team.seats.get(SOLVER)
    if seat is None or seat.adapter is None or seat.script is not None:
        return {}
    policy = engine.policies.get(seat.policy)
    if ref_adapter(SOLVER) not in getattr(policy, "adapter_names", ()):  # no snapshot yet, or no weights here
        return {}
    tasks = proposals(episodes, wf)
    if not tasks:
        return {}
    with team.seated({SOLVER: dataclasses.replace(seat, adapter=ref_adapter(SOLVER))}):
        solved = engine.run(solve_alone_factories(cfg, team, tasks, wf.reference_samples, "eval-reference"))
    flags = [bool(e.verifier["correct"]) for e in solved]
    return {"eval/selfplay/reference_solver_rate": sum(flags) / len(flags)}


def _with_answers(tasks: list[Task]) -> list[Task]:
    """The tasks an expert can demonstrate: those with a known answer (a task file may leave it out)."""
    known = [t for t in tasks if isinstance(t, ReasoningTask) and t.answer is not None]
    if not known:
        raise ConfigError(
            "tasks.path: no training task in the file has an answer, so no expert can demonstrate one "
            "for SFT or for the embedded base model; give answers, or use a `kind: hf` policy with "
            "recipe.sft.enabled: false"
        )
    return known


# -- live objects -------------------------------------------------------------------------------
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
