"""Docs that cannot drift: generated references must equal what the code generates now."""

from __future__ import annotations

from app.engine.catalog import render_catalog
from app.engine.library import Library
from tests.conftest import ROOT


def test_rule_catalog_is_current(library: Library) -> None:
    committed = (ROOT / "docs" / "rule-catalog.md").read_text()
    assert committed == render_catalog(library), "run: logtriage rules catalog > docs/rule-catalog.md"


def test_readme_opens_with_the_two_setup_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    fence = lines.index("```bash")
    assert lines[fence + 1].startswith("bash scripts/run.sh")
    assert lines[fence + 2].startswith("bash scripts/test.sh")
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
