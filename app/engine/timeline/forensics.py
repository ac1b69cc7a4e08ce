"""Where each rank was when it stopped, and which rank got further: read from the ranks' own
last lines (app.engine.timeline.builder builds its verdicts on these).

- *Call sites*: the last Python traceback of a rank (outermost frame first) or the watchdog's
  "Stack trace of the failed collective" (`#0 barrier from .../distributed_c10d.py:5030`, innermost
  first) gives the collective the rank was in (the torch.distributed call the user's code made;
  `backward` stands for DDP's gradient all-reduce) and the user's own frame that made it.
- *Progress*: each rank's progress lines (what it printed that is neither noise nor failure),
  with timings and the rank's own number masked, so that the ranks of one program print the
  same sequence. A rank that printed lines past another rank's last one got further; in a
  desync that is the rank that skipped a collective (it ran ahead), in a hang the other one is
  the straggler.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# the torch.distributed calls user code makes (the outermost torch frame names it)
API_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "barrier",
        "monitored_barrier",
        "all_to_all",
        "all_to_all_single",
        "send",
        "recv",
        "isend",
        "irecv",
        "send_object_list",
        "recv_object_list",
        "reduce",
        "batch_isend_irecv",
    }
)
# collectives that exchange pickled objects: garbage sizes there mean the peer ran another op
OBJECT_COLLECTIVES = frozenset(
    {"gather_object", "all_gather_object", "broadcast_object_list", "scatter_object_list", "recv_object_list"}
)
_PY_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_WD_FRAME = re.compile(r"^#(?P<n>\d+) (?P<func>\S+) from (?P<file>\S+?):(?P<line>\d+)\s*$")
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))(?::\s?(?P<msg>.*))?$")
_LIBRARY = re.compile(r"site-packages|dist-packages|^<frozen|/lib/python\d|/torch/|/pytorch/", re.I)


@dataclass
class Frame:
    func: str
    file: str
    line: int
    code: str = ""

    @property
    def library(self) -> bool:
        return bool(_LIBRARY.search(self.file))

    @property
    def short(self) -> str:
        return f"{self.func} ({self.file.rsplit('/', 1)[-1]}:{self.line})"


@dataclass
class CallSite:
    """Where one rank stopped: its frames (outermost first), the collective it was in, the
    error it raised (Python tracebacks only) and the line the block started on."""

    rank: int
    frames: list[Frame]
    source: str  # "traceback" | "watchdog"
    file: str
    line: int
    error: str | None = None
    error_line: int | None = None  # the line `error` was read from (not the block's first)

    @property
    def collective(self) -> str | None:
        for f in self.frames:  # outermost first: the call user code made, not its internals
            if f.library and "distributed" in f.file and f.func in API_COLLECTIVES:
                return f.func
        for f in self.frames:
            if f.func == "backward" or f.code.rstrip().endswith(".backward()"):
                return "backward"
        return None

    @property
    def user(self) -> Frame | None:
        """The innermost frame of the user's own code."""
        own = [f for f in self.frames if not f.library]
        return own[-1] if own else None

    def describe(self) -> str:
        coll = self.collective
        u = self.user
        where = f"{u.func} ({u.file.rsplit('/', 1)[-1]}:{u.line})" if u else "library code"
        if coll == "backward":
            return f"backward, DDP's gradient all-reduce, in {where}"
        return f"{coll} in {where}" if coll else where

    def key(self) -> tuple[str | None, str | None, int | None]:
        u = self.user
        return (self.collective, u.file if u else None, u.line if u else None)


def call_sites(lines: Iterable[tuple[str, int, int | None, str]]) -> dict[int, CallSite]:
    """The last traceback or watchdog stack of each rank. `lines`: (file, lineno, rank, message)
    in order, message without launcher prefixes."""
    out: dict[int, CallSite] = {}
    open_: dict[int, CallSite] = {}
    last_frame: dict[int, Frame] = {}
    for file, lineno, rank, msg in lines:
        if rank is None:
            continue
        if msg.startswith("Traceback (most recent call last)"):
            open_[rank] = CallSite(rank, [], "traceback", file, lineno)
            last_frame.pop(rank, None)
            continue
        if "Stack trace of the failed collective" in msg:
            open_[rank] = CallSite(rank, [], "watchdog", file, lineno)
            continue
        cs = open_.get(rank)
        if cs is None:
            continue
        if cs.source == "traceback":
            m = _PY_FRAME.match(msg)
            if m:
                fr = Frame(m.group("func"), m.group("file"), int(m.group("line")))
                cs.frames.append(fr)
                last_frame[rank] = fr
                continue
            e = _EXC.match(msg.strip())
            if e and cs.frames:
                cs.error = msg.strip()[:300]
                cs.error_line = lineno
                out[rank] = cs
                del open_[rank]
                continue
            fr0 = last_frame.get(rank)
            if fr0 is not None and not fr0.code and msg.startswith("    ") and msg.strip("^~ "):
                fr0.code = msg.strip()
        else:
            w = _WD_FRAME.match(msg.strip())
            if w:
                cs.frames.insert(0, Frame(w.group("func"), w.group("file"), int(w.group("line"))))
            elif cs.frames:
                out[rank] = cs  # the block ended: innermost-first frames were reversed on insert
                del open_[rank]
    for rank, cs in open_.items():
        if cs.frames:
            out[rank] = cs  # a block cut off by the end of the log still says where it was
    return out


