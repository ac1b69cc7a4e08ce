"""Timestamps in log lines, in the forms training stacks print them, as seconds on one clock.

Forms: ISO 8601 and Python logging (`2026-11-23 20:11:58,779`, `2026-11-23T20:11:58.779Z`,
`[2026-05-02 11:00:00]`), glog and c10 (`[E1123 20:12:30.180379048 ...]`, `W1123 18:52:58.388`),
vLLM (`INFO 11-23 20:11:58 [...]`), syslog/dmesg -T (`Nov 23 20:11:58`, `[Mon Nov 23 20:11:58 2026]`)
and epoch seconds (`1795464718.123`). Forms without a year take the year of the analysis' other
timestamps (`year_hint`), so a glog line and an ISO line of the same run compare correctly.
All times are read as UTC wall clock: logs rarely say their zone, and within one job the hosts'
clocks are what the lines have in common (per-host offsets: app.engine.timeline.clockskew).
"""

from __future__ import annotations

import calendar
import re

_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}

_ISO = re.compile(
    r"(?<!\d)(?P<y>20\d\d)-(?P<mo>[01]\d)-(?P<d>[0-3]\d)[T ](?P<h>[0-2]\d):(?P<mi>[0-5]\d):(?P<s>[0-5]\d)"
    r"(?:[.,](?P<frac>\d{1,9}))?"
)
_HMS = r"(?P<h>[0-2]\d):(?P<mi>[0-5]\d):(?P<s>[0-5]\d)"
_GLOG = re.compile(r"(?<![\w])[IWEF](?P<mo>[01]\d)(?P<d>[0-3]\d) " + _HMS + r"\.(?P<frac>\d{1,9})")
_MMDD = re.compile(r"(?<![\w-])(?P<mo>[01]\d)-(?P<d>[0-3]\d) " + _HMS + r"(?:\.(?P<frac>\d{1,9}))?")
_SYSLOG = re.compile(
    r"(?<![\w])(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<d>[0-3]?\d) "
    r"(?P<h>[0-2]\d):(?P<mi>[0-5]\d):(?P<s>[0-5]\d)(?: (?P<y>20\d\d))?"
)
# every form but epoch seconds holds this clock time: one search rules the four out on most lines
_ANY_HMS = re.compile(r"[0-2]\d:[0-5]\d:[0-5]\d")
_EPOCH = re.compile(r"(?<![\d.])(?P<sec>1[5-9]\d{8})(?:\.(?P<frac>\d{1,6}))?(?![\d.])")

SEARCH_CHARS = 160  # a timestamp sits in the first columns of a line, after launcher prefixes


def _frac(text: str | None) -> float:
    return float("0." + text) if text else 0.0


def _seconds(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: float) -> float | None:
    try:
        return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + frac
    except (ValueError, OverflowError):
        return None


def year_of(text: str) -> int | None:
    m = _ISO.search(text[:SEARCH_CHARS])
    return int(m.group("y")) if m else None


def parse_time(text: str, *, year_hint: int | None = None) -> float | None:
    """Seconds since the epoch (UTC) of the first timestamp near the start of a line, or None."""
    head = text[:SEARCH_CHARS]
    if _ANY_HMS.search(head):
        found, t = _clock_time(head, year_hint)
        if found:  # an ISO date with month 13 is no time at all, not a cue to look for epoch seconds
            return t
    m = _EPOCH.search(head)
    if m:
        return int(m.group("sec")) + _frac(m.group("frac"))
    return None


def _clock_time(head: str, year_hint: int | None) -> tuple[bool, float | None]:
    m = _ISO.search(head)
    if m:
        if not (1 <= int(m.group("mo")) <= 12):
            return True, None
        return True, _seconds(
            int(m.group("y")), int(m.group("mo")), int(m.group("d")), int(m.group("h")),
            int(m.group("mi")), int(m.group("s")), _frac(m.group("frac")),
        )  # fmt: skip
    year = year_hint or 2000
    for rx in (_GLOG, _MMDD):
        m = rx.search(head)
        if m and 1 <= int(m.group("mo")) <= 12:
            return True, _seconds(
                year, int(m.group("mo")), int(m.group("d")), int(m.group("h")), int(m.group("mi")),
                int(m.group("s")), _frac(m.group("frac")),
            )  # fmt: skip
    m = _SYSLOG.search(head)
    if m:
        y = int(m.group("y")) if m.group("y") else year
        return True, _seconds(
            y, _MONTHS[m.group("mon")], int(m.group("d")), int(m.group("h")), int(m.group("mi")),
            int(m.group("s")), 0.0,
        )  # fmt: skip
    return False, None


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    import datetime as dt

    return (
        dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )
