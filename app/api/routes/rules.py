"""/api/v1/rules and /api/v1/library: the rule library the service runs with."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.schemas import LibraryInfo, RuleDetail, RuleSummary
from app.engine.pipeline.library import Library, Rule
from app.errors import NotFoundError
from app.http.deps import CtxDep, ReadDep
from app.http.openapi import problems
from app.service import rules as rules_service

router = APIRouter(prefix="/api/v1", tags=["rules"])


def _summary(rule: Rule, library: Library) -> dict[str, Any]:
    return {
        "id": rule.id,
        "version": rule.version,
        "status": rule.status.value,
        "failure_class": rule.failure_class,
        "kind": library.kind_of(rule.failure_class),
        "severity": rule.severity.value,
        "title": rule.title,
        "frameworks": list(rule.frameworks),
    }


@router.get("/rules", response_model=list[RuleSummary], summary="The rules", responses=problems(401, 403))
def list_rules(
    ctx: CtxDep,
    _principal: ReadDep,
    failure_class: Annotated[str | None, Query(alias="class")] = None,
    framework: str | None = None,
    status: str | None = None,
    q: Annotated[
        str | None,
        Query(max_length=200, description="words that must all be in the id, title, class or tags"),
    ] = None,
) -> list[dict[str, Any]]:
    found = rules_service.select_rules(
        ctx, failure_class=failure_class, framework=framework, status=status, text=q
    )
    return [_summary(r, ctx.library) for r in found]


@router.get(
    "/rules/{rule_id}",
    response_model=RuleDetail,
    summary="One rule: current, or an older version kept with past analyses",
    responses=problems(401, 403, 404),
)
def get_rule(
    rule_id: str,
    ctx: CtxDep,
    _principal: ReadDep,
    version: Annotated[int | None, Query(ge=1, description="an older version, as stored")] = None,
) -> dict[str, Any]:
    lib = ctx.library
    lr = lib.get(rule_id)
    stored = rules_service.stored_versions(ctx, rule_id=rule_id)
    stored_list = [
        {
            "version": rv.version,
            "text_sha256": rv.text_sha256,
            "library_version": rv.library_version,
            "first_seen_at": rv.first_seen_at.isoformat(),
        }
        for rv in stored
    ]
    if lr is not None and (version is None or version == lr.rule.version):
        r = lr.rule
        return {
            **_summary(r, lib),
            "explanation": r.explanation,
            "remediation": r.remediation,
            "references": [ref.model_dump() for ref in r.references],
            "yaml": lr.text,
            "current": True,
            "stored_versions": stored_list,
        }
    match = [rv for rv in stored if version is None or rv.version == version]
    if not match:
        what = f"version {version} of rule {rule_id!r}" if version else f"rule {rule_id!r}"
        raise NotFoundError(f"no {what}; GET /api/v1/rules lists the rules")
    rv = match[-1]
    import yaml

    try:
        data = yaml.safe_load(rv.text) or {}
    except yaml.YAMLError:
        data = {}
    return {
        "id": rule_id,
        "version": rv.version,
        "status": str(data.get("status", "retired")),
        "failure_class": rv.failure_class,
        "kind": lib.kind_of(rv.failure_class),
        "severity": str(data.get("severity", "")),
        "title": rv.title,
        "frameworks": list(data.get("frameworks") or []),
        "explanation": str(data.get("explanation", "")),
        "remediation": str(data.get("remediation", "")),
        "references": list(data.get("references") or []),
        "yaml": rv.text,
        "current": False,
        "stored_versions": stored_list,
    }


@router.get(
    "/library",
    response_model=LibraryInfo,
    summary="Library version and changelog",
    responses=problems(401, 403),
)
def library_info(ctx: CtxDep, _principal: ReadDep) -> dict[str, Any]:
    lib = ctx.library
    return {
        "version": lib.version,
        "rules": len(lib.rules),
        "active_rules": len(lib.active),
        "classes": {c.id: {"kind": c.kind, "summary": c.summary} for c in lib.classes.values()},
        "changelog": lib.changelog,
    }
