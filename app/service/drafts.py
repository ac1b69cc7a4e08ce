"""Teaching the service (issue 23), its writing half: a rule drafted from a cluster of unknown
failures or from lines picked in the log viewer, back-tested on the stored history, and
published into the site rule pack (versioned, with author and diff). Blocking (database): the
edges call these in a thread.

The back-test reads the stored signal lines (`analysis_signals.text`: the error lines every
analysis ended with), never the blobs: a draft is tried on 10,000 analyses in well under a
second, a literal of the pattern ruling most lines out before the regex runs.
"""

from __future__ import annotations

import difflib
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.db.models import RuleDraft, SiteRule
from app.db.repo import learn as lrepo
from app.db.repo.ids import is_valid_id, new_id
from app.errors import ConflictError, ForbiddenError, NotFoundError, RuleError, ValidationFailedError
from app.service.access import Principal, check_can_read
from app.service.backtest_scan import BACKTEST_ROWS, backtest_matcher, scan_signal_lines
from app.service.context import ServiceContext

if TYPE_CHECKING:
    from app.service.backtest_ray import RayBacktest

__all__ = ["Backtest", "create_draft", "export_pack", "get_draft", "publish_draft", "site_rules"]

MAX_LINES = 50
BACKTEST_SECONDS = 10.0  # a pattern slower than this on the history is cut short, and says so


@dataclass(frozen=True)
class Backtest:
    analysis_ids: list[str]  # every stored analysis it matches, newest first
    unknown: list[str]  # of those, the ones with no named cause today
    conflicts: list[dict[str, Any]]  # the ones another cause names: {analysis_id, failure_class, rule_id}
    changes: dict[str, int]  # "from -> to": how many analyses would change class if published
    lines_read: int
    seconds: float
    complete: bool  # every stored line was tried (False: the oldest were beyond the limit, or time ran out)
    shards: int = 0  # Ray tasks it ran as (0: in this process); not part of the stored result

    def as_dict(self) -> dict[str, Any]:
        return {
            "analysis_ids": self.analysis_ids,
            "unknown": self.unknown,
            "conflicts": self.conflicts,
            "changes": self.changes,
            "lines_read": self.lines_read,
            "seconds": round(self.seconds, 4),
            "complete": self.complete,
        }


def _can_draft(principal: Principal) -> None:
    if not (principal.allows("read") and principal.allows("ingest")):
        raise ForbiddenError(f"token {principal.name!r} needs the `read` and `ingest` scopes to draft rules")


def create_draft(
    ctx: ServiceContext,
    *,
    principal: Principal,
    cluster_id: str | None = None,
    analysis_id: str | None = None,
    file: int = 0,
    lines: list[int] | None = None,
    analysis_ids: list[str] | None = None,
) -> dict[str, Any]:
    """A draft from a cluster of the unknowns inbox, from line numbers of one analysis' log
    file, or from analyses (their most telling error lines: a feedback proposal's); stored,
    with its back-test."""
    from app.engine.drafts import draft_from_lines

    _can_draft(principal)
    if sum(x is not None for x in (cluster_id, analysis_id, analysis_ids)) != 1:
        raise ValidationFailedError("give cluster_id, analysis_id with lines, or analysis_ids")
    if analysis_ids is not None:
        texts, source = _analyses_lines(ctx, principal=principal, analysis_ids=analysis_ids)
    elif cluster_id is not None:
        texts, source = _cluster_lines(ctx, principal=principal, cluster_id=cluster_id)
    else:
        assert analysis_id is not None
        texts, source = _picked_lines(
            ctx, principal=principal, analysis_id=analysis_id, file=file, lines=lines
        )
    draft = draft_from_lines(texts)
    if not draft.pattern:
        raise ValidationFailedError("nothing to draft from: the lines are empty")
    baseline = _baseline_lines(ctx)
    from app.engine.drafts import lint

    draft.problems = lint(draft.pattern, instances=[_message(t) for t in texts], baseline=baseline)
    suggested = _suggested_class(ctx, source)
    rule = draft.as_rule(rule_id=_rule_id(draft.title), failure_class=suggested or "unknown")
    backtest = run_backtest(ctx, pattern=draft.pattern, failure_class=rule["failure_class"], ray=_ray_of(ctx))
    body = {
        "rule": rule,
        "pattern": draft.pattern,
        "template": draft.template,
        "captures": draft.captures,
        "instances": texts[:MAX_LINES],
        "problems": draft.problems,
        "class_suggested": suggested,
    }
    with ctx.db.write() as s:
        row = RuleDraft(
            id=new_id(),
            source=source,
            rule=body,
            backtest=backtest.as_dict(),
            token_id=principal.token_id,
        )
        s.add(row)
        s.flush()
        return _draft_dict(row)


