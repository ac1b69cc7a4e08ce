"""Rules that cannot hurt: the lint rejects shapes that backtrack without end, and a pattern
that gets through anyway costs one line and a warning, not the scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import redos
from app.engine.ingest import collect_sources
from app.engine.library import load_library
from app.engine.scan import CompiledLibrary
from app.engine.triage import TriageOptions, triage
from app.errors import LogtriageError
from tests.conftest import make_rules_dir

BAD = [r"(a+)+b", r"(.*)*x", r"(\w+\s?)*!", r"(?:x+y?)+z", r"((ab)*)*c", r"\w*\w*x", r".*.*=", r"\s*\s+end"]
GOOD = [
    r"(?:\d+\.)+x",
    r"(?:[\w.-]+/)*file",
    r"(?:\w+,\s*)*end",
    r"foo.*?bar",
    r"\d+(?:, \d+)*",
    r"[\w./+-]+\.so(?:\.\d+)*",
    r"v\d+\.\d+\w*",  # a pair that ends the pattern never gives characters back
    r"(a+)b",
]


@pytest.mark.parametrize("pattern", BAD)
def test_backtracking_shapes_are_named(pattern: str) -> None:
    assert redos.backtracking_risk(pattern)


@pytest.mark.parametrize("pattern", GOOD)
def test_ordinary_shapes_pass(pattern: str) -> None:
    assert redos.backtracking_risk(pattern) is None


def _rule(pattern: str) -> str:
    return (
        "id: slow\nversion: 1\nstatus: stable\nfailure_class: nccl.error\nseverity: error\n"
        "title: A slow rule\nconfidence: 0.8\nexplains: []\n"
        f"match:\n  any: ['{pattern}']\nexplanation: A rule that scans slowly on purpose.\nremediation: Remove the rule.\n"
    )


def test_the_library_refuses_a_rule_with_such_a_pattern(tmp_path: Path) -> None:
    with pytest.raises((LogtriageError, ValueError), match="backtrack"):
        load_library(make_rules_dir(tmp_path, {"nccl/slow.yaml": _rule(r"GPU \w*\w*x")}))


def test_a_pattern_that_gets_through_costs_a_warning_not_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redos, "backtracking_risk", lambda p: None)  # as if the lint had missed it
    lib = CompiledLibrary(load_library(make_rules_dir(tmp_path, {"nccl/slow.yaml": _rule(r"GPU \w*\w*x")})))
    log = tmp_path / "j.log"
    # the line matches at its end, so the fast matcher reports it; the verifier's search first
    # tries the near-miss at its start, O(n^2) over 15,000 characters, far past the budget
    log.write_text("step 1\nGPU " + "a" * 15_000 + "! then GPU x\nGPU fix\n")
    sources, _ = collect_sources([str(log)])
    a = triage(sources=sources, compiled=lib, options=TriageOptions(jobs=1))
    assert any("timed out; line skipped" in w for w in a.warnings)
    assert a.root_cause is not None and a.root_cause.evidence[0].line == 3  # the next line still counted
