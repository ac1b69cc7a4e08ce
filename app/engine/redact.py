"""Secret redaction: nothing unredacted is stored, shown or sent.

Secrets become ``[REDACTED:kind]``. Training logs leak secrets in predictable places: env dumps
(``WANDB_API_KEY=...``), launcher command lines (``--hf-token``), URLs with credentials, and
cloud-provider keys in tracebacks. Patterns favour catching a secret over keeping a line intact.

``redact_text`` handles one string (evidence lines, captures). ``Redactor.redact_stream``
streams a whole log (for the stored blob): a cheap literal pre-check skips the ~all lines that
cannot hold a secret, so it runs at close to copy speed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import BinaryIO

import regex

_RULES: list[tuple[str, str]] = [
    ("private-key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b"),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    ("slack-webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/]+"),
    ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("openai-key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    ("url-credentials", r"(?<=://[^/\s:@]{1,64}:)[^/\s@]{1,128}(?=@)"),
    ("bearer", r"(?i)(?<=\bbearer\s)[A-Za-z0-9._~+/=-]{16,}"),
    (
        "secret-assignment",
        r"(?i)(?<=\b[\w.-]*(?:api[_-]?key|secret|token|passw(?:or)?d|access[_-]?key|credential)s?"
        r"[\"']?\s*[=:]\s*[\"']?)(?![\"']?\[REDACTED)[^\s\"',;}{]{6,}",
    ),
    (
        "secret-flag",
        r"(?i)(?<=--[\w-]*(?:api-key|token|secret|password)[= ])[^\s\"']{6,}",
    ),
]
_COMPILED = [(kind, regex.compile(p)) for kind, p in _RULES]
# Every pattern above needs one of these (lower-cased) literals on the line.
_TRIGGERS = (
    b"private key",
    b"akia",
    b"asia",
    b"ghp_",
    b"gho_",
    b"ghu_",
    b"ghs_",
    b"ghr_",
    b"github_pat_",
    b"xox",
    b"hooks.slack.com",
    b"hf_",
    b"sk-",
    b"eyj",
    b"@",
    b"bearer",
    b"key",
    b"secret",
    b"token",
    b"passw",
    b"credential",
)
_TRIGGER_RX = regex.compile(b"|".join(regex.escape(t) for t in _TRIGGERS), regex.IGNORECASE)


def redact_text(text: str, counts: Counter[str] | None = None) -> str:
    if not _TRIGGER_RX.search(text.encode("utf-8", "replace")):
        return text
    for kind, rx in _COMPILED:
        text, n = rx.subn(f"[REDACTED:{kind}]", text, timeout=1.0)
        if n and counts is not None:
            counts[kind] += n
    return text


def redact_stream(src: BinaryIO, *, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """Yield the redacted log in line-aligned chunks."""
    carry = b""
    while True:
        block = src.read(chunk_size)
        if not block:
            if carry:
                yield _redact_block(carry)
            return
        block = carry + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            if len(block) < 4 * chunk_size:
                carry = block
                continue
            cut = len(block)
        carry = block[cut:]
        yield _redact_block(block[:cut])


def _redact_block(block: bytes) -> bytes:
    if not _TRIGGER_RX.search(block):
        return block
    out = []
    for line in block.split(b"\n"):
        if _TRIGGER_RX.search(line):
            out.append(
                redact_text(line.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            )
        else:
            out.append(line)
    return b"\n".join(out)
