"""Users' own PettingZoo environments: ``--env package.module:factory`` or ``--env path/to/file.py:factory``.

``factory(**env_kwargs)`` (the ``--set env.KEY=VALUE`` values) must return a new PettingZoo
``ParallelEnv`` on every call; :func:`make_user_vec_env` calls it once per copy and runs the copies
through :class:`~teamrl.marl.envs.adapters.PettingZooVecEnv`, the adaptor of the named PettingZoo envs,
so observations, masks, state, auto-reset and seeding (copy ``i`` is reset with ``seed + i``) are the
same as theirs.

Everything that can go wrong is a :class:`~teamrl.config.ConfigError` with one line saying what and how
to fix it: :func:`make_user_vec_env` checks the import, the factory's result and its spaces;
:func:`check_user_env` (run once by ``teamrl.marl.train.resolve``, before a run directory exists) also
plays one reset and one step. Which action spaces each algorithm takes is checked in
``teamrl.marl.train.check_spaces``.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces

from teamrl.config import ConfigError

_PARALLEL_API = ("possible_agents", "observation_space", "action_space", "reset", "step")


def is_import_path(name: str) -> bool:
    """``module:factory`` or ``file.py:factory`` (``mpe2:``, ``lbf:``, ``rware:``, ``vmas:`` name envs)."""
    return ":" in name and name.partition(":")[0] not in ("mpe2", "lbf", "rware", "vmas")


def _split(name: str) -> tuple[str, str]:
    where, _, attr = name.rpartition(":")
    if not where or not attr:
        raise ConfigError(
            f"env {name!r}: an import path is package.module:factory or path/to/file.py:factory"
        )
    return where, attr


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or os.sep in where


def normalize(name: str) -> str:
    """``name`` with a ``file.py`` part made absolute (relative to the current directory), so a run's
    config.yaml works from anywhere; other names unchanged."""
    if not is_import_path(name):
        return name
    where, attr = _split(name)
    if _is_file(where):
        return f"{Path(where).expanduser().resolve()}:{attr}"
    return name


def label(name: str) -> str:
    """A short name for run directories: ``pkg.mod:make`` -> ``pkg.mod.make``, ``dir/f.py:make`` ->
    ``f.make``; other names unchanged."""
    if not is_import_path(name):
        return name
    where, attr = name.rpartition(":")[::2]
    return f"{Path(where).stem if _is_file(where) else where}.{attr}"


# ------------------------------------------------------------------------------------------- import
def _load_file(name: str, where: str) -> ModuleType:
    path = Path(where).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"env {name!r}: file {path} not found")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    mod_name = f"teamrl_user_env_{path.stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"env {name!r}: cannot import {path} (is it a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # before exec: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise ConfigError(f"env {name!r}: importing {path} raised {type(exc).__name__}: {exc}") from None
    return module


def _load_module(name: str, where: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:  # as `python -m`: modules of the current directory
        sys.path.append(cwd)
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        parts = where.split(".")
        if exc.name in {".".join(parts[: i + 1]) for i in range(len(parts))}:
            raise ConfigError(
                f"env {name!r}: module {where!r} not found (no module named {exc.name!r}); install it, run "
                f"from the directory that holds it (now {cwd}), or give a file: path/to/file.py:factory"
            ) from None
        raise ConfigError(f"env {name!r}: importing {where!r} failed: {exc}") from None
    except Exception as exc:
        raise ConfigError(f"env {name!r}: importing {where!r} raised {type(exc).__name__}: {exc}") from None


def load_factory(name: str) -> Callable[..., Any]:
    """The callable that ``name`` (``module:attr`` or ``file.py:attr``; ``attr`` may be dotted) names."""
    where, attr = _split(name)
    module = _load_file(name, where) if _is_file(where) else _load_module(name, where)
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            owner = where if i == 0 else ".".join([where, *attr.split(".")[:i]])
            public = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, public, n=3)
            if close:
                hint = f"; did you mean {' or '.join(repr(c) for c in close)}?"
            else:
                defined = [n for n in public if callable(getattr(obj, n, None))][:12]
                hint = f"; callables there: {', '.join(defined)}" if defined else ""
            raise ConfigError(f"env {name!r}: {owner!r} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(
            f"env {name!r}: {attr!r} is {_short(obj)} (type {type(obj).__name__}), not callable; it must be "
            "a function (or class) that returns a PettingZoo ParallelEnv"
        )
    return obj


def _short(obj: Any, n: int = 60) -> str:
    text = repr(obj)
    return text if len(text) <= n else text[: n - 3] + "..."


# -------------------------------------------------------------------------------------- the result
def _call(name: str, factory: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    try:
        return factory(**kwargs)
    except Exception as exc:
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "no arguments"
        raise ConfigError(
            f"env {name!r}: the factory raised {type(exc).__name__}: {exc} (called with {shown})"
        ) from None


def check_parallel_env(name: str, env: Any) -> None:
    """A PettingZoo ParallelEnv, or something with its whole API; else say what ``env`` is."""
    from pettingzoo import AECEnv, ParallelEnv

    if isinstance(env, ParallelEnv):
        return
    what = f"{type(env).__module__}.{type(env).__qualname__}"
    if isinstance(env, AECEnv):
        raise ConfigError(
            f"env {name!r}: the factory returned an AECEnv ({what}), not a ParallelEnv; wrap it with "
            "pettingzoo.utils.conversions.aec_to_parallel (turn_based_aec_to_parallel for a game that "
            "moves in turns)"
        )
    import gymnasium

    if isinstance(env, gymnasium.Env):
        raise ConfigError(
            f"env {name!r}: the factory returned a single-agent gymnasium Env ({what}), not a PettingZoo "
            "ParallelEnv"
        )
    missing = [a for a in _PARALLEL_API if not hasattr(env, a)]
    if missing:
        raise ConfigError(
            f"env {name!r}: the factory returned {_short(env)} (type {what}), not a PettingZoo ParallelEnv "
            f"(missing {', '.join(missing)})"
        )


def make_user_vec_env(name: str, num_envs: int, seed: int | None = None, **kwargs: Any):
    """``num_envs`` copies of the user's env ``name`` as a :class:`PettingZooVecEnv`."""
    from teamrl.marl.envs.adapters import PettingZooVecEnv

    factory = load_factory(name)
    made: list[Any] = []

    def env_fn() -> Any:
        env = _call(name, factory, kwargs)
        check_parallel_env(name, env)
        if any(env is m for m in made):
            raise ConfigError(
                f"env {name!r}: the factory returned the same env object twice; it must build a new env "
                "on every call (one per batched copy)"
            )
        made.append(env)
        if len(made) == 1:
            check_spaces(name, env)
        return env

    try:
        return PettingZooVecEnv(env_fn, num_envs, seed=seed)
    except Exception as exc:
        for env in made:
            env.close()
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"env {name!r}: batching it raised {type(exc).__name__}: {exc}") from None


