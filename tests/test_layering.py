"""The package's architecture as a test: a layer order between teamrl's packages, no import cycles, and
no oversized files.

Every module under teamrl/ is parsed (never imported) with :mod:`ast`; each import of ``teamrl.*`` it makes
is collected, wherever it stands:

* module-level imports and lazy ones inside function bodies alike (a lazy import is still a dependency);
* ``importlib.import_module(...)`` / ``__import__(...)`` of a literal name, or of an f-string whose start
  is literal (``{__name__}`` counts as literal): ``f"teamrl.policies.{name}"`` may load any module under
  ``teamrl.policies``, so it counts as an import of each of them;
* imports under ``if TYPE_CHECKING:``, kept apart: they create no runtime cycle, so the cycle checks ignore
  them, but one that points to a higher layer is a violation unless its line carries ``TYPE_ONLY_PRAGMA``
  (a type-only reference upward is still coupling, and should be a conscious exception);
* strings naming a teamrl module (``"teamrl.workflows.pipeline:Pipeline"`` in a registry) are not imports
  and break no rule, but are listed in the report, since whatever resolves them imports that module.

A node of the graph is the first component under teamrl (``teamrl.trainer.build`` -> ``trainer``); a
top-level module is its own node (``config``, ``cli``, ``__init__``, ``__main__``, ...). As import-linter
does, importing ``teamrl.a.b`` counts as a dependency on ``teamrl.a.b`` alone, not on the ``__init__`` of
its parents. The layers, like import-linter's ``layers`` contract: a node may import its own layer and
the layers below it, never one above; within a layer, see ``SIBLING_ORDER``, ``MUTUAL`` and
``ONLY_IMPORTS``.

Run ``pytest tests/test_layering.py -rP`` to see the full report (with the TYPE_CHECKING imports and the
by-name references) when the tests pass.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "teamrl"
MAX_LINES = 600

# Lowest first. A node may import nodes of its own layer or of lower layers only.
LAYERS: list[tuple[str, ...]] = [
    # 0 foundations, no teamrl dependencies: atomic file writes; the protocol (messages, episodes, the
    #   settings base every component's config model derives from, components by name)
    ("atomic", "protocol"),
    # 1 policies: the base LM + per-role adapters, the tiny default, OpenAI-compatible endpoints
    ("policies",),
    # 2 the engine: runs a team's seats (policies) over turns
    ("engine",),
    # 3 what a team does, on what, scored how (memory: a collaborator, notes and the collaborate workflow;
    #   world: the open-ended town):
    #   ordered siblings, see SIBLING_ORDER
    ("tasks", "rewards", "workflows", "memory", "world"),
    # 4 RL objectives over scored episodes (GRPO, MGRPO, PPO with a critic)
    ("algorithms",),
    # 5 training recipes built from the above (closed loop, population, schedules)
    ("recipes",),
    # 6 the run configuration: assembles every component's settings model, so it imports the component
    #   packages; what runs a config (trainer, Ray backend) sits above it
    ("config",),
    # 7 the trainer and its Ray backend: may import each other, see MUTUAL
    ("trainer", "distributed"),
    # 8 stand-alone subsystems and assemblies over the trainer: the report, classic MARL (see
    #   ONLY_IMPORTS), the plugin conformance checks, a person in a role's seat (play)
    ("report", "marl", "testing", "play"),
    # 9 entry points
    ("cli", "__init__", "__main__"),
]

# Siblings of one layer, lowest first: each may import only the ones before it (tasks <- rewards <-
# workflows). Siblings not named here may import one another (package cycles still fail).
SIBLING_ORDER: list[tuple[str, ...]] = [
    ("tasks", "rewards", "workflows", "memory", "world"),
]

# Siblings that may import each other: the package-level cycle check treats them as one node, and the
# module graph across them must be acyclic instead (no cycle between their modules, at runtime).
MUTUAL: list[tuple[str, ...]] = [
    ("trainer", "distributed"),
]

# Nodes restricted further than their layer: they may import only these (and themselves).
ONLY_IMPORTS: dict[str, frozenset[str]] = {
    "marl": frozenset({"atomic", "protocol", "config"}),
}

# On an import under `if TYPE_CHECKING:` that points to a higher layer, this comment (with a reason)
# lets it stand. It has no effect on any other import.
TYPE_ONLY_PRAGMA = "layering: type-only"

_NAMED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:[A-Za-z_][\w.]*)?")


@dataclasses.dataclass(frozen=True, order=True)
class Import:
    file: str  # path as reported, e.g. teamrl/recipes/closed_loop.py
    line: int
    importer: str  # teamrl.recipes.closed_loop
    target: str  # teamrl.trainer.learner
    kind: str  # "module" (runs on import), "lazy" (in a function), "importlib", "type" (TYPE_CHECKING)
    pragma: bool = False  # carries TYPE_ONLY_PRAGMA

    @property
    def runtime(self) -> bool:
        return self.kind != "type"

    @property
    def tag(self) -> str:
        return {"module": "", "lazy": " [lazy]", "importlib": " [importlib]", "type": " [TYPE_CHECKING]"}[
            self.kind
        ]

    def where(self) -> str:
        return f"{self.file}:{self.line} imports {self.target}{self.tag}"


@dataclasses.dataclass
class Report:
    violations: list[str]  # layer rules broken, one line per import, sorted
    cycles: list[str]  # one block per cycle (package cycles, then module cycles within MUTUAL groups)
    type_only: list[str]  # cross-node TYPE_CHECKING imports (informational)
    named: list[str]  # cross-node strings naming teamrl modules (informational)
    imports: list[Import]

    @property
    def ok(self) -> bool:
        return not self.violations and not self.cycles

    def text(self) -> str:
        parts = []
        if self.violations:
            parts.append(f"{len(self.violations)} layer violation(s):\n" + "\n".join(self.violations))
        if self.cycles:
            parts.append(f"{len(self.cycles)} import cycle(s) (runtime imports):\n" + "\n".join(self.cycles))
        if self.type_only:
            parts.append(
                "imports under TYPE_CHECKING (not counted for cycles; upward ones need "
                f"'# {TYPE_ONLY_PRAGMA}: <reason>'):\n" + "\n".join(self.type_only)
            )
        if self.named:
            parts.append(
                "strings naming a teamrl module of another package (not imports; whatever resolves them "
                "imports that module):\n" + "\n".join(self.named)
            )
        return "\n\n".join(parts) or "no layer violations, no cycles"


# ---------------------------------------------------------------------------------------------- parsing


def _modules(package_dir: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file under package_dir (a package's name -> its __init__.py)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _static_prefix(node: ast.expr, module: str, package: str) -> tuple[str, bool] | None:
    """The literal text a module-name argument starts with, and whether that is all of it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if not isinstance(node, ast.JoinedStr):
        return None
    text = ""
    for value in node.values:
        if isinstance(value, ast.Constant):
            text += str(value.value)
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Name)
            and value.value.id in ("__name__", "__package__")
            and value.format_spec is None
        ):
            text += module if value.value.id == "__name__" else package
        else:
            return text, False
    return text, True


