"""The error lines a failed job's logs end with, and their templates.

When no rule names a cause, these lines are what the analysis is known by: the unknowns inbox
groups analyses by them, and every report links to past failures that share them (issue 23).
They come from each file's last lines, which the scan keeps anyway (``FileScan.tail``, the last
2,000), so finding them costs nothing on the scan of a big log: a failure ends a log.

A line "reads as an error" by ``ERRORS`` (the viewer's "next error" uses the same definition).
Each chosen line's message (its launcher prefixes removed: a Ray actor's ``(pid=, ip=)``,
torchrun's ``[rank3]:``) is masked into a template (`app.engine.templates.mask`: numbers, ids,
paths, hosts as typed holes), the same in every analysis, so a template's key groups analyses
without a shared miner; lines of one template count once, the latest kept. Merging templates
that differ in a word is the clustering's job, over many analyses (`TemplateMiner`). The lines
that say what broke come first: an exception's own line (``ValueError: ...``), a fatal or error
level line, then the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
# the line a traceback ends with: "module.Name: message" or a bare class name, unindented
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:\(|:|$)")


@dataclass(frozen=True)
class Signal:
    file: str
    line: int
    text: str  # the whole line (cut at MAX_TEXT), redacted
    template: str  # its message, masked: numbers, ids, paths... as typed holes
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
    from app.engine.templates import mask, template_key

    latest: dict[str, tuple[int, Signal]] = {}
    n = 0
    for name, lines in tails:
        in_traceback = False
        for number, raw in lines:
            if _TRACEBACK in raw:
                in_traceback = True
                continue
            raised = False
            if in_traceback:
                body = _unprefixed(raw)
                if not body.strip() or body[:1].isspace() or _FRAME.match(body):
                    continue  # a frame or a source line of the traceback
                in_traceback = False
                # the exception it ends with, whatever its class is called (httpx.ReadTimeout)
                raised = bool(_RAISED.match(body))
            if not raised and (not any(lit in raw for lit in ERROR_LITERALS) or not _ERRORS.search(raw)):
                continue
            if _FRAME.match(raw):
                continue
            msg = message_of(raw)
            body = _unprefixed(raw)
            if not msg or _FRAME.match(body) or (body[:1].isspace() and not raised):
                continue  # a frame or source line through a logger ("ERROR ... [core.py:708]   raise e")
            weight = 2 if raised or _EXCEPTION.match(msg) else 1 if _LEVEL.search(msg) else 0
            template = mask(msg[:MAX_TEXT])
            key = template_key(template)
            text = raw[:MAX_TEXT]
            if redact is not None:
                text = redact(text)
            latest[key] = (n, Signal(name, number, text, template, key, weight))
            n += 1
    # most telling first, then the latest (a failure is at the end)
    ranked = sorted(latest.values(), key=lambda p: (-p[1].weight, -p[0]))
    return [sig for _n, sig in ranked[:limit]]


__all__ = ["ERRORS", "ERROR_LITERALS", "MAX_SIGNALS", "Signal", "find_signals", "message_of"]
