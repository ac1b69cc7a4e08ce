"""A local stand-in for Slack's servers: the Web API, file downloads and a Socket Mode
WebSocket, on 127.0.0.1, recording every call. The only mock in the Slack tests: everything on
our side (slack_bolt, slack_sdk, the service, the database) is the real thing.

It answers as Slack documents (`{"ok": true, ...}`, `{"ok": false, "error": ...}`), serves
shared files only with the bot token, and can be told to answer 429 (with `Retry-After`) or a
5xx the next N times a method is called.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import WSMsgType, web

from tests.servicekit import free_port

BOT_TOKEN = "xoxb-1111-2222-fakebottoken"
APP_TOKEN = "xapp-1-A111-2222-fakeapptoken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_USER = "UBOTLOGTR"
TEAM = "T0TESTTEAM"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    auth: str | None
    raw: str  # the request as sent (body, plus query string): what "nothing secret sent" checks
    at: float = field(default_factory=time.monotonic)  # when it arrived (bench/slack_bench.py)


@dataclass
class SharedFile:
    id: str
    name: str
    data: bytes
    mimetype: str = "text/plain"
    extra: dict[str, Any] = field(default_factory=dict)


class FakeSlack:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api/"
        self.calls: list[Call] = []
        self.downloads: list[tuple[str, str | None]] = []
        self.files: dict[str, SharedFile] = {}
        self.not_in_channel: set[str] = set()
        self.socket_acks: list[dict[str, Any]] = []
        self._faults: dict[str, list[tuple[int, int]]] = {}
        self._ts = itertools.count(1)
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, name="fake-slack", daemon=True)
        self._ready = threading.Event()

    # --- control ---------------------------------------------------------------------------------

    def start(self) -> FakeSlack:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("fake Slack did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def fail(self, method: str, *, status: int, times: int = 1, retry_after: int = 0) -> None:
        """The next `times` calls of `method` get `status` (429 carries `Retry-After`)."""
        self._faults.setdefault(method, []).extend([(status, retry_after)] * times)

    def add_file(
        self, file_id: str, name: str, data: bytes, mimetype: str = "text/plain", **extra: Any
    ) -> dict[str, Any]:
        self.files[file_id] = SharedFile(file_id, name, data, mimetype, extra)
        return self._file_info(self.files[file_id])

    def of(self, method: str) -> list[Call]:
        with self._cond:
            return [c for c in self.calls if c.method == method]

    def wait_for(self, pred: Callable[[FakeSlack], bool], timeout: float = 90.0) -> None:
        """Until `pred` holds (checked on every recorded call), or fail after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"fake Slack: condition not met; calls: {[c.method for c in self.calls]}"
                    )
                # woken by each recorded call; also re-checked now and then, for conditions
                # on the service's side (its counters) that change without a call
                self._cond.wait(min(left, 0.05))

    def push(self, payload: dict[str, Any], *, kind: str = "events_api") -> str:
        """Send an envelope down the Socket Mode connection; returns its envelope id."""
        assert self._loop is not None
        envelope_id = f"env-{next(self._ts)}"
        message = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": False,
        }

        async def send() -> None:
            for ws in list(self._sockets):
                await ws.send_str(json.dumps(message))
                return
            raise AssertionError("no Socket Mode connection")

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(30)
        return envelope_id

    # --- the server ------------------------------------------------------------------------------

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        app.router.add_get("/socket", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _record(self, call: Call) -> None:
        with self._cond:
            self.calls.append(call)
            self._cond.notify_all()

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        raw = await request.text()
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json" and raw:
            params.update(json.loads(raw))
        elif raw:
            params.update(dict(await request.post()))
        auth = request.headers.get("Authorization")
        self._record(Call(method, params, auth, raw + "?" + request.query_string))
        faults = self._faults.get(method)
        if faults:
            status, retry_after = faults.pop(0)
            headers = {"Retry-After": str(retry_after)} if status == 429 else {}
            return web.json_response(
                {"ok": False, "error": "ratelimited" if status == 429 else "fatal_error"},
                status=status,
                headers=headers,
            )
        token = (auth or "").removeprefix("Bearer ") or params.get("token")
        if method == "apps.connections.open":
            if token != APP_TOKEN:
                return web.json_response({"ok": False, "error": "invalid_auth"})
            return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket"})
        if token != BOT_TOKEN:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        return web.json_response(self._answer(method, params))

    def _answer(self, method: str, p: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://test.slack.com/",
                "team": "test",
                "user": "logtriage",
                "team_id": TEAM,
                "user_id": BOT_USER,
                "bot_id": "BBOTLOGTR",
                "is_enterprise_install": False,
            }
        if method == "files.info":
            f = self.files.get(str(p.get("file")))
            return {"ok": True, "file": self._file_info(f)} if f else {"ok": False, "error": "file_not_found"}
        if method in ("chat.postMessage", "chat.update"):
            channel = str(p.get("channel"))
            if channel in self.not_in_channel:
                return {"ok": False, "error": "not_in_channel"}
            ts = p.get("ts") if method == "chat.update" else f"{1700000000 + next(self._ts)}.000100"
            return {"ok": True, "channel": channel, "ts": ts, "message": {"text": p.get("text"), "ts": ts}}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"{1700000000 + next(self._ts)}.000200"}
        if method in ("reactions.add", "reactions.remove"):
            return {"ok": True}
        if method == "views.open":
            if "trigger_id" not in p or "view" not in p:
                return {"ok": False, "error": "invalid_arguments"}
            return {"ok": True, "view": {"id": f"V{next(self._ts)}"}}
        return {"ok": False, "error": "unknown_method"}

    def _file_info(self, f: SharedFile) -> dict[str, Any]:
        url = f"{self.url}/files/{f.id}/{f.name}"
        info = {
            "id": f.id,
            "name": f.name,
            "mimetype": f.mimetype,
            "filetype": "text",
            "size": len(f.data),
            "mode": "hosted",
            "url_private": url,
            "url_private_download": url,
        }
        info.update(f.extra)
        return info

    async def _download(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization")
        self.downloads.append((request.match_info["file_id"], auth))
        f = self.files.get(request.match_info["file_id"])
        if f is None or auth != f"Bearer {BOT_TOKEN}":
            # what Slack does without a valid token: a sign-in page, not a 401
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        return web.Response(body=f.data, content_type="application/octet-stream")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1, "debug_info": {"host": "fake"}}))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    with self._cond:
                        self.socket_acks.append(json.loads(msg.data))
                        self._cond.notify_all()
        finally:
            self._sockets.remove(ws)
        return ws


