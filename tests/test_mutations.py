"""Every rule still fires on its must-match fixtures as other launchers, terminals and copies
print them (app/engine/ruledev/mutate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import Rule
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from app.engine.ruledev.mutate import MUTATIONS
from app.engine.ruledev.ruletest import fixture_cases

# slow: every rule's fixtures under every mutation
pytestmark = pytest.mark.slow


# (fixture, mutation or cut): why that fixture cannot survive it, so the test skips it
EXEMPT = {
    # the check reads Megatron's iteration lines by their `|` layout, which a 64-column wrap breaks
    ("fp16-steps-skipped.match-megatron.log", "wrapped"): "layout",
    # three iteration lines in a row decide it; the finding's evidence is the third
    ("fp16-steps-skipped.match-megatron.log", "start"): "needs the lines before its evidence",
    # a timeline verdict: the launcher's table (its "Root Cause" header above the evidence row) and
    # another rank's watchdog timeout (below it) decide it, and the timeline reads the timeout's
    # collective from the watchdog's own line, which a 64-column wrap splits
    ("torchrun-rank-failed-first.match.log", "start"): "needs the table's header above its evidence",
    ("torchrun-rank-failed-first.match.log", "end"): "needs the other ranks' timeouts below its evidence",
    ("torchrun-rank-failed-first.match.log", "wrapped"): "the timeline reads a collective from one line",
    # the tensor-parallel size the signature compares with is a fact from vLLM's custom all-reduce
    # warning, which this paste puts after the assertion
    ("megatron-heads-not-divisible-by-tp.match-vllm-tp-warning.log", "end"): "needs the TP warning below",
    # the budget the second engine overran is the first engine's `gpu_memory_utilization` line, which
    # the reporter printed only among model1's lines, above the second engine's evidence (vllm#4242)
    ("vllm-kv-cache-insufficient.match-second-engine.log", "start"): "needs model1's utilization line above",
}


def _fires(compiled: CompiledLibrary, rule_id: str, path: Path) -> bool:
    sources, _ = collect_sources([str(path)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    return any(f.rule_id == rule_id for f in a.findings)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_rules_survive_the_mutation(compiled: CompiledLibrary, tmp_path: Path, mutation: str) -> None:
    mutate = MUTATIONS[mutation]
    failed = []
    n = 0
    for lr, fixture in fixture_cases(compiled.library):
        if ".match" not in fixture.name or (fixture.name, mutation) in EXEMPT:
            continue
        variant = tmp_path / fixture.name
        variant.write_text(mutate(fixture.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")
        n += 1
        if not _fires(compiled, lr.rule.id, variant):
            failed.append(f"{lr.rule.id}: {fixture.name}")
    assert n >= 100
    assert not failed, f"{len(failed)} of {n} fixtures stop matching under {mutation}:\n" + "\n".join(failed)


@pytest.mark.parametrize("fn", ["ansi", "crlf", "glog"])
def test_mutations_change_the_text(fn: str) -> None:
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered\nstep 3\n"
    out = MUTATIONS[fn](text)
    assert out != text and "uncorrectable ECC error encountered" in out


def _context(lr_rule: Rule) -> int:
    # lines around the anchor a rule may need: its `all`/`not` window (the widest of its signatures)
    matches = [m for m in [lr_rule.match, *lr_rule.signatures] if m is not None]
    return max((m.window for m in matches if m.all or m.not_), default=0)


@pytest.mark.parametrize("cut", ["start", "end"])
def test_rules_match_an_excerpt_cut_to_their_own_lines(
    compiled: CompiledLibrary, tmp_path: Path, cut: str
) -> None:
    """Whoever copies a log keeps a few lines around the error: a fixture cut just before (or
    just after) the rule's evidence, keeping only the window the rule declares, still matches."""
    failed = []
    n = 0
    for lr, fixture in fixture_cases(compiled.library):
        if ".match" not in fixture.name or (fixture.name, cut) in EXEMPT:
            continue
        sources, _ = collect_sources([str(fixture)])
        a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
        found = [f for f in a.findings if f.rule_id == lr.rule.id]
        assert found, f"{lr.rule.id}: {fixture.name} does not match uncut"
        lines = fixture.read_text(encoding="utf-8", errors="replace").splitlines()
        ev = [e.line for e in found[0].evidence] or [found[0].first_line]
        w = _context(lr.rule)
        kept = lines[max(0, min(ev) - 1 - w) :] if cut == "start" else lines[: max(ev) + w]
        if len(kept) == len(lines):
            continue  # nothing to cut: the evidence is at the edge already
        n += 1
        variant = tmp_path / fixture.name
        variant.write_text("\n".join(kept) + "\n", encoding="utf-8")
        if not _fires(compiled, lr.rule.id, variant):
            failed.append(f"{lr.rule.id}: {fixture.name} (evidence lines {ev}, window {w})")
    assert n >= 50
    assert not failed, f"{len(failed)} of {n} fixtures stop matching cut at the {cut}:\n" + "\n".join(failed)
