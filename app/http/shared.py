"""What the REST and web edges both read from a request: the base of absolute links, time
parameters (`since`, `until`) and the `Content-Disposition` of a file they send."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from urllib.parse import quote

from fastapi import Request

from app.errors import ValidationFailedError
from app.http.context import AppContext

__all__ = ["base_url", "content_disposition", "parse_time"]

_REL = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_AGE_SECONDS = 100 * 366 * 86400
MIN_TIME = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MAX_TIME = dt.datetime(9999, 12, 30, tzinfo=dt.UTC)


def base_url(request: Request, ctx: AppContext) -> str:
    """The base of absolute links: LOGTRIAGE_PUBLIC_URL, else the request's own when its Host is
    trusted (app.http.hosts), else "" (links stay relative: a Host never steers where they point)."""
    from app.http.hosts import link_base

    return link_base(request.scope, ctx.settings, str(request.base_url))


def parse_time(value: str | None, *, name: str, now: dt.datetime | None = None) -> dt.datetime | None:
    """ISO 8601 date or datetime (UTC if no offset), or a relative age such as 24h, 7d, 2w.
    Values no database can compare (before 1970, past 9999, an age of more than 100 years) are
    a 422, never an overflow deep in a query."""
    if value is None or value == "":
        return None
    now = now or dt.datetime.now(dt.UTC)
    bad = ValidationFailedError(
        f"{name}: {value[:64]!r} is neither an ISO 8601 date/time between 1970 and 9999 nor an age "
        "like 24h or 7d (at most 100 years)"
    )
    m = _REL.match(value.strip())
    try:
        if m:
            seconds = int(m.group(1)) * _UNITS[m.group(2)]
            if seconds > MAX_AGE_SECONDS:
                raise bad
            return now - dt.timedelta(seconds=seconds)
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        parsed = parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise bad from None
    if not (MIN_TIME <= parsed <= MAX_TIME):
        raise bad
    return parsed


_FALLBACK_UNSAFE = re.compile(r"[^A-Za-z0-9._()+,=@~ -]+")


def content_disposition(name: str, disposition: str = "inline") -> str:
    """A `Content-Disposition` header for a file name in any script (RFC 6266): an ASCII
    `filename=` for old clients and the name itself as RFC 5987 `filename*=UTF-8''...`.
    Headers are Latin-1: a name outside it used to make its response a 500."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    fallback = _FALLBACK_UNSAFE.sub("_", ascii_name).strip(" _") or "log.txt"
    if fallback.startswith(".") or set(fallback) <= {"_", "."}:
        fallback = "log.txt"
    encoded = quote(name.encode("utf-8", "replace"), safe="")
    return f"{disposition}; filename=\"{fallback[:150]}\"; filename*=UTF-8''{encoded}"
