"""Line normalisation and launcher-prefix parsing.

Only lines the scanner reports are normalised (the hot path never touches the rest), so this
module favours clarity over speed (``parse_context`` only skips patterns that cannot match).
The prefixes understood, outermost first:

- pdsh/DeepSpeed multi-node launcher: ``worker-3: ...``
- mpirun ``--tag-output``: ``[1,3]<stderr>: ...``
- ``srun --label``: ``3: ...``
- Ray worker prefix: ``(WorkerDict pid=81234, ip=10.0.3.17) ...`` (also ``(raylet, ip=...)``)
- torchrun ``--tee``/``--redirects``: ``[rank3]: ...`` and ``[default3]: ...`` (local rank)
- NCCL debug lines: ``node-3:81234:81240 [3] NCCL INFO ...``
and the Ray dedup suffix ``[repeated 7x across cluster]``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import regex

if TYPE_CHECKING:
    from app.engine.pipeline.matcher import LineFilter

_ANSI = regex.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]")
_PREFIXES = [
    # (kind, pattern); patterns are tried repeatedly at the start of the remaining text
    ("mpi", regex.compile(r"\[(?P<job>\d+),(?P<rank>\d+)\]<std(?:out|err)>:\s?")),
    ("torchrun", regex.compile(r"\[(?:rank|default)(?P<rank>\d+)\]:\s?")),
    (
        "ray",
        regex.compile(
            # "(worker1, rank=1, pid=..., ip=...)": a launcher's worker index, not torch's rank
            # (that one follows as "[rank13]:"), so it is skipped, not read as the rank
            r"\((?P<actor>[^()\s,=]+(?:\([^()]*\))?)?(?:,\s*rank=\d+)?(?:,?\s*pid=(?P<pid>\d+))?"
            r"(?:,\s*ip=(?P<ip>[\d.:a-fA-F]+))?(?:,\s*repeated\s+\d+x)?\)\s"
        ),
    ),
    ("srun", regex.compile(r"(?P<rank>\d{1,5}):\s")),
    # a host name carries a digit (node-12, worker3); exception names never do
    ("pdsh", regex.compile(r"(?P<host>[A-Za-z][\w.-]*\d[\w.-]*):\s")),
    ("timestamp", regex.compile(r"\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s*")),
]

# parse_context runs on every verified line, so it tries only the prefixes whose pattern can
# start with the line's first character; their order is kept, so the first match is the same.
_BY_KIND = dict(_PREFIXES)
_BRACKET_LED = [(k, _BY_KIND[k]) for k in ("mpi", "torchrun", "timestamp")]  # "[" first
_PAREN_LED = [(k, _BY_KIND[k]) for k in ("ray",)]  # "(" first
_LETTER_LED = [(k, _BY_KIND[k]) for k in ("pdsh",)]  # [A-Za-z] first
_DIGIT_LED = [(k, _BY_KIND[k]) for k in ("srun", "timestamp")]  # \d first: anything else
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _prefixes_for(first: str) -> list[tuple[str, regex.Pattern[str]]]:
    if first == "[":
        return _BRACKET_LED
    if first == "(":
        return _PAREN_LED
    if first in _ASCII_LETTERS:
        return _LETTER_LED
    return _DIGIT_LED  # the patterns decide whether `first` is a digit (\d is Unicode-wide)


# The searches below each get a literal that every match contains: a plain `in` test skips the
# search on the many lines without it (the NCCL search costs tens of µs on a long line).
# The look-behind starts the host only where a name starts: the same leftmost match, without
# retrying the greedy name from every character of every word before it
_NCCL = regex.compile(r"(?<![\w.-])(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL ")
_NCCL_MARK = "] NCCL "
# the first dedup of a session adds Ray's note: "[repeated 2x across cluster] (Ray deduplicates logs
# by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://... for more options.)"
_REPEATED = regex.compile(
    r"\[repeated (?P<n>\d+)x across cluster\](?: \(Ray deduplicates logs by default\.[^()\n]{0,400}\))?\s*$"
)
_REPEATED_MARK = "[repeated "
# "[Rank 3]", "rank=3", and a logging format's "INFO [rank3] name:" (torchrun's prefix without
# its colon, inside the line: a job run without --tee prints it that way in its own records)
_RANK_WORD = regex.compile(r"\[(?:Rank|rank) ?(?P<rank>\d+)\]|\brank[ =:](?P<rank2>\d+)\b")
_RANK_WORD_MARK = "ank"


# Every way parse_context finds a rank leaves one of these in the line: mpirun's "]<std", torchrun's
# "[rank"/"[default", srun's "3: ", the word "rank"/"Rank" (all contain "ank"). A line with none of
# them has no rank, whatever its prefixes: callers that want only the rank skip the parse.
# the stdlib's engine (a third of `regex`'s cost here), led by the literal ":" so that it skips to
# each colon (a fast literal scan) instead of trying `\d` at every character: `\d:\s` took 12-17 µs
# on a 300-character metric line, and the timeline gates its last 2000 lines with this (~30 ms of a
# hook's 1 MB log); the look-behind keeps it `\d:\s`
_SRUN_RANK = re.compile(r":(?<=\d:)\s")


_RANK_MARKS = ("ank", "[default", "]<std")


def may_name_rank(text: str) -> bool:
    """False only when `parse_context(text).rank` is certainly None (a cheap gate before it)."""
    return any(m in text for m in _RANK_MARKS) or _SRUN_RANK.search(text) is not None


def lines_naming_ranks(texts: Sequence[str]) -> list[int]:
    """The indices of the lines `may_name_rank` passes (some more: the caller parses them), found
    for all of them in one pass (`LineFilter`): the timeline gates a log's last 2,000 lines."""
    return _rank_filter().lines_with(texts)