# --- progress ------------------------------------------------------------------------------------

_MASKS = [
    (re.compile(r"\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*(?:s|ms|sec|seconds|%)\b"), "#t"),
    (re.compile(r"\b\d+\.\d+(?:[eE][-+]?\d+)?\b|\b\d\.\d+[eE][-+]?\d+\b"), "#"),
    (re.compile(r"\b(rank|local_rank|pid|tid)([ =:]*)\d+", re.I), r"\1\2#"),
    (re.compile(r"\[rank\d+\]|\brank\d+\b", re.I), "[rank#]"),
    (re.compile(r"0x[0-9a-fA-F]+"), "#x"),
    (re.compile(r"\b\d+/\d+\b"), "#/#"),
]

_DIGIT = re.compile(r"\d")


def normalise(message: str) -> str:
    """A progress line as every rank of the same program prints it."""
    out = message.strip()
    if not _DIGIT.search(out):
        return out[:200]  # every mask needs a digit
    for rx, sub in _MASKS:
        out = rx.sub(sub, out)
    return out[:200]


@dataclass
class Progress:
    """A rank's progress lines (normalised, in order) and the last step it reported."""

    lines: list[str] = field(default_factory=list)
    last_step: int | None = None


ALIGN = 4  # lines of one rank's end that must appear, in order, in the other's


def _beyond(a: Sequence[str], b: Sequence[str]) -> int | None:
    """How many lines `a` printed after the point where `b` stopped, or None when `a` never
    printed `b`'s last lines. `b`'s last ALIGN lines must appear together in `a`: one line alone
    repeats every step ("train: update on 16 sequences") and would match an earlier step."""
    if not b:
        return None
    k = min(len(b), ALIGN)
    tail = list(b[-k:])
    for i in range(len(a) - 1, k - 2, -1):
        if list(a[i - k + 1 : i + 1]) == tail:
            return len(a) - 1 - i
    return None


def compare(a: Progress, b: Progress) -> int:
    """+1 when `a` got further than `b`, -1 when `b` did, 0 when the logs cannot tell."""
    if a.last_step is not None and b.last_step is not None and a.last_step != b.last_step:
        return 1 if a.last_step > b.last_step else -1
    ab, ba = _beyond(a.lines, b.lines), _beyond(b.lines, a.lines)
    if ab and not ba:
        return 1
    if ba and not ab:
        return -1
    return 0


def ordering(progress: dict[int, Progress]) -> tuple[list[int], list[int]]:
    """(ahead, behind): the ranks that got further than some rank and behind none, and the
    ranks behind some rank and ahead of none."""
    ranks = sorted(progress)
    ahead, behind = [], []
    for r in ranks:
        res = [compare(progress[r], progress[o]) for o in ranks if o != r]
        if any(x > 0 for x in res) and not any(x < 0 for x in res):
            ahead.append(r)
        elif any(x < 0 for x in res) and not any(x > 0 for x in res):
            behind.append(r)
    return ahead, behind


def later_in_same_function(sites: dict[int, CallSite]) -> list[int]:
    """When ranks stopped in the same function of the user's code at different lines, the
    ranks at the later line (they passed the earlier call the others are blocked in)."""
    users = {r: cs.user for r, cs in sites.items() if cs.user is not None}
    if len(users) < 2:
        return []
    funcs = {(u.file, u.func) for u in users.values()}
    if len(funcs) != 1:
        return []
    top = max(u.line for u in users.values())
    if all(u.line == top for u in users.values()):
        return []
    return sorted(r for r, u in users.items() if u.line == top)
