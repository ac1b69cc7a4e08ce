"""Rule fixtures and lint: what `logtriage rules test|lint` and the test suite run.

Every ``<id>.match*.log`` must produce its rule (and the captures/patch values the rule's
``fixtures:`` pins); every ``<id>.nomatch*.log`` must not; nothing of severity warning or above
may fire on ``rules/_baseline/``.
"""

from __future__ import annotations

import contextlib
import re as stdlib_re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.engine.models import Analysis, Patch
from app.engine.pipeline.expr import names_in
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import DERIVED_FACTS, Library, LoadedRule, Rule, Severity
from app.engine.pipeline.matcher import PatternSpec, build_matcher, hyperscan_available
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage


@dataclass
class CaseResult:
    rule_id: str
    fixture: str
    ok: bool
    detail: str = ""


def patch_key(p: Patch) -> str:
    return p.path[-1] if p.target in ("cli", "env") else ".".join(p.path)


def _analyse(compiled: CompiledLibrary, path: Path) -> Analysis:
    sources, _ = collect_sources([str(path)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


def _foreign_keys(rule: Rule, library: Library) -> list[LintIssue]:
    """Advice every job gets (the remediation, steps and patches for no framework) that names a
    framework's own keys: shown to a job of another framework it is wrong, so it belongs in a step
    or patch with `frameworks:` (unless the rule is that framework's own). An error: the lint
    refuses it, as issue 22 asks ("a patch for framework X only when X is detected")."""
    text = "\n".join([rule.remediation, *(st.do for st in rule.steps if not st.frameworks)])
    # a patch is rendered with its path, so the path is what a foreign key would be read from
    patch_text = "\n".join(
        p.path[-1] if p.target in ("cli", "env") else ".".join(p.path)
        for p in rule.patches
        if not p.frameworks
    )
    out = []
    for fw in library.frameworks:
        if fw.name in rule.frameworks:
            continue
        for where, body in (("remediation", text), ("a patch", patch_text)):
            hits = sorted({m.group(0) for k in fw.keys for m in stdlib_re.finditer(k, body)})
            if hits:
                out.append(
                    LintIssue(
                        rule.id,
                        "error",
                        f"{where} names {fw.name} keys for every job ({', '.join(hits[:3])}): "
                        f"give it `frameworks: [{fw.name}]`",
                    )
                )
    return out


def run_fixture(compiled: CompiledLibrary, lr: LoadedRule, path: Path) -> CaseResult:
    rule = lr.rule
    a = _analyse(compiled, path)
    hit = next((f for f in a.findings if f.rule_id == rule.id), None)
    name = path.name
    if ".nomatch" in name:
        if hit is not None:
            return CaseResult(rule.id, name, False, f"fired on a near-miss at line {hit.first_line}")
        return CaseResult(rule.id, name, True)
    if hit is None:
        got = ", ".join(f.rule_id for f in a.findings) or "nothing"
        return CaseResult(rule.id, name, False, f"did not fire (got: {got})")
    expect = rule.fixtures.get(name)
    if expect is not None:
        for k, v in expect.captures.items():
            if hit.captures.get(k) != v:
                return CaseResult(rule.id, name, False, f"capture {k}={hit.captures.get(k)!r}, want {v!r}")
        values = {patch_key(p): p.value for p in hit.patches}
        for k, v in expect.patch_values.items():
            if k not in values:
                return CaseResult(rule.id, name, False, f"no patch {k} (have {sorted(values)})")
            if str(values[k]) != str(v):
                return CaseResult(rule.id, name, False, f"patch {k}={values[k]!r}, want {v!r}")
        for k in expect.absent_patches:
            if k in values:
                why = f"patch {k} offered ({values[k]!r}); the log rules it out"
                return CaseResult(rule.id, name, False, why)
        if expect.signature and expect.signature not in hit.signatures:
            return CaseResult(
                rule.id, name, False, f"matched through {hit.signatures}, not signature {expect.signature!r}"
            )
        if expect.framework and (a.framework is None or a.framework.name != expect.framework):
            got_fw = a.framework.name if a.framework else None
            return CaseResult(rule.id, name, False, f"framework {got_fw!r}, want {expect.framework!r}")
    return CaseResult(rule.id, name, True)


def fixture_cases(library: Library) -> Iterator[tuple[LoadedRule, Path]]:
    for lr in library.rules:
        for f in lr.fixtures:
            yield lr, f


def run_all(compiled: CompiledLibrary) -> list[CaseResult]:
    results = [run_fixture(compiled, lr, f) for lr, f in fixture_cases(compiled.library)]
    results.extend(run_baseline(compiled))
    return results


def baseline_files(library: Library) -> list[Path]:
    base = library.root / "_baseline"
    return (
        sorted(p for p in base.glob("*") if p.is_file() and not p.name.startswith("."))
        if base.is_dir()
        else []
    )


def run_baseline(compiled: CompiledLibrary) -> list[CaseResult]:
    out = []
    for path in baseline_files(compiled.library):
        a = _analyse(compiled, path)
        loud = [f for f in a.findings if Severity(f.severity).weight >= Severity.warning.weight]
        detail = ", ".join(f"{f.rule_id}@{f.first_line}" for f in loud)
        out.append(CaseResult("_baseline", path.name, not loud, f"fired: {detail}" if loud else ""))
    return out


# Scan cost (x plain literals) above which lint warns; the whole library's cost is measured by
# bench/scan_bench.py against ripgrep.
MAX_COST = 8.0

# --- lint ---------------------------------------------------------------------------------


@dataclass
class LintIssue:
    rule_id: str
    level: str  # error | warning
    message: str


def lint(library: Library, *, cost_sample: bytes | None = None) -> tuple[list[LintIssue], dict[str, float]]:
    """Static checks plus each rule's scan cost (relative to a plain-literal pattern)."""
    issues: list[LintIssue] = []
    known = {f.name for f in library.facts} | set(DERIVED_FACTS)
    for lr in library.rules:
        rule = lr.rule
        fixtures = [f.name for f in lr.fixtures]
        if rule.trigger is None:
            if not any(".match" in f for f in fixtures):
                issues.append(LintIssue(rule.id, "error", "no match fixture (<id>.match*.log)"))
            if not any(".nomatch" in f for f in fixtures):
                issues.append(LintIssue(rule.id, "error", "no near-miss fixture (<id>.nomatch*.log)"))
        for name in rule.fixtures:
            if name not in fixtures:
                issues.append(LintIssue(rule.id, "error", f"`fixtures:` names {name}, which does not exist"))
        pinned = {e.signature for e in rule.fixtures.values() if e.signature}
        for sig in rule.signatures:
            if sig.name not in pinned:
                issues.append(
                    LintIssue(
                        rule.id,
                        "error",
                        f"signature {sig.name!r} has no fixture: pin one with "
                        f"`fixtures: {{<id>.match-…log: {{signature: {sig.name}}}}}`",
                    )
                )
        for name, e in rule.fixtures.items():
            if e.signature and e.signature not in {s.name for s in rule.signatures} | {"main"}:
                issues.append(
                    LintIssue(rule.id, "error", f"fixture {name} pins unknown signature {e.signature}")
                )
        captures = rule.match.group_names() if rule.match else set()
        for spec in rule.patches:
            # `when` is an expression; a value is literal text outside its {braces}
            names = names_in("{" + spec.when + "}") if spec.when else set()
            if isinstance(spec.value, str):
                names |= names_in(spec.value)
            for n in sorted(names - captures - known):
                issues.append(
                    LintIssue(
                        rule.id,
                        "warning",
                        f"patch {'.'.join(spec.path)} uses `{n}`: not a capture nor a fact; "
                        "it resolves only from --config",
                    )
                )
        issues.extend(_foreign_keys(rule, library))
        if rule.status.value == "deprecated" and not rule.deprecated_by:
            issues.append(LintIssue(rule.id, "warning", "deprecated without `deprecated_by`"))
        if rule.failure_class not in library.classes:
            issues.append(LintIssue(rule.id, "error", f"unknown class {rule.failure_class}"))
    issues.extend(every_line_marks(library))
    costs = scan_costs(library, cost_sample) if cost_sample and hyperscan_available() else {}
    for rid, ratio in costs.items():
        if ratio > MAX_COST:
            issues.append(
                LintIssue(
                    rid,
                    "warning",
                    f"scan cost {ratio:.1f}x a literal pattern: add a rare literal of 4+ bytes",
                )
            )
    return issues, costs


# a streamed fact or detector pattern matching a third of a healthy log's lines (of at least
# EVERY_LINE_MIN_LINES) is a mark on every line: it belongs in the sampled keys
EVERY_LINE_SHARE = 1 / 3
EVERY_LINE_MIN_LINES = 10


def every_line_marks(library: Library) -> list[LintIssue]:
    """Facts' `patterns` and frameworks' `detect` that match a third or more of the lines of a
    baseline log.

    Searched for in every chunk of a file's first and last 32 MiB, a literal on every line costs
    the scan of each of them (Ray's worker prefix alone was a quarter of the facts' scan of a Ray
    log, bench/README.md "Sampled detectors"); one sighting is all a fact or a detector needs, so
    such a mark goes under `patterns_sampled` / `detect_sampled` (a file's first 256 KiB and last
    1 MiB)."""
    import regex

    from app.engine.pipeline.lines import normalise

    logs = []
    for path in baseline_files(library):
        lines = [normalise(raw, max_chars=4096) for raw in path.read_bytes().splitlines() if raw.strip()]
        if len(lines) >= EVERY_LINE_MIN_LINES:
            logs.append((path.name, lines))
    if not logs:
        return []
    issues: list[LintIssue] = []
    owners = [
        *((f"facts.yaml:{f.name}", "patterns_sampled", p) for f in library.facts for p in f.patterns),
        *(
            (f"frameworks.yaml:{fw.name}", "detect_sampled", p)
            for fw in library.frameworks
            for p in fw.detect
        ),
    ]
    for owner, key, pattern in owners:
        rx = regex.compile(pattern)
        for name, lines in logs:
            hits = 0
            for line in lines:
                with contextlib.suppress(TimeoutError):  # the scan's verifier skips such a line too
                    hits += rx.search(line, timeout=0.2) is not None
            if hits >= EVERY_LINE_SHARE * len(lines):
                issues.append(
                    LintIssue(
                        owner,
                        "warning",
                        f"{pattern!r} matches {hits} of the {len(lines)} lines of _baseline/{name}: a mark "
                        f"on every line belongs under `{key}` (searched for in every chunk, it costs the "
                        "whole scan)",
                    )
                )
                break
    return issues


def scan_costs(library: Library, sample: bytes, *, repeats: int = 3) -> dict[str, float]:
    """Seconds to scan `sample` with only this rule's patterns, over the same for literals."""

    def timed(specs: list[PatternSpec]) -> float:
        m = build_matcher(specs, engine="hyperscan")
        view = memoryview(sample)
        best = float("inf")
        for _ in range(repeats):
            out: list[tuple[int, int]] = []
            t = time.perf_counter()
            m.scan(view, out)
            best = min(best, time.perf_counter() - t)
        return best

    # Compare with as many plain literals as the rule has patterns: the cost reported is what the
    # patterns' shape adds, not their number.
    bases: dict[int, float] = {}
    costs: dict[str, float] = {}
    for lr in library.rules:
        if lr.rule.match is None:
            continue
        specs = [
            PatternSpec(p, m.ignore_case)
            for m in [lr.rule.match, *lr.rule.signatures]
            for p in [*m.any, *m.all, *m.not_]
        ]
        n = len(specs)
        if n not in bases:
            bases[n] = timed([PatternSpec(f"zqxj{i}kvwy-no-such-text") for i in range(n)])
        costs[lr.rule.id] = round(timed(specs) / bases[n], 2) if bases[n] > 0 else 0.0
    return costs
