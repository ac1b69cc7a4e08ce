"""/rules and /rules/{id}: the library the engine runs, with how each rule does in the field."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.engine.pipeline.library import LoadedRule
from app.errors import NotFoundError
from app.http.deps import CtxDep
from app.service import rules as rules_service
from app.web.pages import WebPrincipal, render, require_page

router = APIRouter(include_in_schema=False)
FIXTURE_SHOWN_BYTES = 8 << 10


def precision(fb: dict[str, int]) -> float | None:
    right, wrong = fb.get("correct", 0), fb.get("wrong", 0)
    return right / (right + wrong) if right + wrong else None


def flagged(fb: dict[str, int]) -> bool:
    """People said this rule was wrong too often: it needs a look (learn.FLAG_PRECISION)."""
    from app.service.learn import FLAG_PRECISION, MIN_FEEDBACK

    right, wrong = fb.get("correct", 0), fb.get("wrong", 0)
    return right + wrong >= MIN_FEEDBACK and right / (right + wrong) < FLAG_PRECISION


@router.get("/rules")
async def rules_page(
    request: Request,
    ctx: CtxDep,
    principal: WebPrincipal,
    q: Annotated[str, Query(max_length=200)] = "",
    class_: Annotated[str, Query(alias="class", max_length=100)] = "",
    framework: Annotated[str, Query(max_length=32)] = "",
    status: Annotated[str, Query(max_length=20)] = "",
) -> Response:
    require_page(principal, "read", "the rule library")
    lib = ctx.library

    activity, feedback = await asyncio.to_thread(rules_service.rules_field, ctx)
    rows = []
    for r in rules_service.select_rules(
        ctx, failure_class=class_ or None, framework=framework or None, status=status or None, text=q
    ):
        act = activity.get(r.id, {"root": [0, 0], "any": [0, 0]})
        rows.append(
            {
                "rule": r,
                "kind": lib.kind_of(r.failure_class),
                "activity": act,
                "feedback": feedback.get(r.id, {}),
                "precision": precision(feedback.get(r.id, {})),
                "flagged": flagged(feedback.get(r.id, {})),
            }
        )
    return render(
        request,
        ctx,
        "rules.html",
        principal=principal,
        nav="rules",
        rows=rows,
        total=len(lib.rules),
        q=q,
        class_=class_,
        framework=framework,
        rule_status=status,
        statuses=("experimental", "stable", "deprecated"),
        frameworks=sorted({f for lr in lib.rules for f in lr.rule.frameworks}),
        library=lib,
    )


def changelog_entries(changelog: str, rule_id: str) -> list[tuple[str, str]]:
    """(library version, entry) for every CHANGELOG line that names the rule."""
    out: list[tuple[str, str]] = []
    version = ""
    entry: list[str] = []

    def flush() -> None:
        text = " ".join(entry)
        if entry and re.search(rf"(?<![\w-]){re.escape(rule_id)}(?![\w-])", text):
            out.append((version, text))

    for line in changelog.splitlines():
        if line.startswith("## "):
            flush()
            entry = []
            version = line[3:].strip()
        elif line.startswith("- "):
            flush()
            entry = [line[2:].strip()]
        elif line.startswith("  ") and entry:
            entry.append(line.strip())
    flush()
    return out


def fixtures_of(lr: LoadedRule) -> list[dict[str, Any]]:
    out = []
    for path in lr.fixtures:
        data = path.read_bytes()
        out.append(
            {
                "name": path.name,
                "kind": "must not match" if ".nomatch" in path.name else "must match",
                "text": data[:FIXTURE_SHOWN_BYTES].decode("utf-8", errors="replace"),
                "truncated": len(data) > FIXTURE_SHOWN_BYTES,
                "expect": lr.rule.fixtures.get(path.name),
            }
        )
    return out


@router.get("/rules/{rule_id}")
async def rule_page(rule_id: str, request: Request, ctx: CtxDep, principal: WebPrincipal) -> Response:
    require_page(principal, "read", "the rule library")
    lr = ctx.library.get(rule_id)
    if lr is None:
        raise NotFoundError(f"no rule {rule_id!r} in library {ctx.library.version}; /rules lists them")
    r = lr.rule

    field = await asyncio.to_thread(rules_service.rule_field, ctx, rule_id=r.id)
    act, fb, comments = field.activity, field.feedback, field.comments
    stored = [
        {
            "version": v.version,
            "library_version": v.library_version,
            "first_seen_at": v.first_seen_at.isoformat()[:16].replace("T", " "),
            "sha": v.text_sha256[:12],
        }
        for v in await asyncio.to_thread(rules_service.stored_versions, ctx, rule_id=r.id)
    ]
    signatures = [("main", r.match, r.confidence)] if r.match else []
    signatures += [(s.name, s, s.confidence) for s in r.signatures]
    return render(
        request,
        ctx,
        "rule.html",
        principal=principal,
        nav="rules",
        lr=lr,
        r=r,
        kind=ctx.library.kind_of(r.failure_class),
        activity=act,
        feedback=fb,
        precision=precision(fb),
        comments=comments,
        stored=stored,
        signatures=signatures,
        fixtures=fixtures_of(lr),
        changes=changelog_entries(ctx.library.changelog, r.id),
    )
