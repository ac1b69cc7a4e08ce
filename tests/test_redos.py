"""Rules that cannot hurt: the lint rejects shapes that backtrack without end, and a pattern
that gets through anyway costs one line and a warning, not the scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline import redos
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
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


@pytest.mark.slow  # a timing budget over every pattern
def test_every_pattern_holds_its_time_budget_on_adversarial_lines(compiled: CompiledLibrary) -> None:
    """Each pattern the scan verifies (rules, signatures, facts, framework detection, timeline
    probes), fed lines built to make a backtracking engine work hardest on it (for every
    unbounded repeat: a long run of what it loops on, cut short, with and without a whole
    match after it), at the longest line the verifier reads. None may reach the budget: a
    pattern that did would cost 0.2 s per such line (a DoS by log content) and skip the line.
    Quadratic shapes found this way (a match that can start anywhere inside a long run) are
    anchored with a lookbehind in the rules."""
    from app.engine.pipeline.scan import MAX_VERIFY_CHARS, VERIFY_TIMEOUT

    lines = 0
    over: list[str] = []
    for entry in compiled.entries:
        for line in redos.adversarial_lines(entry.text, MAX_VERIFY_CHARS):
            lines += 1
            try:
                entry.rx.search(line, None, None, None, False, VERIFY_TIMEOUT)
            except TimeoutError:
                over.append(f"{entry.owner}: {entry.text[:100]}")
    assert lines > 1000  # every pattern with a repeat got its lines
    assert not sorted(set(over)), "patterns over the verify budget:\n" + "\n".join(sorted(set(over)))


def test_adversarial_lines_reach_the_backtracking() -> None:
    """The generator finds the slow case of a known quadratic shape (else the test above would
    pass by not trying): `\\d+ Workers` on a long run of digits."""
    import regex

    from app.engine.pipeline.scan import MAX_VERIFY_CHARS

    lines = redos.adversarial_lines(r"\d+ Workers killed", MAX_VERIFY_CHARS)
    assert any(len(line) >= MAX_VERIFY_CHARS and set(line[:1000]) <= set("0123456789") for line in lines)
    rx = regex.compile(r"\d+ Workers killed")
    with pytest.raises(TimeoutError):
        for line in lines:
            rx.search(line, timeout=0.05)  # quadratic: ~10^8 steps, far past 50 ms


def test_redaction_rules_pass_the_redos_check_and_hold_their_budget() -> None:
    """The secret rules run on every candidate line the service stores (`redact_stream`), with
    the same kind of budget: none may have a backtracking shape, and none may reach its timeout
    on the lines built to make it work hardest (a line that did would be withheld whole)."""
    import regex

    from app.engine.pipeline.redact import RULES
    from app.engine.pipeline.scan import MAX_VERIFY_CHARS

    assert {kind: redos.backtracking_risk(p) for kind, p in RULES if redos.backtracking_risk(p)} == {}
    over = []
    lines = 0
    for kind, pattern in RULES:
        rx = regex.compile(pattern)
        for line in redos.adversarial_lines(pattern, MAX_VERIFY_CHARS):
            lines += 1
            try:
                rx.search(line, timeout=0.5)
            except TimeoutError:
                over.append(kind)
    assert lines > 100  # every rule with an unbounded repeat got its lines
    assert over == []