# -------------------------------------------------------------------------------------- the checks
def _space(name: str, env: Any, kind: str, agent: Any) -> Any:
    try:
        return getattr(env, f"{kind}_space")(agent)
    except Exception as exc:
        raise ConfigError(
            f"env {name!r}: {kind}_space({agent!r}) raised {type(exc).__name__}: {exc}"
        ) from None


def check_spaces(name: str, env: Any) -> None:
    """Every possible agent has gymnasium spaces the adaptor can use: a flattenable observation space
    (or a Dict of ``observation`` and ``action_mask``, with Discrete actions), any action space (which
    ones each algorithm takes is checked by ``teamrl.marl.train.check_spaces``)."""
    agents = list(env.possible_agents)
    if not agents:
        raise ConfigError(f"env {name!r}: possible_agents is empty")
    for a in agents:
        obs, act = _space(name, env, "observation", a), _space(name, env, "action", a)
        for kind, space in (("observation", obs), ("action", act)):
            if not isinstance(space, spaces.Space):
                raise ConfigError(
                    f"env {name!r}: the {kind} space of agent {a!r} is {_short(space)}, not a gymnasium space"
                )
        masked = isinstance(obs, spaces.Dict) and "action_mask" in obs.spaces
        if masked and "observation" not in obs.spaces:
            raise ConfigError(
                f"env {name!r}: the observation space {obs} of agent {a!r} has an action_mask but no "
                "'observation'"
            )
        inner = obs["observation"] if masked else obs
        if not inner.is_np_flattenable:
            raise ConfigError(
                f"env {name!r}: the observation space {inner} of agent {a!r} cannot be flattened to a "
                "vector, which every algorithm here needs (Box, Discrete, MultiDiscrete, MultiBinary and "
                "Dict / Tuple of those can; Sequence and Graph cannot)"
            )
        if masked and not isinstance(act, spaces.Discrete):
            raise ConfigError(
                f"env {name!r}: agent {a!r} has an action_mask but a {act} action space; masks need "
                "Discrete actions"
            )


