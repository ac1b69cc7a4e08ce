"""Load without loss, scaled to a test: 40 hooks posting at once while a 20 MB log streams in;
every request the service accepted has its analysis afterwards, and none got a 5xx.
(`bench/loss_bench.py` runs the full size: 200 x 1 MB and a 1 GB upload, `serve --workers 2`.)"""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from tests.servicekit import ECC, OOM, LiveServer, training_log, wait_done

# slow: a live server under concurrent load
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"


def test_concurrent_hooks_and_a_big_upload_lose_nothing(server: LiveServer) -> None:
    run = uuid.uuid4().hex[:8]
    results: dict[str, int] = {}
    ids: dict[str, str] = {}
    lock = threading.Lock()
    start = threading.Barrier(41)

    def hook(i: int) -> None:
        job = f"load-{run}-{i}"
        # ~256 KB each, every one a distinct log (no duplicate short-cut)
        body = training_log(OOM.format(gib=f"{i}.25"), steps=2500, job=job).encode()
        with server.client() as c:
            start.wait()
            r = c.post(API, content=body, params={"job_id": job}, headers={"Content-Type": "text/plain"})
            if r.status_code == 202:
                r = httpx.Response(200, json=wait_done(c, r.headers["location"]))
            with lock:
                results[job] = r.status_code
                if r.status_code in (200, 201):
                    ids[job] = r.json()["id"]

    def big() -> None:
        job = f"load-{run}-big"
        line = (
            b"(WorkerDict pid=7, ip=10.0.0.9) step 1 | loss=0.52 | grad_norm=1.1 | lr=1e-6 | tokens/s=1200\n"
        )
        payload = line * (20 * (1 << 20) // len(line)) + ECC.format(ip="10.0.0.9").encode()

        def chunks():  # type: ignore[no-untyped-def]
            for i in range(0, len(payload), 1 << 20):
                yield payload[i : i + (1 << 20)]

        with httpx.Client(base_url=server.url, timeout=600) as c:
            start.wait()
            r = c.post(API, content=chunks(), params={"job_id": job}, headers={"Content-Type": "text/plain"})
            if r.status_code == 202:
                r = httpx.Response(200, json=wait_done(c, r.headers["location"], timeout=600))
            with lock:
                results[job] = r.status_code
                if r.status_code in (200, 201):
                    ids[job] = r.json()["id"]

    threads = [threading.Thread(target=hook, args=(i,)) for i in range(40)] + [threading.Thread(target=big)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    assert len(results) == 41
    assert not [s for s in results.values() if s >= 500], results
    accepted = {job for job, s in results.items() if s in (200, 201)}
    assert len(accepted) == 41  # nothing was refused either: 41 is well within the limits
    with server.client() as c:
        stored = {}
        for job in accepted:
            items = c.get(API, params={"job_id": job, "limit": 10}).json()["items"]
            stored[job] = [it["id"] for it in items if it["status"] == "done"]
    assert {job: [ids[job]] for job in accepted} == stored
    with server.client() as c:
        big_one = c.get(f"{API}/{ids[f'load-{run}-big']}").json()
    assert big_one["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
