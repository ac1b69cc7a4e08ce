"""Teaching the service (issue 23), its reading half: the unknowns inbox (analyses with no named
cause, and those marked wrong, grouped by the error line they end with), similar past failures
for a report, and failure groups' triage state (open / resolved / ignored, assignee, note, a
tracker link), like a tracker's issue. Blocking (database): the edges call these in a thread.

Groups come from the stored signal lines (`analysis_signals`, written with every analysis), never
from the logs: listing the inbox reads a few thousand rows, whatever the logs' sizes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from app.db.models import utcnow
from app.db.repo import learn as lrepo
from app.engine.clusters import NO_SIGNAL, Member, group_failures
from app.errors import NotFoundError, ValidationFailedError
from app.service.access import Principal, check_can_read
from app.service.context import ServiceContext
from app.service.metadata import checked_text

__all__ = [
    "GROUP_STATUSES",
    "Cluster",
    "Similar",
    "feedback_summary",
    "list_clusters",
    "similar_failures",
    "update_group",
]

GROUP_STATUSES = ("open", "resolved", "ignored")
SCAN_LIMIT = 5000  # newest unknown analyses grouped per request
MEMBERS_SHOWN = 200  # analysis ids listed per cluster
SAMPLES = 3


@dataclass(frozen=True)
class Sample:
    analysis_id: str
    file: str
    position: int | None  # the file's position, for the viewer link
    line: int
    text: str

    @property
    def url(self) -> str | None:
        if self.position is None:
            return None
        return f"/analyses/{self.analysis_id}/files/{self.position}?line={self.line}#L{self.line}"


@dataclass(frozen=True)
class Cluster:
    id: str
    template: str
    count: int
    analysis_ids: list[str]
    first_seen: dt.datetime
    last_seen: dt.datetime
    jobs: list[str]
    hosts: list[str]
    frameworks: list[str]
    classes: dict[str, int]  # the members' root classes ("unknown", or the class marked wrong)
    samples: list[Sample]
    status: str = "open"
    assignee: str | None = None
    note: str | None = None
    tracker_url: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "template": self.template,
            "count": self.count,
            "analysis_ids": self.analysis_ids,
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "jobs": self.jobs,
            "hosts": self.hosts,
            "frameworks": self.frameworks,
            "classes": self.classes,
            "samples": [
                {"analysis_id": s.analysis_id, "file": s.file, "line": s.line, "text": s.text, "url": s.url}
                for s in self.samples
            ],
            "status": self.status,
            "assignee": self.assignee,
            "note": self.note,
            "tracker_url": self.tracker_url,
        }


@dataclass(frozen=True)
class Similar:
    analysis_id: str
    created_at: dt.datetime
    shared: int  # signal templates in common
    same_first: bool  # the most telling lines have one template
    root_class: str | None
    root_title: str | None
    job_id: str | None
    feedback: str | None
    comment: str | None
    lines: list[str] = field(default_factory=list)  # the shared lines, as that analysis has them
    group_note: str | None = None  # its failure group's note ("fixed by pinning NCCL 2.21")
    group_status: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "analysis_id": self.analysis_id,
            "created_at": self.created_at.isoformat(),
            "shared": self.shared,
            "same_first": self.same_first,
            "root_class": self.root_class,
            "root_title": self.root_title,
            "job_id": self.job_id,
            "feedback": self.feedback,
            "comment": self.comment,
            "lines": self.lines,
            "group_note": self.group_note,
            "group_status": self.group_status,
        }


def list_clusters(
    ctx: ServiceContext,
    *,
    principal: Principal,
    unknown: bool = True,
    days: int | None = None,
    status: str | None = "open",
    limit: int = 50,
) -> list[Cluster]:
    """The unknowns inbox: groups of analyses with no named cause (or marked wrong), largest
    and newest first; ``unknown=False``: the named failures, a group per fingerprint.
    ``status`` keeps groups in that state (None: all)."""
    if not principal.allows("read"):
        from app.errors import ForbiddenError

        raise ForbiddenError(f"token {principal.name!r} lacks the `read` scope for the unknowns inbox")
    if status is not None and status not in GROUP_STATUSES:
        raise ValidationFailedError(f"status is one of {', '.join(GROUP_STATUSES)}, not {status[:20]!r}")
    since = utcnow() - dt.timedelta(days=days) if days else None
    with ctx.db.read() as s:
        if unknown:
            ids = lrepo.unknown_candidates(s, since=since, limit=SCAN_LIMIT)
            sigs = lrepo.signals_of(s, analysis_ids=ids)
            members = [
                Member(a, sigs[a][0].key, sigs[a][0].template) if sigs.get(a) else Member(a, None, None)
                for a in ids
            ]
            found = group_failures(members)
        else:
            known = lrepo.known_candidates(s, since=since, limit=SCAN_LIMIT)
            found = _by_fingerprint(known)
            firsts = [g.members[0] for g in found][: limit * 2]
            sigs = lrepo.signals_of(
                s, analysis_ids=[a for g in found[: limit * 2] for a in g.members[:SAMPLES]]
            )
            del firsts
        states = lrepo.groups(s, ids=[g.id for g in found])
        kept = [
            g
            for g in found
            if status is None or (states[g.id].status if g.id in states else "open") == status
        ]
        kept = kept[:limit]
        shown_ids = [a for g in kept for a in g.members[:MEMBERS_SHOWN]]
        info = lrepo.briefs(s, ids=shown_ids)
        positions = lrepo.file_positions(s, analysis_ids=[a for g in kept for a in g.members[:SAMPLES]])
    out = []
    for g in kept:
        members_info = [info[a] for a in g.members[:MEMBERS_SHOWN] if a in info]
        if not members_info:
            continue
        times = [b.created_at for b in members_info]
        samples = []
        shown_texts: set[str] = set()  # the same line from several analyses says nothing new
        for a in g.members[:SAMPLES]:
            if sigs.get(a) and sigs[a][0].text not in shown_texts:
                first = sigs[a][0]
                shown_texts.add(first.text)
                samples.append(Sample(a, first.file, positions.get((a, first.file)), first.line, first.text))
        classes: dict[str, int] = {}
        for b in members_info:
            c = b.root_class or "unknown"
            classes[c] = classes.get(c, 0) + 1
        st = states.get(g.id)
        out.append(
            Cluster(
                id=g.id,
                template=g.template if g.id != NO_SIGNAL else "(the logs end with no error line)",
                count=len(g.members),
                analysis_ids=g.members[:MEMBERS_SHOWN],
                first_seen=min(times),
                last_seen=max(times),
                jobs=sorted({b.job_id for b in members_info if b.job_id})[:20],
                hosts=sorted({b.host for b in members_info if b.host})[:20],
                frameworks=sorted({b.framework for b in members_info if b.framework}),
                classes=classes,
                samples=samples,
                status=st.status if st else "open",
                assignee=st.assignee if st else None,
                note=st.note if st else None,
                tracker_url=st.tracker_url if st else None,
            )
        )
    return out


def similar_failures(
    ctx: ServiceContext, *, analysis_id: str, principal: Principal, limit: int = 5
) -> list[Similar]:
    """Earlier analyses whose logs end with lines of the same templates as this one's, the
    most shared first (a same most-telling line first of all), with their feedback and notes."""
    from app.db import repo

    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id)
        check_can_read(principal, row)
        mine = lrepo.signals_of(s, analysis_ids=[row.id]).get(row.id) or []
        if not mine:
            return []
        keys = [x.key for x in mine]
        found = lrepo.sharing_keys(s, keys=keys, exclude=row.id, limit=max(limit * 4, 20))
        if not principal.allows("read"):
            # an ingest token reads only what it posted: the others' failures stay unseen
            mine_ids = lrepo.posted_by(
                s, analysis_ids=[a for a, _n, _p in found], token_id=principal.token_id
            )
            found = [x for x in found if x[0] in mine_ids]
        if not found:
            return []
        ids = [a for a, _n, _p in found]
        info = lrepo.briefs(s, ids=ids)
        theirs = lrepo.signals_of(s, analysis_ids=ids)
        group_ids = {a: (f"f:{b.fingerprint}" if b.fingerprint else None) for a, b in info.items()}
        for a in ids:
            if group_ids.get(a) is None and theirs.get(a):
                group_ids[a] = f"t:{theirs[a][0].key}"
        states = lrepo.groups(s, ids=[g for g in group_ids.values() if g])
    first = mine[0].key
    out: list[Similar] = []
    for a, n, _pos in found:
        b = info.get(a)
        if b is None or b.created_at > row.created_at:  # only what came before this failure
            continue
        their = theirs.get(a) or []
        same_first = bool(their) and their[0].key == first
        if not same_first and n < 2:
            continue  # one shared line that is not the telling one: often a generic `raise` line
        st = states.get(group_ids.get(a) or "")
        out.append(
            Similar(
                analysis_id=a,
                created_at=b.created_at,
                shared=n,
                same_first=same_first,
                root_class=b.root_class,
                root_title=b.root_title,
                job_id=b.job_id,
                feedback=b.feedback,
                comment=b.comment,
                lines=[x.text for x in their if x.key in keys][:3],
                group_note=st.note if st else None,
                group_status=st.status if st else None,
            )
        )
    out.sort(key=lambda x: (not x.same_first, -x.shared, -x.created_at.timestamp()))
    return out[:limit]


def update_group(
    ctx: ServiceContext,
    *,
    group_id: str,
    principal: Principal,
    status: str | None = None,
    assignee: str | None = None,
    note: str | None = None,
    tracker_url: str | None = None,
    clear: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Set a failure group's state (``t:<key>`` a cluster, ``f:<fingerprint>`` a known failure);
    needs the `read` scope and a person's token or session (an ingest hook does not triage)."""
    import re

    if not principal.allows("read"):
        from app.errors import ForbiddenError

        raise ForbiddenError(f"token {principal.name!r} lacks the `read` scope to triage failure groups")
    if not re.fullmatch(r"[tf]:[0-9a-z]{1,32}", group_id):
        raise NotFoundError(
            f"no failure group {group_id[:40]!r}: ids are t:<template key> or f:<fingerprint>"
        )
    if status is not None and status not in GROUP_STATUSES:
        raise ValidationFailedError(f"status is one of {', '.join(GROUP_STATUSES)}, not {status[:20]!r}")
    bad = [c for c in clear if c not in ("assignee", "note", "tracker_url")]
    if bad:
        raise ValidationFailedError(f"clear names assignee, note or tracker_url, not {bad[0][:20]!r}")
    assignee = _text(assignee, "assignee", 200)
    note = _text(note, "note", 4000, multiline=True)
    tracker_url = _text(tracker_url, "tracker_url", 2000)
    if tracker_url is not None and not re.match(r"https?://[^\s]+$", tracker_url):
        raise ValidationFailedError("tracker_url is an http(s) link to the issue")
    with ctx.db.write() as s:
        g = lrepo.set_group(
            s,
            group_id=group_id,
            status=status,
            assignee=assignee,
            note=note,
            tracker_url=tracker_url,
            token_id=principal.token_id,
            clear=clear,
        )
        return {
            "id": g.id,
            "status": g.status,
            "assignee": g.assignee,
            "note": g.note,
            "tracker_url": g.tracker_url,
            "updated_at": g.updated_at.isoformat(),
        }