def _collect(root_pkg: str, modules: dict[str, Path], rel_to: Path) -> tuple[list[Import], list[Import]]:
    """(imports of root_pkg modules, strings naming root_pkg modules) made by every module."""

    def resolve(name: str) -> str:
        """The longest prefix of dotted ``name`` that is a known module (``name`` itself if none is)."""
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in modules:
                return ".".join(parts[:n])
        return name

    def ours(name: str) -> bool:
        return name == root_pkg or name.startswith(root_pkg + ".")

    imports: list[Import] = []
    named: list[Import] = []
    for module, path in modules.items():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        tree = ast.parse(source, filename=str(path))
        is_pkg = path.name == "__init__.py"
        package = module if is_pkg else module.rpartition(".")[0]
        file = path.relative_to(rel_to).as_posix()

        def add(node: ast.AST, target: str, kind: str, module=module, file=file, lines=lines) -> None:
            if not ours(target):
                return
            text = "\n".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)])
            imports.append(Import(file, node.lineno, module, target, kind, TYPE_ONLY_PRAGMA in text))

        def visit(node: ast.AST, lazy: bool, type_only: bool, module=module, package=package, file=file):
            kind = "type" if type_only else ("lazy" if lazy else "module")
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(node, resolve(alias.name), kind)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    source_mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    source_mod = node.module or ""
                for alias in node.names:
                    sub = f"{source_mod}.{alias.name}"
                    add(node, sub if sub in modules else resolve(source_mod), kind)
            elif isinstance(node, ast.Call) and node.args:
                func = node.func
                fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if fname in ("import_module", "__import__"):
                    static = _static_prefix(node.args[0], module, package)
                    if static:
                        text, complete = static
                        name = text if complete else text.rpartition(".")[0]
                        # a name known only by its start may be any module under that start
                        under = [] if complete else [m for m in modules if m.startswith(name + ".")]
                        for target in under or ([resolve(name)] if name else []):
                            add(node, target, "type" if type_only else "importlib")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                target = resolve(node.value.partition(":")[0])
                if _NAMED.fullmatch(node.value) and ours(node.value) and target != root_pkg:
                    named.append(Import(file, node.lineno, module, target, "module"))
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                for child in node.body:
                    visit(child, lazy, True)
                for child in node.orelse:
                    visit(child, lazy, type_only)
                return
            inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            for child in ast.iter_child_nodes(node):
                visit(child, inner, type_only)

        visit(tree, False, False)
    return sorted(set(imports)), sorted(set(named))