def _fits(space: spaces.Space, x: Any) -> bool:
    if isinstance(space, spaces.Box):
        return np.shape(x) == space.shape
    try:
        return bool(space.contains(x))
    except Exception:
        return False


def _check_obs(name: str, env: Any, obs: Any, when: str) -> None:
    if not isinstance(obs, dict):
        raise ConfigError(f"env {name!r}: {when} returned observations {_short(obs)}, not a dict by agent")
    for a, o in obs.items():
        if a not in env.possible_agents:
            continue
        space = env.observation_space(a)
        if isinstance(space, spaces.Dict) and "action_mask" in space.spaces:
            if not isinstance(o, dict) or "action_mask" not in o or "observation" not in o:
                raise ConfigError(
                    f"env {name!r}: {when}: the observation space of agent {a!r} has an action_mask but its "
                    f"observation {_short(o)} is not a dict with 'observation' and 'action_mask'"
                )
            space, o = space["observation"], o["observation"]
        if not _fits(space, o):
            got = f"an array of shape {np.shape(o)}" if isinstance(o, np.ndarray) else _short(o)
            raise ConfigError(
                f"env {name!r}: {when}: the observation of agent {a!r} ({got}) does not fit its observation "
                f"space {space}"
            )


def check_user_env(name: str, kwargs: dict[str, Any]) -> None:
    """Build two copies (the factory must return a new env each call), play one reset and one step of
    random actions on the first, then one reset and step of the batched pair."""
    env = make_user_vec_env(name, 2, seed=0, **kwargs)
    try:
        first = env.envs[0]
        try:
            out = first.reset(seed=0)
        except Exception as exc:
            raise ConfigError(f"env {name!r}: reset(seed=0) raised {type(exc).__name__}: {exc}") from None
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ConfigError(
                f"env {name!r}: reset() must return (observations, infos) (PettingZoo >= 1.23); got "
                f"{_short(out)}"
            )
        _check_obs(name, first, out[0], "reset()")
        rng = np.random.default_rng(0)
        actions = {}
        for a in first.agents:
            space = first.action_space(a)
            if isinstance(space, spaces.Discrete):
                o = out[0].get(a)
                allowed = np.ones(int(space.n), bool)
                if isinstance(o, dict) and "action_mask" in o and np.asarray(o["action_mask"]).any():
                    allowed = np.asarray(o["action_mask"], bool)
                actions[a] = int(space.start) + int(rng.choice(np.flatnonzero(allowed)))
            else:
                actions[a] = space.sample()
        try:
            res = first.step(actions)
        except Exception as exc:
            raise ConfigError(
                f"env {name!r}: step() with random actions raised {type(exc).__name__}: {exc}"
            ) from None
        if not (isinstance(res, tuple) and len(res) == 5):
            raise ConfigError(
                f"env {name!r}: step() must return (observations, rewards, terminations, truncations, "
                f"infos); got {_short(res)}"
            )
        _check_obs(name, first, res[0], "step()")
        try:  # the adaptor's own reset and step (flattening, state())
            step = env.reset(seed=0)
            masks = step.action_masks or {}
            env.step(
                {
                    a: masks[a].argmax(1)
                    if a in masks
                    else np.zeros(2, np.int64)
                    if isinstance(s, spaces.Discrete)
                    else np.stack([s.sample() for _ in range(2)])
                    for a, s in env.action_spaces.items()
                }
            )
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"env {name!r}: stepping it batched raised {type(exc).__name__}: {exc}"
            ) from None
    finally:
        env.close()
