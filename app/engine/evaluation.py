"""Corpus evaluation: top-1 accuracy and per-class precision/recall of the root cause.

`tests/corpus/manifest.yaml` lists each log with its expected class (`unknown` for negatives:
healthy runs, ordinary user bugs, near-misses). The prediction is the root cause's class, or
`unknown` when there is none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.engine.ingest import collect_sources
from app.engine.scan import CompiledLibrary
from app.engine.triage import TriageOptions, triage
from app.errors import InputError


@dataclass
class Case:
    file: str
    expected: str
    predicted: str
    source: str = ""
    split: str = "real"


@dataclass
class Report:
    cases: list[Case] = field(default_factory=list)

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

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": len(self.cases),
            "accuracy": round(self.accuracy, 4),
            "accuracy_by_split": self.by_split(),
            "per_class": self.per_class(),
            "errors": [c.__dict__ for c in self.cases if c.expected != c.predicted],
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
        report.cases.append(Case(label, e["expected_class"], predicted, e.get("source", ""), name))
    return report


def format_report(r: Report) -> str:
    splits = ", ".join(f"{k} {v:.1%}" for k, v in r.by_split().items())
    lines = [f"corpus: {len(r.cases)} logs, top-1 accuracy {r.accuracy:.1%} ({splits})", ""]
    lines.append(f"{'class':36} {'precision':>9} {'recall':>7} {'n':>4}")
    for cls, m in r.per_class().items():
        lines.append(f"{cls:36} {m['precision']:9.2f} {m['recall']:7.2f} {int(m['support']):4d}")
    wrong = [c for c in r.cases if c.expected != c.predicted]
    if wrong:
        lines += ["", "misclassified:"]
        lines += [f"  {c.file}: expected {c.expected}, got {c.predicted}" for c in wrong]
    return "\n".join(lines)