def node_of(module: str) -> str:
    """``teamrl.trainer.build`` -> ``trainer``; ``teamrl.config`` -> ``config``; ``teamrl`` -> ``__init__``"""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


# ----------------------------------------------------------------------------------------------- graphs


def _elementary_cycles(edges: dict[str, set[str]], limit: int = 500) -> tuple[list[list[str]], bool]:
    """Every elementary cycle (each started at its smallest node), shortest first; (cycles, truncated)."""
    nodes = sorted(set(edges) | {v for vs in edges.values() for v in vs})
    cycles: list[list[str]] = []
    for start in nodes:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ()), reverse=True):
                if nxt == start:
                    cycles.append(path)
                    if len(cycles) >= limit:
                        return sorted(cycles, key=lambda c: (len(c), c)), True
                elif nxt > start and nxt not in path:
                    stack.append((nxt, [*path, nxt]))
    return sorted(cycles, key=lambda c: (len(c), c)), False


def _cycle_blocks(title: str, edges: dict[tuple[str, str], list[Import]]) -> list[str]:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    cycles, truncated = _elementary_cycles(graph)
    blocks = []
    for cycle in cycles:
        hops = list(zip(cycle, [*cycle[1:], cycle[0]], strict=True))
        lines = [f"{title}: {' -> '.join([*cycle, cycle[0]])}"]
        for a, b in hops:
            examples = edges[(a, b)]
            more = f" (+{len(examples) - 1} more)" if len(examples) > 1 else ""
            lines.append(f"    {a} -> {b}: {examples[0].where()}{more}")
        blocks.append("\n".join(lines))
    if truncated:
        blocks.append(f"{title}: ... more cycles not listed (stopped at {len(cycles)})")
    return blocks


# ------------------------------------------------------------------------------------------------ check


