"""Timestamps in the forms logs print them."""

from __future__ import annotations

import calendar

import pytest

from app.engine.timeline.clock import iso, parse_time, year_of


def at(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: float = 0.0) -> float:
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + frac


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "[default0]:2026-11-23 20:11:58,779 INFO [rank0] trainer: step 1",
            at(2026, 11, 23, 20, 11, 58, 0.779),
        ),
        ("2026-11-23T20:11:58.779123Z INFO loaded", at(2026, 11, 23, 20, 11, 58, 0.779123)),
        ("[2026-05-02 11:00:00] [cluster.py (46)] [INFO] start", at(2026, 5, 2, 11, 0, 0)),
        (  # c10/glog with nanoseconds, year from the hint
            "[default1]:[rank1]:[E1123 20:12:30.117421077 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog",
            at(2026, 11, 23, 20, 12, 30, 0.117421077),
        ),
        ("W1123 18:52:58.388 1234 socket.cpp:458] [c10d] retry", at(2026, 11, 23, 18, 52, 58, 0.388)),
        ("(EngineCore pid=12) INFO 11-23 20:11:58 [core.py:94] Initializing", at(2026, 11, 23, 20, 11, 58)),
        ("[Mon Nov 23 20:11:58 2026] NVRM: Xid (PCI:0000:3b:00): 79", at(2026, 11, 23, 20, 11, 58)),
        ("Nov 23 20:11:58 gpu-7 kernel: Out of memory: Killed process 4242", at(2026, 11, 23, 20, 11, 58)),
        ("1795464718.25 step=3 loss=0.4", 1795464718.25),
    ],
)
def test_forms(line: str, want: float) -> None:
    got = parse_time(line, year_hint=2026)
    assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    "line",
    [
        "step 10 loss 0.5 lr 1e-5",
        "version 2.21.5 built 12-99 25:99:99",  # not a date
        "worker pid 12345 exited with code 1 after 3600 s",
    ],
)
def test_lines_without_a_time(line: str) -> None:
    assert parse_time(line, year_hint=2026) is None


def test_year_hint_and_iso_output() -> None:
    assert year_of("2026-11-23 20:11:58,779 INFO x") == 2026
    assert year_of("no date") is None
    assert iso(at(2026, 11, 23, 20, 11, 58, 0.5)) == "2026-11-23T20:11:58.500Z"
    assert iso(None) is None