def get_draft(ctx: ServiceContext, *, draft_id: str, principal: Principal) -> dict[str, Any]:
    _can_draft(principal)
    with ctx.db.read() as s:
        row = s.get(RuleDraft, draft_id.upper()) if is_valid_id(draft_id) else None
        if row is None:
            raise NotFoundError(f"no rule draft {draft_id[:40]!r}")
        return _draft_dict(row)


def _draft_dict(row: RuleDraft) -> dict[str, Any]:
    return {
        "id": row.id,
        "created_at": row.created_at.isoformat(),
        "source": row.source,
        **row.rule,
        "backtest": row.backtest,
        "published_version": row.published_version,
    }


def _message(text: str) -> str:
    from app.engine.signals import message_of

    return message_of(text)


def _cluster_lines(
    ctx: ServiceContext, *, principal: Principal, cluster_id: str
) -> tuple[list[str], dict[str, Any]]:
    from app.service.learn import list_clusters

    for c in list_clusters(ctx, principal=principal, status=None, limit=500):
        if c.id == cluster_id:
            with ctx.db.read() as s:
                sigs = lrepo.signals_of(s, analysis_ids=c.analysis_ids[:MAX_LINES])
            texts = [sigs[a][0].text for a in c.analysis_ids[:MAX_LINES] if sigs.get(a)]
            if not texts:
                raise ValidationFailedError(f"cluster {cluster_id} has no error line to draft from")
            return texts, {"cluster_id": cluster_id, "analysis_ids": c.analysis_ids[:MAX_LINES]}
    raise NotFoundError(
        f"no cluster {cluster_id[:40]!r} in the unknowns inbox (it may have changed: list it again)"
    )


def _analyses_lines(
    ctx: ServiceContext, *, principal: Principal, analysis_ids: list[str]
) -> tuple[list[str], dict[str, Any]]:
    from app.db import repo

    if not analysis_ids or len(analysis_ids) > MAX_LINES:
        raise ValidationFailedError(f"analysis_ids holds 1 to {MAX_LINES} analyses")
    with ctx.db.read() as s:
        ids = []
        for aid in analysis_ids:
            row = repo.get_analysis(s, analysis_id=aid)
            check_can_read(principal, row)
            ids.append(row.id)
        sigs = lrepo.signals_of(s, analysis_ids=ids)
    texts = [sigs[a][0].text for a in ids if sigs.get(a)]
    if not texts:
        raise ValidationFailedError("these analyses' logs end with no error line to draft from")
    return texts, {"analysis_ids": ids}


def _picked_lines(
    ctx: ServiceContext, *, principal: Principal, analysis_id: str, file: int, lines: list[int] | None
) -> tuple[list[str], dict[str, Any]]:
    from app.blobstore.window import read_window
    from app.db import repo
    from app.db.repo.completion import blob_line_index

    if not lines:
        raise ValidationFailedError("lines names the line numbers to draft from")
    if len(lines) > MAX_LINES or any(n < 1 for n in lines):
        raise ValidationFailedError(f"lines holds 1 to {MAX_LINES} line numbers from 1")
    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id, full=True)
        check_can_read(principal, row)
        files = sorted(row.files, key=lambda f: f.position)
        if not 0 <= file < len(files):
            raise NotFoundError(f"analysis {row.id} has no file {file}")
        f = files[file]
        index = blob_line_index(s, sha256=f.blob_sha256)
        aid = row.id
    texts = []
    for n in sorted(set(lines)):
        w = read_window(ctx.store, f.blob_sha256, index, line=n, max_lines=1, before=0)
        got = [ln.text for ln in w.lines if ln.number == n]
        if not got:
            raise ValidationFailedError(f"{f.name} has no line {n}")
        texts.append(got[0])
    return texts, {"analysis_id": aid, "file": file, "lines": sorted(set(lines))}


