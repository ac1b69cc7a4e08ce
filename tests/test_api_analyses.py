"""The REST API over real HTTP against uvicorn, on SQLite and on PostgreSQL."""

from __future__ import annotations

import gzip
import io
import json
import time
import uuid

import httpx
import pytest
import zstandard

from tests.servicekit import ECC, NCCL_TIMEOUT, OOM, LiveServer, blob_files, training_log, wait_done

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
CLI_KEYS = {
    "library_version",
    "framework",
    "root_cause",
    "findings",
    "next_steps",
    "warnings",
    "config_diff",
    "stats",
}


def post_text(client: httpx.Client, text: str, **params: object) -> httpx.Response:
    return client.post(
        API,
        content=text.encode(),
        params={k: v for k, v in params.items() if v is not None},
        headers={"Content-Type": "text/plain"},
    )


def uid() -> str:
    return uuid.uuid4().hex[:12]


def test_raw_upload_returns_201_with_the_cli_contract(client: httpx.Client) -> None:
    job = uid()
    r = post_text(client, training_log(OOM.format(gib="1.96")), job_id=job, exit_code=1, host="node-7")
    assert r.status_code == 201, r.text
    body = r.json()
    assert r.headers["location"] == body["links"]["self"]
    assert set(body) >= CLI_KEYS
    assert {"id", "links", "metadata", "status", "permalink", "files"} <= set(body)
    assert body["status"] == "done"
    assert body["metadata"] == {
        "job_id": job,
        "framework": None,
        "exit_code": 1,
        "host": "node-7",
        "labels": {},
        "source": "api",
    }
    root = body["root_cause"]
    assert root["failure_class"] == "cuda.out_of_memory"
    assert root["evidence"][0]["line"] == 21
    assert body["findings"][0] == root
    assert body["permalink"].endswith(f"/analyses/{body['id']}") and "/api/" not in body["permalink"]
    # GET returns the same document
    again = client.get(f"{API}/{body['id']}")
    assert again.status_code == 200
    assert again.json() == body


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_compressed_bodies(client: httpx.Client, encoding: str) -> None:
    raw = training_log(ECC.format(ip="10.1.1.1")).encode()
    data = gzip.compress(raw) if encoding == "gzip" else zstandard.ZstdCompressor().compress(raw)
    r = client.post(API, content=data, headers={"Content-Type": "text/plain", "Content-Encoding": encoding})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
    # the stored log is the decompressed, redacted text
    assert client.get(body["links"]["log"]).content == raw


def test_encoding_mismatch_and_unknown_encoding(client: httpx.Client) -> None:
    r = client.post(
        API, content=b"plain text\n", headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"}
    )
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/problem+json"
    assert "not gzip" in r.json()["detail"]
    r = client.post(API, content=b"x\n", headers={"Content-Type": "text/plain", "Content-Encoding": "br"})
    assert r.status_code == 415
    assert r.json()["type"] == "/problems/unsupported-media-type"


