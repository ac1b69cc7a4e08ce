"""Database rows -> API resources (plain JSON-ready dicts) and the service part of reports."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.db import repo
from app.db.models import Analysis, AnalysisFile, Feedback
from app.db.rollup import Recurrence
from app.engine.models import Action
from app.engine.pipeline.verdict import with_history
from app.service.access import Principal
from app.settings import Settings

API = "/api/v1"


def iso(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if value else None


def analysis_url(base: str, analysis_id: str) -> str:
    return f"{base}{API}/analyses/{analysis_id}"


def links(base: str, row: Analysis) -> dict[str, Any]:
    url = analysis_url(base, row.id)
    return {
        "self": url,
        "report_md": f"{url}/report.md",
        "report_html": f"{url}/report.html",
        "log": f"{url}/log",
        "feedback": f"{url}/feedback",
        "retriage": f"{url}/retriage",
        "duplicate_of": analysis_url(base, row.duplicate_of_id) if row.duplicate_of_id else None,
    }


def metadata(row: Analysis) -> dict[str, Any]:
    return {
        "job_id": row.job_id,
        "framework": row.framework,
        "exit_code": row.exit_code,
        "host": row.host,
        "labels": dict(row.labels or {}),
        "source": row.source,
    }


def recurrence_text(rec: Recurrence) -> str:
    times = "time" if rec.in_window == 1 else "times"
    text = f"seen {rec.in_window} {times} in {rec.window_days} days"
    if rec.total != rec.in_window:
        text += f" ({rec.total} in all)"
    text += f", first on {rec.first_seen:%Y-%m-%d %H:%M} UTC"
    if rec.jobs > 1:
        text += f", across {rec.jobs} jobs"
    return text


def recurrence_dict(rec: Recurrence) -> dict[str, Any]:
    return {
        "fingerprint": rec.fingerprint,
        "fingerprint_version": rec.fingerprint_version,
        "total": rec.total,
        "in_window": rec.in_window,
        "window_days": rec.window_days,
        "first_seen": iso(rec.first_seen),
        "first_analysis_id": rec.first_analysis_id,
        "last_seen": iso(rec.last_seen),
        "jobs": rec.jobs,
        "hosts": rec.hosts,
        "summary": recurrence_text(rec),
    }


def suspect_dict(s: repo.SuspectHost) -> dict[str, Any]:
    return {
        "host": s.host,
        "failures": s.failures,
        "jobs": s.jobs,
        "classes": s.classes,
        "first_seen": iso(s.first_seen),
        "last_seen": iso(s.last_seen),
        "latest_analysis_id": s.latest_analysis_id,
    }


def feedback_dict(f: Any) -> dict[str, Any]:
    return {
        "id": f.id,
        "analysis_id": f.analysis_id,
        "created_at": iso(f.created_at),
        "verdict": f.verdict,
        "correct_class": f.correct_class,
        "comment": f.comment,
    }


def resource(
    *,
    row: Analysis,
    base: str,
    files: Sequence[AnalysisFile],
    feedback: Sequence[Feedback],
    standing: repo.Standing,
) -> dict[str, Any]:
    """The API resource of an analysis; pure: the caller has read (or just written) every part."""
    url = analysis_url(base, row.id)
    out: dict[str, Any] = {
        "id": row.id,
        "status": row.status,
        "created_at": iso(row.created_at),
        "finished_at": iso(row.finished_at),
        "source": row.source,
        "metadata": metadata(row),
        "links": links(base, row),
        "permalink": f"{base}/analyses/{row.id}",
        "files": [
            {"name": f.name, "size": f.size, "sha256": f.blob_sha256, "url": f"{url}/log?file={f.position}"}
            for f in files
        ],
        "config": {"name": row.config_name, "sha256": row.config_sha256} if row.config_sha256 else None,
        "duplicate_of": row.duplicate_of_id,
        "recurrence": recurrence_dict(standing.recurrence) if standing.recurrence else None,
        "suspect_hosts": [suspect_dict(s) for s in standing.suspects],
        "feedback": [feedback_dict(f) for f in feedback],
        "retriaged_at": iso(row.retriaged_at),
        "error": row.error,
    }
    if row.status == "done" and row.result is not None:
        out.update(row.result)
        action = row.result.get("action")
        if action and standing.outcomes:
            # the stored action is the class's; what reruns of this failure did is read now
            out["action"] = with_history(Action.model_validate(action), standing.outcomes).model_dump()
    return out


def for_principal(res: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """The resource as `principal` may see it. Without `read` (an ingest token, which sees only
    the analyses it posted) the ids of other analyses are left out: the first of a recurring
    failure, the analysis a duplicate repeats, a suspect host's latest; the counts stay. No
    resource holds a token's id or name."""
    if principal.allows("read"):
        return res
    out = dict(res)
    out["duplicate_of"] = None
    if isinstance(out.get("links"), dict):
        out["links"] = {**out["links"], "duplicate_of": None}
    if out.get("recurrence"):
        out["recurrence"] = {**out["recurrence"], "first_analysis_id": None}
    out["suspect_hosts"] = [{**s, "latest_analysis_id": None} for s in out.get("suspect_hosts") or []]
    return out


