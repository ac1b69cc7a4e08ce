"""The rule library: schema, loader and lint checks.

A rule is one YAML file ``rules/<area>/<id>.yaml``; its fixtures sit beside it as
``<id>.match*.log`` (must produce the rule) and ``<id>.nomatch*.log`` (must not).
The pydantic models below are the schema: unknown keys are rejected and every error names
the file and the field, so a typo in a rule never silently disables it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import re as stdlib_re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.engine.pipeline.expr import ExprError, parse_expression, required_names
from app.engine.pipeline.triggers import KINDS as TRIGGER_KINDS
from app.errors import RuleError

RULE_ID = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
CLASS_ID = r"^[a-z0-9_]+(?:\.[a-z0-9_]+)?$"
Framework = Literal[
    "roll",
    "chatlearn",
    "slime",
    "verl",
    "openrlhf",
    "megatron",
    "deepspeed",
    "vllm",
    "sglang",
    "ray",
    "pytorch",
]
FRAMEWORKS: tuple[str, ...] = get_args(Framework)


class Strict(BaseModel):
    # built on first validation: a cached library is unpickled, never validated, so a run that
    # hits the cache skips building every rule schema (tens of ms of start-up)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Status(StrEnum):
    experimental = "experimental"
    stable = "stable"
    deprecated = "deprecated"


class Severity(StrEnum):
    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"

    @property
    def weight(self) -> int:
        return {"critical": 3, "error": 2, "warning": 1, "info": 0}[self.value]


def _check_pattern(p: str) -> str:
    try:
        compiled = regex.compile(p)
    except regex.error as exc:
        raise ValueError(f"invalid regex {p!r}: {exc}") from None
    # The fast engine scans raw bytes where `^` would mean "start of the line including
    # its Ray/rank prefix"; the verifier sees the same line. An anchored pattern would
    # silently stop matching prefixed lines, so anchors are not allowed.
    if p.startswith("^") or "(?m)" in p:
        raise ValueError(f"pattern {p!r} is anchored with ^; rules match anywhere in a line")
    if compiled.match(""):
        raise ValueError(f"pattern {p!r} matches the empty string")
    from app.engine.pipeline.redos import backtracking_risk

    risk = backtracking_risk(p)
    if risk:
        raise ValueError(f"pattern {p!r} can backtrack without end on a near-miss line: {risk}")
    return p


Pattern = Annotated[str, Field(min_length=4)]


class Match(Strict):
    """How a rule matches.

    ``any``: line patterns; a line matching one of them is an *anchor*.
    ``all``: each must also match some line within ``window`` lines of the anchor.
    ``not``: none may match within ``window`` lines of the anchor (near-miss guard).
    """

    any: list[Pattern] = Field(min_length=1)
    all: list[Pattern] = Field(default_factory=list)
    not_: list[Pattern] = Field(default_factory=list, alias="not")
    window: int = Field(default=0, ge=0, le=200)
    ignore_case: bool = False

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    @field_validator("any", "all", "not_")
    @classmethod
    def _valid(cls, v: list[str]) -> list[str]:
        return [_check_pattern(p) for p in v]

    @model_validator(mode="after")
    def _window_needed(self) -> Match:
        if (self.all or self.not_) and self.window == 0:
            raise ValueError("`all`/`not` need a `window` (lines around the anchor) of at least 1")
        return self

    @property
    def flags(self) -> int:
        return regex.IGNORECASE if self.ignore_case else 0

    def group_names(self) -> set[str]:
        names: set[str] = set()
        for p in [*self.any, *self.all]:
            names.update(regex.compile(p).groupindex)
        return names


def _check_when(when: str | None) -> None:
    """A `when:` that is not an expression is refused at load, where the rule is named."""
    if when is not None:
        try:
            parse_expression(when)
        except ExprError as exc:
            raise ValueError(f"`when`: {exc}") from None


class Signature(Match):
    """Another way the same failure shows in a log, with its own confidence.

    Real excerpts hold failures in pieces: only the tail of a long message (Ray's table after
    an out-of-memory kill, the link line at its end), a continuation line, or the exception
    type inside a wrapper (`RayTaskError(OutOfMemoryError)`, a ChildFailedError summary, a
    `what():` line). Each piece is a signature; the main one is the rule's `match`. They are
    all in the scanner's one multi-pattern pass; a finding's confidence is that of the best
    signature that matched."""

    name: Annotated[str, Field(pattern=RULE_ID)]
    confidence: float = Field(gt=0, le=1)
    # an expression over the log's facts: the signature counts only where it holds (a failure
    # table's SIGBUS is shared memory only when several workers died of it)
    when: str | None = None

    @model_validator(mode="after")
    def _when_parses(self) -> Signature:
        _check_when(self.when)
        return self


class PatchTarget(StrEnum):
    yaml = "yaml"  # a key in the job's YAML config (ROLL, ChatLearn, verl, OpenRLHF yaml)
    hydra = "hydra"  # a dotted Hydra/OmegaConf override on the command line
    cli = "cli"  # an argparse flag (slime, Megatron, DeepSpeed launcher, vLLM)
    env = "env"  # an environment variable (shell export / Ray runtime_env env_vars)


class PatchOp(StrEnum):
    set = "set"
    unset = "unset"
    flag_on = "flag_on"
    flag_off = "flag_off"


class StepSpec(Strict):
    """One remediation step that holds only for some jobs: a framework's keys, or a condition
    over the log's facts. Shown after the rule's `remediation`, in order, when it applies."""

    do: str = Field(min_length=10)  # Markdown; {placeholders} from the captures and facts
    frameworks: list[Framework] = Field(default_factory=list)  # only when one is detected
    when: str | None = None  # an expression; unknown (a name the log lacks) leaves the step out
    # the facts or captures that chose it, shown with it ("because the log shows ...")
    because: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _when_parses(self) -> StepSpec:
        _check_when(self.when)
        return self


class PatchSpec(Strict):
    """A config change as declared in a rule; values are templates over captures/config."""

    target: PatchTarget
    path: list[str] = Field(min_length=1)
    op: PatchOp = PatchOp.set
    value: str | int | float | bool | None = None
    why: str = Field(min_length=3)
    frameworks: list[Framework] = Field(default_factory=list)
    when: str | None = None  # expression; the patch is offered only when it is true
    # expression over `value` (the computed value) and the captures: a value failing it is not
    # offered (a wrong patch costs the user more than none)
    valid: str | None = None

    @model_validator(mode="after")
    def _value_matches_op(self) -> PatchSpec:
        if self.op is PatchOp.set and self.value is None:
            raise ValueError("op `set` needs a `value`")
        if self.op is not PatchOp.set and self.value is not None:
            raise ValueError(f"op `{self.op.value}` takes no `value`")
        if self.target is PatchTarget.cli and not self.path[-1].startswith("-"):
            raise ValueError("a cli patch path ends in the flag itself, e.g. ['--max-tokens-per-gpu']")
        for name, source in (("when", self.when), ("valid", self.valid)):
            # an expression that cannot parse would only surface as a patch silently not offered
            if source is not None:
                try:
                    parse_expression(source)
                except ExprError as exc:
                    raise ValueError(f"`{name}`: {exc}") from None
        return self


class Implausible(Strict):
    """A value no real run produces: the finding then points at corruption upstream (e.g. ranks
    disagreeing on a collective) rather than at its face-value class."""

    when: str = Field(min_length=3)  # expression over the finding's captures
    why: str = Field(min_length=10)


class Reference(Strict):
    title: str
    url: str | None = None
    kind: Literal["faq", "issue", "pr", "docs", "source", "log"] = "docs"
    fix_status: Literal["fixed", "open", "workaround", "wontfix"] | None = None
    fixed_in: str | None = None


class FixtureExpect(Strict):
    """Extra expectations for one ``*.match*.log`` fixture."""

    captures: dict[str, str] = Field(default_factory=dict)
    patch_values: dict[str, str] = Field(default_factory=dict)  # "a.b.c" or "--flag" -> value
    # patches that must NOT be offered for this log (its facts rule them out), same keys
    absent_patches: list[str] = Field(default_factory=list)
    framework: str | None = None
    signature: str | None = None  # the fixture must match through this signature of the rule


# a rule's `trigger:`: one of the kinds app.engine.pipeline.triggers declares, in its order
if TYPE_CHECKING:
    TriggerName = str
else:
    TriggerName = Literal[tuple(TRIGGER_KINDS)]


class Rule(Strict):
    id: Annotated[str, Field(pattern=RULE_ID)]
    version: int = Field(ge=1)
    status: Status
    failure_class: Annotated[str, Field(pattern=CLASS_ID)]
    severity: Severity
    title: str = Field(min_length=5, max_length=120)
    frameworks: list[Framework] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    match: Match | None = None
    signatures: list[Signature] = Field(default_factory=list)
    # A rule with a trigger fires on evidence other than log text: job metadata, the parsed
    # training metrics, the timeline's verdicts (the kinds: app.engine.pipeline.triggers).
    trigger: TriggerName | None = None
    explains: list[Annotated[str, Field(pattern=CLASS_ID)]] = Field(default_factory=list)
    # classes this failure is a consequence of when they are present and not later in the log
    # (an abort after a watchdog timeout): outranks the class relations (app.engine.pipeline.rank)
    consequence_of: list[Annotated[str, Field(pattern=CLASS_ID)]] = Field(default_factory=list)
    confidence: float = Field(default=0.8, gt=0, le=1)
    # what would confirm this cause when the log only suggests it (shown with possible causes)
    confirm: str | None = None
    implausible: list[Implausible] = Field(default_factory=list)
    explanation: str = Field(min_length=20)
    remediation: str = Field(min_length=10)
    steps: list[StepSpec] = Field(default_factory=list)
    # values computed from the finding's own captures (and the facts), used like captures in the
    # remediation, steps and patches: "used = total - free" of the occurrence the rule reports
    derived: dict[str, str] = Field(default_factory=dict)
    patches: list[PatchSpec] = Field(default_factory=list)
    references: list[Reference] = Field(default_factory=list)
    fixtures: dict[str, FixtureExpect] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    deprecated_by: str | None = None

    @model_validator(mode="after")
    def _templates_use_known_names(self) -> Rule:
        if (self.match is None) == (self.trigger is None):
            raise ValueError("a rule has exactly one of `match` and `trigger`")
        if self.signatures and self.match is None:
            raise ValueError("`signatures` add to `match`: a trigger rule has none")
        sig_names = [s.name for s in self.signatures]
        if len(set(sig_names)) != len(sig_names) or "main" in sig_names:
            raise ValueError("signature names are unique and not `main` (the rule's `match`)")
        for name, source in self.derived.items():
            if not stdlib_re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"derived value {name!r} is not a name")
            try:
                parse_expression(source)
            except ExprError as exc:
                raise ValueError(f"derived value {name}: {exc}") from None
        return self

    def template_names(self) -> set[str]:
        """The names its remediation's and steps' {placeholders} use, and what steps cite."""
        texts = [self.remediation, *(st.do for st in self.steps)]
        names = {n for t in texts for n in stdlib_re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", t)}
        return names | {n for st in self.steps for n in st.because}

    def capture_names(self) -> set[str]:
        if self.match is None:
            kind = TRIGGER_KINDS.get(self.trigger or "")
            return set(kind.captures) if kind else set()
        names = self.match.group_names() | set(self.derived)
        for s in self.signatures:
            names |= s.group_names()
        return names


@dataclass(frozen=True)
class FailureClass:
    id: str
    kind: str
    summary: str
    explains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Kind:
    """Who has to act on a class of failure, as every edge words it (`failure-classes.yaml`)."""

    id: str
    label: str  # "Hardware": the chip on a report
    who: str  # "hardware: drain the node": one line in a chat message
    action: str  # a sentence under the report's root cause


DECISIONS = ("retry", "retry_excluding", "fix_and_rerun", "stop", "investigate")


@dataclass(frozen=True)
class Verdict:
    """What to do with a job that failed this way (`rules/verdicts.yaml`)."""

    decision: str  # one of DECISIONS
    why: str
    ambiguous: bool = False
    # facts that name the host to leave out (retry_excluding) when the finding's lines carry none
    # in a launcher prefix: "mycl-g2" of NCCL's "mycl-g2:353236:353423 [6] transport/net_ib.cc:..."
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerdictCondition:
    """A decision for some classes when the log states something (`conditions:` in
    verdicts.yaml): `when` in the rules' expression language over the facts."""

    classes: tuple[str, ...]
    when: str
    verdict: Verdict


