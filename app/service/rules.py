"""What the edges read about rules: the library's rules filtered one way for every edge, the
versions stored with past analyses, and how each rule does in the field (activity, feedback,
comments)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from app.db import repo
from app.engine.pipeline.library import Rule
from app.service import aggregates
from app.service.context import ServiceContext

__all__ = ["RuleField", "StoredRuleVersion", "rule_field", "rules_field", "select_rules", "stored_versions"]


def select_rules(
    ctx: ServiceContext,
    *,
    failure_class: str | None = None,
    framework: str | None = None,
    status: str | None = None,
    text: str | None = None,
) -> list[Rule]:
    """The library's rules by class then id, narrowed by each filter given. A rule that names no
    framework applies to all, so it stays under any `framework`; `text`: every word must be in
    the id, title, class or tags (case-insensitive)."""
    words = (text or "").lower().split()
    out = []
    for lr in sorted(ctx.library.rules, key=lambda lr: (lr.rule.failure_class, lr.rule.id)):
        r = lr.rule
        if failure_class and r.failure_class != failure_class:
            continue
        if framework and r.frameworks and framework not in r.frameworks:
            continue
        if status and r.status.value != status:
            continue
        if words:
            hay = f"{r.id} {r.title} {r.failure_class} {' '.join(r.tags)}".lower()
            if any(w not in hay for w in words):
                continue
        out.append(r)
    return out


@dataclass(frozen=True)
class StoredRuleVersion:
    """A rule's text as it was when it matched (old reports show the text they were made with)."""

    version: int
    text_sha256: str
    text: str
    failure_class: str
    title: str
    library_version: str
    first_seen_at: dt.datetime


def stored_versions(ctx: ServiceContext, *, rule_id: str) -> list[StoredRuleVersion]:
    """Oldest first."""
    with ctx.db.read() as s:
        return [
            StoredRuleVersion(
                rv.version,
                rv.text_sha256,
                rv.text,
                rv.failure_class,
                rv.title,
                rv.library_version,
                rv.first_seen_at,
            )
            for rv in repo.rule_versions(s, rule_id=rule_id)
        ]


def _windows() -> list[dt.datetime]:
    # to the minute: the activity counts are cached per question (app.service.aggregates)
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    return [now - dt.timedelta(days=7), now - dt.timedelta(days=30)]


def _activity(s: Any) -> dict[str, dict[str, list[int]]]:
    since = _windows()
    return aggregates.CACHE.get(s, ("rule_activity", *since), lambda: repo.rule_activity(s, since=since))


@dataclass(frozen=True)
class RuleField:
    """How one rule does in the field: fired in the last 7 and 30 days (as root cause and in any
    role), the feedback verdicts on analyses it led, the latest comments."""

    activity: dict[str, list[int]]
    feedback: dict[str, int]
    comments: list[dict[str, Any]]


def rules_field(ctx: ServiceContext) -> tuple[dict[str, dict[str, list[int]]], dict[str, dict[str, int]]]:
    """Activity and feedback of every rule, by rule id (the library page)."""
    with ctx.db.read() as s:
        return _activity(s), repo.rule_feedback(s)


def rule_field(ctx: ServiceContext, *, rule_id: str) -> RuleField:
    with ctx.db.read() as s:
        act = _activity(s).get(rule_id, {"root": [0, 0], "any": [0, 0]})
        fb = repo.rule_feedback(s, rule_id=rule_id).get(rule_id, {})
        comments = repo.rule_comments(s, rule_id=rule_id)
    return RuleField(act, fb, comments)
