"""Crash consistency: `kill -9` of the whole server at random points of an upload mix loses no
acknowledged analysis, and the next start (or `logtriage doctor`) leaves no orphan behind."""

from __future__ import annotations

import contextlib
import gzip
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import zstandard
from sqlalchemy import create_engine, text

from tests.conftest import ROOT
from tests.servicekit import OOM, blob_files, cli_env, free_port, make_settings, run_cli, training_log

# slow: `logtriage serve` processes killed with -9 mid-traffic and restarted
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
ROUNDS = 4


def _start(settings: Any) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        env=cli_env(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,  # the server and its scan workers: one process group to kill
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    return proc, url
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
    except BaseException:
        _kill(proc)  # a server that never came up is still this test's to stop
        raise


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _body(rng: random.Random, n: int) -> tuple[bytes, str]:
    """Upload n of the mix: plain, gzip, or two files in one multipart form; (body, content type)."""
    log = training_log(OOM.format(gib=f"{rng.randint(1, 60)}.{n:02d}"), job=f"crash-{n}")
    kind = n % 3
    if kind == 0:
        return log.encode(), "text/plain"
    if kind == 1:
        return gzip.compress(log.encode()), "application/gzip"
    form = httpx.Request(
        "POST",
        "http://x" + API,
        files=[
            ("log", ("r0.log", log.encode(), "text/plain")),
            ("log", ("r1.log", (log + "x\n").encode(), "text/plain")),
        ],
    )
    return form.read(), form.headers["Content-Type"]


def _post(c: httpx.Client, body: bytes, ctype: str, key: str) -> httpx.Response:
    return c.post(API, content=body, headers={"Content-Type": ctype, "Idempotency-Key": key})


def test_kill_9_at_random_points_loses_nothing_acknowledged_and_leaves_no_orphan(
    db_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path / "data", db_url)
    rng = random.Random(20261123)
    acked: list[str] = []  # answered 201: stored, done
    # answered 202 (queued behind the others: under load most are): the hook's to follow up,
    # by id, and with the same Idempotency-Key and body when the analysis was interrupted
    pending: dict[str, tuple[str, bytes, str]] = {}
    n = 0
    for _ in range(ROUNDS):
        proc, url = _start(settings)
        if proc.stderr is not None:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # never block the server
        target = len(acked) + len(pending) + rng.randint(2, 6)
        stop = threading.Event()

        def client(base: str = url, stopped: threading.Event = stop) -> None:
            nonlocal n
            with httpx.Client(base_url=base, timeout=30) as c:
                while not stopped.is_set():
                    n += 1
                    key = f"crash-{n}"
                    body, ctype = _body(rng, n)
                    try:
                        r = _post(c, body, ctype, key)
                    except httpx.TransportError:
                        return  # the server is gone
                    if r.status_code == 201:
                        acked.append(r.json()["id"])
                    elif r.status_code == 202:
                        pending[r.json()["id"]] = (key, body, ctype)

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            # kill in the middle of the traffic, not before it starts: once some uploads are
            # acknowledged, however the server answered them
            while len(acked) + len(pending) < target:
                for t in threads:
                    t.join(0.01)
                assert any(t.is_alive() for t in threads), "every client stopped before the kill"
            time.sleep(rng.random() * 0.05)  # and at a random point of what is in flight
        finally:
            _kill(proc)
            stop.set()
            for t in threads:
                t.join(60)
    assert acked or pending
    proc, url = _start(settings)  # the start after the last crash sweeps
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            for aid, (key, body, ctype) in pending.items():
                status = c.get(f"{API}/{aid}").json()["status"]
                if status != "done":
                    # interrupted by the kill: the hook posts it again under its key, which runs
                    # it again under the same id; a 202 is followed by its id until it is done
                    again = _post(c, body, ctype, key)
                    assert again.status_code in (200, 201, 202), again.text[:200]
                    assert again.json()["id"] == aid
                    limit = time.monotonic() + 300  # a bound, not a timing: a rerun that never ends
                    while again.json()["status"] not in ("done", "failed"):
                        assert time.monotonic() < limit, f"{aid} still {again.json()['status']}"
                        time.sleep(0.1)
                        again = c.get(f"{API}/{aid}")
                acked.append(aid)
            for aid in acked:
                r = c.get(f"{API}/{aid}")
                assert r.status_code == 200 and r.json()["status"] == "done", (aid, r.text[:200])
                assert r.json()["root_cause"]["failure_class"] == "cuda.out_of_memory"
                assert c.get(f"{API}/{aid}/log", params={"file": 0}).status_code == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)
    # every blob file has its row, and every row its file
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = {r[0] for r in conn.execute(text("SELECT sha256 FROM blobs"))}
    finally:
        engine.dispose()
    files = {p.name.removesuffix(".zst") for p in blob_files(settings.data_dir)}
    assert files == rows
    for p in blob_files(settings.data_dir):  # and each file is a whole zstd stream
        with p.open("rb") as fh:
            zstandard.ZstdDecompressor().stream_reader(fh).read()
    doctor = run_cli("doctor", "--dry-run", env=cli_env(settings))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "orphan blob files: 0" in doctor.stdout and "missing: 0" in doctor.stdout
    print(
        f"\n{ROUNDS} kill -9 rounds: {len(acked)} uploads acknowledged ({len(pending)} of them 202), all done"
    )