@functools.cache
def _rank_filter() -> LineFilter:
    from app.engine.pipeline.matcher import LineFilter

    # srun's "3: " on UTF-8 bytes: a digit, a colon, then ASCII white space, or any non-ASCII
    # byte (a Unicode space the Python test accepts; the caller re-checks)
    return LineFilter(
        _RANK_MARKS,
        extra=(r"\d:[\t\x0b\x0c\r ]", r"\d:[\x80-\xff]"),
        extra_test=lambda t: _SRUN_RANK.search(t) is not None,
    )


@dataclass
class LineContext:
    rank: int | None = None
    pid: int | None = None
    ip: str | None = None
    host: str | None = None
    actor: str | None = None
    repeats: int = 1  # the Ray dedup suffix says how many times this line stands for
    message: str = ""  # the line after its launcher prefixes

    @property
    def where(self) -> str | None:
        return self.host or self.ip


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def normalise(raw: bytes, *, max_chars: int) -> str:
    """Decode (bad UTF-8 replaced), drop ANSI escapes and progress-bar redraws."""
    text = strip_ansi(raw.decode("utf-8", errors="replace"))
    if "\r" in text:
        # tqdm redraws with \r; what the user saw last is the final non-empty segment,
        # but an error printed between redraws must survive, so keep all distinct segments.
        parts = [p for p in text.split("\r") if p.strip()]
        text = " \u23ce ".join(dict.fromkeys(parts)) if len(parts) > 1 else (parts[0] if parts else "")
    if len(text) > max_chars:
        text = text[:max_chars] + " …[truncated]"
    return text.rstrip("\n")


def parse_context(text: str, *, max_prefixes: int = 4) -> LineContext:
    ctx = LineContext()
    # a log pasted into markdown keeps the fence's or inline code's backtick before its prefix
    unfenced = text.lstrip("`") if text[:1] == "`" else text
    rest = unfenced
    for _ in range(max_prefixes):
        for kind, pat in _prefixes_for(rest[:1]):
            m = pat.match(rest)
            if not m:
                continue
            g = m.groupdict()
            if kind == "pdsh" and g["host"].lower().endswith(_NOT_HOSTS_SUFFIX):
                continue
            if g.get("rank") is not None and ctx.rank is None:
                ctx.rank = int(g["rank"])
            if g.get("pid"):
                ctx.pid = int(g["pid"])
            if g.get("ip"):
                ctx.ip = g["ip"]
            if g.get("actor"):
                ctx.actor = g["actor"]
            if g.get("host") and ctx.host is None:
                ctx.host = g["host"]
            rest = rest[m.end() :]
            break
        else:
            break
    if rest is unfenced:
        rest = text  # no prefix after the backtick: the line is what it was
    nm = _NCCL.search(rest) if _NCCL_MARK in rest else None
    if nm:
        ctx.host = ctx.host or nm.group("host")
        ctx.pid = ctx.pid or int(nm.group("pid"))
    if ctx.rank is None and _RANK_WORD_MARK in rest:
        rm = _RANK_WORD.search(rest)
        if rm:
            ctx.rank = int(rm.group("rank") or rm.group("rank2"))
    rep = _REPEATED.search(rest) if _REPEATED_MARK in rest else None
    if rep:
        ctx.repeats = int(rep.group("n"))
    ctx.message = rest
    return ctx


# Names that look like a pdsh host prefix but start ordinary log lines.
_NOT_HOSTS_SUFFIX = ("error", "exception", "warning")