def _baseline_lines(ctx: ServiceContext) -> list[str]:
    """The healthy runs the bundled rules are checked against (rules/_baseline): a draft that
    matches one of their lines would name a failure in a run that did not fail."""
    root = ctx.library.root / "_baseline"
    out: list[str] = []
    for p in sorted(root.glob("*.log")) if root.is_dir() else []:
        out.extend(p.read_text(encoding="utf-8", errors="replace").splitlines()[:20000])
    return out


def _suggested_class(ctx: ServiceContext, source: dict[str, Any]) -> str | None:
    """The class people said these failures were, when they marked them wrong and agree."""
    from sqlalchemy import select

    from app.db.models import Feedback

    ids = source.get("analysis_ids") or ([source["analysis_id"]] if source.get("analysis_id") else [])
    if not ids:
        return None
    with ctx.db.read() as s:
        said = [
            c
            for (c,) in s.execute(
                select(Feedback.correct_class).where(
                    Feedback.analysis_id.in_(ids),
                    Feedback.verdict == "wrong",
                    Feedback.correct_class.is_not(None),
                )
            )
            if c and c != "unknown" and c in ctx.library.classes
        ]
    if not said:
        return None
    cls, n = Counter(said).most_common(1)[0]
    return cls if n * 2 > len(said) else None


def _ray_of(ctx: ServiceContext) -> RayBacktest | None:
    """The back-test's Ray set-up from the settings (None: LOGTRIAGE_BACKTEST_RAY_ADDRESS unset)."""
    from app.service.backtest_ray import options_of

    return options_of(ctx.settings)


def _rule_id(title: str) -> str:
    words = re.findall(r"[a-z0-9]+", title.lower())[:6]
    return "site-" + ("-".join(words) or "rule")


def run_backtest(
    ctx: ServiceContext, *, pattern: str, failure_class: str, ray: RayBacktest | None = None
) -> Backtest:
    """Every stored analysis a pattern matches (on its stored signal lines), and what changes.

    `ray` (``LOGTRIAGE_BACKTEST_RAY_ADDRESS``): a history of at least ``ray.min_lines`` lines is
    split by analysis id ranges over Ray tasks, each reading its share from the database
    (app/service/backtest_ray.py); the result is the in-process one. Without it, or for a smaller
    history, or when Ray cannot be reached, it runs here."""
    t0 = time.monotonic()
    rx, lits = backtest_matcher(pattern)  # a bad pattern fails here, before any work
    scanned = None
    if ray is not None:
        from app.service import backtest_ray

        scanned = backtest_ray.scan(ctx.db, ray, pattern=pattern, started=t0, budget_s=BACKTEST_SECONDS)
    if scanned is None:
        with ctx.db.read() as s:
            # one more than the limit: whether older lines were left out
            rows = lrepo.signal_texts(s, limit=BACKTEST_ROWS + 1)
        complete = len(rows) <= BACKTEST_ROWS
        ids, read, finished = scan_signal_lines(
            rows[:BACKTEST_ROWS], rx=rx, lits=lits, started=t0, budget_s=BACKTEST_SECONDS
        )
        shards = 0
    else:
        ids, read, complete, finished, shards = scanned
    with ctx.db.read() as s:
        classes = lrepo.classes_of(s, analysis_ids=ids)
    unknown = [a for a in ids if (classes.get(a) or (None, None))[0] in (None, "unknown")]
    conflicts = [
        {"analysis_id": a, "failure_class": classes[a][0], "rule_id": classes[a][1]}
        for a in ids
        if a in classes and classes[a][0] not in (None, "unknown", failure_class)
    ]
    changes = Counter(
        f"{(classes.get(a) or ('unknown', None))[0] or 'unknown'} -> {failure_class}" for a in unknown
    )
    return Backtest(
        ids, unknown, conflicts, dict(changes), read, time.monotonic() - t0, complete and finished, shards
    )


