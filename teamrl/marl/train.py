"""``teamrl marl train`` / ``teamrl marl eval``: any registered algorithm on any env, one run directory.

A run directory holds ``config.yaml`` (algorithm, env, env kwargs and the resolved algorithm config),
``metrics.jsonl``, ``metrics_definition.json``, TensorBoard events under ``tb/``, ``checkpoint.pt``,
``learning_curve.png`` and ``eval.json`` (the deterministic policy's return over whole episodes).

The algorithm config is built from, in order: the ``Config`` defaults of the algorithm's module, the
registry preset of the named variant (``mappo`` = ppo with ``centralised_critic: true``), the module's
``ENV_PRESETS`` for the env or its family (``"lbf:"``), then the user's overrides. Overrides ``env.KEY`` go
to the env factory (``--set env.N=4``).

``env`` is a name known to ``make_vec_env`` or the user's own PettingZoo ParallelEnv as
``package.module:factory`` / ``path/to/file.py:factory`` (stored with an absolute path in config.yaml).
Before a run directory exists, :func:`resolve` builds the env and checks that the algorithm can use its
spaces (:data:`ACTION_SPACES`); any problem is a one-line ``ConfigError``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from teamrl.atomic import atomic_write_text
from teamrl.config import ConfigError, _parse_override
from teamrl.marl.registry import ALGORITHMS, algorithm, env_preset, preset_config

DEFAULT_OUT = "runs/marl"
EVAL_SEED = 12345
RECORD_FILE = "episode_record.json"  # the final evaluation's first episode as the env recorded it

# The action spaces each algorithm can use (observations: any space gymnasium can flatten, for all).
ACTION_SPACES: dict[str, str] = {
    "ippo": "Discrete or 1-D float Box",
    "mappo": "Discrete or 1-D float Box",
    "qmix": "Discrete",
    "vdn": "Discrete",
    "maddpg": "Discrete or bounded 1-D float Box",
}


def make_env_factory(env: str, env_kwargs: dict[str, Any]):
    """``(num_envs, seed) -> VecMultiAgentEnv`` for ``env`` (a name known to ``make_vec_env``, or a
    user's ``module:factory``)."""
    from teamrl.marl.envs import make_vec_env

    def make(num_envs: int, seed: int):
        return make_vec_env(env, num_envs, seed, **env_kwargs)

    return make


def _one_line(err: ValidationError, algo: str, model: type[BaseModel], prefix: str = "invalid --set") -> str:
    """A validation error of ``algo``'s settings as one line: every error, an unknown key with the closest
    valid one; ``prefix`` says where the settings came from."""
    valid = sorted(model.model_fields)
    parts = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(config)"
        if e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(e["loc"][0]), valid, n=1)
            hint = f" did you mean {close[0]!r}?" if close else ""
            parts.append(f"unknown key {key!r} for {algo};{hint} valid keys: {', '.join(valid)}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            parts.append(f"{key}: {msg} (got {e.get('input')!r})")
    return f"{prefix}: " + "; ".join(parts)


def resolve(
    algo: str, env: str, overrides: dict[str, Any] | None = None
) -> tuple[ModuleType, BaseModel, dict[str, Any]]:
    """(algorithm module, validated Config, env kwargs); raises ConfigError naming the bad key."""
    if algo not in ALGORITHMS:
        close = difflib.get_close_matches(algo, list(ALGORITHMS), n=1)
        hint = f" did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown algorithm {algo!r};{hint} choose one of {', '.join(sorted(ALGORITHMS))}")
    module, preset = algorithm(algo)
    overrides = dict(overrides or {})
    env_kwargs = {k.removeprefix("env."): overrides.pop(k) for k in list(overrides) if k.startswith("env.")}
    for key in overrides:
        if key in preset and overrides[key] != preset[key]:
            raise ConfigError(f"{key} is fixed to {preset[key]!r} by the algorithm {algo!r}")
    defaults = env_preset(module, env)
    try:
        cfg, dropped = preset_config(module.Config, preset, defaults, overrides)
    except ValidationError as err:
        raise ConfigError(_one_line(err, algo, module.Config)) from None
    if dropped:  # the env preset's keys that the user's settings rule out (registry.preset_config)
        left = ", ".join(f"{key}={defaults[key]!r}" for key in dropped)
        print(f"note: {env}'s preset {left} does not go with your --set: left out", file=sys.stderr)
    # fail now, not after the run directory exists, on an unknown env or env kwarg or unusable spaces
    from teamrl.marl.envs.user import check_user_env, is_import_path

    if is_import_path(env):
        check_user_env(env, env_kwargs)
    try:
        probe = make_env_factory(env, env_kwargs)(1, 0)
    except ConfigError:
        raise
    except Exception as exc:  # the env's own message, on one line
        raise ConfigError(f"env {env!r} with {env_kwargs or 'no kwargs'}: {exc}") from None
    try:
        check_spaces(algo, cfg, probe)
    finally:
        probe.close()
    return module, cfg, env_kwargs


