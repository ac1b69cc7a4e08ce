"""What the blind advice sets' tests share (tests/test_advice*_*.py): a set's log or a rule
fixture analysed under its own name, the root finding of a rule, facts and patches by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.engine.models import Analysis, Finding
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
CORPUS = ROOT / "tests" / "corpus"


def analysed(analyze: Analyze, path: Path) -> Analysis:
    """The file analysed under its own name (a rank or host in the name counts)."""
    return analyze(path.read_bytes(), name=path.name)


def set_reader(name: str) -> Callable[[Analyze, str], Analysis]:
    """`read(analyze, file)`: a log of the blind set `tests/corpus/<name>/`."""

    def read(analyze: Analyze, file: str) -> Analysis:
        return analysed(analyze, CORPUS / name / file)

    return read


def rule_fixture(analyze: Analyze, area: str, name: str) -> Analysis:
    return analysed(analyze, RULES / area / name)


def root(a: Analysis, rule_id: str) -> Finding:
    assert a.root_cause is not None and a.root_cause.rule_id == rule_id
    return a.root_cause


def facts(a: Analysis) -> dict[str, object]:
    return {f.name: f.value for f in a.facts}


def patched(f: Finding, key: str) -> bool:
    return any(p.path and p.path[-1] == key for p in f.patches)


def flat(f: Finding) -> str:
    """A finding's remediation on one line (steps wrap at any width)."""
    return " ".join(f.remediation.split())


def decision(a: Analysis) -> str:
    assert a.action is not None
    return a.action.decision
