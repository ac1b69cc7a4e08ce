"""Markdown report: for issue trackers, the API's report.md and the Slack bot."""

from __future__ import annotations

from app.engine.models import Analysis, Finding
from app.engine.pipeline.patches import ray_env_block
from app.render.action import DECISION_LABELS, folded_note, headline
from app.render.timeline_table import clock_notes, rows


def _fence(text: str, lang: str = "") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _finding_md(f: Finding, *, level: str) -> list[str]:
    out = [f"{level} {f.title}", ""]
    out.append(
        f"`{f.failure_class}` · {f.kind} · {f.severity} · confidence {f.confidence:.2f} · "
        f"seen {f.count}x · rule `{f.rule_id}` v{f.rule_version}"
    )
    if f.ranks or f.hosts:
        out.append("")
        line = f"ranks: {', '.join(map(str, f.ranks)) or '-'} · hosts: {', '.join(f.hosts) or '-'}"
        if f.ranks_folded:
            line += f" · {folded_note(f.ranks_folded)}"
        out.append(line)
    if f.evidence:
        out.append("")
        out.append(_fence("\n".join(f"{e.file}:{e.line}: {e.text}" for e in f.evidence)))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:120] or "-"


def _timeline_md(a: Analysis) -> list[str]:
    tl = a.timeline or {}
    verdict = tl.get("verdict")
    ranks = tl.get("ranks") or []
    if not verdict and len(ranks) < 2:
        return []
    out = ["", "## Timeline", ""]
    if verdict:
        phase = f" (phase: **{verdict['phase']}**)" if verdict.get("phase") else ""
        out += [verdict["summary"] + phase, ""]
    table, left = rows(tl)
    if len(ranks) >= 2 and table:
        out += [
            "| rank | hosts | phase | step | last line (UTC) | quiet first | stopped in / last progress |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in table:
            rank = f"**{r.rank}**" if r.named else str(r.rank)
            out.append(
                f"| {rank} | {_cell(r.hosts)} | {r.phase} | {r.step} | {r.last_seen} | {r.gap or '-'} | "
                f"{_cell(r.stopped_in or r.last_line)} |"
            )
        if left:
            out += ["", f"… and {left} more rank(s)."]
    notes = clock_notes(tl)
    if notes:
        out += [""] + [f"- {_cell(n)}" for n in notes]
    return out


MAX_FACTS = 40  # a report lists the facts it read up to this many; the JSON keeps them all


def _facts_md(a: Analysis) -> list[str]:
    if not a.facts:
        return []
    out = ["", "## Facts read from the log", "", "| fact | value | where |", "|---|---|---|"]
    for f in a.facts[:MAX_FACTS]:
        where = f"{f.file}:{f.line}" if f.line is not None else f"computed: `{_cell(f.expression or '')}`"
        out.append(f"| `{f.name}` | {_cell(f.text)} | {where} |")
    if len(a.facts) > MAX_FACTS:
        out += ["", f"… and {len(a.facts) - MAX_FACTS} more (the JSON report lists them all)."]
    return out


def _action_md(a: Analysis) -> list[str]:
    if a.action is None:
        return []
    label = DECISION_LABELS.get(a.action.decision, a.action.decision)
    out = ["", f"## The job: {label.lower()}", "", f"**{headline(a.action)}** (`{a.action.decision}`)", ""]
    return out + [f"- {w}" for w in a.action.why]


def render_markdown(a: Analysis) -> str:
    out: list[str] = ["# logtriage report", ""]
    fw = a.framework
    out.append(
        f"Framework: **{fw.name if fw else 'unknown'}{' ' + fw.version if fw and fw.version else ''}** · "
        f"rule library {a.library_version}"
    )
    out.append("")
    root = a.root_cause
    if root is None:
        out += ["## No known failure matched", "", "Nothing is guessed. Collect this next:", ""]
        out += [f"- {s}" for s in a.next_steps]
        if a.possible_causes:
            out += ["", "### Possible causes (suggested by the log, not established)", ""]
            for pc in a.possible_causes:
                out.append(
                    f"- **{pc.title}** (`{pc.failure_class}`, {pc.kind}, confidence {pc.confidence:.2f})"
                )
                if pc.evidence:
                    out += [
                        "",
                        "  "
                        + _fence("\n".join(f"{e.file}:{e.line}: {e.text}" for e in pc.evidence[:2])).replace(
                            "\n", "\n  "
                        ),
                    ]
                out.append(f"  To confirm: {pc.confirm}")
        out += _action_md(a)
    else:
        out += _finding_md(root, level="## Root cause:")
        symptoms = [f for f in a.findings if f.role == "symptom"]
        if symptoms:
            out += ["", "**Symptoms** (caused by the root cause):", ""]
            out += [f"- {f.title} (`{f.failure_class}`, {f.count}x)" for f in symptoms]
        out += _action_md(a)
        out += ["", "## What to do", "", root.remediation]
        if root.patches:
            out += ["", "## Config patches", ""]
            for p in root.patches:
                lang = {"yaml": "yaml", "env": "bash", "cli": "bash"}.get(p.target, "")
                dialect = f" ({p.framework})" if p.framework else ""
                out += [f"- **{p.target}{dialect}**: {p.why}" + (f" _({p.note})_" if p.note else ""), ""]
                out += ["  " + line for line in _fence(p.rendered, lang).splitlines()]
            block = ray_env_block(root.patches, frameworks=a.stats.get("frameworks_detected") or [])
            if block:
                out += ["", "As a Ray `runtime_env`:", "", _fence(block, "python")]
        if a.config_diff:
            out += ["", "## Your config, patched", "", _fence(a.config_diff, "diff")]
        if a.next_steps:
            out += ["", "## Also check", ""] + [f"- {s}" for s in a.next_steps]
    out += _timeline_md(a)
    out += _facts_md(a)
    related = [f for f in a.findings if f.role == "related"]
    if related:
        out += ["", "## Other findings", ""]
        for f in related:
            out += _finding_md(f, level="###")
            out.append("")
    if a.warnings:
        out += ["", "## Warnings", ""] + [f"- {w}" for w in a.warnings]
    return "\n".join(out).rstrip() + "\n"