@contextmanager
def fake_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    try:
        yield fake
    finally:
        fake.stop()


# --- what Slack sends us -------------------------------------------------------------------------


def sign(body: str, *, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def post_event(client: httpx.Client, payload: dict[str, Any], **headers: str) -> httpx.Response:
    body = json.dumps(payload)
    return client.post(
        "/slack/events",
        content=body,
        headers={"Content-Type": "application/json", **sign(body), **headers},
    )


def post_form(client: httpx.Client, form: dict[str, str]) -> httpx.Response:
    """A slash command (form fields) or an interaction (`payload=` JSON), signed."""
    body = httpx.QueryParams(form).__str__()
    return client.post(
        "/slack/events",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded", **sign(body)},
    )


_events = itertools.count(1)


def event_callback(event: dict[str, Any]) -> dict[str, Any]:
    n = next(_events)
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "api_app_id": "A0LOGTRIAGE",
        "type": "event_callback",
        "event_id": f"Ev{n:08d}{int(time.time())}",
        "event_time": int(time.time()),
        "event": event,
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
    }


def file_share(
    channel: str, ts: str, files: list[dict[str, Any]], *, text: str = "", user: str = "U0ALICE01"
) -> dict[str, Any]:
    return event_callback(
        {
            "type": "message",
            "subtype": "file_share",
            "channel": channel,
            "channel_type": "channel",
            "user": user,
            "text": text,
            "ts": ts,
            "files": files,
        }
    )


def mention(
    channel: str, ts: str, text: str, *, user: str = "U0BOB0001", files: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`@logtriage ...` in a channel (with the files shared in the same message, if any)."""
    event: dict[str, Any] = {"type": "app_mention", "channel": channel, "user": user, "text": text, "ts": ts}
    if files:
        event["files"] = files
    return event_callback(event)
