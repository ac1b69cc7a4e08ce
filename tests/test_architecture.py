"""Invariants of the layout (see ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

FORBIDDEN_IN_ENGINE = {
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "slack_bolt",
    "slack_sdk",
    "jinja2",
    "uvicorn",
    "app.db",
    "app.api",
    "app.web",
    "app.slack",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_engine_is_pure() -> None:
    for path in sorted((ROOT / "app" / "engine").rglob("*.py")):
        bad = {n for n in _imports(path) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN_IN_ENGINE)}
        assert not bad, f"{path.name} imports {bad}"


def test_nothing_heavy_at_import_time() -> None:
    code = (
        "import sys, app.cli, app.engine.pipeline.triage, app.settings;"
        "heavy = {'hyperscan', 'fastapi', 'sqlalchemy', 'ruamel.yaml', 'zstandard', 'isal'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


# --- layers: every import in app/, top level, lazy and TYPE_CHECKING alike ----------------------

APP = ROOT / "app"
EDGES = ("app.api", "app.web", "app.slack")
# lowest first; a module may import its own layer and those below, never one above
LAYERS: tuple[tuple[str, ...], ...] = (
    ("app.errors", "app.settings", "app.scan_settings", "app.__init__", "app"),
    ("app.engine",),
    ("app.render",),
    ("app.db", "app.blobstore"),
    ("app.service",),
    ("app.http",),
    EDGES,
    ("app.cli", "app.service_cli", "app.client"),
    ("app.asgi",),
)


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_of(p): p for p in sorted(APP.rglob("*.py"))}


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (they never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _app_imports(path: Path, module: str, known: dict[str, Path], *, runtime_only: bool = False) -> set[str]:
    """The app modules `path` imports; `from pkg import name` counts `pkg.name` when it is a module.
    `runtime_only`: leave out the imports under `if TYPE_CHECKING:`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    skip = _type_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "app")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "app":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    out.discard(module)
    return out


def _graph(*, runtime_only: bool = False) -> dict[str, set[str]]:
    known = _modules()
    return {m: _app_imports(p, m, known, runtime_only=runtime_only) for m, p in known.items()}


def _layer(module: str) -> int:
    best, rank = -1, -1
    for i, names in enumerate(LAYERS):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > best:
                best, rank = len(n), i
    assert rank >= 0, f"{module} is in no layer of tests/test_architecture.py's LAYERS"
    return rank


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_edges_import_neither_each_other_nor_the_database() -> None:
    bad = []
    for mod, deps in _graph().items():
        edge = next((e for e in EDGES if _in(mod, e)), None)
        if edge is None:
            continue
        for d in deps:
            if _in(d, "app.db") or any(_in(d, other) for other in EDGES if other != edge):
                bad.append(f"{mod} -> {d}")
    assert not bad, "edges call the service layer only (ARCHITECTURE.md):\n" + "\n".join(sorted(bad))


def test_no_import_runs_up_a_layer() -> None:
    bad = []
    crossings = []
    for mod, deps in _graph().items():
        for d in deps:
            if _layer(d) > _layer(mod):
                bad.append(f"{mod} -> {d}")
            if _layer(mod) >= _layer("app.http") and _in(d, "app.db"):
                crossings.append(f"{mod} -> {d}")
    assert not bad, "imports that run back up a layer:\n" + "\n".join(sorted(bad))
    # the CLI's service commands included: they go through app.service.admin
    assert not crossings, "above the service layer, only the service opens the database:\n" + "\n".join(
        sorted(crossings)
    )


def test_the_import_graph_has_no_circle() -> None:
    # the imports that run: a type named under TYPE_CHECKING may point back (library's Rule in
    # the findings it builds) without a module needing another half-initialised
    graph = _graph(runtime_only=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_graph_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The checks above would pass vacuously if the walk missed imports inside functions."""
    known = {"app.web.routes.report": Path(), "app.db.repo": Path(), "app.api.edge": Path()}
    src = tmp_path / "mod.py"
    src.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.web.routes import report\n"
        "def f():\n    from app.db import repo\n    from ...api import edge\n"
    )
    assert _app_imports(src, "app.web.routes.mod", known) == {
        "app.db.repo",
        "app.api.edge",
        "app.web.routes.report",
    }
    assert _app_imports(src, "app.web.routes.mod", known, runtime_only=True) == {
        "app.db.repo",
        "app.api.edge",
    }


def test_architecture_md_names_every_package() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    packages = sorted(_module_of(p.parent) for p in APP.rglob("__init__.py"))
    top_modules = sorted(_module_of(p) for p in APP.glob("*.py") if p.name != "__init__.py")
    missing = [p for p in [*packages, *top_modules] if f"`{p.replace('.', '/')}" not in text]
    assert not missing, f"ARCHITECTURE.md does not name: {missing}"
