"""The error lines a failed job's logs end with, and their templates.

When no rule names a cause, these lines are what the analysis is known by: the unknowns inbox
groups analyses by them, and every report links to past failures that share them (issue 23).
They come from each file's last lines, which the scan keeps anyway (``FileScan.tail``, the last
2,000), so finding them costs nothing on the scan of a big log: a failure ends a log.

A line "reads as an error" by ``ERRORS`` (the viewer's "next error" uses the same definition).
Each chosen line's message (its launcher prefixes removed: a Ray actor's ``(pid=, ip=)``,
torchrun's ``[rank3]:``) is masked into a template (`app.engine.templates.mask`: numbers, ids,
paths, hosts as typed holes), the same in every analysis; a Python exception about the
program's own objects (``KeyError``, ``FileNotFoundError``...) that the user's code raised gets
the raising frame's file and function in front (`_raised_in`: two users' bugs often print one
message), so a template's key groups analyses without a shared miner; lines of one template
count once, the latest kept. Merging templates that differ in a word is the clustering's job,
over many analyses (`TemplateMiner`). The lines that say what broke come first: an exception's
own line (``ValueError: ...``), a fatal or error level line, then the rest.
"""

from __future__ import annotations

import builtins
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.engine.pipeline.matcher import LineFilter

# what reads as an error when no rule said so: a traceback, an exception or error class, a
# logger's ERROR/FATAL/CRITICAL level, glog's E/F lines, a failed step, a crash; case-sensitive,
# so a metric named `error_rate` or a word "errors" in prose is not one
ERRORS = (
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b|\b(?:ERROR|FATAL|CRITICAL|FAILED|"
    r"PANIC)\b|\bpanic:|Segmentation fault|core dumped|\bKilled\b|\bAborted\b|\bexception\b"
    # glog's error and fatal lines (PyTorch's C++ side: "[E321 02:07:08.408 ProcessGroupNCCL...",
    # and c10d's older short form "[E socket.cpp:957] [c10d] The client socket has timed out")
    r"|\[[EF]\d{3,4} \d{2}:\d{2}:\d{2}\.\d+|\[[EF] [\w.]+:\d+\]"
)
# every match of ERRORS holds one of these: they find the candidates at bytes.find speed
ERROR_LITERALS = (
    "Traceback",
    "Error",
    "Exception",
    "ERROR",
    "FATAL",
    "CRITICAL",
    "FAILED",
    "PANIC",
    "panic:",
    "Segmentation fault",
    "core dumped",
    "Killed",
    "Aborted",
    "exception",
    "[E",
    "[F",
)
# a logger's own prefix before the message (vLLM's "ERROR 12-23 23:34:23 [core.py:708] ",
# Python logging's "2026-11-27 04:00:01,123 ERROR "): stripped before a line is judged, so a
# stack frame printed through a logger reads as a frame, not as an error line
_LOGGER_PREFIX = re.compile(
    r"^(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]{1,80}\]"
    r"|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)? +(?:-\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: +-)?)"
    r"[ \t]"  # the one space after it: what is indented beyond that is a frame's
)
MAX_SIGNALS = 8  # per analysis
MAX_TEXT = 400  # characters of a line kept

_ERRORS = re.compile(ERRORS)
# an exception's own line: "ValueError: ...", "torch.OutOfMemoryError: ...", "RayTaskError(...)"
_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b(?:\(|:|$)")
_LEVEL = re.compile(
    r"\b(?:FATAL|CRITICAL|ERROR|PANIC)\b|\[[EF]\d{3,4} |\bpanic:|Segmentation fault|core dumped"
)
# lines that only frame an error (its header, a separator, a stack frame)
_FRAME = re.compile(r"^\s*(?:Traceback \(most recent call last\)|File \".*\", line \d+|[-=*#~_]{5,}\s*$)")
_TRACEBACK = "Traceback (most recent call last)"
# a traceback's stack frame: its file and function (the line number changes with every edit)
_FRAME_AT = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')
# library code: an installed package, the standard library, or code with no file
_LIBRARY = re.compile(r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python\d|^<")
# Python's own exceptions about the program's own objects: a key, an index, an attribute, a name,
# an argument, a value, an assertion, a file path. Their messages say what went wrong, not where
# ("KeyError: 'input_ids'", "TypeError: __init__() got an unexpected keyword argument <*>"), so
# two users' bugs often read alike. Not RuntimeError (how PyTorch's C++ side and other native
# extensions report their own failures: a CUDA error, NCCL, a failed write, whoever called the
# op), ImportError (its message names the module) or the OS's errors (a full disk, a refused
# connection): those messages name the failure wherever it is hit.
_PROGRAM_ERRORS = frozenset(
    name
    for name, v in vars(builtins).items()
    if isinstance(v, type)
    and issubclass(
        v,
        (
            LookupError,
            AttributeError,
            NameError,
            TypeError,
            ValueError,
            AssertionError,
            ArithmeticError,
            FileNotFoundError,
            FileExistsError,
            IsADirectoryError,
            NotADirectoryError,
        ),
    )
)
# the line a traceback ends with: "module.Name: message" or a bare class name, unindented
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:\(|:|$)")


@dataclass(frozen=True)
class Signal:
    file: str
    line: int
    text: str  # the whole line (cut at MAX_TEXT), redacted
    template: str  # its message, masked: numbers, ids, paths... as typed holes (`_raised_in`)
    key: str  # the template's stable id (`app.engine.templates.template_key`)
    weight: int  # 2: an exception's own line, 1: an error or fatal level, 0: the rest

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "text": self.text,
            "template": self.template,
            "key": self.key,
            "weight": self.weight,
        }


def message_of(text: str) -> str:
    """A line without its launcher prefixes (what the template is mined from)."""
    return _unprefixed(text).strip()


def _unprefixed(text: str) -> str:
    """A line without its launcher and logger prefixes, its indentation kept (a frame's)."""
    from app.engine.pipeline.lines import parse_context

    return _LOGGER_PREFIX.sub("", parse_context(text).message or text, count=1)


def find_signals(
    tails: Sequence[tuple[str, Sequence[tuple[int, str]]]],
    *,
    redact: Callable[[str], str] | None = None,
    limit: int = MAX_SIGNALS,
) -> list[Signal]:
    """The error lines of each file's last lines, one per template, the most telling first.

    ``tails``: (file name, [(line number, text)]) in the files' order; ``redact`` applies to
    each kept text (None: the lines are redacted already)."""
    latest: dict[str, tuple[int, Signal]] = {}
    n = 0
    for name, lines in tails:
        in_traceback = False
        frame: tuple[str, str] | None = None  # the traceback's last frame so far
        # the lines holding an error literal, found for the whole tail at once: outside a
        # traceback only they can be signals (the literal "Traceback" starts one)
        candidates = _error_lines().lines_with([raw for _, raw in lines])
        marked = set(candidates)
        k = 0
        i = 0
        while i < len(lines):
            if not in_traceback:
                while k < len(candidates) and candidates[k] < i:
                    k += 1
                if k == len(candidates):
                    break
                i = candidates[k]
            number, raw = lines[i]
            i += 1
            if _TRACEBACK in raw:
                in_traceback = True
                frame = None
                continue
            raised = False
            if in_traceback:
                body = _unprefixed(raw)
                if not body.strip() or body[:1].isspace() or _FRAME.match(body):
                    at = _FRAME_AT.match(body)
                    if at:
                        frame = (at.group(1), at.group(2))
                    continue  # a frame or a source line of the traceback
                in_traceback = False
                # the exception it ends with, whatever its class is called (httpx.ReadTimeout)
                raised = bool(_RAISED.match(body))
            if not raised and (i - 1 not in marked or not _ERRORS.search(raw)):
                continue
            if _FRAME.match(raw):
                continue
            msg = message_of(raw)
            body = _unprefixed(raw)
            if not msg or _FRAME.match(body) or (body[:1].isspace() and not raised):
                continue  # a frame or source line through a logger ("ERROR ... [core.py:708]   raise e")
            weight = 2 if raised or _EXCEPTION.match(msg) else 1 if _LEVEL.search(msg) else 0
            # imported here: its patterns take ~5 ms to compile, and most short logs hold no signal
            from app.engine.templates import mask, template_key

            template = mask(msg[:MAX_TEXT])
            if raised and frame is not None:
                template = _raised_in(frame, msg) + template
            key = template_key(template)
            text = raw[:MAX_TEXT]
            if redact is not None:
                text = redact(text)
            latest[key] = (n, Signal(name, number, text, template, key, weight))
            n += 1
    # most telling first, then the latest (a failure is at the end)
    ranked = sorted(latest.values(), key=lambda p: (-p[1].weight, -p[0]))
    return [sig for _n, sig in ranked[:limit]]


@functools.cache
def _error_lines() -> LineFilter:
    from app.engine.pipeline.matcher import LineFilter

    return LineFilter(ERROR_LITERALS)


def _raised_in(frame: tuple[str, str], msg: str) -> str:
    """Where a Python exception of the user's code was raised, as a template's first token
    ("train.py:load_data "), or "" when that does not tell failures apart.

    As Sentry groups by in-app frames: one of Python's own exceptions about the program's
    objects (``KeyError``, ``FileNotFoundError``, ``TypeError``...: ``_PROGRAM_ERRORS``) raised
    by the user's code (the traceback's last frame is not in an installed package or the
    standard library) is known by its message and where it was raised: the frame's file name
    (no directories: they hold homes, checkouts and temp dirs) and function, masked like the
    message (no line number: it moves with every edit). The same bug in another run raises in
    the same place, and two bugs that print the same message do not fall together. Any other
    class (a library's own, RuntimeError from a native extension) names the failure already,
    and an exception raised inside a library is known by its message alone. As the first token
    it routes the template in the miner's tree (`TemplateMiner`), so templates raised in
    different places never merge into one ``<*>``."""
    path, function = frame
    cls = re.split(r"[:(]", msg, maxsplit=1)[0].strip()
    if cls not in _PROGRAM_ERRORS or _LIBRARY.search(path):
        return ""
    from app.engine.templates import mask

    file = re.split(r"[/\\]", path)[-1]
    return mask(f"{file}:{function}").replace(" ", "") + " "


__all__ = ["ERRORS", "ERROR_LITERALS", "MAX_SIGNALS", "Signal", "find_signals", "message_of"]
