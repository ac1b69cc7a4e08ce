"""Corpus evaluation: top-1 accuracy and per-class precision/recall of the root cause.

`tests/corpus/manifest.yaml` lists each log with its expected class (`unknown` for negatives:
healthy runs, ordinary user bugs, near-misses). The prediction is the root cause's class, or
`unknown` when there is none.

Device corpora (`tests/corpus/<name>/cases.yaml`: real multi-rank runs with the script that made
them) also state, for hangs, desyncs and stragglers, the rank(s) a correct report names and the
phase it stopped in. Each case is scored three ways: torchrun's combined console log, the per-rank
files alone, and the console with the run's artifacts (py-spy dumps, flight-recorder dumps). The
named ranks are the timeline's lead verdict's (else the root cause's) and must equal the expected
ones: naming every rank does not count.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from app.engine.pipeline.verdict import real_host
from app.errors import InputError


@dataclass
class Case:
    file: str
    expected: str
    predicted: str
    source: str = ""
    split: str = "real"
    confidence: float | None = None  # of the root cause, when one was named
    decision: str | None = None  # the action's decision (rules/verdicts.yaml)
    exclude_hosts: list[str] = field(default_factory=list)
    root_hosts: list[str] = field(default_factory=list)  # the hosts the root cause names
    expected_decision: str | None = None  # the verdict of the expected class


@dataclass
class TimelineCase:
    corpus: str
    case: str
    variant: str  # console | ranks | artifacts
    expected: str
    predicted: str
    lagging: list[int]
    named: list[int]
    phase: str | None
    expected_phase: str | None
    verdict: str = ""

    @property
    def scored(self) -> bool:
        return bool(self.lagging)

    @property
    def rank_ok(self) -> bool:
        return set(self.named) == set(self.lagging)

    @property
    def phase_ok(self) -> bool:
        return self.phase == self.expected_phase


@dataclass
class Report:
    cases: list[Case] = field(default_factory=list)
    timeline: list[TimelineCase] = field(default_factory=list)

    def timeline_scores(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for corpus in sorted({c.corpus for c in self.timeline}):
            rows = [c for c in self.timeline if c.corpus == corpus]
            scored = [c for c in rows if c.scored]
            out[corpus] = {
                "runs": len(rows),
                "class_ok": sum(c.expected == c.predicted for c in rows),
                "scored": len(scored),
                "rank_ok": sum(c.rank_ok for c in scored),
                "phase_ok": sum(c.phase_ok for c in scored),
            }
        return out

    @property
    def accuracy(self) -> float:
        return sum(c.expected == c.predicted for c in self.cases) / len(self.cases) if self.cases else 0.0

    def per_class(self) -> dict[str, dict[str, float]]:
        tp: Counter[str] = Counter()
        fp: Counter[str] = Counter()
        fn: Counter[str] = Counter()
        for c in self.cases:
            if c.expected == c.predicted:
                tp[c.expected] += 1
            else:
                fp[c.predicted] += 1
                fn[c.expected] += 1
        out = {}
        for cls in sorted(set(tp) | set(fp) | set(fn)):
            p = tp[cls] / (tp[cls] + fp[cls]) if tp[cls] + fp[cls] else 0.0
            r = tp[cls] / (tp[cls] + fn[cls]) if tp[cls] + fn[cls] else 0.0
            out[cls] = {"precision": round(p, 3), "recall": round(r, 3), "support": tp[cls] + fn[cls]}
        return out

    def by_split(self) -> dict[str, float]:
        out = {}
        for name in sorted({c.split for c in self.cases}):
            cases = [c for c in self.cases if c.split == name]
            out[name] = round(sum(c.expected == c.predicted for c in cases) / len(cases), 4)
        return out

    def split_detail(self) -> dict[str, dict[str, Any]]:
        """Per split: top-1, how often a named cause is right (precision), how many failures got a
        cause at all (coverage), and false alarms (a cause named for a negative)."""
        out: dict[str, dict[str, Any]] = {}
        for name in sorted({c.split for c in self.cases}):
            cases = [c for c in self.cases if c.split == name]
            named = [c for c in cases if c.predicted != "unknown"]
            failures = [c for c in cases if c.expected != "unknown"]
            negatives = [c for c in cases if c.expected == "unknown"]
            out[name] = {
                "logs": len(cases),
                "top1": round(sum(c.expected == c.predicted for c in cases) / len(cases), 4),
                "named": len(named),
                "precision": round(sum(c.expected == c.predicted for c in named) / len(named), 4)
                if named
                else None,
                "coverage": round(sum(c.predicted != "unknown" for c in failures) / len(failures), 4)
                if failures
                else None,
                "negatives": len(negatives),
                "false_alarms": sum(c.predicted != "unknown" for c in negatives),
            }
        return out

    def calibration(self, bands: tuple[float, ...] = (0.35, 0.5, 0.7, 0.85, 1.0)) -> list[dict[str, Any]]:
        """Reliability: for root causes named with confidence in each band, how often they were
        right. A calibrated library is right about as often as it says."""
        out = []
        named = [(c, c.confidence) for c in self.cases if c.confidence is not None]
        for lo, hi in itertools.pairwise(bands):
            inside = [(c, x) for c, x in named if lo <= x < hi or (hi == bands[-1] and x == hi)]
            right = sum(c.expected == c.predicted for c, _ in inside)
            out.append(
                {
                    "band": f"{lo:.2f}-{hi:.2f}",
                    "cases": len(inside),
                    "stated": round(sum(x for _, x in inside) / len(inside), 3) if inside else None,
                    "observed": round(right / len(inside), 3) if inside else None,
                }
            )
        return out

    def verdicts(self) -> dict[str, Any]:
        """Issue 24's targets on the corpus: a retry advised where the true class's verdict says the
        failure repeats (fix_and_rerun or stop) is the costly error; a hardware fault should be
        retried without the hosts the report names."""
        repeating = [c for c in self.cases if c.expected_decision in ("fix_and_rerun", "stop")]
        retried = [c for c in repeating if c.decision in ("retry", "retry_excluding")]
        hardware = [c for c in self.cases if c.expected_decision == "retry_excluding"]
        excluded = [
            c for c in hardware if c.decision == "retry_excluding" and c.exclude_hosts == c.root_hosts
        ]
        decisions = Counter(c.decision or "none" for c in self.cases)
        return {
            "decisions": dict(sorted(decisions.items())),
            "repeating": len(repeating),
            "retry_advised_on_repeating": len(retried),
            "retry_advised_on_repeating_cases": [c.file for c in retried],
            "hardware": len(hardware),
            "hardware_retry_excluding_named_hosts": len(excluded),
            "hardware_with_hosts": sum(bool(c.exclude_hosts) for c in excluded),
            "hardware_misses": [c.file for c in hardware if c not in excluded],
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": len(self.cases),
            "verdicts": self.verdicts(),
            "accuracy": round(self.accuracy, 4),
            "accuracy_by_split": self.by_split(),
            "splits": self.split_detail(),
            "per_class": self.per_class(),
            "calibration": self.calibration(),
            "errors": [c.__dict__ for c in self.cases if c.expected != c.predicted],
            "timeline": self.timeline_scores(),
            "timeline_errors": [
                c.__dict__
                for c in self.timeline
                if c.expected != c.predicted or (c.scored and not (c.rank_ok and c.phase_ok))
            ],
        }


def _read_manifest(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = data.get("entries") or []
    for e in entries:
        if "file" not in e or "expected_class" not in e:
            raise InputError(f"{path}: every entry needs `file` and `expected_class` ({e})")
        e["_base"] = path.parent
    return list(entries)


def load_manifest(corpus: Path) -> list[dict[str, Any]]:
    """`manifest.yaml` at the top plus one per subdirectory (e.g. a held-out `public/` set)."""
    paths = [corpus / "manifest.yaml", *sorted(corpus.glob("*/manifest.yaml"))]
    paths = [p for p in paths if p.is_file()]
    if not paths:
        raise InputError(f"{corpus}: no corpus manifest")
    return [e for p in paths for e in _read_manifest(p)]


def evaluate_corpus(compiled: CompiledLibrary, corpus: Path, *, split: str | None = None) -> Report:
    report = Report()
    for e in load_manifest(corpus):
        base: Path = e["_base"]
        name = "real" if base == corpus else base.name
        if split and name != split:
            continue
        files = e["file"] if isinstance(e["file"], list) else [e["file"]]
        sources, _ = collect_sources([str(base / f) for f in files])
        opts = TriageOptions(jobs=1, exit_code=e.get("exit_code"))
        a = triage(sources=sources, compiled=compiled, options=opts)
        predicted = a.root_cause.failure_class if a.root_cause else "unknown"
        label = ", ".join(str((base / f).relative_to(corpus)) for f in files)
        conf = a.root_cause.confidence if a.root_cause else None
        lib = compiled.library
        expected = lib.verdicts.get(e["expected_class"])
        if a.root_cause is not None and predicted == e["expected_class"]:
            # a rule that knows its failure differs from its class's usual one decides (Xid 13/31/43
            # are the application's faults though their class is a GPU's)
            expected = lib.rule_verdicts.get(a.root_cause.rule_id) or expected
        report.cases.append(
            Case(
                label,
                e["expected_class"],
                predicted,
                e.get("source", ""),
                name,
                conf,
                decision=a.action.decision if a.action else None,
                exclude_hosts=list(a.action.exclude_hosts) if a.action else [],
                root_hosts=_named_hosts(a, lib),
                expected_decision=expected.decision if expected else None,
            )
        )
    for cases_file in sorted(corpus.glob("*/cases.yaml")):
        if split and cases_file.parent.name != split:
            continue
        report.timeline += evaluate_cases(compiled, cases_file)
    return report


def _named_hosts(a: Any, lib: Any) -> list[str]:
    """The hosts the report names for the root cause: its lines' own (a launcher prefix), else
    those of the facts its verdict takes the host from (`hosts:` in verdicts.yaml)."""
    if a.root_cause is None:
        return []
    named = sorted({h for h in a.root_cause.hosts if real_host(h)})
    if named:
        return named
    verdict = lib.rule_verdicts.get(a.root_cause.rule_id) or lib.verdicts.get(a.root_cause.failure_class)
    facts = {f.name: f.value for f in a.facts}
    return sorted(
        {v for n in (verdict.hosts if verdict else ()) if isinstance(v := facts.get(n), str) and real_host(v)}
    )


def _named(a: Any) -> tuple[list[int], str | None, str]:
    """The ranks and phase the report names: its lead timeline verdict's, else the root cause's
    ranks and the phase of the first of them."""
    tl = a.timeline or {}
    v = tl.get("verdict") or {}
    ranks = list(v.get("ranks") or [])
    if not ranks and a.root_cause is not None:
        ranks = list(a.root_cause.ranks)
    phase = v.get("phase") if v.get("ranks") else None
    if phase is None:
        by_rank = {r["rank"]: r for r in tl.get("ranks") or []}
        phase = next((by_rank[r]["phase"] for r in ranks if r in by_rank and by_rank[r]["phase"]), None)
    return ranks, phase, v.get("summary", "")


def evaluate_cases(compiled: CompiledLibrary, cases_file: Path) -> list[TimelineCase]:
    base = cases_file.parent
    data = yaml.safe_load(cases_file.read_text(encoding="utf-8")) or {}
    out: list[TimelineCase] = []
    for c in data.get("cases") or []:
        d = base / c["dir"]
        logs = [f for f in c.get("files", []) if f != "console.log"]
        extra = [f for f in c.get("artifacts") or [] if f != "run.txt"]
        variants = {"console": ["console.log"], "ranks": logs}
        if extra:
            variants["artifacts"] = ["console.log", *extra]
        for vname, names in variants.items():
            files = [d / f for f in names if (d / f).is_file()]
            if not files:
                continue
            sources, _ = collect_sources([str(f) for f in files])
            a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
            ranks, phase, summary = _named(a)
            out.append(
                TimelineCase(
                    corpus=base.name,
                    case=c["dir"],
                    variant=vname,
                    expected=c["expected_class"],
                    predicted=a.root_cause.failure_class if a.root_cause else "unknown",
                    lagging=list(c.get("lagging_ranks") or []),
                    named=ranks,
                    phase=phase,
                    expected_phase=c.get("phase"),
                    verdict=summary,
                )
            )
    return out


def format_report(r: Report) -> str:
    splits = ", ".join(f"{k} {v:.1%}" for k, v in r.by_split().items())
    lines = [f"corpus: {len(r.cases)} logs, top-1 accuracy {r.accuracy:.1%} ({splits})"]
    for name, d in r.split_detail().items():
        prec = f"{d['precision']:.1%}" if d["precision"] is not None else "-"
        cov = f"{d['coverage']:.1%}" if d["coverage"] is not None else "-"
        lines.append(
            f"  {name}: {d['logs']} logs, top-1 {d['top1']:.1%}; a cause named for {d['named']} "
            f"(precision {prec}, failures covered {cov}); {d['negatives']} negatives, "
            f"{d['false_alarms']} false alarm(s)"
        )
    lines.append("")
    lines.append(f"{'class':36} {'precision':>9} {'recall':>7} {'n':>4}")
    for cls, m in r.per_class().items():
        lines.append(f"{cls:36} {m['precision']:9.2f} {m['recall']:7.2f} {int(m['support']):4d}")
    lines += [
        "",
        "calibration (root causes named, by stated confidence):",
        f"{'band':12} {'cases':>5} {'stated':>7} {'observed':>8}",
    ]
    for b in r.calibration():
        stated = f"{b['stated']:.2f}" if b["stated"] is not None else "-"
        observed = f"{b['observed']:.2f}" if b["observed"] is not None else "-"
        lines.append(f"{b['band']:12} {b['cases']:5d} {stated:>7} {observed:>8}")
    v = r.verdicts()
    lines += [
        "",
        "actions (rules/verdicts.yaml): " + ", ".join(f"{k} {n}" for k, n in v["decisions"].items()),
        f"  a retry advised on a failure that repeats (true class: fix_and_rerun or stop): "
        f"{v['retry_advised_on_repeating']} of {v['repeating']}",
        f"  hardware faults retried without the hosts the report names: "
        f"{v['hardware_retry_excluding_named_hosts']} of {v['hardware']} "
        f"({v['hardware_with_hosts']} name a host)",
    ]
    lines += [f"    retry advised, repeats: {f}" for f in v["retry_advised_on_repeating_cases"]]
    lines += [f"    hardware, not retry_excluding: {f}" for f in v["hardware_misses"]]
    wrong = [c for c in r.cases if c.expected != c.predicted]
    if wrong:
        lines += ["", "misclassified:"]
        lines += [f"  {c.file}: expected {c.expected}, got {c.predicted}" for c in wrong]
    if r.timeline:
        lines += ["", "device corpora (each case as console log, per-rank files, console + artifacts):"]
        for corpus, sc in r.timeline_scores().items():
            lines.append(
                f"  {corpus}: class {sc['class_ok']}/{sc['runs']}; on the {sc['scored']} hang/desync/"
                f"straggler runs the right rank(s) named {sc['rank_ok']}/{sc['scored']}, "
                f"the phase {sc['phase_ok']}/{sc['scored']}"
            )
        for c in r.timeline:
            bad = []
            if c.expected != c.predicted:
                bad.append(f"class {c.predicted} (expected {c.expected})")
            if c.scored and not c.rank_ok:
                bad.append(f"named rank(s) {c.named or 'none'} (expected {c.lagging})")
            if c.scored and not c.phase_ok:
                bad.append(f"phase {c.phase} (expected {c.expected_phase})")
            if bad:
                lines.append(f"    {c.corpus}/{c.case} [{c.variant}]: " + "; ".join(bad))
    return "\n".join(lines)