def test_multipart_several_logs_config_and_metadata(client: httpx.Client) -> None:
    job = uid()
    rank0 = training_log(OOM.format(gib="3.50"), job="r0")
    rank1 = gzip.compress(training_log(NCCL_TIMEOUT, job="r1").encode())
    config = "actor_rollout_ref:\n  model:\n    path: /models/qwen\n"
    r = client.post(
        API,
        files=[
            ("log", ("rank0.log", rank0.encode(), "text/plain")),
            ("log", ("rank1.log.gz", rank1, "application/gzip")),
            ("config", ("job.yaml", config.encode(), "text/plain")),
        ],
        data={"job_id": job, "exit_code": "1", "framework": "verl", "label": ["team=rl", "cluster=a"]},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert [f["name"] for f in body["files"]] == ["rank0.log", "rank1.log.gz"]
    assert body["metadata"]["labels"] == {"team": "rl", "cluster": "a"}
    assert body["metadata"]["framework"] == "verl"
    assert body["framework"]["name"] == "verl"
    assert body["config"]["name"] == "job.yaml"
    classes = {f["failure_class"] for f in body["findings"]}
    assert {"cuda.out_of_memory", "nccl.collective_timeout"} <= classes
    assert body["root_cause"]["failure_class"] == "cuda.out_of_memory"
    # each stored file reads back
    assert client.get(body["files"][1]["url"]).text == training_log(NCCL_TIMEOUT, job="r1")


def test_metadata_from_query_validated(client: httpx.Client) -> None:
    for params, where in (
        ({"exit_code": "abc"}, "exit_code"),
        ({"framework": "tensorflow"}, "framework"),
        ({"label": "novalue"}, "label"),
        ({"source": "email"}, "source"),
    ):
        r = client.post(API, content=b"log\n", params=params, headers={"Content-Type": "text/plain"})
        assert r.status_code == 422, (params, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["status"] == 422 and problem["title"] and where in problem["detail"]


def test_unknown_multipart_part_is_422(client: httpx.Client) -> None:
    r = client.post(API, files=[("log", ("a.log", b"x\n", "text/plain"))], data={"jobid": "typo"})
    assert r.status_code == 422
    assert "jobid" in r.json()["detail"]
    r = client.post(API, data={"job_id": "x"}, files=[("config", ("c.yaml", b"a: 1\n", "text/plain"))])
    assert r.status_code == 422
    assert "no log" in r.json()["detail"]


def test_masked_exit_status(client: httpx.Client) -> None:
    r = post_text(client, training_log(OOM.format(gib="2.00")), exit_code=0)
    assert r.status_code == 201
    classes = [f["failure_class"] for f in r.json()["findings"]]
    assert "job.exit_status_masked" in classes
    r = post_text(client, training_log(OOM.format(gib="2.00")), exit_code=1)
    assert "job.exit_status_masked" not in [f["failure_class"] for f in r.json()["findings"]]


def test_respond_async_gives_202_and_location(client: httpx.Client) -> None:
    r = client.post(
        API,
        content=training_log(ECC.format(ip="10.9.9.9")).encode(),
        headers={"Content-Type": "text/plain", "Prefer": "respond-async"},
    )
    assert r.status_code == 202, r.text
    assert r.headers["retry-after"]
    assert r.headers["preference-applied"] == "respond-async"
    assert r.json()["status"] == "pending"
    done = wait_done(client, r.headers["location"])
    assert done["status"] == "done"
    assert done["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"


def test_idempotency_key(client: httpx.Client) -> None:
    key = str(uuid.uuid4())
    text = training_log(OOM.format(gib="4.25"), job=uid())
    h = {"Content-Type": "text/plain", "Idempotency-Key": key}
    first = client.post(API, content=text.encode(), headers=h)
    assert first.status_code == 201
    second = client.post(API, content=text.encode(), headers=h)
    assert second.status_code == 201
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json()["id"] == first.json()["id"]
    other = client.post(API, content=b"another log\n", headers=h)
    assert other.status_code == 422
    assert other.json()["type"] == "/problems/idempotency-key-reused"


def test_same_log_twice_links_to_the_first(client: httpx.Client) -> None:
    text = training_log(OOM.format(gib="5.5"), job=uid())
    a = post_text(client, text).json()
    b = post_text(client, text).json()
    assert a["duplicate_of"] is None
    assert b["duplicate_of"] == a["id"]
    assert b["links"]["duplicate_of"] == a["links"]["self"]


def test_recurring_failures_share_a_fingerprint(client: httpx.Client) -> None:
    # three jobs, three different allocation sizes: the same failure recurring
    job = uid()
    ids = []
    for i, gib in enumerate(("1.11", "2.22", "3.33")):
        body = post_text(
            client, training_log(OOM.format(gib=gib), job=f"{job}-{i}"), job_id=f"{job}-{i}"
        ).json()
        ids.append(body["id"])
    rec = body["recurrence"]
    assert rec["total"] >= 3 and rec["in_window"] >= 3 and rec["window_days"] == 7
    assert rec["summary"].startswith(f"seen {rec['in_window']} times in 7 days")
    assert "first on" in rec["summary"]
    assert client.get(f"{API}/{ids[-1]}").json() == body  # the upload's answer == a later read
    fps = {client.get(f"{API}/{i}").json()["recurrence"]["fingerprint"] for i in ids}
    assert len(fps) == 1
    listed = client.get(API, params={"fingerprint": fps.pop(), "limit": 200}).json()["items"]
    assert set(ids) <= {x["id"] for x in listed}


def test_suspect_host_in_hardware_failures_across_jobs(client: httpx.Client) -> None:
    ip = f"10.77.{int(time.time()) % 250}.{len(uid()) + 3}"
    first = post_text(client, training_log(ECC.format(ip=ip), job=uid()), job_id=uid()).json()
    assert all(s["host"] != ip for s in first["suspect_hosts"])
    second = post_text(client, training_log(ECC.format(ip=ip), job=uid()), job_id=uid()).json()
    suspects = {s["host"]: s for s in second["suspect_hosts"]}
    assert ip in suspects and suspects[ip]["jobs"] == 2
    assert "hardware.gpu_ecc_error" in suspects[ip]["classes"]
    stats = client.get("/api/v1/stats").json()
    assert ip in {s["host"] for s in stats["suspect_hosts"]}
    md = client.get(second["links"]["report_md"]).text
    assert f"Suspect node `{ip}`" in md
    # the upload's answer is built from what was just written, a GET reads it back: the same
    assert client.get(second["links"]["self"]).json() == second


def test_stored_log_is_redacted_and_supports_ranges(client: httpx.Client) -> None:
    secret = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"
    text = f"export HF_TOKEN={secret}\n" + training_log(OOM.format(gib="1.00"))
    body = post_text(client, text).json()
    log = client.get(body["links"]["log"])
    assert log.status_code == 200
    assert log.headers["accept-ranges"] == "bytes"
    assert secret not in log.text and "[REDACTED:" in log.text
    size = len(log.content)
    assert body["files"][0]["size"] == size
    part = client.get(body["links"]["log"], headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.content == log.content[:10]
    assert part.headers["content-range"] == f"bytes 0-9/{size}"
    tail = client.get(body["links"]["log"], headers={"Range": "bytes=-30"})
    assert tail.status_code == 206 and tail.content == log.content[-30:]
    rest = client.get(body["links"]["log"], headers={"Range": f"bytes={size - 5}-"})
    assert rest.content == log.content[-5:]
    bad = client.get(body["links"]["log"], headers={"Range": f"bytes={size + 10}-"})
    assert bad.status_code == 416 and bad.headers["content-type"] == "application/problem+json"
    assert client.get(body["links"]["log"], params={"file": 3}).status_code == 404
    # no secret in the JSON either
    assert secret not in json.dumps(body)


def test_reports_markdown_and_html(client: httpx.Client) -> None:
    text = training_log("<script>alert(1)</script>\n" + OOM.format(gib="6.00"))
    body = post_text(client, text, job_id="report-job").json()
    md = client.get(body["links"]["report_md"])
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert "## Root cause: CUDA out of memory" in md.text or "Root cause:" in md.text
    assert body["permalink"] in md.text
    html = client.get(body["permalink"])
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert body["root_cause"]["title"] in html.text
    assert "report-job" in html.text
    assert "<script>alert(1)" not in html.text


def test_report_of_pending_analysis_is_409(client: httpx.Client, server: LiveServer) -> None:
    # a large log, sent asynchronously: the report exists only once the analysis is done
    r = client.post(
        API,
        content=training_log(OOM.format(gib="7.00"), steps=200_000).encode(),
        headers={"Content-Type": "text/plain", "Prefer": "respond-async"},
    )
    assert r.status_code == 202
    md = client.get(f"{r.headers['location']}/report.md")
    if md.status_code == 409:
        assert md.json()["type"] == "/problems/analysis-not-ready"
    else:  # finished already on a fast machine
        assert md.status_code == 200
    assert wait_done(client, r.headers["location"])["status"] == "done"


def test_list_filters_and_cursor_pagination(client: httpx.Client) -> None:
    job = uid()
    made = []
    for i in range(5):
        tail = OOM.format(gib=f"{i}.5") if i % 2 == 0 else NCCL_TIMEOUT
        made.append(
            post_text(client, training_log(tail, job=f"{job}{i}"), job_id=job, host=f"h{i}").json()["id"]
        )
    seen: list[str] = []
    url: str | None = API
    params: dict[str, object] | None = {"job_id": job, "limit": 2}
    while url:
        page = client.get(url, params=params)
        assert page.status_code == 200
        data = page.json()
        seen += [x["id"] for x in data["items"]]
        url = data["links"]["next"]
        params = None
        if url:
            assert page.headers["link"] == f'<{url}>; rel="next"'
    assert seen == sorted(made, reverse=True)  # newest first, no duplicates, nothing lost
    ooms = client.get(API, params={"job_id": job, "class": "cuda.out_of_memory"}).json()["items"]
    assert len(ooms) == 3 and all(x["failure_class"] == "cuda.out_of_memory" for x in ooms)
    infra = client.get(API, params={"job_id": job, "kind": "infra"}).json()["items"]
    assert len(infra) == 2
    assert [x["id"] for x in client.get(API, params={"job_id": job, "host": "h3"}).json()["items"]] == [
        made[3]
    ]
    assert client.get(API, params={"job_id": job, "since": "1h"}).json()["items"]
    assert client.get(API, params={"job_id": job, "until": "2000-01-01"}).json()["items"] == []
    assert client.get(API, params={"job_id": job, "framework": "slime"}).json()["items"] == []
    assert len(client.get(API, params={"job_id": job, "framework": "verl"}).json()["items"]) == 3
    assert client.get(API, params={"since": "yesterday"}).status_code == 422
    assert client.get(API, params={"cursor": "garbage"}).status_code == 422
    assert client.get(API, params={"limit": 0}).status_code == 422


def test_feedback(client: httpx.Client) -> None:
    body = post_text(client, training_log(NCCL_TIMEOUT)).json()
    url = body["links"]["feedback"]
    r = client.post(
        url, json={"verdict": "wrong", "correct_class": "hardware.gpu_ecc_error", "comment": "node 3 ECC"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["correct_class"] == "hardware.gpu_ecc_error"
    assert client.post(url, json={"verdict": "correct"}).status_code == 201
    bad = client.post(url, json={"verdict": "wrong", "correct_class": "not.a_class"})
    assert bad.status_code == 422 and "not a known failure class" in bad.json()["detail"]
    assert client.post(url, json={"verdict": "maybe"}).status_code == 422
    assert client.post(url, json={"verdict": "correct", "correct_class": "unknown"}).status_code == 422
    assert (
        client.post(url, content=b"{not json", headers={"Content-Type": "application/json"}).status_code
        == 422
    )
    fb = client.get(body["links"]["self"]).json()["feedback"]
    assert [f["verdict"] for f in fb] == ["wrong", "correct"]
    assert (
        client.post(f"{API}/01ARZ3NDEKTSV4RRFFQ69G5FAV/feedback", json={"verdict": "correct"}).status_code
        == 404
    )
    assert client.get("/api/v1/stats").json()["feedback"]["wrong"] >= 1


def test_retriage_with_the_same_library_changes_nothing(client: httpx.Client) -> None:
    body = post_text(client, training_log(ECC.format(ip="10.3.3.3"))).json()
    r = client.post(body["links"]["retriage"])
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["changes"]["changed"] is False
    assert out["summary"] == "root cause unchanged (hardware.gpu_ecc_error)"
    assert out["analysis"]["retriaged_at"] is not None


def test_rules_library_and_stats(client: httpx.Client) -> None:
    rules = client.get("/api/v1/rules").json()
    ids = {r["id"] for r in rules}
    assert "cuda-out-of-memory" in ids
    one = client.get("/api/v1/rules/cuda-out-of-memory").json()
    assert one["current"] is True and "id: cuda-out-of-memory" in one["yaml"]
    assert client.get("/api/v1/rules/no-such-rule").status_code == 404
    ecc = client.get("/api/v1/rules", params={"class": "hardware.gpu_ecc_error"}).json()
    assert ecc and {r["failure_class"] for r in ecc} == {"hardware.gpu_ecc_error"}
    # the same words the /rules page searches with: every word in id, title, class or tags
    found = client.get("/api/v1/rules", params={"q": "ECC uncorrectable"}).json()
    assert found and len(found) < len(rules)
    assert all("ecc" in f"{r['id']} {r['title']} {r['failure_class']}".lower() for r in found)
    # a rule that names no framework applies to every framework's logs
    verl = client.get("/api/v1/rules", params={"framework": "verl"}).json()
    assert {r["id"] for r in verl} >= {r["id"] for r in rules if not r["frameworks"]}
    assert all(not r["frameworks"] or "verl" in r["frameworks"] for r in verl)
    lib = client.get("/api/v1/library").json()
    assert lib["version"] and lib["version"] in lib["changelog"]
    assert lib["classes"]["cuda.out_of_memory"]["kind"] == "config"
    # one named and one unknown of its own: the rate is between 0 and 1 whatever ran before
    post_text(client, training_log(ECC.format(ip="10.4.4.4")))
    post_text(client, training_log("nothing to see here\n"))
    stats = client.get("/api/v1/stats", params={"days": 1}).json()
    assert stats["analyses"] >= 1
    assert stats["by_class"]["unknown"] >= 1
    assert 0 < stats["unknown_rate"] < 1
    today = next(iter(stats["by_day"].values()))
    assert today["total"] >= today["unknown"] >= 1
    assert stats["top_recurring"] and {"fingerprint", "count", "first_seen"} <= set(stats["top_recurring"][0])
    assert client.get("/api/v1/stats", params={"since": "1d", "until": "2d"}).status_code == 422


def test_problem_json_for_every_error(client: httpx.Client) -> None:
    for method, path, status in (
        ("GET", f"{API}/01ARZ3NDEKTSV4RRFFQ69G5FAV", 404),
        ("GET", f"{API}/not-an-id", 404),
        ("GET", "/api/v1/nothing-here", 404),
        ("DELETE", API, 405),
    ):
        r = client.request(method, path)
        assert r.status_code == status, (path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        p = r.json()
        assert set(p) >= {"type", "title", "status", "detail", "instance"} and p["status"] == status
    r = client.post(API, json={"log": "x"})
    assert r.status_code == 415 and r.json()["type"] == "/problems/unsupported-media-type"
    assert client.get("/problems/payload-too-large").json()["status"] == 413


def test_bad_input_leaves_no_analysis_and_no_blob(client: httpx.Client, server: LiveServer) -> None:
    data_dir = server.settings.data_dir
    count = len(client.get(API, params={"limit": 200}).json()["items"])
    blobs = blob_files(data_dir)
    cases = [
        (gzip.compress(b"a log\n" * 1000)[:-30], {"Content-Type": "text/plain"}, 400),  # truncated gzip
        (b"\x00\x01\x02\x03" * 4096, {"Content-Type": "application/octet-stream"}, 415),  # binary
        (b"", {"Content-Type": "text/plain"}, 400),  # empty
        (gzip.compress(b""), {"Content-Type": "text/plain"}, 400),  # empty after decompression
    ]
    for data, headers, status in cases:
        r = client.post(API, content=data, headers=headers)
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
    bad_config = client.post(
        API,
        files=[
            ("log", ("a.log", OOM.format(gib="1").encode(), "text/plain")),
            ("config", ("c.yaml", b"a: [1\n", "text/plain")),
        ],
    )
    assert bad_config.status_code == 422, bad_config.text
    assert len(client.get(API, params={"limit": 200}).json()["items"]) == count
    assert blob_files(data_dir) == blobs

    def leftovers() -> list:  # type: ignore[type-arg]
        return [p for p in (data_dir / "tmp").iterdir() if p.name.startswith(("up-", "blob-"))]

    deadline = time.monotonic() + 30  # a request's staging is removed just after its answer
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leftovers()


def test_event_loop_stays_responsive_during_a_slow_upload(server: LiveServer) -> None:
    """A client stalled mid-body must not block other requests: the health checks below are
    answered while the upload is held open, and the upload completes once released."""
    import threading

    sent_first = threading.Event()
    release = threading.Event()

    def trickle() -> bytes:  # type: ignore[misc]
        yield b"step 0 loss 0.5\n" * 100
        sent_first.set()  # runs when the client asks for the next chunk: the first is sent
        assert release.wait(120)
        for i in range(1, 5):
            yield f"step {i}\n".encode() * 100
        yield OOM.format(gib="1.0").encode()

    result: dict[str, int] = {}

    def upload() -> None:
        with server.client() as c:
            result["status"] = c.post(
                API, content=trickle(), headers={"Content-Type": "text/plain"}
            ).status_code

    t = threading.Thread(target=upload)
    t.start()
    try:
        assert sent_first.wait(60)
        with server.client() as c:
            for _ in range(5):
                assert c.get("/healthz").status_code == 200
        assert t.is_alive() and "status" not in result  # the upload was still open meanwhile
    finally:
        release.set()
        t.join(60)
    assert result["status"] == 201


def test_health_openapi_and_docs(client: httpx.Client) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["checks"]["database"] == "ok"
    spec = client.get("/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/api/v1/analyses",
        "/api/v1/analyses/{analysis_id}",
        "/api/v1/analyses/{analysis_id}/report.md",
        "/api/v1/analyses/{analysis_id}/report.html",
        "/api/v1/analyses/{analysis_id}/log",
        "/api/v1/analyses/{analysis_id}/feedback",
        "/api/v1/analyses/{analysis_id}/retriage",
        "/api/v1/rules",
        "/api/v1/rules/{rule_id}",
        "/api/v1/library",
        "/api/v1/stats",
        "/healthz",
        "/readyz",
    } <= paths
    assert "multipart/form-data" in spec["paths"]["/api/v1/analyses"]["post"]["requestBody"]["content"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_upload_limit_413(tmp_path_factory: pytest.TempPathFactory, db_url: str) -> None:
    from tests.servicekit import live_server, make_settings

    data_dir = tmp_path_factory.mktemp("small-limit")
    settings = make_settings(data_dir, db_url, max_upload_bytes=4096, max_bytes=100_000)
    with live_server(settings) as srv, srv.client() as c:
        declared = c.post(API, content=b"x" * 5000, headers={"Content-Type": "text/plain"})
        assert declared.status_code == 413
        assert declared.json()["type"] == "/problems/payload-too-large"
        streamed = c.post(
            API, content=iter([b"y" * 3000, b"y" * 3000]), headers={"Content-Type": "text/plain"}
        )
        assert streamed.status_code == 413
        multi = c.post(API, files=[("log", ("a.log", io.BytesIO(b"z" * 6000), "text/plain"))])
        assert multi.status_code == 413
        # small on the wire, too large once decompressed: a gzip bomb stops at LOGTRIAGE_MAX_BYTES
        bomb = gzip.compress(b"step 1 loss 0.5\n" * 20_000)
        assert len(bomb) < 4096
        big = c.post(API, content=bomb, headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"})
        assert big.status_code == 413, big.text
        assert big.json()["type"] == "/problems/input-too-large"
        assert blob_files(data_dir) == []
        ok = c.post(API, content=OOM.format(gib="1").encode(), headers={"Content-Type": "text/plain"})
        assert ok.status_code == 201
        assert c.get(API).json()["items"][0]["id"] == ok.json()["id"]


def test_client_disconnect_mid_upload_leaves_nothing(client: httpx.Client, server: LiveServer) -> None:
    import socket

    tmp = server.settings.data_dir / "tmp"

    def staged() -> list:  # type: ignore[type-arg]
        return [p for p in tmp.iterdir() if p.name.startswith("up-")] if tmp.is_dir() else []

    count = len(client.get(API, params={"limit": 200}).json()["items"])
    assert not staged()
    # 3 MiB of a declared 6: more than a body the server keeps in memory (1 MiB), so the client
    # leaves with part of it on disk, and a scan may have started behind it
    part = b"step 1 loss 0.5\n" * (3 * 65536)
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(
            # a loopback name: the open-mode server refuses any other Host before the body
            b"POST /api/v1/analyses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            + f"Content-Length: {2 * len(part)}\r\n\r\n".encode()
            + part
        )
        deadline = time.monotonic() + 60  # a bound against a hang: the staging is waited for
        while not staged():
            assert time.monotonic() < deadline, "the server never staged the body"
            time.sleep(0.05)
    deadline = time.monotonic() + 60
    while staged() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not staged()
    assert len(client.get(API, params={"limit": 200}).json()["items"]) == count


def test_flight_recorder_dumps_are_stored_as_text_and_judged(client: httpx.Client) -> None:
    # the pickles PyTorch wrote on a real 2-GPU desync (tests/corpus/gpu/ckpt-barrier-deadlock)
    from tests.conftest import ROOT

    d = ROOT / "tests" / "corpus" / "gpu" / "ckpt-barrier-deadlock"
    files = [
        ("log", (name, (d / name).read_bytes(), "application/octet-stream"))
        for name in ("nccl_trace_rank_0", "nccl_trace_rank_1")
    ]
    r = client.post(API, files=files, data={"job_id": uid()})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["root_cause"]["failure_class"] == "dist.collective_mismatch"
    verdict = body["timeline"]["verdict"]
    assert verdict["kind"] == "flight_recorder" and verdict["seq"] == 27
    stored = client.get(body["files"][1]["url"]).text
    assert stored.startswith("# PyTorch flight recorder dump (rank 1")
    assert "[FR rank 1] pg 0 seq 27 op nccl:all_reduce_barrier" in stored
    # a pickle that is not a dump stays binary and is refused
    r = client.post(
        API, files=[("log", ("x.pkl", b"\x80\x02" + bytes(range(256)) * 20, "application/octet-stream"))]
    )
    assert r.status_code == 415, r.text