@dataclass(frozen=True)
class FrameworkDetector:
    name: str
    title: str
    detect: tuple[str, ...]
    version: tuple[str, ...]
    # a mark the framework stamps on every line of its processes' output (Ray's "(WorkerDict
    # pid=312563, ip=...)" prefix): searched for only in a file's first 256 KiB and last 1 MiB
    # (scan.SAMPLE_HEAD_BYTES, METRIC_TAIL_BYTES). A literal on every line costs the scan of each
    # chunk it is searched in (~1 ms/MiB each on a Ray log, a quarter of the context patterns'),
    # and one sighting is all a detector needs.
    detect_sampled: tuple[str, ...] = ()
    # config keys and flags only this framework has: advice naming one belongs in a step or patch
    # for this framework (`logtriage rules lint`), not in text every job gets
    keys: tuple[str, ...] = ()


# facts the engine derives from the whole log rather than from one line (`triage`):
# metric_lines: training-metric lines read (a sample in long logs): 0 = no step ran that the log shows
# sigbus_processes: processes torchrun's failure table (in the log's last lines) reports killed by
# SIGBUS (exitcode -7), counted by pid
# lagging_ranks: the ranks the timeline found the others waiting for in a timed-out collective
# (never reached it, or printed no error while the others failed), "0" or "0, 2"; absent otherwise
# launcher_closed_pids: the worker pids torchelastic's agent sent its (last) closing signal, in the
# log's last lines ("46807, 46808, 46809"), and launcher_closing_signal that signal ("SIGHUP");
# absent otherwise
# ray_active_nodes: the nodes the last `ray status` summary lists as active (and idle); absent without one
# nccl_shared_host, nccl_shared_host_procs: a host name NCCL's line prefix shows for two or more
# processes in the log's last lines, and those processes ("GPU [2] (pid 6897) and GPU [3] (pid 6898)")
# oom_table_*: the kernel OOM killer's task table in the log's last lines (one row per process:
# pid, uid, tgid, total_vm, rss in pages, ...): its rows, the process with the largest rss (pid,
# name, pages, GiB at 4 KiB a page) and the other processes of that name within half the size of the
# largest of them (a launch's other ranks, not its small launcher processes): count, PIDs, median GiB
# launcher_killed_pids: the ranks DeepSpeed's launcher killed ("Killing subprocess 230"), "230, 231"
# dup_global_*: global ranks Lightning started more than once ("Initializing distributed: GLOBAL_RANK:
# 1, MEMBER: 2/8" twice): the ranks ("1-3"), the world size, the ranks above the highest seen that no
# line claims, srun's tasks (its --label prefixes) and the world size per task
DERIVED_FACTS: dict[str, str] = {
    "metric_lines": "int",
    "sigbus_processes": "int",
    "lagging_ranks": "str",
    "launcher_closed_pids": "str",
    "launcher_closing_signal": "str",
    "ray_active_nodes": "int",
    "nccl_shared_host": "str",
    "nccl_shared_host_procs": "str",
    "oom_table_rows": "int",
    "oom_table_top_pid": "int",
    "oom_table_top_name": "str",
    "oom_table_top_rss_pages": "int",
    "oom_table_top_rss_gib": "float",
    "oom_table_peers": "int",
    "oom_table_peer_rss_gib": "float",
    "oom_table_peer_pids": "str",
    "launcher_killed_pids": "str",
    "dup_global_ranks": "str",
    "dup_global_world": "int",
    "dup_global_unclaimed": "str",
    "dup_global_tasks": "int",
    "dup_global_per_task": "int",
}


