"""A fast path for the engine's ``redact_stream``, with byte-identical output.

The engine redacts a stream block by block: any line holding one of its trigger literals
(``key``, ``token``, ``secret``, ``@``, ...) goes through ``redact_text``, i.e. a dozen regexes.
On real training logs a quarter of all lines say "tokens" (vLLM and verl metrics), which makes
``redact_stream`` run at ~3.5 MB/s: a 200 MB upload spent a minute there.

This module finds, with one Hyperscan pass per block, the lines on which at least one of the
engine's redaction patterns can match (each pattern below is a superset of the engine's pattern
for ASCII text: lookarounds dropped, character classes widened), and runs the engine's own
``redact_text`` on those lines only. Lines with non-ASCII bytes that hold a trigger (where Unicode
case folding or whitespace could differ) always take the engine's path. Every other line is one
the engine would leave unchanged, so the output is the same bytes as ``redact_stream``'s (the
tests compare both on many inputs).

Safety: if Hyperscan is missing, or the engine's rule table is not the one these patterns were
derived from (``ENGINE_RULES_SHA256``), ``fast_redact_stream`` *is* the engine's
``redact_stream``: slower, never less redacted.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from typing import BinaryIO

from app.engine import redact as engine_redact

log = logging.getLogger("logtriage.redaction")

_WS = rb"[\t\x0b\x0c\r\x1c-\x20]"  # ASCII whitespace but newline (a superset of `\s` minus \n)

# (kind, pattern bytes, caseless): one superset pattern per engine rule, in the engine's order
# Fixed-length tails (`{6}` for the engine's `{6,}`, no trailing `\b`) keep them supersets and make
# Hyperscan report each occurrence once instead of at every extra character.
PATTERNS: list[tuple[str, bytes, bool]] = [
    ("private-key", rb"PRIVATE KEY-----", False),
    ("aws-access-key", rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}", False),
    ("github-token", rb"\b(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{40})", False),
    ("slack-token", rb"\bxox[abposr]-[A-Za-z0-9-]{10}", False),
    ("slack-webhook", rb"https://hooks\.slack\.com/services/[A-Za-z0-9/]", False),
    ("huggingface-token", rb"\bhf_[A-Za-z0-9]{30}", False),
    ("openai-key", rb"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20}", False),
    ("jwt", rb"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10}", False),
    ("url-credentials", rb"://[^/\n:@]{1,64}:[^/\n@]{1,128}@", False),
    ("bearer", rb"bearer" + _WS + rb"[A-Za-z0-9._~+/=-]{16}", True),
    (
        "secret-assignment",
        rb"(?:api[_-]?key|secret|token|passw(?:or)?d|access[_-]?key|credential)s?[\"']?"
        + _WS
        + rb"*[=:]"
        + _WS
        + rb"*[\"']?[^\n\"',;}{]{6}",
        True,
    ),
    ("secret-flag", rb"(?:api-key|token|secret|password)[= ][^\n\"']{6}", True),
]


def _engine_fingerprint() -> str:
    rules = getattr(engine_redact, "_RULES", None)
    triggers = getattr(engine_redact, "_TRIGGERS", None)
    return hashlib.sha256(repr((rules, triggers)).encode()).hexdigest()


# sha256 of repr((engine _RULES, engine _TRIGGERS)) that PATTERNS were derived from; when the
# engine's table changes, the fast path switches itself off until PATTERNS are reviewed
DERIVED_FROM = "7a2411f09c6f1a16cc255ee65c655687f8e3ff010afc79f2d9f53329aac667d1"


class _FastRedactor:
    def __init__(self) -> None:
        import hyperscan as hs

        self._db = hs.Database(mode=hs.HS_MODE_BLOCK)
        self._db.compile(
            expressions=[p for _k, p, _c in PATTERNS],
            ids=list(range(len(PATTERNS))),
            elements=len(PATTERNS),
            flags=[hs.HS_FLAG_CASELESS if c else 0 for _k, _p, c in PATTERNS],
        )

    def redact_block(self, block: bytes) -> bytes:
        trigger = engine_redact._TRIGGER_RX
        if not trigger.search(block):
            return block
        ends: list[int] = []

        def on_match(_pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            ends.append(to)

        self._db.scan(block, match_event_handler=on_match)
        starts = {block.rfind(b"\n", 0, end - 1) + 1 if end > 1 else 0 for end in ends}
        if not block.isascii():
            # lines with non-ASCII bytes and a trigger: Unicode case folding and whitespace may
            # let the engine's patterns match where the ASCII supersets do not; take its path
            pos = 0
            for line in block.split(b"\n"):
                if not line.isascii() and trigger.search(line):
                    starts.add(pos)
                pos += len(line) + 1
        if not starts:
            return block
        out: list[bytes] = []
        pos = 0
        for ls in sorted(starts):
            le = block.find(b"\n", ls)
            if le < 0:
                le = len(block)
            out.append(block[pos:ls])
            out.append(_redact_line(block[ls:le]))
            pos = le
        out.append(block[pos:])
        return b"".join(out)


def _redact_line(line: bytes) -> bytes:
    """The engine's per-line step, exactly as ``_redact_block`` does it."""
    if not engine_redact._TRIGGER_RX.search(line):
        return line
    try:
        text = engine_redact.redact_text(line.decode("utf-8", "surrogateescape"))
    except TimeoutError:  # a pathological line: never store it unredacted
        return b"[REDACTED:line-too-complex]"
    return text.encode("utf-8", "surrogateescape")


_REDACTOR: _FastRedactor | None = None
_CHECKED = False


def fast_path() -> _FastRedactor | None:
    """The Hyperscan redactor, or None when the engine's own path must be used."""
    global _REDACTOR, _CHECKED
    if _CHECKED:
        return _REDACTOR
    _CHECKED = True
    if _engine_fingerprint() != DERIVED_FROM:
        log.warning("engine redaction rules changed: using the engine's (slower) redact_stream")
        return None
    try:
        _REDACTOR = _FastRedactor()
    except Exception as exc:  # no hyperscan on this platform, or a compile error
        log.info("fast redaction unavailable (%s): using the engine's redact_stream", exc)
        _REDACTOR = None
    return _REDACTOR


def fast_redact_stream(src: BinaryIO, *, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """Same contract and output as ``app.engine.redact.redact_stream``."""
    fast = fast_path()
    if fast is None:
        yield from engine_redact.redact_stream(src, chunk_size=chunk_size)
        return
    # the engine's chunking, unchanged, so blocks (and long-line splits) are identical
    carry = b""
    while True:
        block = src.read(chunk_size)
        if not block:
            if carry:
                yield fast.redact_block(carry)
            return
        block = carry + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            if len(block) < 4 * chunk_size:
                carry = block
                continue
            cut = len(block)
        carry = block[cut:]
        yield fast.redact_block(block[:cut])
