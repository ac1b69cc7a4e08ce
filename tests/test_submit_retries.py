"""`logtriage submit` against a scripted local HTTP server: it retries 429/502/503/504/507 and
lost connections with backoff, honours Retry-After, always resends under the same
Idempotency-Key and the same body, sends an interrupted analysis again, and gives up with a
clear message and exit status 4 (`--strict`) once `--deadline` has passed. The waits are
injected (in-process) or made short by the server's Retry-After and `--backoff` (subprocess)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.client import SubmitOptions, submit
from app.errors import RemoteError, SubmitGaveUpError
from tests.servicekit import ROOT

DONE = {"id": "a1", "status": "done", "root_cause": None, "next_steps": [], "permalink": "http://x/a1"}


@dataclass
class Answer:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    method: str
    path: str
    key: str | None
    body: bytes


class Fake:
    """Answers each POST and GET with the next scripted answer of its kind (the last repeats)."""

    def __init__(self, posts: list[Answer], gets: list[Answer] | None = None) -> None:
        self.posts, self.gets = posts, gets or []
        self.seen: list[Seen] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, script: list[Answer]) -> None:
                a = script.pop(0) if len(script) > 1 else script[0]
                data = json.dumps(a.body or {"title": "x", "detail": f"scripted {a.status}"}).encode()
                self.send_response(a.status)
                for k, v in a.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                if size:
                    raw = self.rfile.read(size)
                else:  # chunked
                    raw = b""
                    while (n := int(self.rfile.readline().strip() or b"0", 16)) > 0:
                        raw += self.rfile.read(n)
                        self.rfile.readline()
                    self.rfile.readline()
                if self.headers.get("content-encoding") == "gzip":
                    raw = gzip.decompress(raw)
                fake.seen.append(Seen("POST", self.path, self.headers.get("idempotency-key"), raw))
                self._answer(fake.posts)

            def do_GET(self) -> None:
                fake.seen.append(Seen("GET", self.path, self.headers.get("idempotency-key"), b""))
                self._answer(fake.gets)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def posts_seen(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    p = tmp_path / "job.log"
    p.write_text("step 1\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    return p


@pytest.fixture
def fake_factory() -> Iterator[Any]:
    made: list[Fake] = []

    def make(posts: list[Answer], gets: list[Answer] | None = None) -> Fake:
        made.append(Fake(posts, gets))
        return made[-1]

    yield make
    for f in made:
        f.close()


class Clock:
    """A clock that only the injected sleep moves: waits are recorded, not spent."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def __call__(self) -> float:
        return self.now


def _opts(url: str, clock: Clock, **kw: Any) -> SubmitOptions:
    return SubmitOptions(url=url, job_id="j1", sleep=clock.sleep, clock=clock, **kw)


def test_retryable_answers_are_retried_under_one_key_honouring_retry_after(
    fake_factory: Any, log_file: Path
) -> None:
    fake = fake_factory(
        [
            Answer(429, headers={"Retry-After": "7"}),
            Answer(503, headers={"Retry-After": "3"}),
            Answer(507, headers={"Retry-After": "60"}),
            Answer(502),
            Answer(504),
            Answer(201, DONE),
        ]
    )
    clock = Clock()
    res = submit([log_file], _opts(fake.url, clock), log=lambda m: None)
    assert res["id"] == "a1"
    posts = fake.posts_seen()
    assert len(posts) == 6
    assert len({p.key for p in posts}) == 1 and posts[0].key  # one Idempotency-Key throughout
    assert len({p.body for p in posts}) == 1 and b"CUDA out of memory" in posts[0].body
    # Retry-After is waited (a little longer, jittered), capped at 60 s; without it, backoff
    waits = clock.slept
    assert 7 <= waits[0] <= 7 * 1.2 and 3 <= waits[1] <= 3.6 and 60 <= waits[2] <= 72
    # without: the backoff of the 4th and 5th failure in a row (1 s doubling, jittered by half)
    assert 4 <= waits[3] <= 8 and 8 <= waits[4] <= 16


