"""Every code block of the documentation (docs/**/*.md) works as written.

- ```python blocks run, each in a fresh interpreter, in an empty working directory that has the
  repository's ``examples/`` (so ``examples/x.yaml`` reads as from the repository root), within a timeout.
- ```yaml blocks are teamrl configs: each must load with ``teamrl.config.load_config``.
- ```bash blocks: every ``teamrl`` command's subcommand answers ``--help``, its ``--flags`` exist, the
  repository files it names (``examples/...``, ``benchmarks/...``) exist, and a ``teamrl train CONFIG
  --set ...`` loads with its overrides.

A block that cannot run here (it needs a GPU, a model hub, a Ray cluster) gets the line
``<!-- no-run: REASON -->`` right before its opening fence; the site shows the reason, and this test
then skips the block (python, yaml) or keeps only the static checks (bash). The documentation page
docs/development.md describes the convention.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PYTHON_TIMEOUT_S = 60
NO_RUN = re.compile(r"^\s*<!--\s*no-run:(.*?)-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
# top-level entries of the repository whose paths a command may name (runs/, ~/.cache/... are outputs)
REPO_DIRS = ("examples", "benchmarks", "scripts", "tests", "docs", "teamrl", ".ci")
PLACEHOLDER = re.compile(r"[<>\[\]*$]|\.\.\.")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    no_run: str | None  # the reason, when marked

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def doc_blocks() -> list[Block]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        lines = path.read_text().split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            indent, fence, lang = m.groups()
            start = i
            body = []
            i += 1
            while i < len(lines) and not (
                lines[i].strip().startswith(fence) and not lines[i].strip().strip(fence[0])
            ):
                body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
                i += 1
            i += 1
            before = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
            marker = NO_RUN.match(before)
            found.append(
                Block(
                    page=path.relative_to(DOCS).as_posix(),
                    line=start + 1,
                    lang=lang.lower(),
                    code="\n".join(body) + "\n",
                    no_run=marker.group(1).strip() if marker else None,
                )
            )
    return found


BLOCKS = doc_blocks()


def _prose(lines: list[str]) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fence = [], None
    for line in lines:
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(2)
            else:
                out.append(line)
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None
    return out


def _of(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def _params(blocks: list[Block]) -> list:
    return [
        pytest.param(b, id=b.id, marks=[pytest.mark.skip(reason=f"no-run: {b.no_run}")] if b.no_run else [])
        for b in blocks
    ]


def test_the_docs_have_runnable_blocks() -> None:
    assert _of("python") and _of("yaml") and _of("bash"), "the block finder found no blocks"


def test_no_run_markers_give_a_reason_and_mark_a_block() -> None:
    marked = {(b.page, b.no_run) for b in BLOCKS if b.no_run is not None}
    assert all(reason for _, reason in marked), "a <!-- no-run: REASON --> marker without its reason"
    for path in sorted(DOCS.rglob("*.md")):
        count = sum(1 for ln in _prose(path.read_text().split("\n")) if NO_RUN.match(ln))
        page = path.relative_to(DOCS).as_posix()
        assert count == sum(1 for b in BLOCKS if b.page == page and b.no_run is not None), (
            f"{page}: a no-run marker that is not directly before a code block"
        )


# ------------------------------------------------------------------------------------------- python
@pytest.mark.parametrize("block", _params(_of("python")))
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PYTHON_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"{block.id} failed:\n{block.code}\n--- output:\n{proc.stdout}{proc.stderr}"


# --------------------------------------------------------------------------------------------- yaml
@pytest.mark.parametrize("block", _params(_of("yaml")))
def test_yaml_block_is_a_config_that_loads(block: Block, tmp_path: Path) -> None:
    from teamrl.config import load_config

    path = tmp_path / "config.yaml"
    path.write_text(block.code)
    load_config(path)


# --------------------------------------------------------------------------------------------- bash
def _commands(code: str) -> list[list[str]]:
    """The commands of a shell block: lines joined at trailing backslashes, comments dropped, split at
    ``&&``, ``||``, ``;`` and ``|``, leading ``NAME=value`` assignments dropped."""
    out = []
    for line in code.replace("\\\n", " ").split("\n"):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split("#")[0].split()
        command: list[str] = []
        for tok in [*tokens, ";"]:
            if tok in ("&&", "||", ";", "|"):
                while command and re.match(r"^[A-Za-z_]\w*=", command[0]):
                    command.pop(0)
                if command:
                    out.append(command)
                command = []
            else:
                command.append(tok)
    return out


def _repo_paths(tokens: list[str]) -> list[str]:
    paths = []
    for tok in tokens:
        value = tok.strip("[]'\"").split("=", 1)[-1]
        first = value.split("/", 1)[0]
        if "/" in value and first in REPO_DIRS and not PLACEHOLDER.search(value):
            paths.append(value)
    return paths


def _subparsers(parser):
    import argparse

    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _check_teamrl(block: Block, args: list[str]) -> None:
    from teamrl.cli import build_parser, main

    parser = build_parser()
    chain: list[str] = []
    sub = _subparsers(parser)
    rest = list(args)
    while sub is not None and rest and rest[0] in sub.choices:
        chain.append(rest.pop(0))
        parser = sub.choices[chain[-1]]
        sub = _subparsers(parser)
    where = f"{block.id}: teamrl {' '.join(args)}"
    assert chain, f"{where}: no such teamrl subcommand"
    if sub is not None and rest and not rest[0].startswith("-"):
        raise AssertionError(f"{where}: teamrl {' '.join(chain)} has no subcommand {rest[0]!r}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main([*chain, "--help"])
    assert exit_.value.code == 0 and "usage:" in out.getvalue(), f"teamrl {' '.join(chain)} --help failed"
    options = {s for a in parser._actions for s in a.option_strings}
    for tok in rest:
        flag = tok.strip("[]").split("=", 1)[0]
        if flag.startswith("--") and len(flag) > 2:
            assert flag in options, (
                f"{where}: teamrl {' '.join(chain)} has no {flag} (it has {sorted(options)})"
            )
    if block.no_run or any(PLACEHOLDER.search(t) for t in args):
        return  # a synopsis with placeholders, or marked: the static checks only
    parsed = build_parser().parse_args(args)
    if chain == ["train"] and not parsed.resume and (parsed.config is None or "/" in parsed.config):
        from teamrl.config import load_config

        load_config(ROOT / parsed.config if parsed.config else None, parsed.set)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in _of("bash") + _of("sh")])
def test_bash_block_commands_exist(block: Block) -> None:
    for command in _commands(block.code):
        for path in _repo_paths(command):
            assert (ROOT / path).exists(), f"{block.id}: {' '.join(command)}: {path} does not exist"
        if Path(command[0]).name == "teamrl":
            _check_teamrl(block, command[1:])


# -------------------------------------------------------------------------------- generated pages
def _hook(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before exec: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_config_reference_covers_every_section_and_key() -> None:
    from teamrl.config import Config

    text = _hook("config_reference").config_reference()
    for name in Config.model_fields:
        assert f"## `{name}`\n" in text, f"no section for {name}"
    assert "`run.seed`" in text and "`policies.<name>.kind`" in text
    # a field without a description still has its row
    assert re.search(r"\| `run\.seed` \| `int` \| `0` \|", text)


def test_site_hooks_show_no_run_reasons_and_tolerate_missing_api_modules() -> None:
    site = _hook("docs_site")
    page = "<!-- no-run: needs a GPU -->\n```python\nprint(1)\n```\n"
    assert "*Not run by the docs test: needs a GPU.*" in site._no_run_notes(page)
    api = "::: teamrl.no_such_module\n    options:\n      heading_level: 3\n\n::: teamrl.protocol\n"
    out = site._tolerant_api(api, "reference/api.md")
    assert '!!! note "`teamrl.no_such_module`"' in out and "heading_level" not in out
    assert "::: teamrl.protocol" in out


def test_example_configs_ship_in_the_package() -> None:
    """pyproject's package-data ships teamrl/configs/*.yaml; teamrl/configs is examples/."""
    configs = ROOT / "teamrl" / "configs"
    assert configs.resolve() == (ROOT / "examples").resolve()
    examples = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))
    assert examples and sorted(p.name for p in configs.glob("*.yaml")) == examples
    assert '"configs/*.yaml"' in (ROOT / "pyproject.toml").read_text()
