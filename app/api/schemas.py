"""Request and response models of the REST API (they also make the OpenAPI document)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.engine.models import Finding, FrameworkInfo
from app.engine.pipeline.library import Framework
from app.errors import ValidationFailedError

Source = Literal["web", "api", "slack", "cli"]
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$")
MAX_LABELS = 32
# control characters (C0, DEL, C1) and lone surrogates: never in a job id, host or label, and
# PostgreSQL refuses NUL in text (a 500 before this check); comments may hold tabs and newlines
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def no_control(value: str, what: str, pattern: re.Pattern[str] = CONTROL) -> str:
    """`value` unless it holds a control character (ValueError naming it and where)."""
    m = pattern.search(value)
    if m is not None:
        raise ValueError(f"{what}: control character U+{ord(m.group()):04X} at position {m.start()}")
    return value


class Problem(BaseModel):
    """RFC 9457 problem details (`application/problem+json`)."""

    type: str = Field(examples=["/problems/not-found"])
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


class JobMetadata(BaseModel):
    """What the job's failure hook reports about the job (all optional)."""

    model_config = ConfigDict(extra="forbid")

    job_id: str | None = Field(default=None, min_length=1, max_length=256)
    framework: Framework | None = Field(
        default=None, description="The job's framework; overrides detection from the log."
    )
    exit_code: int | None = Field(
        default=None,
        ge=-(2**31),
        le=2**31 - 1,
        description="The job's exit status as the hook saw it; 0 with a fatal error in the log adds a "
        "`job.exit_status_masked` finding.",
    )
    host: str | None = Field(default=None, min_length=1, max_length=255)
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels (up to 32).")
    source: Source = "api"

    @field_validator("job_id", "host")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        return v if v is None else no_control(v, "value")

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > MAX_LABELS:
            raise ValueError(f"at most {MAX_LABELS} labels")
        for k, val in v.items():
            if not LABEL_KEY.fullmatch(k):
                raise ValueError(f"label key {k[:80]!r}: letters, digits, _ . - / (up to 63)")
            if len(val) > 256:
                raise ValueError(f"label {k!r}: value over 256 characters")
            no_control(val, f"label {k!r}")
        return v


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValidationFailedError(f"labels: key {key[:80]!r} appears twice in the JSON object")
        obj[key] = value
    return obj


def parse_labels(pairs: list[str], json_objects: list[str] | None = None) -> dict[str, str]:
    """Labels from `key=value` pairs and `labels` JSON objects. Each key may be given once, in
    all of them together (a key twice, with the same value or not, is a 422: which was meant?);
    a JSON value is a string, number or boolean (`true`, `1.5` as written)."""
    labels: dict[str, str] = {}

    def put(key: str, value: str) -> None:
        if key in labels:
            raise ValidationFailedError(f"label {key[:80]!r} given twice; give each label once")
        labels[key] = value

    for raw in json_objects or []:
        try:
            obj = json.loads(raw, object_pairs_hook=_unique_pairs)
        except json.JSONDecodeError as exc:
            raise ValidationFailedError(f"labels: not a JSON object ({exc.msg})") from None
        except RecursionError:
            raise ValidationFailedError("labels: not a JSON object of labels (nested too deep)") from None
        if not isinstance(obj, dict):
            raise ValidationFailedError("labels: not a JSON object")
        for k, v in obj.items():
            if isinstance(v, str):
                put(k, v)
            elif isinstance(v, bool | int | float):
                put(k, json.dumps(v))
            else:
                raise ValidationFailedError(
                    f"label {k[:80]!r}: the value must be a string, number or boolean"
                )
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValidationFailedError(f"label {pair[:80]!r}: write labels as key=value")
        put(key.strip(" "), value.strip(" "))  # spaces only: a control character is refused
    return labels


def validate_metadata(data: dict[str, Any]) -> JobMetadata:
    try:
        return JobMetadata.model_validate(data)
    except ValidationError as exc:
        msgs = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'metadata'}: {e['msg']}" for e in exc.errors()
        )
        raise ValidationFailedError(msgs) from None


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
    next_steps: list[str] | None = None
    warnings: list[str] | None = None
    config_diff: str | None = None
    stats: dict[str, Any] | None = None


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


class Health(BaseModel):
    status: str
    checks: dict[str, Any] = {}
