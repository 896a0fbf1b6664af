"""The run configuration: each component declares its own settings model next to its code; ``Config``
assembles them, and every default lives in those models once. YAML files and ``--set`` only set values.

The ``workflow:`` and ``tasks:`` sections are the settings of the workflow and the task suite they name
(a built-in name or an import path ``package.module:Class``, see ``teamrl.protocol.plugins``); the
``reward:`` section's ``functions`` name reward functions the same way.

Validation happens before any model is built. A bad key or value raises :class:`ConfigError` whose
message names the key, what is wrong and how to fix it; an option that does not apply to the chosen
algorithm, recipe or reward is refused with the reason.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, SerializeAsAny, ValidationError, field_validator, model_validator

from teamrl.algorithms.settings import CRITIC_ADAPTER, AlgorithmConfig, CriticConfig
from teamrl.policies.settings import EmbeddedConfig, LoraConfig, PolicyConfig, VLLMConfig
from teamrl.protocol.overrides import apply_overrides, deep_merge, format_errors, read_yaml
from teamrl.protocol.overrides import parse_override as _parse_override  # noqa: F401 - teamrl.marl's
from teamrl.protocol.plugins import resolve
from teamrl.protocol.settings import ConfigError, SeatConfig, Strict, TaskSettings, WorkflowSettings
from teamrl.recipes.settings import ClosedLoopConfig, PopulationConfig, RecipeConfig, SFTConfig
from teamrl.rewards.functions import check_reward_function
from teamrl.rewards.settings import MAPoRLConfig, MARTIConfig, RewardConfig, RewardFunctionConfig
from teamrl.tasks.base import TaskSuite
from teamrl.tasks.sandbox.settings import SandboxConfig
from teamrl.tasks.suites import HumanEvalTasksConfig, ReasoningTasksConfig, TasksConfig
from teamrl.workflows.base import Workflow
from teamrl.workflows.debate import JUDGE, DebateConfig
from teamrl.workflows.pipeline import PipelineConfig, RoleConfig, WorkflowConfig
from teamrl.workflows.self_play_settings import GENERATOR, PROPOSER, SOLVER, SelfPlayConfig

__all__ = [  # the settings models, re-exported where they were before they moved next to their components
    "CRITIC_ADAPTER",
    "GENERATOR",
    "JUDGE",
    "PROPOSER",
    "SOLVER",
    "AlgorithmConfig",
    "ClosedLoopConfig",
    "Config",
    "ConfigError",
    "CriticConfig",
    "DebateConfig",
    "EmbeddedConfig",
    "HumanEvalTasksConfig",
    "LoraConfig",
    "MAPoRLConfig",
    "MARTIConfig",
    "PipelineConfig",
    "PolicyConfig",
    "PopulationConfig",
    "RayConfig",
    "ReasoningTasksConfig",
    "RecipeConfig",
    "RewardConfig",
    "RewardFunctionConfig",
    "RoleConfig",
    "RunConfig",
    "SFTConfig",
    "SandboxConfig",
    "SeatConfig",
    "SelfPlayConfig",
    "TasksConfig",
    "VLLMConfig",
    "WorkflowConfig",
    "applicable_overrides",
    "apply_overrides",
    "dump_config",
    "load_config",
    "reward_functions",
    "suite_class",
    "workflow_class",
]


@cache
def workflow_class(name: str) -> type[Workflow[Any]]:
    """The workflow ``name`` (built-in or import path); ConfigError when it is none."""
    cls = resolve("workflow", name)
    if not (isinstance(cls, type) and issubclass(cls, Workflow)):
        what = f"the class {cls.__name__}" if isinstance(cls, type) else f"a {type(cls).__name__}"
        raise ConfigError(f"workflow {name!r} is {what}, not a teamrl Workflow subclass")
    settings = getattr(cls, "Settings", None)
    if not (isinstance(settings, type) and issubclass(settings, WorkflowSettings)):
        raise ConfigError(
            f"workflow {name!r}: its Settings must subclass teamrl.WorkflowSettings (got {settings!r})"
        )
    return cls


@cache
def suite_class(name: str) -> type[TaskSuite[Any]]:
    """The task suite ``name`` (built-in or import path); ConfigError when it is none."""
    cls = resolve("task suite", name)
    if not (isinstance(cls, type) and issubclass(cls, TaskSuite)):
        what = f"the class {cls.__name__}" if isinstance(cls, type) else f"a {type(cls).__name__}"
        raise ConfigError(f"task suite {name!r} is {what}, not a teamrl TaskSuite subclass")
    settings = getattr(cls, "Settings", None)
    if not (isinstance(settings, type) and issubclass(settings, TaskSettings)):
        raise ConfigError(
            f"task suite {name!r}: its Settings must be a subclass of teamrl.TaskSettings (got {settings!r})"
        )
    return cls


def reward_functions(reward: RewardConfig) -> list[tuple[str, Any, float, dict[str, Any]]]:
    """(name, function, weight, args) of every reward function the config names."""
    out = []
    for f in reward.function_list():
        fn = check_reward_function(f.name, resolve("reward function", f.name), f.args)
        out.append((f.name, fn, f.weight, dict(f.args)))
    return out


def _settings(kind: str, value: Any, name: str, base: type[BaseModel], find: Any) -> Any:
    if isinstance(value, base):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"the {kind} section must be a mapping, got {value!r}")
    try:
        model = find(str(value.get(name) or "")).Settings
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return model.model_validate(value)


class RayConfig(Strict):
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


class RunConfig(Strict):
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
    async_rollouts: int = Field(
        0,
        ge=0,
        le=8,
        description="0: each RL iteration plays its rollout, then updates; k > 0: a rollout worker process "
        "plays the next k iterations' rollouts while this one updates (on 2 cores, one each), so an "
        "update learns from episodes sampled up to k updates before, corrected by truncated importance "
        "sampling (algorithm.is_cap); staleness and importance weights are logged (train/staleness, "
        "train/<role>/is_weight)",
    )
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


class Config(Strict):
    run: RunConfig = Field(default_factory=RunConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    tasks: SerializeAsAny[TaskSettings] = Field(
        default_factory=TasksConfig, description="the task suite (`suite`: a built-in name or an import path)"
    )
    workflow: SerializeAsAny[WorkflowSettings] = Field(
        default_factory=PipelineConfig, description="the workflow (`name`: a built-in name or an import path)"
    )
    policies: dict[str, PolicyConfig] = Field(default_factory=lambda: {"default": PolicyConfig()})
    reward: RewardConfig = Field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    recipe: RecipeConfig = Field(default_factory=RecipeConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)

    @field_validator("workflow", mode="before")
    @classmethod
    def _workflow(cls, value: Any) -> Any:
        if isinstance(value, dict) and "name" not in value:
            value = {**value, "name": "pipeline"}
        return _settings("workflow", value, "name", WorkflowSettings, workflow_class)

    @field_validator("tasks", mode="before")
    @classmethod
    def _tasks(cls, value: Any) -> Any:
        return _settings("tasks", value, "suite", TaskSettings, suite_class)

    @property
    def workflow_class(self) -> type[Workflow[Any]]:
        return workflow_class(self.workflow.name)

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        wf = self.workflow_class
        suite = suite_class(self.tasks.suite)
        if (
            wf.task_type is not None
            and suite.task_type is not None
            and not issubclass(suite.task_type, wf.task_type)
        ):
            raise ValueError(
                f"tasks.suite is {self.tasks.suite!r}, whose tasks are {suite.task_type.__name__}, but "
                f"workflow {self.workflow.name!r} plays {wf.task_type.__name__} tasks; set tasks.suite: "
                f"{wf.task_suite}"
            )
        wf.check_config(self.workflow, self)
        roles: dict[str, SeatConfig] = dict(getattr(self.workflow, "roles", {}))
        order = list(getattr(self.workflow, "order", roles))
        if not order:
            raise ValueError(f"workflow {self.workflow.name!r} has no roles")
        for name in order:
            if name not in roles:
                raise ValueError(
                    f"workflow.order names {name!r}, which is not in workflow.roles {sorted(roles)}"
                )
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
        functions = [f.name for f in r.function_list()]
        try:
            reward_functions(r)
        except ConfigError as exc:
            raise ValueError(f"reward.functions: {exc}") from None
        if "counterfactual" in functions and r.counterfactual_budget < self.algorithm.group_size:
            raise ValueError(
                f"reward.counterfactual_budget={r.counterfactual_budget} is below algorithm.group_size="
                f"{self.algorithm.group_size}, so no group could be replayed: raise it to at least "
                f"{self.algorithm.group_size} (a whole group per role) or pick another reward.credit"
            )
        if self.run.async_rollouts:
            unsupported = [
                ("counterfactual" in functions, "counterfactual credit replays with newer adapters"),
                (self.recipe.name == "population", "recipe population seats snapshots in this process"),
                (self.run.backend == "ray", "the Ray backend plays its rollouts on its own workers"),
            ]
            why = next((why for applies, why in unsupported if applies), None)
            if why is not None:
                raise ValueError(
                    f"run.async_rollouts={self.run.async_rollouts} is not supported here: {why}; set 0"
                )
        per_turn = [f for f in functions if f in ("maporl", "marti")]
        if per_turn and wf.scored_turns is Workflow.scored_turns:
            raise ValueError(
                f"reward {per_turn[0]} needs per-turn scores, and workflow {self.workflow.name!r} gives none "
                "(Workflow.scored_turns); use hybrid, shared or counterfactual"
            )
        for name in self.recipe.roles or []:
            if name not in order:
                raise ValueError(f"recipe.roles names {name!r}, not in workflow.order {order}")
            if not roles[name].trainable:
                raise ValueError(f"recipe.roles names {name!r}, but workflow.roles.{name}.trainable is false")
        return self

    @model_validator(mode="after")
    def _tree_critic_and_closed_loop(self) -> Config:
        if self.algorithm.tree and not self.run.seeded_sampling:  # a shared turn is found by its seed
            raise ValueError("algorithm.tree needs run.seeded_sampling: true (episodes share turns by seed)")
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
            if CRITIC_ADAPTER in getattr(self.workflow, "roles", {}):
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
            if name not in self.role_order():
                raise ValueError(f"{where} names {name!r}, not in workflow.order {self.role_order()}")
            if not self.workflow.seat(name).trainable:
                raise ValueError(f"{where} names {name!r}, but workflow.roles.{name}.trainable is false")
        if len(set(learners)) < len(learners):
            raise ValueError(f"{where} lists a role twice ({learners}): list each once")
        opponents = self.population_opponents()
        for seat, source in opponents.items():
            key = f"recipe.population.opponents.{seat}"
            if seat not in self.role_order():
                raise ValueError(f"{key}: {seat!r} is not a role of workflow.order {self.role_order()}")
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
        return [r for r in self.role_order() if self.workflow.seat(r).trainable]

    def role_order(self) -> list[str]:
        """The workflow's roles in speaking order (a role may speak more than once)."""
        return list(getattr(self.workflow, "order", None) or getattr(self.workflow, "roles", {}))

    def seat(self, role: str) -> SeatConfig:
        return self.workflow.seat(role)

    def population_learners(self) -> list[str]:
        """recipe population: the roles that learn (default: the first trained role)."""
        learners = self.recipe.population.learners
        return list(learners) if learners is not None else self.trained_roles()[:1]

    def population_opponents(self) -> dict[str, str]:
        """recipe population: seat role -> the learner whose pool plays it. The default mirrors the first
        learner of the workflow's interchangeable roles (a debate's debaters) into the others' seats."""
        opponents = self.recipe.population.opponents
        if opponents is not None:
            return dict(opponents)
        learners = self.population_learners()
        alike = self.workflow.interchangeable_roles()
        source = next((name for name in learners if name in alike), None)
        return {} if source is None else {d: source for d in alike if d not in learners}


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    section = data.get(name)
    return section if isinstance(section, dict) else {}


