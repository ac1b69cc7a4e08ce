"""Request and response models of the REST API (they also make the OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.service.contracts import (
    AnalysisPage,
    AnalysisResource,
    AnalysisSummary,
    FeedbackOut,
    FileInfo,
    Links,
    RecurrenceInfo,
    RetriageChanges,
    SuspectHostInfo,
)
from app.service.metadata import CONTROL_IN_TEXT, no_control

__all__ = [  # the service's resource contracts, which the REST API documents
    "AnalysisPage",
    "AnalysisResource",
    "AnalysisSummary",
    "FeedbackIn",
    "FeedbackOut",
    "FileInfo",
    "HostClearIn",
    "LibraryInfo",
    "Links",
    "OutcomeIn",
    "OutcomeOut",
    "RecurrenceInfo",
    "RetriageChanges",
    "RetriageOut",
    "RuleDetail",
    "RuleSummary",
    "SuspectHostInfo",
]


class OutcomeIn(BaseModel):
    """How the next attempt of a failed job ended (sent by the hook when that attempt ends)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["succeeded", "failed"]
    action: Literal["retry", "retry_excluding", "fix_and_rerun"] | None = Field(
        default=None,
        description="What the attempt did: run again as it was, run without some hosts, or run after "
        "a change. Default: what the analysis advised.",
    )
    attempt_id: str | None = Field(
        default=None,
        max_length=256,
        description="The scheduler's id of the attempt (e.g. SLURM_JOB_ID): a second post of the same "
        "attempt returns the first.",
    )
    analysis_id: str | None = Field(
        default=None, max_length=26, description="The failure the attempt followed; default: see started_at."
    )
    started_at: str | None = Field(
        default=None,
        description="When the attempt started (ISO 8601): the outcome follows the job's newest analysis "
        "before it. Without it and without analysis_id: the job's newest analysis with no outcome yet.",
    )
    excluded_hosts: list[str] = Field(default_factory=list, max_length=1000)
    detail: str | None = Field(default=None, max_length=4000)


class OutcomeOut(BaseModel):
    id: int
    job_id: str
    attempt_id: str | None
    analysis_id: str | None = Field(description="The failure it followed; None when the job had none.")
    status: str
    action: str | None
    advised: str | None = Field(description="The decision the analysis gave.")
    failure_class: str | None
    rule_id: str | None
    excluded_hosts: list[str]
    detail: str | None
    created_at: str
    links: dict[str, str | None]


class GroupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["open", "resolved", "ignored"] | None = None
    assignee: str | None = Field(default=None, max_length=200)
    note: str | None = Field(
        default=None, max_length=4000, description='what is known: "fixed by pinning NCCL 2.21"'
    )
    tracker_url: str | None = Field(default=None, max_length=2000, description="the issue tracking it")
    clear: list[Literal["assignee", "note", "tracker_url"]] = Field(
        default_factory=list, description="fields to empty"
    )


class DraftIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster_id: str | None = Field(
        default=None, max_length=40, description="a cluster of GET /api/v1/clusters"
    )
    analysis_id: str | None = Field(default=None, max_length=26)
    file: int = Field(default=0, ge=0, le=100_000, description="the analysis' log file (0 the first)")
    lines: list[int] | None = Field(default=None, max_length=50, description="line numbers of that file")
    analysis_ids: list[str] | None = Field(
        default=None, max_length=50, description="analyses whose most telling error lines to draft from"
    )


class SiteClassIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^site\.[a-z0-9_]+$", max_length=100)
    kind: Literal["hardware", "infra", "config", "code", "numerics", "unknown"]
    summary: str = Field(min_length=5, max_length=300)


class PublishIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(
        default=None, max_length=100, description="the rule id (a bundled id overrides it)"
    )
    failure_class: str | None = Field(default=None, max_length=100)
    site_class: SiteClassIn | None = Field(default=None, description="a new class of this site")
    title: str | None = Field(default=None, max_length=120)
    explanation: str | None = Field(default=None, max_length=4000)
    remediation: str | None = Field(default=None, max_length=8000)
    severity: Literal["error", "warning", "info", "critical"] | None = None
    confidence: float | None = Field(default=None, gt=0, le=1)
    pattern: str | None = Field(default=None, max_length=2000, description="the pattern, edited")
    again: bool | None = Field(default=None, description="publish a draft published before as a new version")


class HostClearIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str | None = Field(
        default=None, max_length=4000, description="What was done: repaired, replaced ..."
    )


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: Literal["correct", "wrong"]
    correct_class: str | None = Field(
        default=None, max_length=100, description="The right failure class, when the verdict is `wrong`."
    )
    comment: str | None = Field(default=None, max_length=4000)

    @field_validator("correct_class")
    @classmethod
    def _class(cls, v: str | None) -> str | None:
        return v if v is None else no_control(v, "value")

    @field_validator("comment")
    @classmethod
    def _comment(cls, v: str | None) -> str | None:
        return v if v is None else no_control(v, "value", CONTROL_IN_TEXT)


class RetriageOut(BaseModel):
    summary: str
    changes: RetriageChanges
    analysis: AnalysisResource


class RuleSummary(BaseModel):
    id: str
    version: int
    status: str
    failure_class: str
    kind: str
    severity: str
    title: str
    frameworks: list[str]


class RuleDetail(RuleSummary):
    explanation: str
    remediation: str
    references: list[dict[str, Any]]
    yaml: str
    current: bool = Field(description="False when this is an older version kept with past analyses.")
    stored_versions: list[dict[str, Any]]


class LibraryInfo(BaseModel):
    version: str
    rules: int
    active_rules: int
    classes: dict[str, dict[str, str]]
    changelog: str


class LogSearchOut(BaseModel):
    line: int | None = Field(description="the line found (1-based), or null")
    reached: int = Field(
        description="with no line: the last line looked at (going backward, the first), where a "
        "search that goes on starts (`from`)"
    )
    done: bool = Field(description="the search reached the end (or the start) of the log")
    page: str | None = Field(description="the log viewer's page at the line found")