def publish_draft(
    ctx: ServiceContext,
    *,
    draft_id: str,
    principal: Principal,
    overrides: dict[str, Any],
) -> dict[str, Any]:
    """Publish a draft into the site rule pack (scope `rules:write`): the next analysis on any
    worker uses it. One transaction: the version row (the audit: author, time, diff) and the
    draft's mark are stored together or not at all."""
    import yaml

    from app.engine.pipeline.library import SitePack

    if not principal.allows("rules:write"):
        raise ForbiddenError(f"token {principal.name!r} needs the `rules:write` scope to publish rules")
    with ctx.db.read() as s:
        found = s.get(RuleDraft, draft_id.upper()) if is_valid_id(draft_id) else None
        if found is None:
            raise NotFoundError(f"no rule draft {draft_id[:40]!r}")
        draft = _draft_dict(found)
    rule = dict(draft["rule"])
    site_class = overrides.pop("site_class", None)
    for key in ("id", "failure_class", "title", "explanation", "remediation", "severity", "confidence"):
        if overrides.get(key) is not None:
            rule[key] = overrides[key]
    if overrides.get("pattern"):
        rule["match"] = {"any": [overrides["pattern"]]}
    if rule.get("failure_class") in (None, "unknown") and not site_class:
        raise ValidationFailedError(
            "name the failure class this rule stands for (failure_class, or a site_class)"
        )
    if site_class:
        rule["failure_class"] = site_class.get("id")
    if draft["problems"] and not overrides.get("pattern"):
        raise ValidationFailedError("the draft cannot be published as it is: " + "; ".join(draft["problems"]))
    if overrides.get("pattern"):
        from app.engine.drafts import lint

        problems = lint(
            overrides["pattern"],
            instances=[_message(t) for t in draft["instances"]],
            baseline=_baseline_lines(ctx),
        )
        if problems:
            raise ValidationFailedError("the pattern cannot be published: " + "; ".join(problems))
    rid = str(rule.get("id") or "")
    bundled = ctx.library.get(rid)
    with ctx.db.write() as s:
        from sqlalchemy import func, select

        last = s.scalar(select(func.max(SiteRule.version)).where(SiteRule.rule_id == rid)) or 0
        previous: dict[str, Any] | None = None
        if last:
            prev_row = s.get(SiteRule, (rid, last))
            previous = dict(prev_row.rule.get("rule") or {}) if prev_row is not None else None
        elif bundled is not None:
            previous = yaml.safe_load(bundled.text)
        rule["version"] = max(int(rule.get("version") or 1), int((previous or {}).get("version", 0)) + 1)
        # the whole pack as it would be, checked as the workers will load it
        stored = list(s.scalars(select(SiteRule)))
        from app.service.sitepack import pack_entries

        entries, classes = pack_entries(stored)
        entries = [(d, o) for d, o in entries if d.get("id") != rid] + [(rule, f"site:{rid}@{last + 1}")]
        new_id_ = (site_class or {}).get("id")
        classes = [c for c in classes if c.get("id") != new_id_] + ([dict(site_class)] if site_class else [])
        try:
            SitePack.build(entries, base=ctx.library, classes=classes)
        except RuleError as exc:
            raise ValidationFailedError(f"the rule does not load: {exc}") from None
        old_text = yaml.safe_dump(previous, sort_keys=False, allow_unicode=True) if previous else ""
        new_text = yaml.safe_dump(rule, sort_keys=False, allow_unicode=True)
        diff = "".join(
            difflib.unified_diff(
                old_text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                fromfile=f"{rid}@{last}" if last else (f"bundled/{rid}" if bundled else "/dev/null"),
                tofile=f"{rid}@{last + 1}",
            )
        )
        row = s.get(RuleDraft, draft["id"], with_for_update=True)
        if row is None:
            raise NotFoundError(f"no rule draft {draft_id[:40]!r}")
        if row.published_version is not None and not overrides.get("again"):
            raise ConflictError(
                f"draft {row.id} was published already (as {rid} version {row.published_version})"
            )
        s.add(
            SiteRule(
                rule_id=rid,
                version=last + 1,
                rule={"rule": rule, "site_class": site_class},
                draft_id=row.id,
                diff=diff,
                author=principal.name,
                token_id=principal.token_id,
            )
        )
        row.published_version = last + 1
        s.flush()
    if ctx.pool.site is not None:
        ctx.pool.site.invalidate()
    backtest = run_backtest(
        ctx, pattern=rule["match"]["any"][0], failure_class=str(rule["failure_class"]), ray=_ray_of(ctx)
    )
    return {
        "rule_id": rid,
        "version": last + 1,
        "rule": rule,
        "diff": diff,
        "author": principal.name,
        "backtest": backtest.as_dict(),
        # what re-triage would move: the existing re-triage, one analysis at a time, or in bulk
        "retriage": {
            "analysis_ids": backtest.analysis_ids[:1000],
            "how": "POST /api/v1/analyses/{id}/retriage for each, "
            "or `logtriage retriage --since 30d --class unknown`",
        },
    }


