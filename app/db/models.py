"""The database schema (SQLAlchemy 2, typed). Alembic migrations in ``migrations/`` create it.

Raw logs are not stored here: each analysis file points at a content-addressed, redacted, zstd
blob in the data directory (``blobs`` records which blobs exist and their sizes).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive, in UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dt.datetime: UTCDateTime,
        dict[str, Any]: JSON,
        dict[str, str]: JSON,
    }


def table_of(model: type[Base]) -> Table:
    """A model's table, typed (Core inserts of many rows skip the ORM unit of work)."""
    return cast(Table, model.__table__)


class ApiToken(Base):
    """An API token. Only the SHA-256 of the secret is stored; `prefix` identifies it in lists."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(100))  # space-separated: ingest read admin
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[dt.datetime | None]
    expires_at: Mapped[dt.datetime | None]
    revoked_at: Mapped[dt.datetime | None]

    @property
    def scope_set(self) -> frozenset[str]:
        return frozenset(self.scopes.split())


class RuleVersion(Base):
    """A rule as it was when it matched: old reports still show the rule text they were made with."""

    __tablename__ = "rule_versions"
    __table_args__ = (UniqueConstraint("rule_id", "version", "text_sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    rule_id: Mapped[str] = mapped_column(String(100), index=True)
    version: Mapped[int]
    text_sha256: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    failure_class: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(200))
    library_version: Mapped[str] = mapped_column(String(50))
    first_seen_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Blob(Base):
    """A redacted log (or config) in the blob store, by the SHA-256 of its (uncompressed) content."""

    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    stored_size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # where to enter the compressed blob: its independent zstd frames, each as
    # [uncompressed offset, compressed offset, newlines before it], then the end as
    # [size, stored size, newlines, lines] (app.blobstore.base.FrameIndex); None for a blob
    # stored as one frame (before 0003) or already stored when the upload came: read from the start
    line_index: Mapped[list[list[int]] | None] = mapped_column(JSON)


class Analysis(Base):
    __tablename__ = "analyses"
    __table_args__ = (
        UniqueConstraint("idempotency_scope", "idempotency_key"),
        Index("ix_analyses_fingerprint_created", "fingerprint", "created_at"),
        Index("ix_analyses_root_rule_created", "root_rule_id", "created_at"),
        # covers the history/trends window so SQLite never walks rows that carry the result JSON
        Index(
            "ix_analyses_window",
            "created_at",
            "id",
            "status",
            "root_class",
            "root_kind",
            "job_id",
            "root_title",
        ),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True)  # ULID: sorts by creation time
    created_at: Mapped[dt.datetime] = mapped_column(index=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(index=True)  # the cache's data version
    status: Mapped[str] = mapped_column(String(16), index=True)  # pending | done | failed
    source: Mapped[str] = mapped_column(String(16))  # web | api | slack | cli
    # job metadata, as the hook reported it
    job_id: Mapped[str | None] = mapped_column(String(256), index=True)
    framework: Mapped[str | None] = mapped_column(String(32))
    exit_code: Mapped[int | None]
    host: Mapped[str | None] = mapped_column(String(255), index=True)
    labels: Mapped[dict[str, str]] = mapped_column(default=dict)
    # who and how
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
    idempotency_scope: Mapped[str | None] = mapped_column(String(32))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_digest: Mapped[str | None] = mapped_column(String(64))
    runner: Mapped[str | None] = mapped_column(String(128))  # host:pid of the server running it
    # the logs
    log_digest: Mapped[str | None] = mapped_column(String(64), index=True)
    log_bytes: Mapped[int | None] = mapped_column(BigInteger)
    duplicate_of_id: Mapped[str | None] = mapped_column(ForeignKey("analyses.id", ondelete="SET NULL"))
    config_name: Mapped[str | None] = mapped_column(String(255))
    config_sha256: Mapped[str | None] = mapped_column(ForeignKey("blobs.sha256"))
    # the result, denormalised for filters and stats; `result` is the Analysis JSON contract
    library_version: Mapped[str | None] = mapped_column(String(50))
    root_class: Mapped[str | None] = mapped_column(String(100), index=True)
    root_kind: Mapped[str | None] = mapped_column(String(32), index=True)
    root_rule_id: Mapped[str | None] = mapped_column(String(100))
    root_title: Mapped[str | None] = mapped_column(String(300))  # searched by the history page
    fingerprint: Mapped[str | None] = mapped_column(String(32))
    # the algorithm `fingerprint` and the findings' fingerprints were computed with
    # (app.engine.fingerprint.VERSIONS)
    fingerprint_version: Mapped[int] = mapped_column(SmallInteger, server_default="1")
    framework_detected: Mapped[str | None] = mapped_column(String(32), index=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    retriaged_at: Mapped[dt.datetime | None] = mapped_column(index=True)

    files: Mapped[list[AnalysisFile]] = relationship(
        back_populates="analysis", cascade="all, delete-orphan", order_by="AnalysisFile.position"
    )
    findings: Mapped[list[Finding]] = relationship(
        back_populates="analysis", cascade="all, delete-orphan", order_by="Finding.position"
    )
    feedback: Mapped[list[Feedback]] = relationship(
        back_populates="analysis", cascade="all, delete-orphan", order_by="Feedback.id"
    )


class AnalysisFile(Base):
    __tablename__ = "analysis_files"

    analysis_id: Mapped[str] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    blob_sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"), index=True)
    size: Mapped[int] = mapped_column(BigInteger)

    analysis: Mapped[Analysis] = relationship(back_populates="files")


class Finding(Base):
    __tablename__ = "findings"
    # rule activity reaches a window's findings through its analyses
    __table_args__ = (Index("ix_findings_analysis_rule", "analysis_id", "rule_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    analysis_id: Mapped[str] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), index=True)
    position: Mapped[int]
    rule_version_id: Mapped[int | None] = mapped_column(ForeignKey("rule_versions.id"))
    rule_id: Mapped[str] = mapped_column(String(100), index=True)
    rule_version: Mapped[int]
    failure_class: Mapped[str] = mapped_column(String(100), index=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    role: Mapped[str] = mapped_column(String(16))
    confidence: Mapped[float] = mapped_column(Float)
    count: Mapped[int]
    fingerprint: Mapped[str] = mapped_column(String(32), index=True)

    analysis: Mapped[Analysis] = relationship(back_populates="findings")
    hosts: Mapped[list[FindingHost]] = relationship(cascade="all, delete-orphan")


class FindingHost(Base):
    """Hosts a finding was seen on (from the log lines, else the host the hook reported)."""

    __tablename__ = "finding_hosts"

    finding_id: Mapped[int] = mapped_column(ForeignKey("findings.id", ondelete="CASCADE"), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True, index=True)


class Feedback(Base):
    __tablename__ = "feedback"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    analysis_id: Mapped[str] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    verdict: Mapped[str] = mapped_column(String(16))  # correct | wrong
    correct_class: Mapped[str | None] = mapped_column(String(100))
    comment: Mapped[str | None] = mapped_column(Text)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))

    analysis: Mapped[Analysis] = relationship(back_populates="feedback")


class Retriage(Base):
    """One re-run of an analysis with a newer rule library, and what changed."""

    __tablename__ = "retriages"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    analysis_id: Mapped[str] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    from_library_version: Mapped[str | None] = mapped_column(String(50))
    to_library_version: Mapped[str] = mapped_column(String(50))
    from_class: Mapped[str | None] = mapped_column(String(100))
    to_class: Mapped[str] = mapped_column(String(100))
    changes: Mapped[dict[str, Any]] = mapped_column(JSON)


class RecurrenceDay(Base):
    """Counted analyses of a root-cause fingerprint per UTC day (see app/db/rollup.py)."""

    __tablename__ = "recurrence_days"

    fingerprint: Mapped[str] = mapped_column(String(32), primary_key=True)
    day: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    analyses: Mapped[int]
    first_at: Mapped[dt.datetime]
    last_at: Mapped[dt.datetime]
    first_analysis_id: Mapped[str] = mapped_column(String(26))


class RecurrenceJob(Base):
    """Counted analyses of a fingerprint per job (the analysis id when the hook named no job)."""

    __tablename__ = "recurrence_jobs"

    fingerprint: Mapped[str] = mapped_column(String(32), primary_key=True)
    job_key: Mapped[str] = mapped_column(String(256), primary_key=True)
    analyses: Mapped[int]


class RecurrenceHost(Base):
    """Counted analyses of a fingerprint per host its root-cause findings named."""

    __tablename__ = "recurrence_hosts"

    fingerprint: Mapped[str] = mapped_column(String(32), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    analyses: Mapped[int]


class RecurrenceTotal(Base):
    """How many rows `recurrence_jobs` and `recurrence_hosts` hold per fingerprint, kept as rows
    come and go: a common failure's distinct jobs are read from one row, not counted over every
    job it ever hit (4 ms per completion at 50,000 jobs on PostgreSQL, and growing)."""

    __tablename__ = "recurrence_totals"

    fingerprint: Mapped[str] = mapped_column(String(32), primary_key=True)
    jobs: Mapped[int]
    hosts: Mapped[int]


class SlackEvent(Base):
    """Slack deliveries already taken: an event id (or a message's channel and ts) is claimed
    once, so Slack's retries, a second worker or a restart never answer twice."""

    __tablename__ = "slack_events"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    received_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)