@dataclass(frozen=True)
class FactSpec:
    """A value the log states somewhere (argument dumps, start-up lines); first one wins."""

    name: str
    type: Literal["int", "float", "str", "bool", "size"]  # size: "21.06 MiB" -> bytes (int)
    patterns: tuple[str, ...]
    # as `patterns`, for a value on every line that holds it (Ray's prefix "ip="): searched for only
    # in a file's first 256 KiB and last 1 MiB, as FrameworkDetector.detect_sampled
    sampled: tuple[str, ...] = ()
    # instead of patterns: an expression over other facts, computed once the log is read
    # ("oom_total - oom_free - oom_this_process"); absent when a fact it needs is
    value: str | None = None
    # the names every evaluation of `value` looks up (expr.required_names), kept with the cached
    # library: an analysis skips the expression unparsed when the log lacks one
    required: frozenset[str] = frozenset()


@dataclass
class LoadedRule:
    rule: Rule
    path: Path
    text: str  # the YAML as written, stored with analyses so old reports still render

    @property
    def fixtures(self) -> list[Path]:
        return sorted(self.path.parent.glob(f"{self.rule.id}.*.log"))


@dataclass
class Library:
    version: str
    root: Path
    rules: list[LoadedRule]
    classes: dict[str, FailureClass]
    frameworks: list[FrameworkDetector]
    facts: list[FactSpec] = field(default_factory=list)
    changelog: str = ""
    kinds: dict[str, Kind] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # by class id
    rule_verdicts: dict[str, Verdict] = field(default_factory=dict)  # by rule id: overrides the class
    verdict_conditions: tuple[VerdictCondition, ...] = ()  # the first that holds decides
    _by_id: dict[str, LoadedRule] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_id = {lr.rule.id: lr for lr in self.rules}

    def get(self, rule_id: str) -> LoadedRule | None:
        return self._by_id.get(rule_id)

    @property
    def active(self) -> list[Rule]:
        return [lr.rule for lr in self.rules if lr.rule.status is not Status.deprecated]

    def kind_of(self, failure_class: str) -> str:
        fc = self.classes.get(failure_class)
        return fc.kind if fc else "unknown"

    def kind(self, kind_id: str) -> Kind:
        """The catalogue's words for a kind (a stored analysis may name one since dropped)."""
        return self.kinds.get(kind_id) or Kind(id=kind_id, label=kind_id.title(), who=kind_id, action="")

    def with_pack(self, pack: SitePack) -> Library:
        """This library with a site rule pack: its rules replace bundled rules of the same id
        and add the rest; its classes add to the catalogue (never rename one). The version
        says which pack (``0.3.0+site.<digest>``), so stored analyses name what named them."""
        if not pack.rules and not pack.classes:
            return self
        classes = dict(self.classes)
        for c in pack.classes:
            if c.id not in classes:
                classes[c.id] = c
        by_id = {lr.rule.id: lr for lr in self.rules}
        for lr in pack.rules:
            by_id[lr.rule.id] = lr
        return dataclasses.replace(
            self,
            version=f"{self.version}+site.{pack.digest}",
            rules=list(by_id.values()),
            classes=classes,
            _by_id={},
        )