def check(
    package_dir: Path,
    layers: Sequence[Iterable[str]] = tuple(LAYERS),
    sibling_order: Sequence[Sequence[str]] = tuple(SIBLING_ORDER),
    mutual: Sequence[Iterable[str]] = tuple(MUTUAL),
    only_imports: dict[str, frozenset[str]] | None = None,
) -> Report:
    only_imports = ONLY_IMPORTS if only_imports is None else only_imports
    layer_of: dict[str, int] = {}
    for i, layer in enumerate(layers):
        for node in layer:
            assert node not in layer_of, f"{node} is in layers {layer_of[node]} and {i}"
            layer_of[node] = i
    for group in [*sibling_order, *mutual]:
        assert len({layer_of[n] for n in group}) == 1, f"{group}: siblings must share one layer"
    group_of = {n: "+".join(g) for g in mutual for n in g}

    root_pkg = package_dir.name
    modules = _modules(package_dir)
    imports, named = _collect(root_pkg, modules, package_dir.parent)

    violations: list[tuple[str, int, str]] = []
    type_only: list[tuple[str, int, str]] = []
    for node in sorted({node_of(m) for m in modules} - set(layer_of)):
        first = next(p for m, p in modules.items() if node_of(m) == node)
        rel = first.relative_to(package_dir.parent).as_posix()
        violations.append((rel, 0, f"{rel}: {node} is in no layer (add it to LAYERS)"))

    def rule(src: str, dst: str) -> str | None:
        """Why src may not import dst (None if it may)."""
        if dst not in layer_of:
            return f"{dst} is in no layer"
        ls, ld = layer_of[src], layer_of[dst]
        if src in only_imports and dst not in only_imports[src]:
            return f"layer {ld}; {src} may import only {', '.join(sorted(only_imports[src]))}"
        if ld > ls:
            return f"layer {ld}, higher"
        for order in sibling_order:
            if src in order and dst in order and order.index(dst) > order.index(src):
                return f"layer {ld}, sibling above {src} in {' <- '.join(order)}"
        return None

    for imp in imports:
        src, dst = node_of(imp.importer), node_of(imp.target)
        if src == dst or src not in layer_of:
            continue
        why = rule(src, dst)
        head = f"{imp.file}:{imp.line}: {src} (layer {layer_of[src]}) imports {imp.target}"
        if imp.kind == "type":
            status = "allowed" if why is None else ("annotated" if imp.pragma else "VIOLATION")
            type_only.append((imp.file, imp.line, f"{head} ({why or 'ok'}) -> {status}"))
            if why is None or imp.pragma:
                continue
        if why is not None:
            violations.append((imp.file, imp.line, f"{head} ({why}){imp.tag}"))

    # package cycles: runtime imports between nodes, each MUTUAL group taken as one node
    pkg_edges: dict[tuple[str, str], list[Import]] = defaultdict(list)
    mod_edges: dict[str, dict[tuple[str, str], list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        if not imp.runtime:
            continue
        src, dst = node_of(imp.importer), node_of(imp.target)
        gs, gd = group_of.get(src, src), group_of.get(dst, dst)
        if gs != gd:
            pkg_edges[(gs, gd)].append(imp)
        elif src in group_of and imp.importer != imp.target:
            mod_edges[gs][(imp.importer, imp.target)].append(imp)
    cycles = _cycle_blocks("package cycle", pkg_edges)
    for group, edges in sorted(mod_edges.items()):
        cycles += _cycle_blocks(f"module cycle within {group}", edges)

    named_lines = []
    for ref in named:
        src, dst = node_of(ref.importer), node_of(ref.target)
        if src != dst:
            where = f"layer {layer_of[dst]}" if dst in layer_of else "no layer"
            named_lines.append(
                f"{ref.file}:{ref.line}: {src} (layer {layer_of.get(src, '?')}) names {ref.target} ({where})"
            )

    return Report(
        violations=[text for *_, text in sorted(violations)],
        cycles=cycles,
        type_only=[text for *_, text in sorted(type_only)],
        named=named_lines,
        imports=imports,
    )


def oversized(package_dir: Path, limit: int = MAX_LINES) -> list[str]:
    """'path: N lines' for each text file under package_dir longer than limit lines."""
    out = []
    for path in sorted(package_dir.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            n = len(path.read_text(encoding="utf-8").splitlines())
        except UnicodeDecodeError:
            continue
        if n > limit:
            out.append(f"{path.relative_to(package_dir.parent).as_posix()}: {n} lines")
    return out


# ------------------------------------------------------------------------------------------------ tests


def test_layers_and_cycles():
    report = check(ROOT / PACKAGE)
    print(report.text())
    assert report.ok, "\n" + report.text()


def test_no_file_over_max_lines():
    offenders = oversized(ROOT / PACKAGE)
    assert not offenders, f"files over {MAX_LINES} lines (split them):\n" + "\n".join(offenders)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_on_a_synthetic_package(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            # lower layer importing a higher one: one violation, lazily too
            "pkg/low/bad.py": "import os\nfrom pkg.high import thing\n\n"
            "def f():\n    import pkg.high.other\n",
            # a runtime cycle a <-> b (b's side lazy and relative)
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "def f():\n    from . import a\n",
            # c <-> d only through a TYPE_CHECKING import: no cycle; and d's upward type import is annotated
            "pkg/c.py": "import pkg.d\n",
            "pkg/d.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\n"
                "    from pkg.high import thing  # layering: type-only (annotation)\n"
                "    from pkg.high import other\n"
            ),
            "pkg/high/__init__.py": "thing = 1\n",
            "pkg/high/other.py": "import importlib\nimportlib.import_module(f'pkg.m1.{1}')\n",  # pkg.m1.*
            # siblings that may import each other, but whose modules must not form a cycle
            "pkg/m1/__init__.py": "",
            "pkg/m1/x.py": "from pkg.m2.y import z\n",
            "pkg/m1/ok.py": "from pkg.m2 import w\n",
            "pkg/m2/__init__.py": "w = 1\n",
            "pkg/m2/y.py": "z = 1\ndef g():\n    from pkg.m1 import x\n",
            "pkg/registry.py": "PATHS = {'p': 'pkg.high.other:f'}\n" + "\n" * 3,
        },
    )
    layers = [("low",), ("a", "b", "c", "d", "registry"), ("m1", "m2"), ("high", "__init__")]
    report = check(tmp_path / "pkg", layers, sibling_order=[], mutual=[("m1", "m2")], only_imports={})
    text = report.text()

    assert report.violations == [
        "pkg/d.py:5: d (layer 1) imports pkg.high.other (layer 3, higher) [TYPE_CHECKING]",
        "pkg/low/bad.py:2: low (layer 0) imports pkg.high (layer 3, higher)",
        "pkg/low/bad.py:5: low (layer 0) imports pkg.high.other (layer 3, higher) [lazy]",
    ], text
    assert len(report.cycles) == 2, text
    assert report.cycles[0].startswith("package cycle: a -> b -> a\n"), text
    assert "    b -> a: pkg/b.py:2 imports pkg.a [lazy]" in report.cycles[0]
    assert report.cycles[1].startswith("module cycle within m1+m2: pkg.m1.x -> pkg.m2.y -> pkg.m1.x"), text
    assert not any(" c -> d" in c or " d -> c" in c for c in report.cycles)  # the type-only one made none
    assert "pkg/d.py:3: d (layer 1) imports pkg.c (ok) -> allowed" in report.type_only
    assert "pkg/d.py:4: d (layer 1) imports pkg.high (layer 3, higher) -> annotated" in report.type_only
    assert report.named == ["pkg/registry.py:1: registry (layer 1) names pkg.high.other (layer 3)"]
    dynamic = {i.target for i in report.imports if i.kind == "importlib"}
    assert dynamic == {"pkg.m1.x", "pkg.m1.ok"}, dynamic

    # sibling order and a restricted node
    report = check(
        tmp_path / "pkg",
        [("low", "high", "__init__", "m1", "m2"), ("a", "b", "c", "d", "registry")],
        sibling_order=[("low", "high")],
        mutual=[],
        only_imports={"m1": frozenset({"low"})},
    )
    assert "pkg/low/bad.py:2: low (layer 0) imports pkg.high (layer 0, sibling above low in low <- high)" in (
        report.violations
    ), report.text()
    assert (
        "pkg/m1/x.py:1: m1 (layer 0) imports pkg.m2.y (layer 0; m1 may import only low)" in report.violations
    )
    assert any(c.startswith("package cycle: m1 -> m2 -> m1") for c in report.cycles)

    assert oversized(tmp_path / "pkg", limit=4) == ["pkg/d.py: 5 lines", "pkg/low/bad.py: 5 lines"]
    assert oversized(tmp_path / "pkg", limit=5) == []
