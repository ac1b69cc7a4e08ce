"""Rule activity per window (the rules pages' "fired in 7/30 days") and the data version that
keeps the cached aggregates fresh, read straight from the repo on both backends."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import update

from app.db import repo
from app.db.migrate import upgrade
from app.db.models import Analysis, Feedback, Finding
from app.db.session import Database
from app.service.aggregates import data_version

NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)


def _analysis(aid: str, days_ago: float, rules: list[tuple[str, str]]) -> tuple[Analysis, list[Finding]]:
    created = NOW - dt.timedelta(days=days_ago)
    root = next((rid for rid, role in rules if role == "root_cause"), None)
    row = Analysis(
        id=aid,
        created_at=created,
        finished_at=created,
        status="done",
        source="api",
        root_rule_id=root,
        root_class="x.y" if root else "unknown",
    )
    findings = [
        Finding(
            analysis_id=aid,
            position=i,
            rule_id=rid,
            rule_version=1,
            failure_class="x.y",
            kind="infra",
            severity="error",
            role=role,
            confidence=0.9,
            count=1,
            fingerprint="f" * 32,
        )
        for i, (rid, role) in enumerate(rules)
    ]
    return row, findings


def test_activity_counts_each_window_and_the_version_moves_with_every_change(db_url: str) -> None:
    db = Database(db_url)
    try:
        upgrade(db.engine)
        seeded = [
            _analysis("01A" + "0" * 23, 2, [("rule-a", "root_cause"), ("rule-b", "symptom")]),
            _analysis("01B" + "0" * 23, 10, [("rule-a", "root_cause")]),
            _analysis("01C" + "0" * 23, 20, [("rule-b", "root_cause"), ("rule-a", "related")]),
            _analysis("01D" + "0" * 23, 45, [("rule-a", "root_cause"), ("rule-b", "symptom")]),
            _analysis("01E" + "0" * 23, 1, []),
        ]
        with db.write() as s:
            for row, findings in seeded:
                s.add(row)
                s.flush()
                s.add_all(findings)
        since = [NOW - dt.timedelta(days=7), NOW - dt.timedelta(days=30)]
        with db.read() as s:
            activity = repo.rule_activity(s, since=since)
            v0 = data_version(s)
        # the 45-day-old analysis is outside both windows; "any" counts every role
        assert activity == {
            "rule-a": {"any": [1, 3], "root": [1, 2]},
            "rule-b": {"any": [1, 2], "root": [0, 1]},
        }
        with db.write() as s:
            s.execute(update(Analysis).where(Analysis.id == seeded[1][0].id).values(retriaged_at=NOW))
        with db.read() as s:
            v1 = data_version(s)
        with db.write() as s:
            s.add(Feedback(analysis_id=seeded[0][0].id, verdict="correct"))
        with db.read() as s:
            v2 = data_version(s)
        with db.write() as s:
            s.execute(
                update(Analysis)
                .where(Analysis.id == seeded[4][0].id)
                .values(finished_at=NOW + dt.timedelta(seconds=1))
            )
        with db.read() as s:
            v3 = data_version(s)
        assert len({v0, v1, v2, v3}) == 4, (v0, v1, v2, v3)
    finally:
        db.dispose()