@dataclass(frozen=True)
class SitePack:
    """Rules a site taught its service (stored, or YAML directories: LOGTRIAGE_RULE_PACKS) and
    the classes they added; ``digest`` names the pack's exact content."""

    rules: tuple[LoadedRule, ...] = ()
    classes: tuple[FailureClass, ...] = ()
    digest: str = "none"

    @classmethod
    def build(
        cls,
        entries: Sequence[tuple[dict[str, Any], str]],
        *,
        base: Library,
        classes: Sequence[dict[str, str]] = (),
    ) -> SitePack:
        """A pack from rule mappings (each with where it came from: ``site:<id>@<version>`` or
        a file), validated as a bundled rule is: schema, patterns (lint), classes (the base
        library's or the pack's own), remediation placeholders. Raises RuleError."""
        import yaml

        known = dict(base.classes)
        extra: list[FailureClass] = []
        for c in classes:
            cid, kind = str(c.get("id", "")), str(c.get("kind", "unknown"))
            if not stdlib_re.fullmatch(CLASS_ID, cid) or not cid.startswith("site."):
                raise RuleError(
                    f"a site class is named site.<name>, not {cid!r}", file="site", field="classes"
                )
            if base.kinds and kind not in base.kinds:
                raise RuleError(
                    f"class {cid!r}: kind {kind!r} is not one of {', '.join(base.kinds)}", file="site"
                )
            fc = FailureClass(id=cid, kind=kind, summary=str(c.get("summary") or cid), explains=())
            known.setdefault(cid, fc)
            extra.append(fc)
        fact_names = {f.name for f in base.facts} | set(DERIVED_FACTS)
        loaded: list[LoadedRule] = []
        for data, origin in entries:
            try:
                rule = Rule.model_validate(data)
            except ValidationError as exc:
                raise RuleError(_format_validation(exc), file=origin) from None
            for cls_field, value in [
                ("failure_class", rule.failure_class),
                *(("explains", c) for c in rule.explains),
            ]:
                if value not in known:
                    raise RuleError(f"{value!r} is not a known class", file=origin, field=cls_field)
            for name in sorted(rule.template_names() - rule.capture_names() - fact_names):
                raise RuleError(f"remediation uses {{{name}}}, which nothing captures", file=origin)
            text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
            loaded.append(LoadedRule(rule=rule, path=Path(origin), text=text))
        h = hashlib.sha256()
        for lr in loaded:
            h.update(lr.text.encode())
        for fc in extra:
            h.update(f"{fc.id}:{fc.kind}:{fc.summary};".encode())
        return cls(tuple(loaded), tuple(extra), h.hexdigest()[:12] if loaded or extra else "none")