def _keyed(key: str, find: Any, name: str) -> Any:
    try:
        return find(name)
    except ConfigError as exc:
        raise ConfigError(f"invalid config:\n  {key}: {exc}") from None


def _defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The defaults a config starts from: those of the workflow it names and of that workflow's task
    suite (or of the suite it names)."""
    out = Config().model_dump(mode="json")  # the pipeline on programming tasks
    workflow = _keyed(
        "workflow.name", workflow_class, str(_section(data, "workflow").get("name") or "pipeline")
    )
    out["workflow"] = workflow.Settings.defaults()
    suite = _keyed(
        "tasks.suite", suite_class, str(_section(data, "tasks").get("suite") or workflow.task_suite)
    )
    out["tasks"] = suite.Settings.defaults()
    return out


# options that apply only to some choices: (section, option, the choice key, the values it applies to)
_APPLIES = [
    ("algorithm", "gamma", "name", ("ppo_critic",)),
    ("algorithm", "gae_lambda", "name", ("ppo_critic",)),
    ("algorithm", "critic", "name", ("ppo_critic",)),
    ("recipe", "iterations_per_role", "name", ("freeze_rotate", "closed_loop")),
    ("recipe", "rounds", "name", ("freeze_rotate", "closed_loop")),
    ("recipe", "iterations", "name", ("joint", "population")),
    ("recipe", "closed_loop", "name", ("closed_loop",)),
    ("recipe", "population", "name", ("population",)),
]
_REWARD_APPLIES = {
    "maporl": "maporl",
    "marti": "marti",
    "counterfactual_baseline": "counterfactual",
    "counterfactual_budget": "counterfactual",
}


def _changed(given: dict[str, Any], section: str, option: str, defaults: dict[str, Any]) -> bool:
    """Whether ``given`` sets ``section.option`` to other than its default in ``defaults`` (a saved run's
    config.yaml writes every default)."""
    if option not in _section(given, section):
        return False
    value = given[section][option]
    default = defaults[section].get(option)
    if isinstance(value, dict) and isinstance(default, dict):
        return any(default.get(k) != v for k, v in value.items())
    return value != default


def _check_applicable(given: dict[str, Any], cfg: Config) -> None:
    """Refuse the options the user set (in the file or by --set) to other than their defaults that the
    chosen algorithm, recipe or reward never reads, with the reason: an ignored option is a wrong
    experiment."""
    problems = []
    defaults = Config().model_dump(mode="json")
    for section, option, choice, values in _APPLIES:
        if _changed(given, section, option, defaults):
            chosen = getattr(getattr(cfg, section), choice)
            if chosen not in values:
                problems.append(
                    f"  {section}.{option}: applies to {section}.{choice} {' or '.join(values)} only, and "
                    f"{section}.{choice} is {chosen!r}; remove it (or change {section}.{choice})"
                )
    functions = {f.name for f in cfg.reward.function_list()}
    for option, function in _REWARD_APPLIES.items():
        if _changed(given, "reward", option, defaults) and function not in functions:
            problems.append(
                f"  reward.{option}: applies to the {function} reward only, which this config does not use "
                f"(reward functions: {sorted(functions)}); remove it"
            )
    if problems:
        raise ConfigError("invalid config:\n" + "\n".join(problems))


def _validate(data: dict[str, Any]) -> Config:
    """``data`` as a Config; the workflow's and the task suite's sections first, against their own
    settings models, so that a bad key there is named as the file writes it."""
    errors: list[str] = []
    data = dict(data)
    for key, name, find in (("workflow", "name", workflow_class), ("tasks", "suite", suite_class)):
        section = data.get(key)
        if not isinstance(section, dict):
            continue
        model = find(str(section.get(name) or "")).Settings
        try:
            data[key] = model.model_validate(section)
        except ValidationError as err:
            errors.append(format_errors(err, model, key))
    if errors:
        raise ConfigError("invalid config:\n" + "\n".join(errors))
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError("invalid config:\n" + format_errors(err, Config)) from None


def _absolute_plugins(data: dict[str, Any]) -> dict[str, Any]:
    """Plugins named by file (``dir/flows.py:Name``, relative to the working directory) named by absolute
    path, so that the run's saved config.yaml loads them from anywhere (eval, report, resume)."""

    def absolute(name: Any) -> Any:
        if isinstance(name, str) and ".py:" in name and not Path(name).is_absolute():
            file, _, attr = name.partition(".py:")
            return f"{Path(file + '.py').resolve()}:{attr}"
        return name

    for section, key in (("workflow", "name"), ("tasks", "suite")):
        if isinstance(data.get(section), dict) and key in data[section]:
            data[section][key] = absolute(data[section][key])
    tasks = _section(data, "tasks")
    if (
        isinstance(tasks.get("path"), str)
        and tasks["path"]
        and not Path(tasks["path"]).expanduser().is_absolute()
    ):
        tasks["path"] = str(Path(tasks["path"]).resolve())  # a task file, likewise
    functions = _section(data, "reward").get("functions")
    if isinstance(functions, list):
        for f in functions:
            if isinstance(f, dict) and "name" in f:
                f["name"] = absolute(f["name"])
    return data


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, check_options: bool = True
) -> Config:
    """Read YAML (or start from defaults), apply overrides, validate. Raises ConfigError. With
    ``check_options`` an option set to other than its default that the chosen algorithm, recipe or reward
    does not read is an error."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} not found")
        data = read_yaml(p)
    given = _absolute_plugins(apply_overrides(copy.deepcopy(data), overrides or []))
    # Start from the defaults so that a YAML file or --set changes one field of a role or policy
    # without having to restate the rest of it.
    data = _absolute_plugins(apply_overrides(deep_merge(_defaults(given), data), overrides or []))
    cfg = _validate(data)
    if check_options:
        _check_applicable(given, cfg)
    return cfg


def applicable_overrides(path: str | Path | None, overrides: list[str]) -> list[str]:
    """``overrides`` less those setting an option that ``path``'s config (with them) does not read: one list
    of ``--set`` for runs of several recipes (a benchmark's team and its single-agent control)."""
    cfg = load_config(path, overrides, check_options=False)
    functions = {f.name for f in cfg.reward.function_list()}
    keep = []
    for item in overrides:
        key = item.split("=", 1)[0].strip().split(".")
        unread = any(
            key[:2] == [section, option] and getattr(getattr(cfg, section), choice) not in values
            for section, option, choice, values in _APPLIES
        ) or any(key[:2] == ["reward", o] and f not in functions for o, f in _REWARD_APPLIES.items())
        if not unread:
            keep.append(item)
    return keep


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