def check_spaces(algo: str, cfg: Any, env: Any) -> None:
    """ConfigError unless ``algo`` (with ``cfg``, the algorithm's own ``Config`` model) can use the spaces of
    ``env`` (a VecMultiAgentEnv)."""
    import numpy as np
    from gymnasium import spaces

    by_space: dict[str, list[str]] = {}
    for name, space in ACTION_SPACES.items():
        by_space.setdefault(space, []).append(name)
    supported = "; ".join(f"{'/'.join(names)}: {space}" for space, names in by_space.items())
    for agent in env.agents:
        act = env.action_spaces[agent]
        if isinstance(act, spaces.Discrete):
            continue
        box_1d = isinstance(act, spaces.Box) and len(act.shape) == 1 and np.issubdtype(act.dtype, np.floating)
        bounded = box_1d and bool(np.isfinite(act.low).all() and np.isfinite(act.high).all())
        if box_1d and algo in ("ippo", "mappo"):
            continue
        if bounded and algo == "maddpg":
            continue
        raise ConfigError(
            f"{algo} cannot use the action space {act} of agent {agent!r}: {algo} needs "
            f"{ACTION_SPACES[algo]} actions (supported action spaces: {supported})"
        )
    if algo in ("ippo", "mappo"):
        from teamrl.marl.ppo import entity_slots, make_groups

        try:  # parameter_sharing=shared needs equal spaces; entity_actor / entity_critic need entity_slots
            groups = make_groups(env, cfg.parameter_sharing, cfg.agent_id, cfg.entity_actor)
            if cfg.entity_critic or cfg.shared_encoder:
                for g in groups:
                    entity_slots(env, g)
        except ValueError as exc:
            raise ConfigError(f"{algo}: {exc}") from None
        if cfg.model is not None:
            from teamrl.marl.imagination import check_env

            try:
                check_env(env, cfg.centralised_critic)
            except ValueError as exc:
                raise ConfigError(f"{algo}: {exc}") from None
    if algo in ("qmix", "vdn") and cfg.max_episode_steps is None and env.max_steps is None:
        raise ConfigError(
            f"{algo} replays whole episodes and needs their length: the env has no integer max_cycles "
            "attribute; set it, or --set max_episode_steps=N (longer episodes are cut)"
        )


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["lr=3e-4", "hidden=[128,128]"]`` -> ``{"lr": 0.0003, ...}`` (values parsed as YAML)."""
    out = {}
    for item in items:
        path, value = _parse_override(item)
        out[".".join(path)] = value
    return out


EVAL_POINTS = 10  # evaluations during a run when eval_every is not given
EVAL_EPISODES = 32  # episodes of each evaluation during training (the final one: --episodes)


def periodic_evaluator(
    module: ModuleType, env: str, env_kwargs: dict[str, Any], episodes: int, sampled: bool = False
) -> Callable[[dict[str, Any]], dict[str, float]]:
    """checkpoint -> the deterministic policy's return on the same ``episodes`` episodes every time (the
    env reset with :data:`EVAL_SEED`, built on first use and kept); ``sampled``: actions sampled, torch seeded
    with :data:`EVAL_SEED` each time (:meth:`RunContext.evaluate` forks the caller's generator)."""
    import torch

    from teamrl.marl.evaluate import evaluate

    made: list[Any] = []

    def run(checkpoint: dict[str, Any]) -> dict[str, float]:
        if not made:
            made.append(make_env_factory(env, env_kwargs)(min(episodes, 256), EVAL_SEED))
        actor = module.make_actor(checkpoint, deterministic=not sampled)
        if sampled:
            torch.manual_seed(EVAL_SEED)
        return evaluate(actor, made[0], episodes, seed=EVAL_SEED)

    return run


def train(
    algo: str,
    env: str,
    overrides: dict[str, Any] | None = None,
    run_dir: str | Path | None = None,
    episodes: int = 50,
    show_progress: bool = True,
    print_table: bool = False,
    eval_every: int | None = None,
    eval_episodes: int = EVAL_EPISODES,
    eval_sampled: bool = False,
) -> dict[str, Any]:
    """Train ``algo`` on ``env``, write the run directory, evaluate the final policy; returns a summary.
    ``eval_every``: env steps between evaluations during training (None: :data:`EVAL_POINTS` over the
    run; 0: none), each on ``eval_episodes`` fixed episodes; ``eval_sampled``: they sample actions (seeded)
    and the final policy is evaluated both ways (``eval_sampled.json`` too; for Level-Based Foraging)."""
    from teamrl.marl.envs.user import label, normalize

    env = normalize(env)
    cfg: Any  # the algorithm's own Config model (fields differ between algorithms)
    module, cfg, env_kwargs = resolve(algo, env, overrides)
    if run_dir is None:
        run_dir = Path(DEFAULT_OUT) / f"{algo}__{label(env)}__s{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(
            f"{run_dir} exists and is not empty; pick another --name or --out (or --resume {run_dir})"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    if eval_every is None:
        eval_every = max(1, cfg.total_env_steps // EVAL_POINTS)
    resolved = {
        "algorithm": algo,
        "env": env,
        "env_kwargs": env_kwargs,
        "config": cfg.model_dump(mode="json"),
        "eval_every": eval_every,
        "eval_episodes": eval_episodes,
        "eval_sampled": eval_sampled,
    }
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(resolved, sort_keys=False))
    return _run(module, cfg, resolved, run_dir, episodes, show_progress, print_table, resume=None)


def _run(
    module: ModuleType,
    cfg: Any,
    resolved: dict[str, Any],
    run_dir: Path,
    episodes: int,
    show_progress: bool,
    print_table: bool,
    resume: dict[str, Any] | None,
    init: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train (from scratch, from the ``resume`` checkpoint, or from the ``init`` weights: fine-tuning) in
    ``run_dir``, then evaluate."""
    import torch

    from teamrl.marl.run import RunContext

    env, env_kwargs = resolved["env"], resolved["env_kwargs"]
    eval_every = int(resolved.get("eval_every", 0))
    torch.set_num_threads(getattr(cfg, "threads", 1))
    make_env = make_env_factory(env, env_kwargs)
    sampled = bool(resolved.get("eval_sampled", False))
    evaluator = periodic_evaluator(
        module, env, env_kwargs, int(resolved.get("eval_episodes", EVAL_EPISODES)), sampled
    )
    run = RunContext(
        run_dir,
        make_env,
        cfg.total_env_steps,
        show_progress=show_progress,
        extra_definition=f"env {env} {env_kwargs}",
        evaluator=evaluator if eval_every else None,
        eval_every=eval_every,
        resume=resume,
        init=init,
    )
    try:
        result = module.train(cfg, run)
    finally:
        run.close()
    train_stats = {k: v for k, v in result.items() if isinstance(v, int | float)}
    summary = {"run_dir": str(run_dir), "algorithm": resolved["algorithm"], "env": env, "train": train_stats}
    summary["eval"] = evaluate_run(run_dir, episodes, train_stats=train_stats, print_table=print_table)
    if sampled:
        summary["eval_sampled"] = evaluate_run(
            run_dir, episodes, train_stats=train_stats, print_table=print_table, sampled=True
        )
    return summary


def read_run(run_dir: str | Path, missing: type[Exception] = ConfigError) -> tuple[dict[str, Any], Path]:
    """(the resolved config.yaml, the checkpoint's path) of a ``teamrl marl train`` run directory;
    ``missing`` raised, naming the file, when one of the two is not there."""
    run_dir = Path(run_dir)
    config_path, ckpt_path = run_dir / "config.yaml", run_dir / "checkpoint.pt"
    for path in (config_path, ckpt_path):
        if not path.is_file():
            raise missing(f"{path} not found; is {run_dir} a `teamrl marl train` run directory?")
    return yaml.safe_load(config_path.read_text()), ckpt_path


def resume_run(
    run_dir: str | Path,
    overrides: dict[str, Any] | None = None,
    episodes: int = 50,
    show_progress: bool = True,
    print_table: bool = False,
) -> dict[str, Any]:
    """Continue a ``teamrl marl train`` run from its last checkpoint, in place, with the config it was
    started with; ``overrides`` may only raise ``total_env_steps`` (to train a finished run further). The
    networks, optimizer, value normalisers, update count, learning-rate schedule and torch RNG continue;
    the episodes in progress at the checkpoint are not: the envs start fresh episodes (from a seed
    derived from the run's seed and step). Not bit-identical to an uninterrupted run."""
    import torch

    run_dir = Path(run_dir)
    resolved, ckpt_path = read_run(run_dir)
    config_path = run_dir / "config.yaml"
    algo = resolved["algorithm"]
    module, _ = algorithm(algo)
    if not getattr(module, "RESUMABLE", False):
        able = sorted(name for name in ALGORITHMS if getattr(algorithm(name)[0], "RESUMABLE", False))
        raise ConfigError(f"--resume is not supported for {algo} yet (it is for {', '.join(able)})")
    overrides = dict(overrides or {})
    fixed = sorted(k for k in overrides if k != "total_env_steps")
    if fixed:
        raise ConfigError(
            f"a resumed run keeps the config it was started with; only total_env_steps may be set (got "
            f"{', '.join(fixed)})"
        )
    try:
        cfg = module.Config(**{**resolved["config"], **overrides})
    except ValidationError as err:
        where = f"invalid settings for {algo} ({config_path} with the --set given)"
        raise ConfigError(_one_line(err, algo, module.Config, where)) from None
    checkpoint = torch.load(ckpt_path, weights_only=False)
    done = int(checkpoint.get("env_steps", 0))
    if done >= cfg.total_env_steps:
        raise ConfigError(
            f"{run_dir} has trained its {cfg.total_env_steps:,} env steps already (checkpoint at {done:,}); "
            "to train further: --resume with --set total_env_steps=N, N larger"
        )
    try:
        # refuses an old checkpoint (no optimizer) before anything in the run directory changes
        module.restore_check(checkpoint)
    except ValueError as exc:
        raise ConfigError(f"cannot resume {run_dir}: {exc}") from None
    resolved["config"] = cfg.model_dump(mode="json")
    atomic_write_text(config_path, yaml.safe_dump(resolved, sort_keys=False))
    return _run(module, cfg, resolved, run_dir, episodes, show_progress, print_table, resume=checkpoint)


SAMPLED_EVAL_FILE = "eval_sampled.json"


def evaluate_run(
    run_dir: str | Path,
    episodes: int = 50,
    train_stats: dict[str, float] | None = None,
    print_table: bool = False,
    sampled: bool = False,
) -> dict[str, Any]:
    """Evaluate a run's ``checkpoint.pt`` with the deterministic policy; writes and returns ``eval.json``.
    ``sampled``: actions sampled from the policy (seeded) instead, as EPyMARL evaluates its actor-critic
    methods (where a deterministic policy can deadlock, as on Level-Based Foraging); written to
    ``eval_sampled.json``, the deterministic record kept."""
    import torch

    from teamrl.marl.evaluate import evaluate
    from teamrl.marl.run import RETURN_DEFINITION

    run_dir = Path(run_dir)
    resolved, ckpt_path = read_run(run_dir, FileNotFoundError)
    module, _ = algorithm(resolved["algorithm"])
    torch.set_num_threads(int(resolved["config"].get("threads", 1)))
    checkpoint = torch.load(ckpt_path, weights_only=False, mmap=True)  # a replay in it is mapped, not read
    try:
        actor = module.make_actor(checkpoint, deterministic=not sampled)
    except ValidationError as exc:  # a checkpoint written by another version, or edited by hand
        algo = resolved["algorithm"]
        where = f"{ckpt_path}: its {algo} settings do not fit this teamrl"
        raise ConfigError(_one_line(exc, algo, module.Config, where)) from None
    env = make_env_factory(resolved["env"], resolved["env_kwargs"])(min(episodes, 256), EVAL_SEED)
    try:
        with torch.random.fork_rng(enabled=sampled):  # the caller's generator left as it was
            if sampled:
                torch.manual_seed(EVAL_SEED)  # the same samples every time
            result: dict[str, Any] = evaluate(actor, env, episodes, seed=EVAL_SEED)
        record = getattr(env, "first_record", None)  # an episode the env describes (the town's day)
    finally:
        env.close()
    if isinstance(record, dict):
        atomic_write_text(run_dir / RECORD_FILE, json.dumps(record))
    out_file = run_dir / (SAMPLED_EVAL_FILE if sampled else "eval.json")
    if train_stats is None:
        old = run_dir / "eval.json"
        train_stats = json.loads(old.read_text()).get("train", {}) if old.is_file() else {}
    result.update(
        algorithm=resolved["algorithm"],
        env=resolved["env"],
        policy="sampled" if sampled else "deterministic",
        env_steps=int(checkpoint.get("env_steps", train_stats.get("env_steps", 0))),
        definition=RETURN_DEFINITION,
        train=train_stats,
    )
    atomic_write_text(out_file, json.dumps(result, indent=1))
    if print_table:
        result_table(result, run_dir)
    return result


def result_table(result: dict[str, Any], run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    train = result.get("train", {})
    table = Table(title=f"{result['algorithm']} on {result['env']}: final evaluation")
    n, mean = int(result["episodes"]), result["return/mean"]  # the mean's 95% interval: what n episodes tell
    half = 1.96 * result["return/std"] / max(n, 1) ** 0.5
    table.add_column(f"return (mean +- std, {n} episodes)", justify="right")
    table.add_column("episode length", justify="right")
    table.add_column("env steps", justify="right")
    table.add_column("wall time", justify="right")
    table.add_column("agent-steps/s", justify="right")
    wall, speed = train.get("wall_s"), train.get("agent_steps_per_s")
    table.add_row(
        f"{mean:.2f} +- {result['return/std']:.2f}",
        f"{result['episode_length']:.1f}",
        f"{result['env_steps']:,}",
        "-" if wall is None else f"{wall:.0f} s",
        "-" if speed is None else f"{speed:,.0f}",
    )
    console = Console()
    console.print(table)
    console.print(f"the mean's 95% interval over these {n} episodes: [{mean - half:.2f}, {mean + half:.2f}]")
    console.print(
        "return: undiscounted episode return summed over all agents, "
        f"{result.get('policy', 'deterministic')} policy; "
        "agent-steps/s: training throughput, updates included"
    )
    console.print(f"run written to [bold]{run_dir}[/bold]")


# ------------------------------------------------------------------------------------------------ CLI
def cmd_train(args: argparse.Namespace) -> int:
    from teamrl.marl.envs.user import label

    overrides = parse_sets(args.set)
    if args.resume is not None:
        flags = (("--algo", args.algo), ("--env", args.env), ("--name", args.name))
        given = [flag for flag, v in (*flags, ("--eval-sampled", args.eval_sampled)) if v]
        if given:
            raise ConfigError(f"--resume continues a run with its own config: drop {', '.join(given)}")
        run_dir = Path(args.resume)
    else:
        missing = [flag for flag, v in (("--algo", args.algo), ("--env", args.env)) if not v]
        if missing:
            raise ConfigError(f"teamrl marl train needs {' and '.join(missing)} (or --resume RUN_DIR)")
        name = args.name
        if name is None:
            seed = overrides.get("seed", 0)
            name = f"{args.algo}__{label(args.env)}__s{seed}__{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = Path(args.out) / name
    try:
        if args.resume is not None:
            resume_run(run_dir, overrides, args.episodes, print_table=True)
        else:
            train(
                args.algo,
                args.env,
                overrides,
                run_dir,
                args.episodes,
                print_table=True,
                eval_every=args.eval_every,
                eval_episodes=args.eval_episodes,
                eval_sampled=args.eval_sampled,
            )
    except KeyboardInterrupt:
        print(
            f"\ninterrupted; the last checkpoint is in {run_dir} (teamrl marl eval {run_dir}; "
            f"teamrl marl train --resume {run_dir})",
            file=sys.stderr,
        )
        return 130
    return 0


def cmd_distill(args: argparse.Namespace) -> int:
    from teamrl.marl.distill import distill_run

    summary = distill_run(args.run_dir, args.out, parse_sets(args.set), args.episodes)
    r, f = summary["returns"], summary["flops_per_action"]

    def kept(share: float | None, who: str) -> str:
        if share is None:  # return_kept is undefined: a teacher trained too little
            return "the teacher is no better than random: no share of the teacher's gain over random to keep"
        return f"{who} keeps {share:.0%} of the teacher's gain over random"

    print(
        f"teacher {r['teacher']:.2f} ({f['teacher']:,.0f} FLOPs per action), student {r['student']:.2f} "
        f"({f['student']:,.0f}), random {r['random']:.2f}: {kept(summary['return_kept'], 'the student')}; "
        f"{summary['flops_ratio']:.1f}x fewer FLOPs per action; written to {args.out}"
    )
    if "finetune" in summary:
        print(
            f"fine-tuned by PPO for {summary['finetune']['env_steps']:,} env steps: {r['finetuned']:.2f}; "
            f"{kept(summary['finetune']['return_kept'], 'it')}"
        )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    evaluate_run(args.run_dir, args.episodes, print_table=True, sampled=args.sampled)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``marl train`` and ``marl eval`` to the ``teamrl`` command line."""
    marl = sub.add_parser("marl", help="classic multi-agent RL: IPPO, MAPPO, QMIX, VDN, MADDPG")
    msub = marl.add_subparsers(dest="marl_command", required=True)
    p = msub.add_parser("train", help="train an algorithm on a vectorised multi-agent env")
    p.add_argument("--algo", help=f"one of {', '.join(sorted(ALGORITHMS))}")
    p.add_argument(
        "--env",
        help="an env name known to teamrl.marl.envs.make_vec_env, or your own PettingZoo ParallelEnv: "
        "package.module:factory or path/to/file.py:factory (factory(**env kwargs) -> ParallelEnv)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an algorithm config field (env.KEY=VALUE: an env argument)",
    )
    p.add_argument("--out", default=DEFAULT_OUT, help=f"parent of the run directory (default {DEFAULT_OUT})")
    p.add_argument("--name", help="run directory name (default: algo__env__seed__time)")
    p.add_argument("--episodes", type=int, default=50, help="episodes of the final evaluation")
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="STEPS",
        help=f"env steps between evaluations during training, the evaluation curve (default: "
        f"{EVAL_POINTS} over the run; 0: none)",
    )
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=EVAL_EPISODES,
        help=f"fixed episodes of each evaluation during training (default {EVAL_EPISODES})",
    )
    p.add_argument(
        "--eval-sampled",
        action="store_true",
        help="the evaluations during training sample the policy's actions (seeded; EPyMARL's protocol for "
        "actor-critic methods), and the final policy is evaluated both ways (eval_sampled.json beside "
        "eval.json)",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue RUN_DIR from its last checkpoint with its own config (--set total_env_steps=N to "
        "train a finished run further); every algorithm, its replay included for qmix, vdn and maddpg",
    )
    p.set_defaults(func=cmd_train)
    p = msub.add_parser(
        "distill", help="distil an ippo / mappo run into small decentralised students (KD-MARL)"
    )
    p.add_argument("run_dir", help="the teacher's run directory")
    p.add_argument("--out", required=True, help="the student's run directory")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a distillation setting (hidden=[16], rounds=8, finetune_env_steps=1000000 ...)",
    )
    p.add_argument("--episodes", type=int, default=50, help="evaluation episodes (the same for all three)")
    p.set_defaults(func=cmd_distill)
    p = msub.add_parser("eval", help="evaluate a run's checkpoint with the deterministic policy")
    p.add_argument("run_dir")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument(
        "--sampled",
        action="store_true",
        help="sample actions from the policy (seeded; EPyMARL's protocol for actor-critic methods) instead "
        "of the deterministic policy; written to eval_sampled.json",
    )
    p.set_defaults(func=cmd_eval)
