"""Typed dependencies: the app context, DB sessions and the authenticated principal.

Auth: ``Authorization: Bearer <token>`` (or HTTP Basic with the token as the password, so a
browser can open a report permalink). Tokens carry scopes: ``ingest`` (hooks post logs and read
what they posted), ``read``, ``admin`` (everything). While no token exists the service is open,
for loopback clients only: a single user on their own machine.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPBasic, HTTPBasicCredentials, HTTPBearer
from fastapi.security.http import HTTPAuthorizationCredentials
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session

from app.errors import AuthError, ForbiddenError
from app.http import authcache
from app.http.authcache import Miss
from app.http.context import AppContext
from app.http.session import COOKIE, CSRF_HEADER, BrowserSession
from app.service import tokens
from app.service.access import ALL_SCOPES, Principal
from app.service.tokens import KnownToken

T = TypeVar("T")
log = logging.getLogger("logtriage.api")
DB_UNAVAILABLE = (OperationalError, InterfaceError, PoolTimeoutError)
bearer_scheme = HTTPBearer(auto_error=False, description="An API token from `logtriage tokens create`.")
basic_scheme = HTTPBasic(auto_error=False, description="Any user name; the API token as the password.")


async def get_ctx(request: Request) -> AppContext:
    # async: FastAPI runs a plain `def` dependency in its thread pool, a hop per request for a
    # dict lookup (only dependencies that wait on the database stay `def`)
    ctx: AppContext = request.app.state.ctx
    return ctx


CtxDep = Annotated[AppContext, Depends(get_ctx)]


def get_session(ctx: CtxDep) -> Iterator[Session]:
    with ctx.db.read() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _secret(bearer: HTTPAuthorizationCredentials | None, request: Request) -> str | None:
    if bearer is not None and bearer.credentials:
        return bearer.credentials
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "basic" and value:
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise AuthError("malformed Basic credentials") from None
        _user, _, password = decoded.partition(":")
        return password or None
    if header and scheme.lower() not in ("bearer", "basic"):
        raise AuthError(f"unsupported Authorization scheme {scheme!r}; use `Authorization: Bearer <token>`")
    return None


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def request_session(request: Request, ctx: AppContext) -> BrowserSession | None:
    """The browser session the request's cookie holds (parsed once per request)."""
    if "lt_session" not in request.state._state:
        request.state.lt_session = ctx.sessions.loads(request.cookies.get(COOKIE))
    session: BrowserSession | None = request.state.lt_session
    return session


