"""The import graph of kview points one way and has no cycle (read from the source, nothing imported).

Rules (issue 26 item 5):
- Every module of kview/, tui/, capture/ and models/ is a node, named as installed (tui/app.py is
  kview.tui.app). An import is an edge whether it sits at module level, inside a function, or under
  `if TYPE_CHECKING:` (a type named is a dependency all the same), and so is
  `importlib.import_module("kview....")` with a literal name. `from kview.x import y` points at the
  module kview.x.y when there is one, else at kview.x (its __init__).
- No cycle among modules.
- No arrow up: a module imports only modules of its own layer or of a layer below. The layers, lowest
  first, are LAYERS below:
    models                       the workloads: plain PyTorch, nothing of kview
    kview, atomic_write,         the version, safe file writes, warnings, how a duration, a size,
      warning, notation,         a bar and a kernel name are written (one notation for all), and
      formats                    the names of the document formats (no polars: the CLI's parser)
    io, errors                   readers of trace files, the frame cache, the memory budget; the
                                 one-line errors (out of memory names the budget)
    trace, derived               the normalized trace and its tables kept per trace
    analysis, cluster            computations over a trace: values (a note or finding writes its
                                 figures with kview.notation); cluster spreads rank analyses over processes
    reports                      the nsys-compatible reports
    documents                    what a command or a view shows: titled tables and notes
    output                       rendering to table/md/csv/tsv/json: cells cut to fit, headers, files
    capture, tui, supervisor     front ends: capture of a program, the explorer, a command's process
    cli, quick_stats             the command line, which hands over to the explorer and to capture
                                 (quick_stats: its stats answer for a small trace, without polars)
- A function-level import of a kview module is kept only where a heavy import is deferred on purpose
  (polars at the CLI's start, textual, torch, a big analysis needed by one command); each says so in a
  comment on the line before it or on one of its own lines (a comment above a run of imports covers
  the run).
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

# folder of the repository -> the package it installs as (pyproject's package-dir mapping)
PACKAGES = {"kview": "kview", "tui": "kview.tui", "capture": "kview.capture", "models": "kview.models"}

LAYERS: tuple[tuple[str, ...], ...] = (
    ("kview.models",),
    ("kview", "kview.atomic_write", "kview.warning", "kview.notation", "kview.formats"),
    ("kview.io", "kview.errors"),
    ("kview.trace", "kview.derived"),
    ("kview.analysis", "kview.cluster"),
    ("kview.reports",),
    ("kview.documents",),
    ("kview.output",),
    ("kview.capture", "kview.tui", "kview.supervisor"),
    ("kview.cli", "kview.quick_stats"),
)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: Path
    line: int
    in_function: bool
    commented: bool

    def __str__(self) -> str:
        where = "in a function" if self.in_function else "at module level"
        return f"{self.source} -> {self.target} ({self.path.relative_to(ROOT)}:{self.line}, {where})"


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _layer(module: str) -> int:
    best, level = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            # the bare package `kview` names only its own __init__, not everything under it
            hit = module == prefix or (prefix != "kview" and module.startswith(prefix + "."))
            if hit and len(prefix) > best:
                best, level = len(prefix), i
    assert level >= 0, f"{module} is in no layer: add it to LAYERS"
    return level


def _comment_lines(source: str) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0] for t in tokens if t.type == tokenize.COMMENT}


class _FileImports:
    """The kview imports of one file, each with where it sits and whether a comment explains it."""

    def __init__(self, module: str, path: Path, modules: dict[str, Path]) -> None:
        self.module, self.path, self.modules = module, path, modules
        self.package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        source = path.read_text()
        self.comments = _comment_lines(source)
        self.edges: list[Edge] = []
        self.visit(ast.parse(source, str(path)), False)

    def known(self, name: str) -> str | None:
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None

    def add(self, node: ast.stmt | ast.expr, names: list[str], in_function: bool, commented: bool) -> None:
        for name in names:
            target = self.known(name) if name == "kview" or name.startswith("kview.") else None
            if target is not None and target != self.module:
                self.edges.append(Edge(self.module, target, self.path, node.lineno, in_function, commented))

    def imported(self, node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        # `from kview.x import y`: the submodule kview.x.y where there is one, else kview.x itself
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in self.modules else base for a in node.names]

    def commented(self, node: ast.stmt | ast.expr) -> bool:
        """A comment on one of the node's lines or on the line before it."""
        return bool(set(range(node.lineno - 1, (node.end_lineno or node.lineno) + 1)) & self.comments)

    def visit(self, node: ast.AST, in_function: bool) -> None:
        run_commented = False  # a run of imports under one comment
        previous: ast.AST | None = None
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                follows_import = isinstance(previous, (ast.Import, ast.ImportFrom))
                run_commented = self.commented(child) or (follows_import and run_commented)
                self.add(child, self.imported(child), in_function, run_commented)
            else:
                run_commented = False
                if (
                    isinstance(child, ast.Call)
                    and ast.unparse(child.func).endswith("import_module")
                    and child.args
                    and isinstance(child.args[0], ast.Constant)
                    and isinstance(child.args[0].value, str)
                ):
                    self.add(child, [child.args[0].value], in_function, self.commented(child))
                nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                self.visit(child, nested)
            previous = child


def _edges(modules: dict[str, Path]) -> list[Edge]:
    return [e for module, path in modules.items() for e in _FileImports(module, path, modules).edges]


MODULES = _modules()


@functools.cache
def edges() -> list[Edge]:
    """Every kview import of the package, read once in a test process when a test asks (about
    2.5 CPU s: at collection it cost every worker, not only the one running this file)."""
    return _edges(MODULES)


def _cycle(graph_edges: list[Edge]) -> list[str] | None:
    """One cycle of the graph as the list of its modules (first == last), or None."""
    graph: dict[str, list[str]] = {}
    for e in graph_edges:
        graph.setdefault(e.source, []).append(e.target)
    state: dict[str, int] = {}  # 1 on the path being walked, 2 done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(set(graph.get(node, ()))):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := walk(start)):
            return found
    return None


def test_graph_is_read():
    # the graph is real: the known spine of kview is in it
    assert {"kview.cli", "kview.tui.app", "kview.capture.cli", "kview.io.cache"} <= set(MODULES)
    pairs = {(e.source, e.target) for e in edges()}
    assert ("kview.cli", "kview.errors") in pairs
    assert any(s.startswith("kview.tui.") and t.startswith("kview.analysis.") for s, t in pairs)
    for module in MODULES:
        _layer(module)


def test_no_cycle():
    found = _cycle(edges())
    if found:
        hops = []
        for a, b in zip(found, found[1:]):
            hops.append(str(next(e for e in edges() if e.source == a and e.target == b)))
        raise AssertionError("import cycle: " + " -> ".join(found) + "\n  " + "\n  ".join(hops))


def test_no_arrow_up():
    up = [str(e) for e in edges() if _layer(e.target) > _layer(e.source)]
    assert up == [], "imports from a higher layer:\n  " + "\n  ".join(up)


def test_function_level_imports_say_why():
    silent = sorted({str(e) for e in edges() if e.in_function and not e.commented})
    assert silent == [], (
        "function-level imports of kview without a comment saying why the import is deferred "
        "(or move it to the top of the file):\n  " + "\n  ".join(silent)
    )
