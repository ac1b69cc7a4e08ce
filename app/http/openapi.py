"""The OpenAPI side of errors, shared by every edge that documents routes: the problem+json
model (RFC 9457), the responses a route declares with `problems(...)`, and the 422 rewrite."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.service.contracts import Problem

__all__ = ["PROBLEM_CONTENT", "Problem", "document_problems", "problems"]


PROBLEM_CONTENT = {"application/problem+json": {"schema": Problem.model_json_schema()}}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    texts = {
        400: "Unreadable input",
        401: "No or invalid token",
        403: "Token lacks the scope",
        404: "Not found",
        408: "The request body stalled (`LOGTRIAGE_BODY_TIMEOUT`)",
        409: "Conflict (analysis not ready, request in progress)",
        413: "Upload or log too large, a compression bomb, or over the temporary disk allowed",
        415: "Unsupported media type or encoding",
        416: "Range not satisfiable",
        422: "Validation failed",
        429: "This client's share of the analysis backlog is taken; retry after `Retry-After`",
        431: "Request headers too large",
        503: "Service unavailable (backlog full, database down); retry after `Retry-After`",
        507: "The server's disk is full; nothing was stored; retry after `Retry-After`",
    }
    return {c: {"description": texts.get(c, "Error"), "content": PROBLEM_CONTENT} for c in codes}


def document_problems(app: FastAPI) -> None:
    """The OpenAPI document says what is sent: FastAPI documents its validation errors (422) as
    `application/json` `HTTPValidationError`; they are problem+json documents here."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for item in schema.get("paths", {}).values():
            for op in item.values():
                responses = op.get("responses", {}) if isinstance(op, dict) else {}
                error = responses.get("422")
                if error is not None and "application/problem+json" not in error.get("content", {}):
                    error["content"] = PROBLEM_CONTENT
                    error["description"] = "Validation failed"
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