def test_refusals_are_not_retried(fake_factory: Any, log_file: Path) -> None:
    fake = fake_factory([Answer(422, {"title": "Validation failed", "detail": "framework: bad"})])
    with pytest.raises(RemoteError) as err:
        submit([log_file], _opts(fake.url, Clock()), log=lambda m: None)
    assert not isinstance(err.value, SubmitGaveUpError) and "framework: bad" in err.value.detail
    assert len(fake.posts_seen()) == 1


def test_the_deadline_ends_the_retries_with_a_clear_error(fake_factory: Any, log_file: Path) -> None:
    fake = fake_factory([Answer(503, headers={"Retry-After": "5"})])
    clock = Clock()
    with pytest.raises(SubmitGaveUpError) as err:
        submit([log_file], _opts(fake.url, clock, deadline=60), log=lambda m: None)
    assert "gave up submitting" in err.value.detail and "--deadline 60 s" in err.value.detail
    assert "HTTP 503" in err.value.detail and "no analysis was reported" in err.value.detail
    assert err.value.exit_code == 4
    assert clock.now <= 60 and len(fake.posts_seen()) == len(clock.slept) + 1 >= 9


def test_an_interrupted_analysis_is_sent_again_under_the_same_key(fake_factory: Any, log_file: Path) -> None:
    pending = {"id": "a1", "status": "pending", "links": {"self": "/api/v1/analyses/a1"}}
    interrupted = {
        "id": "a1",
        "status": "failed",
        "error": {"type": "/problems/interrupted", "status": 503, "detail": "the server stopped"},
    }
    fake = fake_factory(
        [Answer(202, pending, {"Location": "/api/v1/analyses/a1", "Retry-After": "1"}), Answer(201, DONE)],
        [Answer(200, pending), Answer(503, headers={"Retry-After": "2"}), Answer(200, interrupted)],
    )
    clock = Clock()
    res = submit([log_file], _opts(fake.url, clock), log=lambda m: None)
    assert res["status"] == "done"
    posts = fake.posts_seen()
    assert len(posts) == 2 and posts[0].key == posts[1].key and posts[0].body == posts[1].body
    assert [s.method for s in fake.seen] == ["POST", "GET", "GET", "GET", "POST"]


def test_an_analysis_that_keeps_failing_retryably_is_not_reported(fake_factory: Any, log_file: Path) -> None:
    failed = {"id": "a1", "status": "failed", "error": {"status": 507, "detail": "disk full"}}
    fake = fake_factory([Answer(200, failed)])
    with pytest.raises(SubmitGaveUpError) as err:
        submit([log_file], _opts(fake.url, Clock()), log=lambda m: None)
    assert "analysis a1 failed: disk full" in err.value.detail
    assert len(fake.posts_seen()) == 6  # the first and MAX_RESENDS more


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "submit", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.slow  # a `logtriage submit` process
def test_cli_retries_then_reports_and_exits_0(fake_factory: Any, log_file: Path) -> None:
    fake = fake_factory(
        [
            Answer(429, headers={"Retry-After": "0.05"}),
            Answer(503, headers={"Retry-After": "0.05"}),
            Answer(507, headers={"Retry-After": "0.05"}),
            Answer(201, DONE),
        ]
    )
    res = _cli(fake.url, str(log_file), "--strict", "--backoff", "0.01")
    assert res.returncode == 0, res.stderr
    assert "no known failure matched" in res.stdout and "report: http://x/a1" in res.stdout
    assert res.stderr.count("retrying in") == 3
    assert len({p.key for p in fake.posts_seen()}) == 1 and len(fake.posts_seen()) == 4


@pytest.mark.slow  # a `logtriage submit` process
def test_cli_gives_up_at_the_deadline_with_exit_4(fake_factory: Any, log_file: Path) -> None:
    fake = fake_factory([Answer(503, headers={"Retry-After": "0.05"})])
    res = _cli(fake.url, str(log_file), "--strict", "--deadline", "1", "--backoff", "0.01")
    assert res.returncode == 4, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert "submit failed: gave up submitting after" in last and "--deadline 1 s" in last, last
    assert "HTTP 503" in last and "no analysis was reported" in last
    assert len(fake.posts_seen()) >= 2
    lenient = _cli(fake.url, str(log_file), "--deadline", "0.5", "--backoff", "0.01")
    assert lenient.returncode == 0 and "gave up submitting" in lenient.stderr  # the job's status is kept