def _check_same_origin(request: Request) -> None:
    """A browser's unsafe request must come from our own pages. Browsers say where a request
    comes from (Sec-Fetch-Site, Origin); hooks and curl send neither and are not affected."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise ForbiddenError(f"cross-site request refused (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is not None and site is None:
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin != own:
            raise ForbiddenError(f"cross-origin request refused (Origin: {origin})")


async def _read(ctx: AppContext, read: Callable[[], T], stale: T | Miss) -> T:
    """`read()` in a thread; while the database cannot answer, the stale answer if there is one
    (see app.http.authcache)."""
    if not isinstance(stale, Miss) and (
        ctx.auth.in_outage() or ctx.db.connect_failed_within(authcache.OUTAGE_HOLD_S)
    ):
        return stale
    try:
        return await asyncio.to_thread(read)
    except DB_UNAVAILABLE as exc:
        ctx.auth.database_failed()
        if isinstance(stale, Miss):
            raise
        log.warning("token lookup failed (%s); using what was read before", type(exc).__name__)
        return stale


async def _resolve(ctx: AppContext, token_hash: str) -> KnownToken | None:
    known = ctx.auth.token(token_hash)
    if isinstance(known, Miss):
        known = await _read(ctx, lambda: read_token(ctx, token_hash), ctx.auth.stale_token(token_hash))
    return known


async def authenticate(
    request: Request,
    ctx: CtxDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    _basic: Annotated[HTTPBasicCredentials | None, Depends(basic_scheme)],
) -> Principal:
    return await principal_of(request, ctx, bearer)


async def principal_of(
    request: Request,
    ctx: AppContext,
    bearer: HTTPAuthorizationCredentials | None,
    *,
    csrf_in_form: bool = False,
) -> Principal:
    """Who is asking. `csrf_in_form`: the route is a page's form, posted without JavaScript,
    and itself checks the form's `csrf_token` field (`app.web.pages.csrf_ok`, the same
    constant-time check); a signed-in browser that sends no CSRF header is then let through
    to that check. A header that is sent must be right, here."""
    # async, and the database only on a cache miss (see app.http.authcache): most requests
    # authenticate without a thread hop or a transaction
    secret = _secret(bearer, request)
    if secret:
        token_hash = tokens.hash_token(secret)
        known = await _resolve(ctx, token_hash)
        if known is None or known.expired(tokens.now()):
            raise AuthError("invalid, revoked or expired API token")
        if (
            tokens.touch_due(token_hash)
            and not ctx.auth.in_outage()
            and not ctx.db.connect_failed_within(authcache.OUTAGE_HOLD_S)
        ):
            try:
                await asyncio.to_thread(_touch, ctx, known)
            except DB_UNAVAILABLE:  # `last used` is best effort: the request itself may not need the db
                ctx.auth.database_failed()
        return Principal(token_id=known.id, name=known.name, scopes=known.scopes)
    unsafe = request.method in UNSAFE_METHODS
    if unsafe:
        _check_same_origin(request)
    session = request_session(request, ctx) if COOKIE in request.cookies else None
    if session is not None and session.signed_in:
        assert session.token_hash is not None
        known = await _resolve(ctx, session.token_hash)
        if known is None or known.expired(tokens.now()):
            raise AuthError("your sign-in has ended (the token was revoked or expired); sign in again")
        header = request.headers.get(CSRF_HEADER)
        if unsafe and not ctx.sessions.csrf_ok(session, header) and not (csrf_in_form and header is None):
            raise ForbiddenError(f"missing or wrong CSRF token: send the page's token in {CSRF_HEADER}")
        return Principal(token_id=known.id, name=known.name, scopes=known.scopes, via="session")
    if ctx.settings.require_tokens:
        raise AuthError("this service requires an API token: send `Authorization: Bearer <token>`")
    tokens_exist = ctx.auth.tokens_exist()
    if isinstance(tokens_exist, Miss):
        tokens_exist = await _read(ctx, lambda: _read_tokens_exist(ctx), ctx.auth.stale_tokens_exist())
    if tokens_exist:
        raise AuthError("this service requires an API token: send `Authorization: Bearer <token>`")
    client = request.client.host if request.client else None
    if not is_loopback(client):
        raise AuthError(
            "no API token exists yet, so the service only serves loopback clients; create one on the "
            "server with `logtriage tokens create --name NAME --scope ingest`"
        )
    return Principal(
        token_id=None, name="local user (open mode)", scopes=ALL_SCOPES, open_mode=True, via="open"
    )


def read_token(ctx: AppContext, token_hash: str) -> KnownToken | None:
    known = tokens.lookup(ctx, token_hash=token_hash)
    ctx.auth.remember_token(token_hash, known)
    return known


def _read_tokens_exist(ctx: AppContext) -> bool:
    exist = tokens.any_active(ctx)
    ctx.auth.remember_tokens_exist(exist)
    return exist


def _touch(ctx: AppContext, token: KnownToken) -> None:
    tokens.touch(ctx, token=token)


PrincipalDep = Annotated[Principal, Depends(authenticate)]


def require(scope: str) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    async def check(principal: PrincipalDep) -> Principal:  # async: no thread hop (see get_ctx)
        if not principal.allows(scope):
            raise ForbiddenError(
                f"token {principal.name!r} has scopes {' '.join(sorted(principal.scopes)) or 'none'}; "
                f"this needs `{scope}`"
            )
        return principal

    return check


IngestDep = Annotated[Principal, Depends(require("ingest"))]
ReadDep = Annotated[Principal, Depends(require("read"))]
AdminDep = Annotated[Principal, Depends(require("admin"))]