def site_rules(ctx: ServiceContext) -> list[dict[str, Any]]:
    """Every published version of the site pack's rules, newest first (the audit trail)."""
    from sqlalchemy import select

    with ctx.db.read() as s:
        rows = list(s.scalars(select(SiteRule).order_by(SiteRule.published_at.desc(), SiteRule.rule_id)))
        return [
            {
                "rule_id": r.rule_id,
                "version": r.version,
                "failure_class": (r.rule.get("rule") or {}).get("failure_class"),
                "title": (r.rule.get("rule") or {}).get("title"),
                "site_class": r.rule.get("site_class"),
                "draft_id": r.draft_id,
                "author": r.author,
                "published_at": r.published_at.isoformat(),
                "diff": r.diff,
            }
            for r in rows
        ]


def export_pack(db: Any, *, out: Path) -> list[Path]:
    """The site pack as rule files (a ready pull request to the bundled library, or a pack
    directory for LOGTRIAGE_RULE_PACKS): ``<id>.yaml`` for each rule's latest version, its
    draft's instances as positive fixtures ``<id>.match-N.log``, and ``classes.yaml`` for the
    site's classes. `logtriage rules test --pack OUT` runs them."""
    import yaml
    from sqlalchemy import select

    from app.service.sitepack import pack_entries

    with db.read() as s:
        rows = list(s.scalars(select(SiteRule)))
        entries, classes = pack_entries(rows)
        latest: dict[str, SiteRule] = {}
        for r in rows:
            if r.rule_id not in latest or r.version > latest[r.rule_id].version:
                latest[r.rule_id] = r
        ids = [r.draft_id for r in latest.values() if r.draft_id]
        drafts = {d.id: d for d in s.scalars(select(RuleDraft).where(RuleDraft.id.in_(ids)))}
        instances = {
            rid: list((drafts[r.draft_id].rule.get("instances") or []) if r.draft_id in drafts else [])
            for rid, r in latest.items()
        }
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for data, _origin in entries:
        rid = str(data["id"])
        rule = dict(data)
        fixtures: dict[str, Any] = {}
        for i, line in enumerate(instances.get(rid, [])[:3], 1):
            name = f"{rid}.match-{i}.log"
            (out / name).write_text(line.rstrip("\n") + "\n", encoding="utf-8")
            fixtures[name] = {}
            written.append(out / name)
        rule["fixtures"] = fixtures
        path = out / f"{rid}.yaml"
        path.write_text(yaml.safe_dump(rule, sort_keys=False, allow_unicode=True), encoding="utf-8")
        written.append(path)
    if classes:
        path = out / "classes.yaml"
        path.write_text(yaml.safe_dump(classes, sort_keys=False, allow_unicode=True), encoding="utf-8")
        written.append(path)
    return written
