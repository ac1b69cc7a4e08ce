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
    # glog's error and fatal lines (PyTorch's C++ side: "[E321 02:07:08.408 ProcessGroupNCCL...")
    r"|\[[EF]\d{3,4} \d{2}:\d{2}:\d{2}\.\d+"
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
    from app.engine.pipeline.lines import parse_context

    msg = parse_context(text).message or text
    return msg.strip()


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
        for number, raw in lines:
            if not _ERRORS.search(raw) or _FRAME.match(raw):
                continue
            msg = message_of(raw)
            if not msg or _FRAME.match(msg):
                continue
            weight = 2 if _EXCEPTION.match(msg) else 1 if _LEVEL.search(msg) else 0
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