def load_pack_dirs(dirs: Sequence[Path]) -> tuple[list[tuple[dict[str, Any], str]], list[dict[str, str]]]:
    """Site rule pack directories (LOGTRIAGE_RULE_PACKS, ``--pack``): rule files as in
    ``rules/<group>/`` (fixtures ``<id>.*.log`` beside them) and an optional ``classes.yaml``
    (``- {id: site.<name>, kind: infra, summary: ...}``). Raises RuleError for a file that is
    not one; `SitePack.build` validates the rules."""
    rules: list[tuple[dict[str, Any], str]] = []
    classes: list[dict[str, str]] = []
    for d in dirs:
        if not d.is_dir():
            raise RuleError("not a directory", file=str(d))
        for path in sorted(d.rglob("*.yaml")):
            data = _read_yaml(path)
            if path.name == "classes.yaml":
                if not isinstance(data, list) or not all(isinstance(c, dict) for c in data):
                    raise RuleError("classes.yaml holds a list of {id, kind, summary}", file=str(path))
                classes.extend({k: str(v) for k, v in c.items()} for c in data)
                continue
            if not isinstance(data, dict):
                raise RuleError("a rule file holds one mapping", file=str(path))
            if data.get("id") != path.stem:
                raise RuleError(f"id {data.get('id')!r} is not the file name", file=str(path), field="id")
            rules.append((data, str(path)))
    return rules, classes


