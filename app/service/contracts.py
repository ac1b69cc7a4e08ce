"""The analysis as the outside world sees it: one typed contract for every edge.

`app.service.present` builds these resources (as JSON-ready dicts, which is what the edges
send and render); the models here declare them. The REST API documents them (OpenAPI), the
web templates and Slack blocks read the same keys, and `tests/test_contracts.py` fails when
`present` fills a key that is not declared here or leaves out one that is.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.engine.models import Action, Fact, Finding, FrameworkInfo, PossibleCause, SignalLine
from app.service.metadata import JobMetadata, Source

__all__ = [
    "AnalysisPage",
    "AnalysisResource",
    "AnalysisSummary",
    "FeedbackOut",
    "FileInfo",
    "Links",
    "Problem",
    "RecurrenceInfo",
    "RetriageChanges",
    "SuspectHostInfo",
]


class Problem(BaseModel):
    """RFC 9457 problem details (`application/problem+json`)."""

    type: str = Field(examples=["/problems/not-found"])
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


class Links(BaseModel):
    self_: str = Field(alias="self")
    report_md: str
    report_html: str
    log: str
    feedback: str
    retriage: str
    duplicate_of: str | None = None

    model_config = ConfigDict(populate_by_name=True)


class FileInfo(BaseModel):
    name: str
    size: int
    sha256: str
    url: str


class RecurrenceInfo(BaseModel):
    fingerprint: str
    fingerprint_version: int = Field(description="The fingerprint algorithm's version (grouping).")
    total: int
    in_window: int
    window_days: int
    first_seen: str
    first_analysis_id: str | None = Field(description="None for a token without `read` (not its analysis).")
    last_seen: str
    jobs: int
    hosts: int
    summary: str = Field(examples=["seen 14 times in 7 days (21 in all), first on 2025-05-01"])


class SuspectHostInfo(BaseModel):
    host: str
    failures: int
    jobs: int
    classes: list[str]
    first_seen: str
    last_seen: str
    latest_analysis_id: str | None = Field(description="None for a token without `read`.")


class FeedbackOut(BaseModel):
    id: int
    analysis_id: str
    created_at: str
    verdict: str
    correct_class: str | None
    comment: str | None


class AnalysisResource(BaseModel):
    """An analysis: the CLI's JSON contract (when done) plus id, status, metadata and links."""

    id: str
    status: Literal["pending", "done", "failed"]
    created_at: str
    finished_at: str | None
    source: Source
    metadata: JobMetadata
    links: Links
    permalink: str
    files: list[FileInfo]
    config: dict[str, Any] | None = None
    duplicate_of: str | None = None
    recurrence: RecurrenceInfo | None = None
    suspect_hosts: list[SuspectHostInfo] = []
    feedback: list[FeedbackOut] = []
    retriaged_at: str | None = None
    error: Problem | None = None
    # the Analysis contract (present once status is `done`)
    library_version: str | None = None
    framework: FrameworkInfo | None = None
    root_cause: Finding | None = None
    findings: list[Finding] | None = None
    possible_causes: list[PossibleCause] | None = None
    timeline: dict[str, Any] | None = None
    next_steps: list[str] | None = None
    warnings: list[str] | None = None
    config_diff: str | None = None
    stats: dict[str, Any] | None = None
    facts: list[Fact] | None = None
    action: Action | None = None
    signals: list[SignalLine] | None = None


class AnalysisSummary(BaseModel):
    id: str
    status: str
    created_at: str
    source: str
    metadata: JobMetadata
    failure_class: str | None
    kind: str | None
    rule_id: str | None
    title: str | None
    confidence: float | None
    framework: str | None
    library_version: str | None
    fingerprint: str | None
    duplicate_of: str | None
    links: dict[str, str]


class AnalysisPage(BaseModel):
    items: list[AnalysisSummary]
    next_cursor: str | None
    links: dict[str, str | None]


class RetriageChanges(BaseModel):
    changed: bool
    root_cause_changed: bool
    before: dict[str, Any]
    after: dict[str, Any]
    added_rules: list[str]
    removed_rules: list[str]
