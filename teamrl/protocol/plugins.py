"""Components by name: built-in names and import paths (``package.module:attr`` or ``path/file.py:attr``).

A config names its workflow, task suite and reward functions by a built-in name (``pipeline``) or by an
import path to user code (``mypkg.flows:SolverVerifier``, or a file ``flows.py:SolverVerifier`` relative to
the working directory). The built-in names map to import paths here, so that nothing below the
configuration imports a component to find it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

from teamrl.protocol.settings import ConfigError

BUILTIN: dict[str, dict[str, str]] = {
    "workflow": {
        "pipeline": "teamrl.workflows.pipeline:Pipeline",
        "debate": "teamrl.workflows.debate:Debate",
        "self_play": "teamrl.workflows.self_play_workflow:SelfPlay",
        "test_driven": "teamrl.workflows.test_driven:TDD",
        "repo_fix": "teamrl.workflows.repo_fix:RepoFix",
        "collaborate": "teamrl.memory.workflow:Collaborate",
        "town": "teamrl.world.workflow:TownWorkflow",
    },
    "task suite": {
        "programming": "teamrl.tasks.suites:ProgrammingSuite",
        "reasoning": "teamrl.tasks.suites:ReasoningSuite",
        "humaneval": "teamrl.tasks.suites:HumanEvalSuite",
        "repo": "teamrl.tasks.repos:RepoSuite",
        "collaborators": "teamrl.memory.workflow:CollaboratorSuite",
        "towns": "teamrl.world.workflow:TownSuite",
    },
    "reward function": {
        "hybrid": "teamrl.rewards.functions:hybrid",
        "shared": "teamrl.rewards.functions:shared",
        "maporl": "teamrl.rewards.functions:maporl",
        "marti": "teamrl.rewards.functions:marti",
        "counterfactual": "teamrl.rewards.functions:counterfactual",
    },
}

# directories of the user files loaded by path, for processes that must import them too (Ray workers)
PLUGIN_DIRS: list[str] = []


def is_import_path(name: str) -> bool:
    return ":" in name


def load_object(path: str, what: str = "object") -> Any:
    """The object at ``package.module:attr`` (``attr`` may be dotted) or ``file.py:attr``; ConfigError
    (naming what is wrong and, where it can, what was meant) when it cannot be loaded."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what} {path!r}: an import path is 'package.module:name' (or 'file.py:name')")
    if module_name.endswith(".py"):
        module = _load_file(Path(module_name).expanduser(), path, what)
    else:
        try:
            module = _import(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise ConfigError(
                    f"{what} {path!r}: no module named {exc.name!r} (is it installed, or its directory on "
                    "PYTHONPATH? run from the directory that holds it, or name the file: dir/file.py:name)"
                ) from None
            raise ConfigError(f"{what} {path!r}: importing {module_name} failed: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
            raise ConfigError(
                f"{what} {path!r}: importing {module_name} raised {type(exc).__name__}: {exc}"
            ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{what} {path!r}: {module_name} has no {part!r}{hint}")
        obj = getattr(obj, part)
    return obj


def _import(module_name: str) -> Any:
    """Import ``module_name``; one not found is looked for again in the working directory, as
    ``python -m`` would (the ``teamrl`` command's own directory is on sys.path, the working one is not)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = str(Path.cwd())
        if cwd in sys.path or not (exc.name and module_name.startswith(exc.name)):
            raise
        sys.path.insert(0, cwd)
        module = importlib.import_module(module_name)
        if cwd not in PLUGIN_DIRS:
            PLUGIN_DIRS.append(cwd)
        return module


def _load_file(file: Path, path: str, what: str) -> Any:
    file = file.resolve()
    if not file.is_file():
        raise ConfigError(f"{what} {path!r}: file {str(file)!r} not found")
    # importable under its own name from its directory: pickling its classes (Ray) then works
    directory = str(file.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    if directory not in PLUGIN_DIRS:
        PLUGIN_DIRS.append(directory)
    try:
        return importlib.import_module(file.stem)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{what} {path!r}: importing {file} raised {type(exc).__name__}: {exc}") from None


def _remember_root(path: str) -> None:
    """Keep the directory that ``path``'s top-level package is imported from, for other processes."""
    module_name = path.partition(":")[0]
    if module_name.endswith(".py"):
        return  # _load_file kept its directory
    file = getattr(sys.modules.get(module_name), "__file__", None)
    if file is None:
        return
    root = Path(file).resolve().parent
    for _ in range(module_name.count(".") + (Path(file).name == "__init__.py")):
        root = root.parent
    if "site-packages" not in root.parts and str(root) not in PLUGIN_DIRS:
        PLUGIN_DIRS.append(str(root))


def python_path() -> str:
    """PYTHONPATH for a process that must import the plugins this one loaded (a Ray worker)."""
    parts = [*PLUGIN_DIRS, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(parts))


def resolve(kind: str, name: str) -> Any:
    """The component ``name`` of ``kind`` (``workflow``, ``task suite``, ``reward function``): a built-in
    name or an import path."""
    builtin = BUILTIN[kind]
    if name in builtin:
        return load_object(builtin[name], kind)
    if is_import_path(name):
        obj = load_object(name, kind)
        _remember_root(name)
        return obj
    close = difflib.get_close_matches(name, list(builtin), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(
        f"unknown {kind} {name!r}: {hint}use a built-in one ({', '.join(builtin)}) or an import path "
        "package.module:Name"
    )


# teamrl's own code (as imported and as resolved), the standard library's and installed packages'
_NOT_PLUGINS = tuple(
    dict.fromkeys(
        (
            str(Path(__file__).parents[1]),
            str(Path(__file__).resolve().parents[1]),
            sysconfig.get_paths()["stdlib"],
        )
    )
) + ("site-packages", "<frozen")


def plugin_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost of ``frames`` (a traceback's or a stack's, outermost first) in code that is not
    teamrl's, the standard library's nor an installed package's: a plugin's, where there is one; else the
    innermost frame; None without frames. Where an error was raised, or a blocked loop is stuck."""
    own = [f for f in frames if not any(part in f.filename for part in _NOT_PLUGINS)]
    return (own or frames)[-1] if frames else None