def default_rules_dir() -> Path:
    """The rules shipped with the project (repo checkout or installed data)."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[3] / "rules", here.parents[2] / "rules"):
        if (candidate / "library.yaml").is_file():
            return candidate
    raise RuleError("cannot find the rule library (rules/library.yaml); pass --rules DIR")


@functools.cache  # one class for the ~110 files of a library load, built on the first
def _strict_loader() -> Any:
    """libyaml's loader, refusing a mapping that repeats a key: YAML keeps the last one silently,
    so a fact or rule field defined twice (two edits merged) would lose the first without a word."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Strict(base):  # type: ignore[misc,valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return Strict


def _read_yaml(path: Path) -> Any:
    import yaml  # here: a run that finds the validated library in its cache never parses YAML

    try:
        # libyaml's C loader is ~10x faster than the pure-Python one: start-up time is a target.
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_strict_loader())
    except (OSError, yaml.YAMLError) as exc:
        raise RuleError(f"cannot parse YAML: {exc}", file=str(path)) from None


def _load_classes(root: Path) -> tuple[dict[str, FailureClass], dict[str, Kind]]:
    path = root / "failure-classes.yaml"
    data = _read_yaml(path) or {}
    extra = _read_yaml(root / "class-relations.yaml") if (root / "class-relations.yaml").exists() else {}
    explains: dict[str, list[str]] = (extra or {}).get("explains", {})
    kinds: dict[str, Kind] = {}
    for kid, spec in (data.get("kinds") or {}).items():
        missing = [k for k in ("label", "who", "action") if not (spec or {}).get(k)]
        if missing:
            raise RuleError(f"kind {kid!r} lacks {', '.join(missing)}", file=str(path), field="kinds")
        kinds[kid] = Kind(id=kid, label=str(spec["label"]), who=str(spec["who"]), action=str(spec["action"]))
    out: dict[str, FailureClass] = {}
    for cid, spec in data.get("classes", {}).items():
        if kinds and spec["kind"] not in kinds:
            raise RuleError(
                f"class {cid!r}: kind {spec['kind']!r} is not one of {', '.join(kinds)}",
                file=str(path),
                field="kind",
            )
        out[cid] = FailureClass(
            id=cid, kind=spec["kind"], summary=spec["summary"], explains=tuple(explains.get(cid, ()))
        )
    return out, kinds


def _load_verdicts(
    root: Path, classes: dict[str, FailureClass], rule_ids: set[str], fact_names: set[str]
) -> tuple[dict[str, Verdict], dict[str, Verdict], tuple[VerdictCondition, ...]]:
    path = root / "verdicts.yaml"
    if not path.exists():
        return {}, {}, ()
    data = _read_yaml(path) or {}

    def one(key: str, spec: Any, section: str) -> Verdict:
        if not isinstance(spec, dict) or spec.get("decision") not in DECISIONS or not spec.get("why"):
            raise RuleError(
                f"{section} {key!r}: needs `decision` (one of {', '.join(DECISIONS)}) and `why`",
                file=str(path),
                field=section,
            )
        unknown = set(spec) - {"decision", "why", "ambiguous", "hosts"}
        if unknown:
            raise RuleError(
                f"{section} {key!r}: unknown {', '.join(sorted(unknown))}", file=str(path), field=section
            )
        hosts = tuple(str(h) for h in spec.get("hosts") or ())
        if set(hosts) - fact_names:
            raise RuleError(
                f"{section} {key!r}: `hosts` names no fact {sorted(set(hosts) - fact_names)}",
                file=str(path),
                field=section,
            )
        return Verdict(
            decision=spec["decision"],
            why=str(spec["why"]),
            ambiguous=bool(spec.get("ambiguous")),
            hosts=hosts,
        )

    by_class = {cid: one(cid, spec, "classes") for cid, spec in (data.get("classes") or {}).items()}
    stray = sorted(set(by_class) - set(classes))
    missing = sorted(set(classes) - set(by_class))
    if stray or missing:
        # every class gets an action, and none is decided for a class that does not exist
        raise RuleError(
            f"classes not in failure-classes.yaml: {stray}; classes without a verdict: {missing}",
            file=str(path),
            field="classes",
        )
    by_rule = {rid: one(rid, spec, "rules") for rid, spec in (data.get("rules") or {}).items()}
    if set(by_rule) - rule_ids:
        raise RuleError(f"no such rule: {sorted(set(by_rule) - rule_ids)}", file=str(path), field="rules")
    conditions = []
    for i, spec in enumerate(data.get("conditions") or []):
        where = f"conditions[{i}]"
        if not isinstance(spec, dict) or not spec.get("classes") or not spec.get("when"):
            raise RuleError(f"{where}: needs `classes` and `when`", file=str(path), field="conditions")
        bad = sorted(set(spec["classes"]) - set(classes))
        if bad:
            raise RuleError(f"{where}: no such class {bad}", file=str(path), field="conditions")
        when = str(spec["when"])
        bare = stdlib_re.sub(r"([\"']).*?\1", "", when)  # names outside string literals
        names = set(stdlib_re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare))
        for args in stdlib_re.findall(r"has\(([^)]*)\)", when):
            names |= set(stdlib_re.findall(r"[\"']([^\"']+)[\"']", args))
        unknown = names - fact_names - {"has", "and", "or", "not", "in", "True", "False", "None"}
        if unknown:
            raise RuleError(
                f"{where}: `when` names no fact {sorted(unknown)}", file=str(path), field="conditions"
            )
        verdict = one(where, {k: v for k, v in spec.items() if k not in ("classes", "when")}, "conditions")
        conditions.append(VerdictCondition(tuple(spec["classes"]), when, verdict))
    return by_class, by_rule, tuple(conditions)


