"""Test helpers for the service: real uvicorn servers on 127.0.0.1, real databases.

PostgreSQL: every server or test database gets its own schema in database `test` (dropped at
the end), so parallel workers and test modules never see each other's rows.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy import create_engine, make_url, text

from app.http.protocol import uvicorn_http
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("LOGTRIAGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

OOM = (
    "(WorkerDict pid=81234, ip=10.0.3.17) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "{gib} GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.21 GiB is free.\n"
)
ECC = "(WorkerDict pid=90412, ip={ip}) RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
NCCL_TIMEOUT = (
    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
    "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
)


def training_log(tail: str, *, steps: int = 20, job: str = "job") -> str:
    lines = [
        f"[{job}] step {i} loss {1.0 / (i + 1):.4f} lr 1e-5 throughput 1234 tokens/s\n" for i in range(steps)
    ]
    return "".join(lines) + tail


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pg_reachable() -> str | None:
    """None when PostgreSQL answers, else why not."""
    try:
        engine = create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        finally:
            engine.dispose()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


class PgSchemas:
    """Creates throw-away schemas; `url(schema)` points search_path at one."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")

    def new(self) -> str:
        name = f"lt_{os.getpid()}_{secrets.token_hex(4)}"
        with self.engine.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{name}"'))
        self.created.append(name)
        return (
            make_url(PG_ADMIN_URL)
            .update_query_dict({"options": f"-csearch_path={name}"})
            .render_as_string(hide_password=False)
        )

    def drop_all(self) -> None:
        with self.engine.connect() as conn:
            for name in self.created:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        self.created.clear()
        self.engine.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, *, proc: subprocess.Popen[Any] | None = None, timeout: float = 120) -> bool:
    """Poll `url`/readyz until it answers 200 (True), the deadline passes or `proc` exits (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return True
        time.sleep(0.2)
    return False


class LiveServer:
    """The real app under uvicorn in a background thread, bound to 127.0.0.1."""

    def __init__(self, settings: Settings, *, port: int | None = None) -> None:
        from app.asgi import create_app

        self.settings = settings
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings)
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="on",
                http=uvicorn_http(settings),  # as `logtriage serve` runs it
            )
        )
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    def start(self, *, ready_timeout: float = 90.0) -> LiveServer:
        from tests import lanes  # here, not at the top: bench/slack_bench.py runs this kit outside pytest

        lanes.require_slow("a live server")
        self.thread.start()
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if not self.thread.is_alive():
                raise RuntimeError("server thread exited during startup")
            with contextlib.suppress(httpx.TransportError):
                r = httpx.get(f"{self.url}/readyz", timeout=2)
                if r.status_code == 200:
                    return self
                if "failed to start" in r.text:
                    self.stop()
                    raise RuntimeError(f"server not ready: {r.json()['detail']}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server not ready in time")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)

    @property
    def ctx(self) -> Any:
        return self.app.state.ctx


def make_settings(data_dir: Path, db_url: str | None, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "database_url": db_url,
        "analysis_workers": 1,
        "sync_wait": 20.0,
        "scan_jobs": 1,
    }
    values.update(extra)
    return Settings(**values)


@contextlib.contextmanager
def live_server(settings: Settings, *, port: int | None = None) -> Iterator[LiveServer]:
    srv = LiveServer(settings, port=port).start()
    try:
        yield srv
    finally:
        srv.stop()


def cli_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env["LOGTRIAGE_DATA_DIR"] = str(settings.data_dir)
    if settings.database_url:
        env["LOGTRIAGE_DATABASE_URL"] = settings.database_url
    if settings.rules_dir:
        env["LOGTRIAGE_RULES_DIR"] = str(settings.rules_dir)
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str], timeout: float = 120, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
    )


def wait_done(client: httpx.Client, location: str, *, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = client.get(location).json()
        if body["status"] != "pending" or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def blob_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "blobs").glob("??/??/*.zst"))


def tmp_leftovers(data_dir: Path) -> list[Path]:
    tmp = data_dir / "tmp"
    return sorted(p for p in tmp.iterdir() if not p.name.startswith(".")) if tmp.is_dir() else []