def _by_fingerprint(rows: list[tuple[str, str, str]]) -> list[Any]:
    """A group per fingerprint (``f:<fingerprint>``, titled by its newest root cause's title),
    the largest first, then the newest."""
    from app.engine.clusters import Group

    groups: dict[str, Any] = {}
    for aid, fp, title in rows:
        g = groups.get(fp)
        if g is None:
            g = groups[fp] = Group(f"f:{fp}", title)
        g.members.append(aid)
    order = {fp: i for i, (_a, fp, _t) in reversed(list(enumerate(rows)))}
    return sorted(groups.values(), key=lambda g: (-len(g.members), order[g.id[2:]]))


def _status(g: Any) -> str:
    return str(g.status) if g is not None else "open"


def _text(value: str | None, what: str, limit: int, *, multiline: bool = False) -> str | None:
    value = value.strip() if value is not None else None
    return checked_text(
        value, what, limit=limit, multiline=multiline, empty=" (to remove it, name it in clear)"
    )


# --- feedback that counts ------------------------------------------------------------------------

FLAG_PRECISION = 0.8  # a rule whose feedback says it is right less often than this is flagged
MIN_FEEDBACK = 3  # ... once this many verdicts judged it


def feedback_summary(ctx: ServiceContext, *, principal: Principal) -> dict[str, Any]:
    """What people's verdicts say: the site's labelled history as an evaluation set (accuracy of
    the stored root causes against the labels, per month: it rises as rules are taught and the
    history re-triaged), each rule's precision (flagged under ``FLAG_PRECISION``), and the
    analyses marked wrong in the same way (same rule, same right class), which propose a rule."""
    from sqlalchemy import select

    from app.db.models import Analysis, Feedback

    if not principal.allows("read"):
        from app.errors import ForbiddenError

        raise ForbiddenError(f"token {principal.name!r} lacks the `read` scope for feedback")
    with ctx.db.read() as s:
        rows = s.execute(
            select(
                Feedback.analysis_id,
                Feedback.verdict,
                Feedback.correct_class,
                Feedback.created_at,
                Feedback.id,
                Analysis.root_class,
                Analysis.root_rule_id,
                Analysis.created_at,
            )
            .join(Analysis, Analysis.id == Feedback.analysis_id)
            .order_by(Feedback.created_at, Feedback.id)
        ).all()
    latest: dict[str, Any] = {}
    for r in rows:
        latest[r[0]] = r  # the latest verdict on each analysis counts
    months: dict[str, list[int]] = {}
    rules: dict[str, list[int]] = {}
    wrong_ways: dict[tuple[str, str], list[str]] = {}
    labelled = right = 0
    for aid, verdict, correct_class, _at, _fid, root_class, rule_id, created in latest.values():
        label = (correct_class or None) if verdict == "wrong" else root_class
        if rule_id:
            rules.setdefault(rule_id, [0, 0])[0 if verdict == "correct" else 1] += 1
        if verdict == "wrong":
            wrong_ways.setdefault((rule_id or "none", correct_class or "?"), []).append(aid)
        if not label:
            continue  # "wrong" without the right class: no label
        m = months.setdefault(created.strftime("%Y-%m"), [0, 0])
        m[0] += 1
        ok = (root_class or "unknown") == label
        m[1] += int(ok)
        labelled += 1
        right += int(ok)
    return {
        "labelled": labelled,
        "accuracy": round(right / labelled, 4) if labelled else None,
        "months": [
            {"month": k, "labelled": v[0], "right": v[1], "accuracy": round(v[1] / v[0], 4)}
            for k, v in sorted(months.items())
        ],
        "rules": sorted(
            (
                {
                    "rule_id": rid,
                    "correct": c,
                    "wrong": w,
                    "precision": round(c / (c + w), 4),
                    "flagged": c + w >= MIN_FEEDBACK and c / (c + w) < FLAG_PRECISION,
                }
                for rid, (c, w) in rules.items()
            ),
            key=lambda x: (not x["flagged"], x["precision"], x["rule_id"]),
        ),
        "proposals": [
            {
                "rule_id": None if rid == "none" else rid,
                "correct_class": None if cls == "?" else cls,
                "count": len(ids),
                "analysis_ids": ids[-50:],
                "why": f"{len(ids)} analyses "
                + (f"named by {rid}" if rid != "none" else "with no named cause")
                + " were marked wrong"
                + (f" as {cls}" if cls != "?" else "")
                + ": draft a rule from them",
            }
            for (rid, cls), ids in sorted(wrong_ways.items(), key=lambda kv: -len(kv[1]))
            if len(ids) >= 2
        ],
        "flag_precision": FLAG_PRECISION,
        "min_feedback": MIN_FEEDBACK,
    }


def group_of(ctx: ServiceContext, *, analysis_id: str, principal: Principal) -> dict[str, Any] | None:
    """The failure group an analysis belongs to and its triage state: its fingerprint's
    (``f:...``) when a rule named it, else its most telling line's template (``t:...``, the
    unknowns inbox's group); None when it has neither."""
    from app.db import repo

    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id)
        check_can_read(principal, row)
        if row.fingerprint:
            gid = f"f:{row.fingerprint}"
        else:
            sigs = lrepo.signals_of(s, analysis_ids=[row.id]).get(row.id) or []
            if not sigs:
                return None
            gid = f"t:{sigs[0].key}"
        g = lrepo.groups(s, ids=[gid]).get(gid)
        return {
            "id": gid,
            "status": g.status if g else "open",
            "assignee": g.assignee if g else None,
            "note": g.note if g else None,
            "tracker_url": g.tracker_url if g else None,
        }
