"""The trivial endpoint the burst bench compares against: what any upload service must do at least.

    uvicorn trivial_app:app --app-dir bench --workers 2   (TRIVIAL_DATABASE_URL, TRIVIAL_DATA_DIR)

`POST /ingest` reads the body, writes it to a file and fsyncs it, and inserts one row in
PostgreSQL (in a thread, as a real service would); `GET /healthz` answers at once. Nothing else:
no parsing, no analysis. A latency within a few times this one is the cost of the work logtriage
does on top.
"""

from __future__ import annotations

import asyncio
import os
import queue
import uuid
from pathlib import Path

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

DSN = os.environ.get("TRIVIAL_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
DATA = Path(os.environ.get("TRIVIAL_DATA_DIR", "/tmp/trivial-data"))
app = FastAPI()
# a pool of autocommit connections, one per thread at most (asyncio.to_thread's executor)
_idle: queue.SimpleQueue[psycopg.Connection] = queue.SimpleQueue()


def _conn() -> psycopg.Connection:
    try:
        return _idle.get_nowait()
    except queue.Empty:
        conn = psycopg.connect(DSN, autocommit=True)
        conn.execute("CREATE TABLE IF NOT EXISTS trivial_uploads (id text PRIMARY KEY, size bigint)")
        return conn


def _store(body: bytes) -> str:
    key = uuid.uuid4().hex
    DATA.mkdir(parents=True, exist_ok=True)
    with (DATA / key).open("wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    conn = _conn()
    try:
        conn.execute("INSERT INTO trivial_uploads (id, size) VALUES (%s, %s)", (key, len(body)))
    finally:
        _idle.put(conn)
    return key


@app.post("/ingest")
async def ingest(request: Request) -> JSONResponse:
    body = await request.body()
    key = await asyncio.to_thread(_store, body)
    return JSONResponse({"id": key, "size": len(body)}, status_code=201)


@app.get("/healthz")
async def healthz() -> JSONResponse:
    return JSONResponse({"ok": True})
