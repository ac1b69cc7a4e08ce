"""Terminal rendering: the root cause first, its symptoms folded under it, then the fix."""

from __future__ import annotations

import re
import textwrap

from app.engine.models import Analysis, Finding, Patch
from app.engine.pipeline.patches import ray_env_block
from app.render.action import folded_note, headline
from app.render.markdown import MAX_FACTS
from app.render.timeline_table import clock_notes, text_table

# values from the log sit in the Markdown remediation backslash-escaped (see triage.md_literal)
_MD_ESCAPE = re.compile(r"\\([\\`*\[\]])")

_COLOURS = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "yellow": "33",
    "green": "32",
    "cyan": "36",
    "magenta": "35",
}
_SEVERITY_COLOUR = {"critical": "red", "error": "red", "warning": "yellow", "info": "cyan"}


class _Style:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, text: str, *styles: str) -> str:
        if not self.colour or not styles:
            return text
        codes = ";".join(_COLOURS[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"


def _where(f: Finding) -> str:
    parts = [f"seen {f.count}x"]
    if f.ranks:
        parts.append("ranks " + _compact(f.ranks))
    if f.ranks_folded:
        parts.append(folded_note(f.ranks_folded))
    if f.hosts:
        parts.append("hosts " + ", ".join(f.hosts[:6]) + (" …" if len(f.hosts) > 6 else ""))
    return ", ".join(parts)


def _compact(nums: list[int]) -> str:
    """[0,1,2,3,5] -> '0-3,5'"""
    out: list[str] = []
    start = prev = None
    for n in nums:
        if start is None:
            start = prev = n
        elif prev is not None and n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(out)


def _patch_line(p: Patch) -> str:
    label = f"[{p.target}{'/' + p.framework if p.framework else ''}]"
    body = p.rendered.replace("\n", "\n      ")
    note = f"   ({p.note})" if p.note else ""
    return f"  {label} {body}\n      # {p.why}{note}"


def _action(a: Analysis, s: _Style) -> list[str]:
    """THE JOB: retry, retry elsewhere, fix first, stop or look, and why."""
    if a.action is None:
        return []
    out = [
        "",
        s("THE JOB", "bold") + f"  {s(headline(a.action), 'bold')}" + s(f"  [{a.action.decision}]", "dim"),
    ]
    out.extend(f"  - {w}" for w in a.action.why)
    return out


def render_text(a: Analysis, *, colour: bool = False, width: int = 100) -> str:
    s = _Style(colour)
    out: list[str] = []
    root = a.root_cause
    if root is None:
        out.append(
            s("No known failure matched.", "bold", "yellow") + " Nothing is guessed; collect this next:"
        )
        out.extend(f"  - {step}" for step in a.next_steps)
        if a.possible_causes:
            out.append("")
            out.append(
                s("POSSIBLE CAUSES", "bold", "yellow") + s("  (suggested by the log, not established)", "dim")
            )
            for pc in a.possible_causes:
                out.append(
                    f"  - {pc.title} [{pc.failure_class}, {pc.kind}]"
                    + s(f"  confidence {pc.confidence:.2f}", "dim")
                )
                for ev in pc.evidence[:2]:
                    out.append(s(f"      {ev.file}:{ev.line}  ", "dim") + _clip(ev.text, width))
        out.extend(_action(a, s))
    else:
        sev = _SEVERITY_COLOUR.get(root.severity, "bold")
        out.append(
            s("ROOT CAUSE", "bold", sev)
            + f"  {s(root.title, 'bold')}  [{root.failure_class}, {root.kind}]"
            + s(f"  confidence {root.confidence:.2f}", "dim")
        )
        out.append(f"  {_where(root)}   rule {root.rule_id} v{root.rule_version}")
        for ev in root.evidence:
            out.append(s(f"  {ev.file}:{ev.line}  ", "dim") + _clip(ev.text, width))
        symptoms = [f for f in a.findings if f.role == "symptom"]
        if symptoms:
            out.append(s("  symptoms (caused by the above):", "bold"))
            for f in symptoms:
                out.append(f"    - {f.title} [{f.failure_class}] {s(_where(f), 'dim')}")
        out.extend(_action(a, s))
        out.append("")
        out.append(s("WHAT TO DO", "bold", "green"))
        out.extend("  " + _MD_ESCAPE.sub(r"\1", line) for line in root.remediation.splitlines())
        if root.patches:
            out.append("")
            out.append(s("CONFIG PATCHES", "bold", "green"))
            out.extend(_patch_line(p) for p in root.patches)
            block = ray_env_block(root.patches, frameworks=a.stats.get("frameworks_detected") or [])
            if block:
                out.append(s("  as a Ray runtime_env:", "dim"))
                out.extend("    " + ln for ln in block.splitlines())
        if a.config_diff:
            out.append("")
            out.append(s("DIFF OF YOUR CONFIG", "bold", "green"))
            out.extend("  " + ln for ln in a.config_diff.rstrip("\n").splitlines())
        if a.next_steps:
            out.append("")
            out.append(s("ALSO CHECK", "bold"))
            out.extend(f"  - {step}" for step in a.next_steps)
    out.extend(_timeline(a, s, width))
    if a.facts:
        out.append("")
        out.append(s("FACTS READ FROM THE LOG", "bold") + s("  (what the advice was chosen by)", "dim"))
        for fact in a.facts[:MAX_FACTS]:
            where = f"{fact.file}:{fact.line}" if fact.line is not None else f"computed: {fact.expression}"
            out.append(f"  {fact.name} = {_clip(fact.text, 60)}" + s(f"   {where}", "dim"))
        if len(a.facts) > MAX_FACTS:
            out.append(s(f"  … and {len(a.facts) - MAX_FACTS} more (--format json lists them all)", "dim"))
    related = [f for f in a.findings if f.role == "related"]
    if related:
        out.append("")
        out.append(s("OTHER FINDINGS", "bold"))
        for f in related:
            out.append(f"  - {f.title} [{f.failure_class}, {f.severity}] {s(_where(f), 'dim')}")
            if f.evidence:
                ev = f.evidence[0]
                out.append(s(f"      {ev.file}:{ev.line}  ", "dim") + _clip(ev.text, width - 6))
    if a.warnings:
        out.append("")
        out.extend(s(f"warning: {w}", "yellow") for w in a.warnings)
    out.append("")
    out.append(s(_footer(a), "dim"))
    return "\n".join(out) + "\n"


def _timeline(a: Analysis, s: _Style, width: int) -> list[str]:
    """Where each rank stopped, led by the timeline's verdict; only when there is more than one
    rank or a verdict to tell."""
    tl = a.timeline or {}
    verdict = tl.get("verdict")
    ranks = tl.get("ranks") or []
    if not verdict and len(ranks) < 2:
        return []
    out = ["", s("TIMELINE", "bold", "magenta")]
    if verdict:
        phase = f" (phase: {verdict['phase']})" if verdict.get("phase") else ""
        wrapped = textwrap.wrap(verdict["summary"] + phase, width=max(40, width - 2))
        out.extend("  " + ln for ln in wrapped)
    if len(ranks) >= 2:
        out.extend("  " + ln for ln in text_table(tl, width=width - 2))
    out.extend("  " + ln for ln in clock_notes(tl))
    return out


def _clip(text: str, width: int) -> str:
    return textwrap.shorten(text, width=max(40, width), placeholder=" …") if len(text) > width else text


def _footer(a: Analysis) -> str:
    fw = (
        f"{a.framework.name}{' ' + a.framework.version if a.framework.version else ''}"
        if a.framework
        else "unknown"
    )
    st = a.stats
    size = st.get("bytes", 0) / 1e6
    speed = f", {st['mb_per_s']:.0f} MB/s" if st.get("mb_per_s") else ""
    return (
        f"framework: {fw} | rule library {a.library_version} | {size:.1f} MB, {st.get('lines', 0)} lines "
        f"in {st.get('scan_seconds', 0):.2f} s{speed} ({st.get('engine')})"
    )
