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