class SlackMessage(Base):
    """A message the bot posted about an analysis: updated in place when feedback or a
    re-triage changes the result; a notification's thread takes repeats of its fingerprint."""

    __tablename__ = "slack_messages"
    __table_args__ = (Index("ix_slack_messages_channel_fp_created", "channel", "fingerprint", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    analysis_id: Mapped[str] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), index=True)
    channel: Mapped[str] = mapped_column(String(100))
    ts: Mapped[str] = mapped_column(String(40))
    thread_ts: Mapped[str | None] = mapped_column(String(40))  # None: a top-level post
    purpose: Mapped[str] = mapped_column(String(16))  # reply | notify | repeat
    fingerprint: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Outcome(Base):
    """How the next attempt of a failed job ended (`POST /api/v1/jobs/{job_id}/outcomes`), linked
    to the analysed failure it followed; the class, rule and fingerprint are copied from that
    analysis so the history of an action is one indexed count (app.engine.pipeline.verdict)."""

    __tablename__ = "outcomes"
    __table_args__ = (
        # a hook that posts the same attempt twice (a retry after a timeout) records it once
        UniqueConstraint("job_id", "attempt_id"),
        Index("ix_outcomes_class_rule", "failure_class", "rule_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String(256), index=True)
    attempt_id: Mapped[str | None] = mapped_column(String(256))
    # the failure the attempt followed; NULL when the job has no analysed failure (or it was deleted)
    analysis_id: Mapped[str | None] = mapped_column(
        ForeignKey("analyses.id", ondelete="SET NULL"), index=True, unique=True
    )
    status: Mapped[str] = mapped_column(String(16))  # succeeded | failed
    # what the attempt did: retry | retry_excluding | fix_and_rerun (default: what was advised)
    action: Mapped[str | None] = mapped_column(String(20))
    advised: Mapped[str | None] = mapped_column(String(20))  # the decision the analysis gave
    failure_class: Mapped[str | None] = mapped_column(String(100))
    rule_id: Mapped[str | None] = mapped_column(String(100))
    fingerprint: Mapped[str | None] = mapped_column(String(32), index=True)
    excluded_hosts: Mapped[list[str]] = mapped_column(JSON, default=list)
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))


