"""What a failed job's hook may say about the job besides its log: metadata and labels, checked
the same way whichever edge receives them (REST query or JSON part, web form)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.db.repo import JobMeta as JobMeta  # stored with the analysis; the edges build it
from app.engine.pipeline.library import Framework
from app.errors import ValidationFailedError

__all__ = [
    "CONTROL_IN_TEXT",
    "JobMeta",
    "JobMetadata",
    "Source",
    "no_control",
    "parse_labels",
    "validate_metadata",
]

Source = Literal["web", "api", "slack", "cli"]  # which edge an analysis came through


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


def checked_text(
    value: str | None, what: str, *, limit: int, multiline: bool = False, empty: str = ""
) -> str | None:
    """A free-text field of a request (None stays None): not blank, at most ``limit``
    characters, no control character (tabs and newlines too unless ``multiline``); a
    ValidationFailedError (422) naming the field otherwise. ``empty`` adds a hint to the
    blank case."""
    if value is None:
        return None
    if not value.strip():
        raise ValidationFailedError(f"{what} is empty{empty}")
    if len(value) > limit:
        raise ValidationFailedError(f"{what} is longer than {limit} characters")
    try:
        return no_control(value, what, CONTROL_IN_TEXT if multiline else CONTROL)
    except ValueError as exc:
        raise ValidationFailedError(str(exc)) from None


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