def test_doctor_removes_an_unclaimed_orphan_at_once_and_keeps_a_claimed_one(tmp_path: Path) -> None:
    from app.blobstore.base import blob_key
    from app.service.spool import claim_dir

    # a store of its own (the blob files are the subject; either database keeps the same rows)
    settings = make_settings(tmp_path / "data", f"sqlite:///{tmp_path / 'doctor.db'}")
    proc, _url = _start(settings)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=60)
    store = settings.data_dir / "blobs"
    orphan, claimed = "a" * 64, "b" * 64
    for sha in (orphan, claimed):
        path = store / blob_key(sha)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(zstandard.ZstdCompressor().compress(b"left by a crash\n"))
    # a live server (this test process) is about to reference `claimed`
    claims = claim_dir(settings.data_dir)
    claims.mkdir(parents=True, exist_ok=True)
    (claims / f"{claimed}.t1").touch()
    try:
        out = run_cli("doctor", env=cli_env(settings))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "orphan blob files: 1 (removed)" in out.stdout
        assert not (store / blob_key(orphan)).exists() and (store / blob_key(claimed)).exists()
    finally:
        (claims / f"{claimed}.t1").unlink()
    out = run_cli("doctor", env=cli_env(settings))  # the claim is released: now it goes too
    assert "orphan blob files: 1 (removed)" in out.stdout and not (store / blob_key(claimed)).exists()


class _Hook(threading.Thread):
    """A failed job's hook as docs/hooks.md has it: POST with an Idempotency-Key; on 202 poll the
    Location; on a connection error, 429/503/507, or an analysis that failed retryably (the
    server stopped under it), send the same request again, until it is done or the deadline."""

    def __init__(self, n: int, servers: dict[str, str], deadline: float) -> None:
        super().__init__(daemon=True)
        self.n, self.servers, self.deadline = n, servers, deadline
        self.key = f"hook-{n}-{os.urandom(4).hex()}"
        self.job = f"retry-hook-{n}"
        self.body = training_log(OOM.format(gib=f"{n % 60 + 1}.{n:02d}"), job=f"burst-{n}").encode()
        self.acked: str | None = None  # the id of the first 201/202
        self.final: dict[str, Any] | None = None
        self.reran = 0  # times its analysis had failed retryably and the replay ran it again

    def _send(self, c: httpx.Client, url: str) -> dict[str, Any] | None:
        headers = {"Content-Type": "text/plain", "Idempotency-Key": self.key}
        if self.n % 2:
            headers["Prefer"] = "respond-async"  # acknowledged before it is done: a pending row
        r = c.post(f"{url}{API}", content=self.body, headers=headers, params={"job_id": self.job})
        if r.status_code in (429, 503, 507):
            return None
        assert r.status_code in (200, 201, 202), r.text[:300]
        self.acked = self.acked or r.json()["id"]
        assert r.json()["id"] == self.acked  # a retry never makes a second analysis
        res: dict[str, Any] = r.json()
        while res["status"] == "pending":
            time.sleep(0.05)
            p = c.get(f"{url}{API}/{res['id']}")
            assert p.status_code == 200, p.text[:300]
            res = p.json()
        return res

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            url = self.servers.get("url")
            if url is None:
                time.sleep(0.05)
                continue
            try:
                with httpx.Client(timeout=30) as c:
                    res = self._send(c, url)
            except httpx.TransportError:
                time.sleep(0.05)  # the server is down: it comes back on another port
                continue
            if res is None or (res["status"] == "failed" and res["error"]["status"] in (503, 507)):
                self.reran += res is not None
                time.sleep(0.05)
                continue
            self.final = res
            return


def test_kill_9_mid_burst_loses_nothing_a_retrying_hook_was_acknowledged(db_url: str, tmp_path: Path) -> None:
    """Every log a hook got 201 or 202 for ends `done` under the same id, though the server is
    killed (-9) twice while hooks post and poll; the interrupted ones run again when their
    hook replays the request with its Idempotency-Key."""
    settings = make_settings(tmp_path / "data", db_url, analysis_workers=1)
    servers: dict[str, str] = {}
    hooks = [_Hook(n, servers, time.monotonic() + 300) for n in range(16)]
    for h in hooks:
        h.start()
    rng = random.Random(20261126)
    proc = None
    try:
        for _ in range(2):
            proc, url = _start(settings)
            if proc.stderr is not None:
                threading.Thread(target=proc.stderr.read, daemon=True).start()
            before = sum(h.acked is not None for h in hooks)
            servers["url"] = url
            deadline = time.monotonic() + 120
            while sum(h.acked is not None for h in hooks) < min(len(hooks), before + rng.randint(2, 5)):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            servers.pop("url")
            _kill(proc)
        proc, url = _start(settings)
        if proc.stderr is not None:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
        servers["url"] = url
        for h in hooks:
            h.join(300)
        assert all(h.final is not None for h in hooks), [h.n for h in hooks if h.final is None]
        for h in hooks:
            assert h.final is not None and h.final["status"] == "done", h.final
            assert h.final["id"] == h.acked
            assert h.final["root_cause"]["failure_class"] == "cuda.out_of_memory"
        for h in hooks:  # no second analysis of a hook's log, failed or otherwise
            mine = httpx.get(f"{url}{API}", params={"job_id": h.job}, timeout=30)
            assert mine.status_code == 200 and [a["id"] for a in mine.json()["items"]] == [h.acked]
        print(f"\n{len(hooks)} hooks, 2 kills: {sum(h.reran for h in hooks)} interrupted analyses ran again")
    finally:
        if proc is not None:
            _kill(proc)
