"""Every rule's fixtures, the silent baseline, lint, class and FAQ coverage."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.engine.pipeline.library import Library, LoadedRule, load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.ruledev.ruletest import fixture_cases, lint, run_baseline, run_fixture
from tests.conftest import ROOT, RULES

_LIB = load_library(RULES)
CASES = list(fixture_cases(_LIB))


@pytest.mark.parametrize(("lr", "path"), CASES, ids=[p.name for _, p in CASES])
def test_fixture(compiled: CompiledLibrary, lr: LoadedRule, path) -> None:  # type: ignore[no-untyped-def]
    result = run_fixture(compiled, lr, path)
    assert result.ok, f"{result.rule_id} / {result.fixture}: {result.detail}"


def test_baseline_is_silent(compiled: CompiledLibrary) -> None:
    results = run_baseline(compiled)
    bad = [f"{r.fixture}: {r.detail}" for r in results if not r.ok]
    assert not bad


def test_lint_has_no_errors(library: Library) -> None:
    issues, _ = lint(library)
    errors = [f"{i.rule_id}: {i.message}" for i in issues if i.level == "error"]
    assert not errors


def test_every_failure_class_has_a_rule(library: Library) -> None:
    covered = {lr.rule.failure_class for lr in library.rules if lr.rule.status.value != "deprecated"}
    missing = sorted(set(library.classes) - covered - {"unknown"})
    assert not missing, f"classes without a rule: {missing}"


VENDORED_CLASSES = ROOT / "tests" / "upstream" / "failure-classes.yaml"


@pytest.mark.parametrize(
    "upstream",
    [
        VENDORED_CLASSES,
        # where the shared folder is beside the checkout (not in CI), its current list too: a
        # class added there since the copy was vendored fails here until the copies are refreshed
        *[p for p in [ROOT.parent / "shared" / "failure-classes.yaml"] if p.exists()],
    ],
    ids=lambda p: "vendored" if p == VENDORED_CLASSES else "shared",
)
def test_classes_copy_keeps_every_shared_class(library: Library, upstream: Path) -> None:
    # The project may add classes to its copy but never rename or drop one.
    theirs = yaml.safe_load(upstream.read_text())["classes"]
    assert theirs, upstream
    assert set(theirs) <= set(library.classes)
    for cid, spec in theirs.items():
        assert library.classes[cid].kind == spec["kind"]


def test_faq_entries_map_to_existing_rules(library: Library) -> None:
    data = yaml.safe_load((RULES / "faq-coverage.yaml").read_text())
    ids = {lr.rule.id for lr in library.rules}
    for faq, entries in data["faqs"].items():
        for entry in entries:
            for rid in entry["rules"]:
                assert rid in ids, f"{faq}: {entry['entry']} -> unknown rule {rid}"
            rule = library.get(entry["rules"][0])
            assert rule is not None
            fw = entry.get("framework")
            if fw and entry.get("patch", True):
                dialect = [
                    p for r in entry["rules"] for p in library.get(r).rule.patches if fw in p.frameworks
                ]  # type: ignore[union-attr]
                assert dialect, f"{faq}: {entry['entry']}: no patch in the {fw} dialect"
                general = [p for r in entry["rules"] for p in library.get(r).rule.patches if not p.frameworks]  # type: ignore[union-attr]
                assert general or entry.get("general") == "text", (
                    f"{faq}: {entry['entry']}: no general remedy"
                )
