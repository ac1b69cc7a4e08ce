"""The service end to end with its blobs in S3 (moto's server on 127.0.0.1): real uvicorn, real HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import zstandard

from app.settings import Settings
from tests.s3kit import MotoS3
from tests.servicekit import (
    ECC,
    OOM,
    blob_files,
    cli_env,
    live_server,
    make_settings,
    run_cli,
    tmp_leftovers,
    training_log,
)

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
PREFIX = "prod/logs"


def s3_settings(tmp: Path, endpoint: str, bucket: str) -> Settings:
    return make_settings(
        tmp / "data",
        f"sqlite:///{tmp / 'logtriage.db'}",
        blob_url=f"s3://{bucket}/{PREFIX}",
        s3_endpoint_url=endpoint,
    )


def post_text(client: httpx.Client, text: str) -> httpx.Response:
    return client.post(API, content=text.encode(), headers={"Content-Type": "text/plain"})


def key_of(sha: str) -> str:
    return f"{PREFIX}/{sha[:2]}/{sha[2:4]}/{sha}.zst"


def test_logs_go_to_the_bucket_and_come_back_redacted(
    tmp_path: Path, moto_s3: MotoS3, s3_bucket: str
) -> None:
    settings = s3_settings(tmp_path, moto_s3.endpoint, s3_bucket)
    secret = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"
    text = f"export HF_TOKEN={secret}\n" + training_log(OOM.format(gib="2.5"))
    with live_server(settings) as srv, srv.client() as c:
        ready = c.get("/readyz").json()
        assert ready["checks"]["blob_store"] == "ok"

        r = post_text(c, text)
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["root_cause"]["failure_class"] == "cuda.out_of_memory"
        sha = body["files"][0]["sha256"]

        log = c.get(body["links"]["log"])
        assert log.status_code == 200
        assert secret not in log.text and "[REDACTED:" in log.text
        assert len(log.content) == body["files"][0]["size"]
        head = c.get(body["links"]["log"], headers={"Range": "bytes=0-9"})
        assert head.status_code == 206 and head.content == log.content[:10]
        tail = c.get(body["links"]["log"], headers={"Range": "bytes=-30"})
        assert tail.status_code == 206 and tail.content == log.content[-30:]

        # the object is in the bucket, content-addressed and zstd-compressed; nothing stays local
        assert moto_s3.keys(s3_bucket) == [key_of(sha)]
        stored = moto_s3.get(s3_bucket, key_of(sha))
        assert zstandard.ZstdDecompressor().decompressobj().decompress(stored) == log.content
        assert moto_s3.head(s3_bucket, key_of(sha))["ContentType"] == "application/zstd"
        assert blob_files(settings.data_dir) == []
        assert tmp_leftovers(settings.data_dir) == []

        # the same log again: a duplicate, stored once
        again = post_text(c, text).json()
        assert again["duplicate_of"] == body["id"]
        assert moto_s3.keys(s3_bucket) == [key_of(sha)]

        # re-triage reads the stored log back from the bucket in a scan worker
        rt = c.post(body["links"]["retriage"])
        assert rt.status_code == 200, rt.text
        assert rt.json()["changes"]["changed"] is False

        # a blob lost behind the service's back is a 404 problem, not a 500
        other = post_text(c, training_log(ECC.format(ip="10.9.9.9"))).json()
        moto_s3.client().delete_object(Bucket=s3_bucket, Key=key_of(other["files"][0]["sha256"]))
        lost = c.get(other["links"]["log"])
        assert lost.status_code == 404, lost.text
        assert lost.headers["content-type"] == "application/problem+json"
        assert "missing from the blob store" in lost.json()["detail"]

    # `db gc` lists the bucket: every object is referenced (or too young), nothing goes
    moto_s3.put(s3_bucket, key_of("e" * 64), b"a crash's orphan, younger than an hour")
    env = cli_env(
        settings, LOGTRIAGE_BLOB_URL=f"s3://{s3_bucket}/{PREFIX}", LOGTRIAGE_S3_ENDPOINT_URL=moto_s3.endpoint
    )
    res = run_cli("db", "gc", env=env)
    assert res.returncode == 0, res.stderr
    assert "deleted 0 unreferenced blobs and 0 orphan blob files" in res.stdout
    assert key_of("e" * 64) in moto_s3.keys(s3_bucket)


def test_a_blob_store_outage_is_a_503_problem(tmp_path: Path, moto_s3: MotoS3) -> None:
    own = MotoS3().start()  # this test stops it; the session's server stays up for the others
    stopped = False
    try:
        bucket = own.new_bucket()
        settings = s3_settings(tmp_path, own.endpoint, bucket)
        with live_server(settings) as srv, srv.client() as c:
            first = post_text(c, training_log(OOM.format(gib="3.1"))).json()
            own.stop()
            stopped = True

            log = c.get(first["links"]["log"])
            assert log.status_code == 503, log.text
            assert log.headers["content-type"] == "application/problem+json"
            assert log.json()["type"] == "/problems/service-unavailable"

            ready = c.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["checks"]["blob_store"].startswith("error: blob store unavailable")

            r = post_text(c, training_log(ECC.format(ip="10.1.1.1")))
            assert r.status_code == 503, r.text
            problem = r.json()
            assert problem["type"] == "/problems/service-unavailable"
            assert "Traceback" not in r.text
            assert tmp_leftovers(settings.data_dir) == []
    finally:
        if not stopped:
            own.stop()
