"""Which `Host` names the service answers to, and which it builds links from.

The `Host` header is the client's to choose. Two things follow:

- **Links.** Every absolute link (a hook's `Location`, the links in a resource, the report link
  in a Slack message) starts with `LOGTRIAGE_PUBLIC_URL` when it is set. Without it, a link is
  built from the request only when its Host is a loopback name or one the operator named in
  `LOGTRIAGE_ALLOWED_HOSTS`; otherwise links are relative (`/api/v1/analyses/ID`) and the Slack
  bot uses `http://LOGTRIAGE_HOST:LOGTRIAGE_PORT`. A request for `Host: evil.example` can no
  longer make the service hand out, or post to Slack, a link to evil.example.
- **DNS rebinding.** In open mode (no API token: everything is readable without credentials by
  a loopback client) a web page on another site could point its own name at 127.0.0.1 and read
  the service as same-origin. Open mode therefore answers only loopback Host names (127.0.0.1
  and all of 127/8, `localhost`, `[::1]`, any port) and names listed in `LOGTRIAGE_ALLOWED_HOSTS`
  or `LOGTRIAGE_PUBLIC_URL`; any other is a 400 problem. With tokens a rebound page holds no
  credentials, so when nothing is configured any Host is served (hooks reach a service by IP,
  by a node name or a cluster DNS name) but none of them is trusted for links. Once
  `LOGTRIAGE_ALLOWED_HOSTS` or `LOGTRIAGE_PUBLIC_URL` is set, the list is strict in every mode.
  `/healthz` and `/readyz` answer any Host (probes use an IP; they tell nothing of the data).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from app.errors import HostNotAllowedError
from app.settings import Settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# a load balancer's or kubelet's probe addresses the service by IP: answered, they hold no data
PROBES = frozenset({"/healthz", "/readyz"})


def host_name(header: str) -> str:
    """The name in a Host header value: lower case, without its port, brackets or final dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8000
        end = value.find("]")
        return value[1:end] if end > 0 else value
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        value = name
    return value[:-1] if value.endswith(".") else value


def is_loopback_name(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPolicy:
    names: frozenset[str]  # named exactly (LOGTRIAGE_ALLOWED_HOSTS, PUBLIC_URL's host)
    suffixes: tuple[str, ...]  # ".example.com": every name under it
    any_host: bool  # "*" in LOGTRIAGE_ALLOWED_HOSTS
    configured: bool  # a list was given: it is strict

    def listed(self, name: str) -> bool:
        return is_loopback_name(name) or name in self.names or name.endswith(self.suffixes)

    def trusted(self, name: str) -> bool:
        """Links may be built from a request for this name."""
        return self.any_host or self.listed(name)


def parse_allowed_hosts(value: str | None) -> list[str]:
    return [h.strip().lower() for h in (value or "").split(",") if h.strip()]


@lru_cache(maxsize=8)
def _policy(allowed: str | None, public_url: str | None) -> HostPolicy:
    names: set[str] = set()
    suffixes: list[str] = []
    any_host = False
    for entry in parse_allowed_hosts(allowed):
        if entry == "*":
            any_host = True
        elif entry.startswith("*."):
            suffixes.append(entry[1:])
        elif entry.startswith("."):
            suffixes.append(entry)
        else:
            names.add(host_name(entry))
    if public_url:
        public = urlsplit(public_url).hostname
        if public:
            names.add(public.lower().rstrip("."))
    return HostPolicy(frozenset(names), tuple(suffixes), any_host, bool(names or suffixes or any_host))


def policy_of(settings: Settings) -> HostPolicy:
    return _policy(settings.allowed_hosts, settings.public_url)


def request_host(scope: Scope) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == b"host":
            return host_name(value.decode("latin-1"))
    return None  # HTTP/1.0 without a Host: links come from the server's own address


def link_base(scope: Scope, settings: Settings, request_base: str) -> str:
    """The base of absolute links for this request: the public URL, else the request's own base
    when its Host is trusted, else "" (links stay relative)."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    name = request_host(scope)
    if name is None or policy_of(settings).trusted(name):
        return request_base.rstrip("/")
    return ""


class HostCheck:
    """Refuses, with a 400 problem, a request for a Host name the service does not answer to."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in PROBES:
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        settings: Settings = state.settings
        name = request_host(scope)
        refusal = None if name is None else await self._refusal(name, settings, state)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        from fastapi.responses import JSONResponse

        from app.http.errors import PROBLEM_JSON, problem_body

        body = problem_body(
            status=refusal.http_status,
            slug=refusal.slug,
            title=refusal.title,
            detail=refusal.detail,
            instance=scope.get("path"),
        )
        response = JSONResponse(body, status_code=refusal.http_status, media_type=PROBLEM_JSON)
        await response(scope, receive, send)

    async def _refusal(self, name: str, settings: Settings, state: Any) -> HostNotAllowedError | None:
        policy = policy_of(settings)
        if policy.listed(name):
            return None
        shown = name[:100]
        if policy.configured and not policy.any_host:
            return HostNotAllowedError(
                f"Host {shown!r} is not one this service answers to: allowed are loopback names, "
                "LOGTRIAGE_ALLOWED_HOSTS and the host of LOGTRIAGE_PUBLIC_URL"
            )
        if await _tokens_mode(settings, state):
            return None  # served; links from it only with "*" (see link_base)
        return HostNotAllowedError(
            f"Host {shown!r} refused: without an API token the service runs open and answers only "
            "loopback names (127.0.0.1, localhost, [::1]), a defence against DNS rebinding; open it "
            "as http://127.0.0.1:PORT/, name this host in LOGTRIAGE_ALLOWED_HOSTS, or create a token "
            "(`logtriage tokens create`)"
        )


async def _tokens_mode(settings: Settings, state: Any) -> bool:
    """True when requests need a token (tokens exist or are required): not open mode."""
    if settings.require_tokens:
        return True
    ctx = getattr(state, "ctx", None)
    if ctx is None:
        return False  # not started yet: as strict as open mode
    from app.http.authcache import Miss
    from app.http.deps import _read_tokens_exist

    exist = ctx.auth.tokens_exist()
    if isinstance(exist, Miss):
        exist = await asyncio.to_thread(_read_tokens_exist, ctx)
    return bool(exist)
