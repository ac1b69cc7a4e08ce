"""The analysis resource is declared once (`app.service.contracts`) and built once
(`app.service.present`): a key built but not declared, or declared but never built, fails here.

Checked on what the service really returns for a done, a failed and a replayed-pending analysis
(REST, both databases), recursively through the nested models (links, files, findings...).
"""

from __future__ import annotations

import types
import typing
import uuid
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from app.service.contracts import AnalysisResource, AnalysisSummary
from tests.servicekit import ECC, training_log

# declared, and filled only in some states (a done analysis has no `error`, a failed one no
# findings...): each must be seen filled in at least one of the resources below
SOMETIMES = {"config", "duplicate_of", "recurrence", "retriaged_at", "error"}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside `X | None`, `list[X]`..., if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, list):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def _keys(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def _undeclared(value: Any, model: type[BaseModel], where: str) -> list[str]:
    """Keys the value has that the model does not declare, through nested models and lists."""
    if isinstance(value, list):
        return [bad for i, v in enumerate(value) for bad in _undeclared(v, model, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return []
    out = [f"{where}.{k}" for k in sorted(set(value) - _keys(model))]
    for name, field in model.model_fields.items():
        sub = _model_of(field.annotation)
        key = field.alias or name
        if sub is not None and value.get(key) is not None and sub.model_config.get("extra") != "allow":
            out += _undeclared(value[key], sub, f"{where}.{key}")
    return out


def _post(client: httpx.Client, body: bytes, **params: str) -> httpx.Response:
    return client.post(
        "/api/v1/analyses", content=body, params=params, headers={"Content-Type": "text/plain"}
    )


@pytest.mark.slow  # a live server
def test_resources_fill_exactly_what_the_contract_declares(client: httpx.Client) -> None:
    done = _post(client, training_log(ECC).encode(), job_id=f"c-{uuid.uuid4().hex[:8]}")
    assert done.status_code == 201, done.text
    again = _post(client, training_log(ECC).encode(), job_id=f"c-{uuid.uuid4().hex[:8]}")
    assert again.status_code == 201
    failed = _post(client, b"\x00\x01\x02binary" * 200)  # not a text log: the analysis fails
    resources = [done.json(), again.json()]
    if failed.status_code in (201, 202):
        resources.append(client.get(failed.headers["location"]).json())
    for res in resources:
        assert _undeclared(res, AnalysisResource, "analysis") == []
        got = client.get(f"/api/v1/analyses/{res['id']}").json()  # read back, not only as built
        assert _undeclared(got, AnalysisResource, "analysis") == []
    seen = set().union(*(set(r) for r in resources))
    never = _keys(AnalysisResource) - seen - SOMETIMES
    assert never == set(), f"declared but never filled: {sorted(never)}"
    always = _keys(AnalysisResource) - SOMETIMES
    assert all(always - {"error"} <= set(r) for r in resources if r["status"] == "done")

    page = client.get("/api/v1/analyses", params={"limit": 5}).json()
    assert page["items"]
    for item in page["items"]:
        assert _undeclared(item, AnalysisSummary, "summary") == []
        assert _keys(AnalysisSummary) - set(item) == set(), "summary keys declared but not filled"


def test_the_check_catches_an_undeclared_key() -> None:
    """So the test above cannot pass vacuously."""
    res = {"id": "x", "links": {"self": "u", "log": "l", "sneaky": 1}, "extra": True}
    assert _undeclared(res, AnalysisResource, "analysis") == ["analysis.extra", "analysis.links.sneaky"]