def _load_frameworks(root: Path) -> list[FrameworkDetector]:
    path = root / "frameworks.yaml"
    if not path.exists():
        return []
    data = _read_yaml(path) or {}
    out = []
    for name, spec in data.get("frameworks", {}).items():
        if name not in FRAMEWORKS:
            raise RuleError(f"unknown framework {name!r}", file=str(path), field="frameworks")
        unknown = set(spec) - {"title", "keys", "detect", "detect_sampled", "version"}
        if unknown:
            raise RuleError(f"unknown keys {sorted(unknown)}", file=str(path), field=name)
        detect = [*spec.get("detect", []), *spec.get("detect_sampled", [])]
        for p in [*detect, *spec.get("version", []), *spec.get("keys", [])]:
            try:
                _check_pattern(p)
            except ValueError as exc:
                raise RuleError(str(exc), file=str(path), field=name) from None
        out.append(
            FrameworkDetector(
                name=name,
                title=spec.get("title", name),
                detect=tuple(spec.get("detect", [])),
                detect_sampled=tuple(spec.get("detect_sampled", [])),
                version=tuple(spec.get("version", [])),
                keys=tuple(spec.get("keys", [])),
            )
        )
    return out


def _load_facts(root: Path) -> list[FactSpec]:
    path = root / "facts.yaml"
    if not path.exists():
        return []
    data = _read_yaml(path) or {}
    out = []
    for name, spec in (data.get("facts") or {}).items():
        unknown = set(spec) - {"type", "patterns", "patterns_sampled", "value"}
        if unknown:
            raise RuleError(f"unknown keys {sorted(unknown)}", file=str(path), field=name)
        ftype = spec.get("type", "str")
        if ftype not in ("int", "float", "str", "bool", "size"):
            raise RuleError(f"unknown type {ftype!r}", file=str(path), field=f"{name}.type")
        pats = tuple(spec.get("patterns") or ())
        sampled = tuple(spec.get("patterns_sampled") or ())
        value = spec.get("value")
        if bool(pats or sampled) == (value is not None):
            why = "a fact has either patterns or a value (an expression), not both nor neither"
            raise RuleError(why, file=str(path), field=name)
        if value is not None:
            try:
                parse_expression(str(value))
            except ExprError as exc:
                raise RuleError(f"value: {exc}", file=str(path), field=name) from None
            need = required_names(str(value))
            out.append(FactSpec(name=name, type=ftype, patterns=(), value=str(value), required=need))
            continue
        for p in (*pats, *sampled):
            try:
                _check_pattern(p)
            except ValueError as exc:
                raise RuleError(str(exc), file=str(path), field=name) from None
            if "value" not in regex.compile(p).groupindex:
                raise RuleError(f"pattern {p!r} must capture `value`", file=str(path), field=name)
        out.append(FactSpec(name=name, type=ftype, patterns=pats, sampled=sampled))
    return out


