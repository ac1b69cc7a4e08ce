"""Planted secrets (tests/secrets/planted.yaml) are gone from everything logtriage keeps or shows,
and healthy text comes out byte for byte.

Engine level: each kind by `redact_text` and by the stream redactor, a secret across the forced
cut of a huge line, and zero false redactions on every log of the corpora. Service level, on
SQLite and PostgreSQL: one upload carrying every planted line, a secret in its file name, job id
and a label; then the analysis JSON, the list API, the Markdown and HTML reports, the stored-log
download, the viewer page, the Slack message, every text column of every table, the blob files on
disk and the server's access log are searched for each secret.
"""

from __future__ import annotations

import functools
import io
import json
import logging
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml
import zstandard
from sqlalchemy import MetaData, create_engine, select

from app.engine.pipeline.library import Library, default_rules_dir, load_library
from app.engine.pipeline.redact import redact_stream, redact_text
from app.http.accesslog import ScrubQuery, scrub_target
from tests.conftest import ROOT
from tests.servicekit import LiveServer, blob_files, wait_done


def who_acts(kind: str) -> str:
    """The bot's words for a kind: the project's class catalogue."""
    return _catalogue().kind(kind).who


@functools.cache
def _catalogue() -> Library:
    return load_library(default_rules_dir())


DATA = yaml.safe_load((ROOT / "tests" / "secrets" / "planted.yaml").read_text())
PLANTED = DATA["planted"]
HEALTHY = DATA["healthy"]
API = "/api/v1/analyses"


@pytest.mark.parametrize("case", PLANTED, ids=[f"{c['kind']}-{i}" for i, c in enumerate(PLANTED)])
def test_each_planted_secret_is_replaced_by_its_kind(case: dict[str, str]) -> None:
    counts: Counter[str] = Counter()
    out = redact_text(case["line"], counts)
    assert case["secret"] not in out
    assert f"[REDACTED:{case['kind']}]" in out and counts[case["kind"]] >= 1
    streamed = b"".join(redact_stream(io.BytesIO(case["line"].encode() + b"\n"))).decode()
    assert case["secret"] not in streamed


@pytest.mark.parametrize("line", HEALTHY)
def test_healthy_lines_come_out_unchanged(line: str) -> None:
    assert redact_text(line) == line


def test_no_false_redaction_on_any_corpus_log() -> None:
    roots = ["tests/corpus", "examples", "rules"]
    files = [
        p
        for r in roots
        for p in (ROOT / r).rglob("*")
        if p.is_file() and p.suffix in (".log", ".txt", "") and p.stat().st_size < 8 << 20
    ]
    assert len(files) > 150
    changed = []
    for p in files:
        data = p.read_bytes()
        if b"\0" in data[:4096]:
            continue  # binary fixtures (flight-recorder pickles) are rendered, not redacted
        if b"".join(redact_stream(io.BytesIO(data))) != data:
            changed.append(str(p.relative_to(ROOT)))
    assert changed == []


