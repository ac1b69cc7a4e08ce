"""Lines a terminal wrapped, joined back for a second look.

A log copied from a terminal (tmux, screen, a web console) is cut into rows of the terminal's
width: `... (4.26 GiB KV cach` / `e is needed, which is larger ...`. A rule's sentence that spans
the cut matches neither row. The scanner is line-based, so instead of joining every file's lines
(the hot path) the tail that is already read for metrics is checked for the shape of a wrap:
at least two rows of exactly the widest length W, nothing longer. Only those rows are joined to
their successors, and only those joined lines are scanned again.

A row of width W is joined to the next only when the next does not start like it (the same
launcher or logger prefix): a wrapped row's continuation starts mid-sentence, a repeated log
line starts with its prefix again.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

MIN_WIDTH = 60  # narrower "wraps" are ordinary short lines
MIN_ROWS = 2  # one row at the widest length is any log's longest line
PREFIX = 12


@dataclass(frozen=True, slots=True)
class Joined:
    first: int  # 1-based line number of the first row
    last: int
    text: bytes


def _row(raw: bytes) -> bytes:
    return raw[:-1] if raw.endswith(b"\r") else raw


def _width(row: bytes) -> int:
    return len(row) if row.isascii() else len(row.decode("utf-8", "replace"))


def _split(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


def wrap_width(widths: list[int]) -> int | None:
    """The terminal width rows of these widths were cut at, or None when they do not look wrapped."""
    w = max(widths, default=0)
    if w < MIN_WIDTH:
        return None
    return w if widths.count(w) >= MIN_ROWS else None


def joined_lines(blocks: list[tuple[int, bytes]]) -> list[Joined]:
    """The logical lines made of more than one row, from line-aligned blocks of
    (lines before the block, bytes)."""
    if all(data.isascii() and b"\r" not in data for _, data in blocks):
        # the common case, and a log's whole tail (up to 1 MiB) is looked at on every upload:
        # a row's width is its length, and most logs are not wrapped, so the rows are only built
        # for one that is (the per-row calls took ~4 ms of a 1 MB hook's analysis)
        widths = list(itertools.chain.from_iterable(map(len, _split(data)) for _, data in blocks))
        if wrap_width(widths) is None:
            return []
    rows: list[tuple[int, bytes]] = []
    for base, data in blocks:
        rows.extend((base + i + 1, _row(raw)) for i, raw in enumerate(_split(data)))
    widths = [_width(r) for _, r in rows]
    width = wrap_width(widths)
    if width is None:
        return []
    out: list[Joined] = []
    i = 0
    while i < len(rows):
        start = i
        while (
            i + 1 < len(rows)
            and widths[i] == width
            and rows[i + 1][1]
            and rows[i + 1][1][:PREFIX] != rows[i][1][:PREFIX]
        ):
            i += 1
        if i > start:
            out.append(Joined(rows[start][0], rows[i][0], b"".join(r for _, r in rows[start : i + 1])))
        i += 1
    return out
