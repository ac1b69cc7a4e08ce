"""What the report page shows, computed from a stored analysis: highlighted evidence with links
into the log viewer, patches grouped by dialect, who has to act. Pure functions over the
analysis resource and the rule library (no request, no database)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import markupsafe
import regex

from app.engine.models import Analysis as AnalysisModel
from app.engine.models import Patch
from app.engine.pipeline.library import Library
from app.engine.pipeline.patches import ray_env_block
from app.render.markdown import render_markdown
from app.service.present import service_markdown

DIALECTS = {
    "yaml": "YAML",
    "hydra": "Hydra overrides",
    "cli": "CLI flags",
    "env": "Environment",
}
HIGHLIGHT_TIMEOUT = 0.05  # seconds per line: a report never waits on a pathological pattern


@lru_cache(maxsize=2048)
def _compiled(pattern: str, ignore_case: bool) -> regex.Pattern[str] | None:
    try:
        return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except regex.error:
        return None


def highlight(text: str, patterns: tuple[str, ...], ignore_case: bool = False) -> markupsafe.Markup:
    """The line, escaped, with the part the rule matched in <mark>; plain when none matches."""
    for p in patterns:
        rx = _compiled(p, ignore_case)
        if rx is None:
            continue
        try:
            m = rx.search(text, timeout=HIGHLIGHT_TIMEOUT)
        except TimeoutError:
            m = None
        if m is not None and m.end() > m.start():
            a, b = m.span()
            return markupsafe.Markup("{}<mark>{}</mark>{}").format(text[:a], text[a:b], text[b:])
    return markupsafe.Markup("{}").format(text)


@dataclass
class EvidenceLine:
    file: str
    line: int
    html: markupsafe.Markup
    href: str | None  # the line in the log viewer


@dataclass
class PatchTab:
    key: str
    label: str
    snippets: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FindingView:
    finding: dict[str, Any]
    evidence: list[EvidenceLine]
    explanation: str | None
    tabs: list[PatchTab]


def file_index(resource: dict[str, Any]) -> dict[str, int]:
    return {f["name"]: i for i, f in enumerate(resource.get("files") or [])}


def viewer_href(analysis_id: str, position: int, line: int) -> str:
    return f"/analyses/{analysis_id}/files/{position}?line={line}#L{line}"


def finding_view(resource: dict[str, Any], finding: dict[str, Any], library: Library) -> FindingView:
    lr = library.get(finding["rule_id"])
    patterns: tuple[str, ...] = ()
    ignore_case = False
    explanation = None
    if lr is not None:
        match = lr.rule.match
        if match is not None:
            patterns = (*match.any, *match.all)
            ignore_case = match.ignore_case
        explanation = lr.rule.explanation
    files = file_index(resource)
    evidence = []
    for e in finding.get("evidence") or []:
        pos = files.get(e["file"])
        if pos is None and len(files) == 1:
            pos = 0  # a single upload: its evidence names it, whatever it was called
        href = viewer_href(resource["id"], pos, int(e["line"])) if pos is not None else None
        evidence.append(
            EvidenceLine(e["file"], int(e["line"]), highlight(e["text"], patterns, ignore_case), href)
        )
    frameworks = (resource.get("stats") or {}).get("frameworks_detected") or []
    return FindingView(
        finding, evidence, explanation, patch_tabs(finding.get("patches") or [], frameworks=frameworks)
    )


@dataclass(frozen=True)
class FactRow:
    name: str
    text: str
    where: str  # "file:line", or the expression a computed fact is made of
    href: str | None  # the line in the log viewer


def fact_rows(resource: dict[str, Any]) -> list[FactRow]:
    """The facts the engine read (what the advice was chosen by), each linked to its line."""
    files = file_index(resource)
    rows = []
    for f in resource.get("facts") or []:
        line = f.get("line")
        if line is None:
            rows.append(FactRow(f["name"], f["text"], f"computed: {f.get('expression') or ''}", None))
            continue
        pos = files.get(f.get("file") or "")
        if pos is None and len(files) == 1:
            pos = 0
        href = viewer_href(resource["id"], pos, int(line)) if pos is not None else None
        rows.append(FactRow(f["name"], f["text"], f"{f.get('file')}:{line}", href))
    return rows


def patch_tabs(patches: list[dict[str, Any]], *, frameworks: list[str]) -> list[PatchTab]:
    """Patches as tabs, one per dialect in a fixed order, plus Ray's runtime_env for env vars
    when the job runs on Ray."""
    tabs: dict[str, PatchTab] = {}
    for p in patches:
        target = p["target"]
        tab = tabs.setdefault(target, PatchTab(target, DIALECTS.get(target, target)))
        tab.snippets.append(p)
    out = [tabs[k] for k in DIALECTS if k in tabs]
    block = ray_env_block((Patch.model_validate(p) for p in patches), frameworks=frameworks)
    if block:
        out.append(
            PatchTab(
                "ray",
                "Ray runtime_env",
                [{"rendered": block, "why": "the same variables for Ray workers", "framework": "ray"}],
            )
        )
    return out


def report_markdown(resource: dict[str, Any]) -> str:
    """The whole report as Markdown (what "copy as Markdown" and report.md give)."""
    return render_markdown(AnalysisModel.model_validate(resource)) + service_markdown(resource)


def kind_info(library: Library, kind: str) -> tuple[str, str]:
    """(label, what to do) for the report's root card, in the class catalogue's words."""
    k = library.kind(kind)
    return k.label, k.action


def possible_evidence(
    resource: dict[str, Any], cause: dict[str, Any], library: Library
) -> list[EvidenceLine]:
    """A possible cause's evidence, highlighted and linked like a finding's."""
    return finding_view(resource, {**cause, "patches": []}, library).evidence
