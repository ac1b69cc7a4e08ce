"""Outcomes of reruns and the lemon-node ledger (issue 24), over real HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any

import httpx
import pytest

from tests.servicekit import ECC, NCCL_TIMEOUT, OOM, training_log

# slow: live servers (the app under uvicorn), one per module and database
pytestmark = pytest.mark.slow

API = "/api/v1"


def uid(prefix: str = "job") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def failure(client: httpx.Client, text: str, job: str, **params: object) -> dict[str, Any]:
    r = client.post(
        f"{API}/analyses",
        content=training_log(text, job=job).encode(),  # distinct logs: no duplicates
        params={"job_id": job, **params},
        headers={"Content-Type": "text/plain"},
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def outcome(client: httpx.Client, job: str, **body: object) -> httpx.Response:
    return client.post(f"{API}/jobs/{job}/outcomes", json=body)


def test_a_timeout_that_keeps_coming_back_after_retries_is_fixed_not_retried(client: httpx.Client) -> None:
    # a timeout never seen before: retry once
    first = failure(client, NCCL_TIMEOUT.replace("SeqNum=1580", "SeqNum=77"), uid())
    assert first["action"]["decision"] == "retry" and first["action"]["ambiguous"] is True
    assert first["action"]["history"] is None
    # three jobs hit the same timeout (one fingerprint); each retry failed the same way
    for _ in range(3):
        job = uid()
        a = failure(client, NCCL_TIMEOUT, job)
        r = outcome(client, job, status="failed")
        assert r.status_code == 201, r.text
        got = r.json()
        assert got["analysis_id"] == a["id"]
        assert (got["action"], got["advised"], got["failure_class"]) == (
            "retry",
            "retry",
            "nccl.collective_timeout",
        )
    # the next job with that failure is told to fix it: three reruns, none passed
    fourth = failure(client, NCCL_TIMEOUT, uid())
    action = fourth["action"]
    assert (action["decision"], action["basis"]) == ("fix_and_rerun", "history")
    assert action["history"] == {
        "scope": "fingerprint",
        "retries": 3,
        "succeeded": 0,
        "fixed": 0,
        "fixed_succeeded": 0,
    }
    assert "3 reruns without a change: 0 succeeded" in action["why"][-1]
    # read again later, the first analysis shows the history too (it is read at request time;
    # the sequence number is not part of the failure's fingerprint)
    again = client.get(f"{API}/analyses/{first['id']}").json()["action"]
    assert again["history"]["scope"] == "fingerprint" and again["history"]["retries"] == 3
    assert again["decision"] == "fix_and_rerun"
    # a timeout of another rule of the class (gloo) learns from the class as a whole
    gloo = failure(
        client,
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
        "1800000ms for recv operation to complete\n",
        uid(),
    )
    assert gloo["root_cause"]["rule_id"] == "gloo-collective-timeout"
    assert gloo["action"]["history"]["scope"] == "class"
    assert gloo["action"]["decision"] == "fix_and_rerun"


def test_an_oom_shows_its_history_but_stays_a_fix(client: httpx.Client) -> None:
    oom = OOM.format(gib="3.50")
    for status in ("succeeded", "succeeded", "succeeded"):
        job = uid()
        failure(client, oom, job)
        assert outcome(client, job, status=status, action="fix_and_rerun").status_code == 201
    a = failure(client, oom, uid())
    assert a["action"]["decision"] == "fix_and_rerun" and a["action"]["basis"] == "class"
    hist = a["action"]["history"]
    assert (hist["retries"], hist["fixed"], hist["fixed_succeeded"]) == (0, 3, 3)


def test_the_same_attempt_posted_twice_is_recorded_once(client: httpx.Client) -> None:
    job = uid()
    a = failure(client, ECC.format(ip="10.9.0.5"), job)
    assert a["action"]["decision"] == "retry_excluding" and a["action"]["exclude_hosts"] == ["10.9.0.5"]
    first = outcome(client, job, status="succeeded", attempt_id="slurm-100", excluded_hosts=["10.9.0.5"])
    assert first.status_code == 201, first.text
    assert first.json()["action"] == "retry_excluding" and first.json()["excluded_hosts"] == ["10.9.0.5"]
    replay = outcome(client, job, status="succeeded", attempt_id="slurm-100")
    assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
    # the same failure's outcome again, under another attempt id: still the first
    again = outcome(client, job, status="succeeded", analysis_id=a["id"], attempt_id="slurm-101")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    contradicts = outcome(client, job, status="failed", attempt_id="slurm-100")
    assert contradicts.status_code == 409
    assert contradicts.headers["content-type"].startswith("application/problem+json")
    listed = client.get(f"{API}/jobs/{job}/outcomes").json()
    assert [o["id"] for o in listed] == [first.json()["id"]]


def test_started_at_links_the_failure_before_the_attempt(client: httpx.Client) -> None:
    job = uid()
    older = failure(client, OOM.format(gib="1.25"), job)
    newer = failure(client, OOM.format(gib="2.25"), job)
    between = older["created_at"]
    r = outcome(
        client, job, status="failed", action="fix_and_rerun", started_at=between.replace("Z", "+00:00")
    )
    # created_at of `older` is not before itself: nothing is older, so nothing links ...
    assert r.status_code == 201 and r.json()["analysis_id"] is None
    start = dt.datetime.fromisoformat(newer["created_at"].replace("Z", "+00:00")) - dt.timedelta(
        microseconds=1
    )
    r = outcome(client, job, status="failed", action="fix_and_rerun", started_at=start.isoformat())
    assert r.status_code == 201 and r.json()["analysis_id"] == older["id"]
    # without a time: the newest failure without an outcome
    r = outcome(client, job, status="succeeded", action="fix_and_rerun")
    assert r.status_code == 201 and r.json()["analysis_id"] == newer["id"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"status": "maybe"}, 422, "status"),
        ({"status": "failed", "action": "reboot"}, 422, "action"),
        ({"status": "failed", "started_at": "yesterday-ish"}, 422, "started_at"),
        ({"status": "failed", "attempt_id": "a\x00b"}, 422, "control character"),
        ({"status": "failed", "detail": "x" * 5000}, 422, "detail"),
        ({"status": "failed", "analysis_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, 404, "no analysis"),
        ({"status": "failed", "surprise": 1}, 422, "surprise"),
    ],
)
def test_bad_outcomes_are_clear_problems(
    client: httpx.Client, body: dict[str, Any], status: int, words: str
) -> None:
    job = uid()
    failure(client, OOM.format(gib="1.50"), job)
    r = outcome(client, job, **body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert words in r.text
    assert client.get(f"{API}/jobs/{job}/outcomes").json() == []


def test_an_analysis_of_another_job_is_refused(client: httpx.Client) -> None:
    a = failure(client, OOM.format(gib="1.75"), uid())
    r = outcome(client, uid(), status="failed", analysis_id=a["id"])
    assert r.status_code == 422 and "is of job" in r.json()["detail"]


def test_concurrent_hooks_count_exactly(client: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    text = NCCL_TIMEOUT.replace("SeqNum=1580", "SeqNum=4242").replace("ALLREDUCE", "BROADCAST")
    jobs = [uid("race") for _ in range(8)]
    for job in jobs:
        failure(client, text, job)
    results: list[int] = []
    lock = threading.Lock()

    def post(job: str, status: str, attempt: str) -> None:
        with server.client() as c:
            code = outcome(c, job, status=status, attempt_id=attempt).status_code
        with lock:
            results.append(code)

    # every job's outcome posted three times at once (a hook retrying): each recorded once
    threads = [
        threading.Thread(target=post, args=(job, "succeeded" if i % 2 else "failed", f"att-{i}"))
        for i, job in enumerate(jobs)
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results).count(201) == len(jobs) and set(results) <= {200, 201}, results
    a = failure(client, text, uid("race"))
    hist = a["action"]["history"]
    assert hist["scope"] == "fingerprint"
    assert (hist["retries"], hist["succeeded"]) == (len(jobs), len(jobs) // 2)


def test_a_host_behind_hardware_faults_in_two_jobs_is_listed_until_cleared(client: httpx.Client) -> None:
    host = f"10.77.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    failure(client, ECC.format(ip=host), uid())
    assert host not in [h["host"] for h in client.get(f"{API}/hosts/exclude").json()["hosts"]]
    failure(client, ECC.format(ip=host), uid())
    body = client.get(f"{API}/hosts/exclude").json()
    listed = {h["host"]: h for h in body["hosts"]}
    assert listed[host]["jobs"] == 2 and listed[host]["classes"] == ["hardware.gpu_ecc_error"]
    assert host in body["forms"]["slurm"] and body["forms"]["slurm"].startswith("--exclude=")
    slurm = client.get(f"{API}/hosts/exclude", params={"format": "slurm"})
    assert slurm.status_code == 200 and host in slurm.text
    k8s = client.get(f"{API}/hosts/exclude", params={"format": "kubernetes"}).text
    assert f"kubectl taint nodes {host} " in k8s
    ray_form = client.get(f"{API}/hosts/exclude", params={"format": "ray"}).text
    assert f"# on {host}: " in ray_form and '--labels=\'{"logtriage-suspect": "true"}\'' in ray_form
    assert 'label_selector={"logtriage-suspect": "!true"}' in ray_form
    assert client.get(f"{API}/hosts/exclude", params={"format": "xml"}).status_code == 422
    assert client.get(f"{API}/hosts/exclude", params={"min_jobs": 3}).json()["hosts"] == [
        h for h in body["hosts"] if h["jobs"] >= 3
    ]
    cleared = client.post(f"{API}/hosts/{host}/clear", json={"note": "GPU 3 replaced"})
    assert cleared.status_code == 200 and cleared.json()["host"] == host
    assert host not in [h["host"] for h in client.get(f"{API}/hosts/exclude").json()["hosts"]]
    # a fault after the repair counts again from one
    failure(client, ECC.format(ip=host), uid())
    assert host not in [h["host"] for h in client.get(f"{API}/hosts/exclude").json()["hosts"]]
    failure(client, ECC.format(ip=host), uid())
    assert host in [h["host"] for h in client.get(f"{API}/hosts/exclude").json()["hosts"]]


def test_the_hosts_page_lists_a_lemon_and_an_admin_clears_it(client: httpx.Client) -> None:
    import re

    host = f"10.78.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    for _ in range(2):
        failure(client, ECC.format(ip=host), uid())
    html = client.get("/hosts", headers={"Accept": "text/html"}).text
    assert "Hosts to leave out" in html and f"<code>{host}</code>" in html
    assert "--exclude=" in html and host in html.split("In your scheduler", 1)[1]
    token = re.search(r'<meta name="csrf-token" content="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    forged = client.post("/hosts/clear", data={"csrf_token": "nope", "host": host})
    assert forged.status_code == 403
    assert host in client.get("/hosts", headers={"Accept": "text/html"}).text
    r = client.post("/hosts/clear", data={"csrf_token": token, "host": host, "note": "GPU <3> swapped"})
    assert r.status_code == 303 and r.headers["location"] == f"/hosts?cleared={host}"
    after = client.get(r.headers["location"], headers={"Accept": "text/html"}).text
    assert f"Cleared <strong>{host}</strong>" in after and f"<code>{host}</code>" not in after
