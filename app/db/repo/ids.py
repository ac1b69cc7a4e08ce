"""Analysis ids: ULIDs (time-sortable, Crockford base32)."""

from __future__ import annotations

import datetime as dt
import os

from app.db.models import (
    utcnow,
)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id(now: dt.datetime | None = None) -> str:
    """A ULID: 48-bit millisecond time + 80 random bits, Crockford base32 (sorts by time)."""
    ms = int((now or utcnow()).timestamp() * 1000)
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        out.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(out))


def id_time(analysis_id: str) -> dt.datetime:
    value = 0
    for ch in analysis_id.upper():
        value = value * 32 + _CROCKFORD.index(ch)
    return dt.datetime.fromtimestamp((value >> 80) / 1000, dt.UTC)


def is_valid_id(analysis_id: str) -> bool:
    return (
        len(analysis_id) == 26 and all(c in _CROCKFORD for c in analysis_id.upper()) and analysis_id[0] <= "7"
    )
