"""mkdocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- Figures kept outside docs/ (``benchmarks/results/*.png``, linked as ``../benchmarks/results/x.png`` so
  that the Markdown also reads on a code host) are copied into the site under ``assets/repo/`` and the
  links rewritten to them; the source files stay where they are.
- The API page names modules with mkdocstrings' ``::: teamrl.module`` lines. A line whose module does
  not exist (yet) becomes a note instead of a failed build, so the page can list the public API that is
  being written; a typo shows as that note (and in the build's log).
- ``<!-- no-run: REASON -->`` before a code block (the docs test, tests/test_docs.py, then skips it)
  becomes a visible line saying why the block is not run.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.docs_site")

ROOT = Path(__file__).resolve().parents[2]
MIRROR = "assets/repo"  # where files from outside docs/ land in the site
_MIRRORED_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp"}
_LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\))")
_API_LINE = re.compile(r"^:::\s+([A-Za-z_][\w.]*)\s*$")
_NO_RUN = re.compile(r"^<!--\s*no-run:\s*(.*?)\s*-->\s*$")


def _outside_target(src_uri: str, target: str, docs_dir: Path) -> Path | None:
    """The repository file a relative link of page ``src_uri`` points to, when it lies outside docs/."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None
    path = (docs_dir / posixpath.dirname(src_uri) / target).resolve()
    try:
        path.relative_to(docs_dir)
        return None
    except ValueError:
        pass
    try:
        path.relative_to(ROOT)
    except ValueError:
        return None
    return path if path.is_file() else None


def on_files(files: Files, config: Any) -> Files:
    docs_dir = Path(config["docs_dir"]).resolve()
    added: set[str] = set()
    for page in list(files.documentation_pages()):
        for match in _LINK.finditer(page.content_string):
            path = _outside_target(page.src_uri, match.group(2), docs_dir)
            if path is None or path.suffix.lower() not in _MIRRORED_SUFFIXES:
                continue
            uri = f"{MIRROR}/{path.relative_to(ROOT).as_posix()}"
            if uri not in added:
                files.append(File.generated(config, uri, abs_src_path=str(path)))
                added.add(uri)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    src_uri = page.file.src_uri

    def mirror(match: re.Match[str]) -> str:
        path = _outside_target(src_uri, match.group(2), docs_dir)
        if path is None or path.suffix.lower() not in _MIRRORED_SUFFIXES:
            return match.group(0)
        uri = f"{MIRROR}/{path.relative_to(ROOT).as_posix()}"
        return match.group(1) + posixpath.relpath(uri, posixpath.dirname(src_uri) or ".") + match.group(3)

    markdown = _LINK.sub(mirror, markdown)
    return _no_run_notes(_tolerant_api(markdown, src_uri))


def module_exists(dotted: str) -> bool:
    """Whether ``dotted`` (a module, or an object in one) names source that exists in this repository
    (an object: its name appears in its module's source) or is importable; the repository's own modules
    are checked without importing them."""
    parts = dotted.split(".")
    if (ROOT / parts[0]).is_dir():
        for i in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:i])
            source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
            if source.is_file():
                return (
                    i == len(parts)
                    or re.search(rf"\b{re.escape(parts[i])}\b", source.read_text()) is not None
                )
        return False
    import importlib.util

    for i in range(len(parts), 0, -1):
        try:
            if importlib.util.find_spec(".".join(parts[:i])) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _outside_fences(markdown: str) -> list[tuple[str, bool]]:
    """Each line of ``markdown`` and whether it lies outside fenced code blocks."""
    out, fence = [], None
    for line in markdown.split("\n"):
        match = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and match:
            fence = match.group(1)
            out.append((line, False))
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            out.append((line, False))
        else:
            out.append((line, True))
    return out


def _tolerant_api(markdown: str, src_uri: str) -> str:
    out: list[str] = []
    skipping = False
    for line, prose in _outside_fences(markdown):
        if skipping and prose and (line.startswith((" ", "\t")) or not line.strip()):
            continue  # the options block of a dropped ::: line
        skipping = False
        match = _API_LINE.match(line) if prose else None
        if match and not module_exists(match.group(1)):
            log.info("%s: %s does not exist (yet); shown as a note", src_uri, match.group(1))
            out += [
                f'!!! note "`{match.group(1)}`"',
                "    Not written yet: this part of the API is to come.",
                "",
            ]
            skipping = True
            continue
        out.append(line)
    return "\n".join(out)


def _no_run_notes(markdown: str) -> str:
    out = []
    for line, prose in _outside_fences(markdown):
        match = _NO_RUN.match(line) if prose else None
        out.append(f"*Not run by the docs test: {match.group(1).rstrip('.')}.*\n" if match else line)
    return "\n".join(out)
