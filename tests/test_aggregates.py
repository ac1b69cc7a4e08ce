"""The cached aggregates of /rules, /trends and /api/v1/stats: a repeat is served from the cache,
and any change of the stored data (an upload, feedback) is seen at once."""

from __future__ import annotations

import httpx
import pytest

from app.service import aggregates
from tests.servicekit import OOM, LiveServer, training_log

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"


def _stats(client: httpx.Client) -> dict[str, object]:
    r = client.get("/api/v1/stats", params={"days": 7})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_repeat_is_a_cache_hit_and_an_upload_or_feedback_is_seen_at_once(
    server: LiveServer, client: httpx.Client
) -> None:
    before = _stats(client)
    hits = aggregates.CACHE.hits
    assert _stats(client) == before and aggregates.CACHE.hits == hits + 1  # nothing changed
    r = client.post(
        API, content=training_log(OOM.format(gib="2.00")).encode(), headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 201, r.text
    after = _stats(client)
    assert after["analyses"] == before["analyses"] + 1  # type: ignore[operator]
    fb = client.post(f"{API}/{r.json()['id']}/feedback", json={"verdict": "correct"})
    assert fb.status_code in (200, 201), fb.text
    assert _stats(client)["feedback"] != after["feedback"]
    page = client.get("/rules/cuda-out-of-memory")
    assert page.status_code == 200
    again = client.get("/rules/cuda-out-of-memory")
    assert again.status_code == 200 and aggregates.CACHE.hits >= hits + 2