class OutcomeTally(Base):
    """Outcomes counted per scope of the failure they followed (`class`: the class id, `rule`:
    "class rule", `fingerprint`: the fingerprint), kept with each insert: the history of an
    action is three primary-key reads however many outcomes there are."""

    __tablename__ = "outcome_tallies"

    scope: Mapped[str] = mapped_column(String(12), primary_key=True)
    key: Mapped[str] = mapped_column(String(210), primary_key=True)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    retries_ok: Mapped[int] = mapped_column(Integer, default=0)
    fixes: Mapped[int] = mapped_column(Integer, default=0)
    fixes_ok: Mapped[int] = mapped_column(Integer, default=0)


class OddRankHost(Base):
    """A host of the rank(s) a timed-out job waited for (the timeline's lead straggler, silent
    or vanished rank): one such job says little, the same host in several is a lemon suspect."""

    __tablename__ = "odd_rank_hosts"

    analysis_id: Mapped[str] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True, index=True)


class AnalysisSignal(Base):
    """An error line an analysis' logs end with and its template (app.engine.signals): the
    unknowns inbox groups analyses by ``key``, similar failures share keys, and a draft rule is
    back-tested on ``text`` (stored lines, not a rescan of every blob)."""

    __tablename__ = "analysis_signals"
    __table_args__ = (Index("ix_analysis_signals_key", "key", "analysis_id"),)

    analysis_id: Mapped[str] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)  # 0: the most telling
    key: Mapped[str] = mapped_column(String(16))
    template: Mapped[str] = mapped_column(Text)
    file: Mapped[str] = mapped_column(Text)
    line: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    weight: Mapped[int] = mapped_column(Integer)


class FailureGroup(Base):
    """A failure group's triage state, like a tracker issue: one fingerprint (``f:...``) or one
    cluster of unknown failures (``t:...``, its signal template's key)."""

    __tablename__ = "failure_groups"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), default="open")  # open | resolved | ignored
    assignee: Mapped[str | None] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(Text)
    tracker_url: Mapped[str | None] = mapped_column(String(2000))
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))


class RuleDraft(Base):
    """A rule drafted from a cluster or from lines of a log, with its back-test (issue 23)."""

    __tablename__ = "rule_drafts"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    source: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"cluster_id"} or {"analysis_id", "lines"}
    rule: Mapped[dict[str, Any]] = mapped_column(JSON)
    backtest: Mapped[dict[str, Any]] = mapped_column(JSON)
    published_version: Mapped[int | None] = mapped_column(Integer)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))


class SiteRule(Base):
    """A site rule pack's rule, one row per published version: the pack is each id's latest,
    and the rows are the audit trail (who, when, what changed)."""

    __tablename__ = "site_rules"
    __table_args__ = (Index("ix_site_rules_published_at", "published_at"),)

    rule_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    rule: Mapped[dict[str, Any]] = mapped_column(JSON)  # the rule as in a YAML file of rules/
    draft_id: Mapped[str | None] = mapped_column(String(26))
    diff: Mapped[str] = mapped_column(Text)  # against the version before (or the bundled rule)
    author: Mapped[str] = mapped_column(String(200))
    published_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))


class HostClearance(Base):
    """An operator cleared a host (repaired, replaced): its hardware failures before this time no
    longer count towards the exclusion list."""

    __tablename__ = "host_clearances"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    cleared_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    note: Mapped[str | None] = mapped_column(Text)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