def _format_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(rule)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def load_rule(path: Path, *, classes: dict[str, FailureClass] | None = None) -> LoadedRule:
    text = path.read_text(encoding="utf-8")
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise RuleError("a rule file holds one mapping", file=str(path))
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        raise RuleError(_format_validation(exc), file=str(path)) from None
    if rule.id != path.stem:
        raise RuleError(f"id {rule.id!r} differs from the file name", file=str(path), field="id")
    if classes is not None:
        for cls_field, value in [
            ("failure_class", rule.failure_class),
            *(("explains", c) for c in rule.explains),
            *(("consequence_of", c) for c in rule.consequence_of),
        ]:
            if value not in classes:
                raise RuleError(f"{value!r} is not in failure-classes.yaml", file=str(path), field=cls_field)
    return LoadedRule(rule=rule, path=path, text=text)


def _library_key(root: Path) -> str:
    h = hashlib.sha256(_CACHE_FORMAT.encode())
    # two copies of the library with the same files' stats (a tree unpacked twice) each keep
    # their own cache: a cached library is only used for the root it was loaded from
    h.update(f"{root};".encode())
    # the schema is this file and the trigger kinds: a cache pickled by another version of them
    # is another format
    for own in (Path(__file__), Path(__file__).with_name("triggers.py")):
        st = own.stat()
        h.update(f"{st.st_mtime_ns}:{st.st_size};".encode())
    # os.walk, not Path.rglob: every analysis starts here, and rglob's globbing took 2.5 ms where
    # the 125 files' stats take 1 (links followed, as rglob and the loader follow them)
    found = []
    for folder, _dirs, files in os.walk(root, followlinks=True):
        rel = os.path.relpath(folder, root)
        found += [
            (os.path.normpath(os.path.join(rel, f)), os.path.join(folder, f))
            for f in files
            if f.endswith(".yaml")
        ]
    for rel_path, path in sorted(found):
        st = os.stat(path)
        h.update(f"{rel_path}:{st.st_mtime_ns}:{st.st_size};".encode())
    changelog = root / "CHANGELOG.md"
    if changelog.exists():
        h.update(str(changelog.stat().st_mtime_ns).encode())
    return h.hexdigest()[:24]


_CACHE_FORMAT = "lib-8"


def load_library(root: Path | None = None, *, cache_dir: Path | None = None) -> Library:
    """Load and validate the library; with `cache_dir`, reuse a pickle keyed by the files' stats.

    Validation compiles every pattern with `regex` (the bulk of start-up time), so the CLI keeps
    the validated library in its cache and only re-validates when a rule file changes.
    """
    root = (root or default_rules_dir()).resolve()
    if cache_dir is None:
        return _load_library(root)
    path = cache_dir / f"library-{_library_key(root)}.pickle"
    try:
        with path.open("rb") as fh:
            cached = pickle.load(fh)
        if isinstance(cached, Library) and cached.root == root:
            return cached
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        pass  # missing or stale cache: rebuild
    lib = _load_library(root)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as fh:
            pickle.dump(lib, fh, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(path)
    except OSError:
        pass
    return lib


def _load_library(root: Path) -> Library:
    meta = _read_yaml(root / "library.yaml") or {}
    if "version" not in meta:
        raise RuleError("missing `version`", file=str(root / "library.yaml"), field="version")
    classes, kinds = _load_classes(root)
    rules: list[LoadedRule] = []
    seen: dict[str, Path] = {}
    for path in sorted(root.glob("*/*.yaml")):
        if path.parent.name.startswith("_"):
            continue
        lr = load_rule(path, classes=classes)
        if lr.rule.id in seen:
            raise RuleError(f"duplicate id, also in {seen[lr.rule.id]}", file=str(path), field="id")
        seen[lr.rule.id] = path
        rules.append(lr)
    facts = _load_facts(root)
    fact_names = {f.name for f in facts} | set(DERIVED_FACTS)
    for lr in rules:
        # a placeholder is filled from a capture, else from a fact the log states elsewhere
        for name in sorted(lr.rule.template_names() - lr.rule.capture_names() - fact_names):
            raise RuleError(
                f"remediation uses {{{name}}}, which no pattern captures and no fact names",
                file=str(lr.path),
                field="remediation",
            )
    changelog_path = root / "CHANGELOG.md"
    changelog = changelog_path.read_text(encoding="utf-8") if changelog_path.exists() else ""
    verdicts, rule_verdicts, conditions = _load_verdicts(root, classes, set(seen), fact_names)
    return Library(
        version=str(meta["version"]),
        root=root,
        rules=rules,
        classes=classes,
        frameworks=_load_frameworks(root),
        facts=facts,
        changelog=changelog,
        kinds=kinds,
        verdicts=verdicts,
        rule_verdicts=rule_verdicts,
        verdict_conditions=conditions,
    )
