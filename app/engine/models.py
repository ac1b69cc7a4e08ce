"""The analysis result: the JSON contract shared by the CLI, the API and the Slack bot.

Keep it stable. Fields may be added; none is renamed or removed without a major version.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["root_cause", "symptom", "related"]


class Evidence(BaseModel):
    model_config = ConfigDict(frozen=True)

    file: str
    line: int  # 1-based line number within `file`
    text: str  # redacted, normalised (no ANSI codes)


class Patch(BaseModel):
    """One config change, typed, with its rendering in the target's dialect."""

    target: Literal["yaml", "hydra", "cli", "env"]
    path: list[str]
    op: Literal["set", "unset", "flag_on", "flag_off"]
    value: Any = None
    why: str
    framework: str | None = None  # the dialect this patch is written for; None = general
    computed: bool = True  # False when a value could not be computed from log or config
    note: str | None = None  # what is missing when not computed
    rendered: str  # ready to paste: YAML snippet, `a.b=c`, `--flag v`, `export X=v`


class Finding(BaseModel):
    rule_id: str
    rule_version: int
    failure_class: str
    kind: str
    severity: str
    title: str
    confidence: float = Field(ge=0, le=1)
    role: Role
    count: int
    first_line: int
    last_line: int
    evidence: list[Evidence]
    captures: dict[str, str]
    ranks: list[int]
    hosts: list[str]
    # occurrences Ray's log dedup folded into the evidence lines ("[repeated 27x across cluster]"):
    # printed by other processes too, whose ranks and hosts `ranks` and `hosts` cannot list
    ranks_folded: int = 0
    remediation: str
    patches: list[Patch]
    explained_by: str | None = None  # rule id of the finding this one is a symptom of
    files: list[str] = Field(default_factory=list)
    # which of the rule's signatures matched: "main" (its `match`) and/or named pieces
    signatures: list[str] = Field(default_factory=list)
    # when it was first seen (ISO 8601, UTC), from its evidence lines' timestamps; None without any
    first_time: str | None = None


class PossibleCause(BaseModel):
    """A cause the log suggests but does not establish (below the root-cause threshold)."""

    failure_class: str
    kind: str
    rule_id: str
    title: str
    confidence: float = Field(ge=0, le=1)
    evidence: list[Evidence]
    confirm: str  # the evidence that would decide it


class Fact(BaseModel):
    """A value the log states (an argument dump, an engine's start-up line, an error message's
    numbers) or one computed from such values, which steps and patches are chosen by."""

    name: str  # as in rules/facts.yaml
    value: str | int | float | bool  # typed: a size in bytes, a count as an int
    text: str  # as the log printed it ("61.34 GiB"), or as a report shows a computed one
    type: str  # int | float | str | bool | size
    file: str | None = None  # where the log states it; None for a computed fact
    line: int | None = None
    expression: str | None = None  # a computed fact's, over other facts (rules/facts.yaml)


Decision = Literal["retry", "retry_excluding", "fix_and_rerun", "stop", "investigate"]


class OutcomeHistory(BaseModel):
    """What happened when jobs that failed this way were run again, as reported to the service."""

    scope: Literal["fingerprint", "rule", "class"]  # the narrowest with enough outcomes
    retries: int  # next attempts run without a fix (retried as they were, or without hosts)
    succeeded: int
    fixed: int = 0  # next attempts after a change to the job
    fixed_succeeded: int = 0


class Action(BaseModel):
    """What to do with the failed job: retry it, retry it elsewhere, fix it first, stop, or look."""

    decision: Decision
    why: list[str]  # the class's reason first, then the facts that decided it
    exclude_hosts: list[str] = Field(default_factory=list)  # for retry_excluding: as the log names them
    basis: Literal["class", "rule", "facts", "history"] = "class"
    ambiguous: bool = False  # the class alone cannot tell transient from repeating: outcomes decide
    history: OutcomeHistory | None = None


class SignalLine(BaseModel):
    """An error line the logs end with, and its template (app.engine.signals): what an analysis
    with no named cause is grouped by, and what links similar failures."""

    file: str
    line: int
    text: str  # redacted
    template: str  # the line's message with numbers, ids, paths, hosts... as typed holes
    key: str  # the template's stable id
    weight: int  # 2: an exception's own line, 1: an error or fatal level line, 0: the rest


class FrameworkInfo(BaseModel):
    name: str
    version: str | None = None


class Analysis(BaseModel):
    library_version: str
    framework: FrameworkInfo | None
    root_cause: Finding | None
    findings: list[Finding]
    next_steps: list[str]
    warnings: list[str]
    config_diff: str | None = None  # unified diff of the user's config with every patch applied
    # when there is no root cause: what the log suggests, each with what would decide it
    possible_causes: list[PossibleCause] = Field(default_factory=list)
    # when, where and why it stopped: per-rank state, collective forensics, metric history,
    # fail-slow (app.engine.timeline.builder; None when the logs hold nothing to build it from)
    timeline: dict[str, Any] | None = None
    stats: dict[str, Any] = Field(default_factory=dict)  # bytes, lines, seconds, engine
    # what the log states that the advice is chosen by, each with the line it came from
    facts: list[Fact] = Field(default_factory=list)
    # what to do with the job (rules/verdicts.yaml); the service adds measured outcomes to it
    action: Action | None = None
    # the error lines the logs end with, the most telling first (app.engine.signals)
    signals: list[SignalLine] = Field(default_factory=list)