def load_resource(session: Session, *, row: Analysis, base: str, settings: Settings) -> dict[str, Any]:
    """The resource of a stored analysis (`row` loaded with its files and feedback)."""
    standing = repo.standing_of(
        session, row=row, days=settings.recurrence_days, suspect_min_jobs=settings.suspect_min_jobs
    )
    return resource(row=row, base=base, files=row.files, feedback=row.feedback, standing=standing)


_UNSET: Any = object()


def summary(row: Analysis, *, base: str, confidence: float | None = _UNSET) -> dict[str, Any]:
    """`confidence` given (a history page's rows, read without their result document): the
    title comes from the denormalised column."""
    if confidence is _UNSET:
        root = (row.result or {}).get("root_cause")
    else:
        named = row.root_class not in (None, "unknown")
        root = {"title": row.root_title, "confidence": confidence} if named else None
    url = analysis_url(base, row.id)
    return {
        "id": row.id,
        "status": row.status,
        "created_at": iso(row.created_at),
        "source": row.source,
        "metadata": metadata(row),
        "failure_class": row.root_class,
        "kind": row.root_kind,
        "rule_id": row.root_rule_id,
        "title": root["title"] if root else None,
        "confidence": root["confidence"] if root else None,
        "framework": row.framework_detected,
        "library_version": row.library_version,
        "fingerprint": row.fingerprint,
        "duplicate_of": row.duplicate_of_id,
        "links": {"self": url, "report_html": f"{url}/report.html", "page": f"{base}/analyses/{row.id}"},
    }


def summaries(session: Any, rows: list[Analysis], *, base: str) -> list[dict[str, Any]]:
    """Summaries of a page of rows listed without their result documents."""
    from app.db import repo

    conf = repo.root_confidences(session, analysis_ids=[r.id for r in rows])
    return [summary(r, base=base, confidence=conf.get(r.id)) for r in rows]


def service_markdown(res: dict[str, Any]) -> str:
    """The service's part of report.md: job, permalink, recurrence, suspect nodes."""
    meta = res["metadata"]
    lines = ["", "## This analysis", ""]
    facts = [f"analysis `{res['id']}`", f"{res['created_at']}"]
    if meta.get("job_id"):
        facts.append(f"job `{meta['job_id']}`")
    if meta.get("host"):
        facts.append(f"host `{meta['host']}`")
    if meta.get("exit_code") is not None:
        facts.append(f"exit code {meta['exit_code']}")
    lines.append(" · ".join(facts))
    lines += ["", f"Permalink: {res['permalink']}"]
    rec = res.get("recurrence")
    if rec and rec["total"] > 1:
        first = f" (first: analysis `{rec['first_analysis_id']}`)" if rec.get("first_analysis_id") else ""
        lines += ["", f"**Recurring:** {rec['summary']}{first}."]
    if res.get("duplicate_of"):
        lines += ["", f"The same log was analysed before: {res['links']['duplicate_of']}"]
    for s in res.get("suspect_hosts") or []:
        lines += [
            "",
            f"**Suspect node `{s['host']}`:** hardware failures in {s['jobs']} jobs since "
            f"{s['first_seen'][:10]} ({', '.join(s['classes'])}). Drain it and run diagnostics "
            "before it takes down another job.",
        ]
    return "\n".join(lines) + "\n"