@pytest.mark.parametrize("offset", range(-40, 41, 8))
def test_a_secret_across_the_forced_cut_of_a_huge_line_is_still_redacted(offset: int) -> None:
    secret = "hf_" + "Qz9" * 12
    from app.engine.pipeline.redact import LONG_LINE_CUT

    head = LONG_LINE_CUT + offset - 10  # the stream cuts a line it cannot end within a window
    line = ("w " * (head // 2))[:head] + secret + " and more" + " z" * 500 + "\n"
    out = b"".join(redact_stream(io.BytesIO(line.encode()), chunk_size=LONG_LINE_CUT))
    assert b"hf_" not in out and out.count(b"[REDACTED:huggingface-token]") == 1
    assert out.count(b"\n") == 1 and out.startswith(b"w w ")


def test_access_log_keeps_query_names_not_values() -> None:
    target = "/api/v1/analyses?label=WANDB_API_KEY%3D9a8b7c6d5e4f3a2b1c0d9e8f&job_id=run-7"
    assert scrub_target(target) == "/api/v1/analyses?label=…&job_id=…"
    assert scrub_target("/analyses/abc") == "/analyses/abc"
    rec = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', None, None
    )
    rec.args = ("127.0.0.1:5000", "GET", target, "1.1", 200)
    assert ScrubQuery().filter(rec) and "9a8b7c6d" not in rec.getMessage()


def _every_text(db_url: str) -> str:
    """Every value of every row of every table, as text."""
    engine = create_engine(db_url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        parts = []
        with engine.connect() as conn:
            for table in meta.sorted_tables:
                for row in conn.execute(select(table)):
                    parts.extend(str(v) for v in row)
        return "\n".join(parts)
    finally:
        engine.dispose()


def _stored_blobs(data_dir: Path) -> str:
    texts = []
    for path in blob_files(data_dir):
        with path.open("rb") as fh:
            texts.append(zstandard.ZstdDecompressor().stream_reader(fh).read().decode("utf-8", "replace"))
    return "\n".join(texts)


@pytest.mark.slow  # a live server
def test_no_planted_secret_reaches_any_place_the_service_keeps_or_shows(
    server: LiveServer, client: httpx.Client, db_url: str
) -> None:
    wandb = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"
    file_token = "hf_FileNameSecretAbCdEfGhIjKlMnOpQrSt"
    job_token = "ghp_JobIdSecret1234567890abcdefghijklmnop"
    # a failure line with a secret: its evidence reaches the reports and the Slack message
    oom_secret = "Oom9Zq7Wm2Xr5Lp"
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
        f"capacity of 79.25 GiB of which 0 bytes is free. Cookie: sid={oom_secret}"
    )
    secrets = [c["secret"] for c in PLANTED] + [file_token, job_token, oom_secret]
    log = "\n".join(["step 1 | loss=0.9", *(c["line"] for c in PLANTED), "step 2 | loss=0.8", oom]) + "\n"
    access = logging.getLogger("uvicorn.access")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    keep = Keep()
    level = access.level
    access.addHandler(keep)
    access.setLevel(logging.INFO)
    try:
        r = client.post(
            API,
            params={"label": f"WANDB_API_KEY={wandb}"},
            files=[("log", (f"rank0-{file_token}.log", log.encode(), "text/plain"))],
            data={"job_id": f"run-{job_token}", "label": ["team=rl"]},
        )
        assert r.status_code in (201, 202), r.text
        body = wait_done(client, r.headers["location"]) if r.status_code == 202 else r.json()
        aid = body["id"]
        assert body["metadata"]["labels"]["WANDB_API_KEY"].startswith("[REDACTED:")
        assert body["metadata"]["labels"]["team"] == "rl"
        pages = {
            "json": client.get(f"{API}/{aid}").text,
            "list": client.get(API, params={"limit": 100}).text,
            "markdown": client.get(f"{API}/{aid}/report.md").text,
            "html": client.get(f"/analyses/{aid}").text,
            "log": client.get(f"{API}/{aid}/log", params={"file": 0}).text,
            "viewer": client.get(f"/analyses/{aid}/files/0").text,
            "history": client.get("/analyses").text,
        }
        for name, text in pages.items():
            assert len(text) > 200, name
        # what the Slack bot would post about it (Block Kit, from the same resource)
        from app.slack import blocks

        resource = client.get(f"{API}/{aid}").json()
        pages["slack"] = json.dumps(
            blocks.diagnosis(resource, who_acts=who_acts, report_url=f"/analyses/{aid}")
        )
        assert "[REDACTED:cookie]" in pages["slack"]  # the evidence line is in the message
    finally:
        access.removeHandler(keep)
        access.setLevel(level)
    places = {
        **pages,
        "database": _every_text(db_url),
        "blobs": _stored_blobs(server.settings.data_dir),
        "access log": "\n".join(seen),
    }
    assert "[REDACTED:" in places["log"] and "[REDACTED:" in places["database"]
    assert any(f"{API}" in line for line in seen)  # the access log did record the requests
    leaks = {(place, s[:12]) for place, text in places.items() for s in [*secrets, wandb] if s in text}
    assert leaks == set()


# Secrets whose key and value are parted by a delimiter the forced cut may choose.
_KEYED = [
    ("secret-assignment", "password: ", "Hx7Qw2Er4Ty6"),
    ("bearer", "Authorization: Bearer ", "Zq9Wm2Xr7Lp4Vn8Bt1Yc5Ua3"),
    ("cli-password", "twine upload -u ci -p ", "R7mK2xQ9vL4p"),
    ("netrc-password", "machine pypi.org login ci password ", "Zp4Kw9Rt2Lm7"),
    ("cookie", "Cookie: ", "sessionid=9f8e7d6c5b4a3f2e1d0c"),
    ("huggingface-token", "HF_TOKEN ", "hf_" + "Qz9" * 12),
]


@pytest.mark.parametrize(("kind", "key", "secret"), _KEYED, ids=[k for k, _, _ in _KEYED])
@pytest.mark.parametrize("offset", [-700, -300, -40, -12, -1, 0, 1, 5, 300])
def test_the_forced_cut_never_parts_a_secret_from_its_key(
    kind: str, key: str, secret: str, offset: int
) -> None:
    from app.engine.pipeline.redact import LONG_LINE_CUT

    # the key ends `offset` bytes from the end of the first piece the stream must cut
    head = LONG_LINE_CUT + offset - len(key)
    line = ("w " * (head // 2))[:head] + key + secret + " and more" + " z" * 500 + "\n"
    out = b"".join(redact_stream(io.BytesIO(line.encode()), chunk_size=LONG_LINE_CUT))
    assert secret.encode() not in out and f"[REDACTED:{kind}]".encode() in out
    assert out.count(b"\n") == 1 and out.startswith(b"w w ")


@pytest.mark.parametrize("offset", [-30, -12, -4, -1])
def test_a_secret_at_the_end_of_a_run_without_delimiters_is_not_split(offset: int) -> None:
    # a huge query string has no delimiter to cut after: the cut moves before the secret
    from app.engine.pipeline.redact import LONG_LINE_CUT

    secret = "q8Kd2Zr9XwP0aLmN3bV5cT7yU1iO4eR6tY8uI0oP2s"
    head = "https://ckpts.blob.core.windows.net/x?" + "a=b&" * (LONG_LINE_CUT // 4)
    head = head[: LONG_LINE_CUT + offset - len("&sig=")]
    line = head + "&sig=" + secret + "&se=2026" + " z" * 500 + "\n"
    out = b"".join(redact_stream(io.BytesIO(line.encode()), chunk_size=LONG_LINE_CUT))
    assert secret[:12].encode() not in out and secret[-12:].encode() not in out
    assert b"[REDACTED:azure-sas]" in out and out.count(b"\n") == 1
