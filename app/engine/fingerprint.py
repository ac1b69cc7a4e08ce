"""Failure fingerprints: the same failure on another day, job or node gets the same fingerprint.

A fingerprint is the rule id plus its captures with the volatile parts normalised away (numbers,
hex ids, addresses, paths' digits, host and rank names), hashed. "CUDA OOM tried to allocate
1.96 GiB" and "... 2.10 GiB" recur as one failure; an ECC error and an OOM never do.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

# captures that name *where* a failure happened, not *what* it was
VOLATILE_KEYS = frozenset({"host", "hostname", "node", "ip", "addr", "address", "rank", "pid", "port", "gpu"})
_RULES = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<hex>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\d+(?:\.\d+)?"), "#"),
    (re.compile(r"\s+"), " "),
]


def normalise_capture(value: str) -> str:
    v = value.strip()
    for rx, repl in _RULES:
        v = rx.sub(repl, v)
    return v[:200]


def fingerprint(rule_id: str, captures: dict[str, str]) -> str:
    return _fingerprint(rule_id, tuple(sorted(captures.items())))


@lru_cache(maxsize=4096)
def _fingerprint(rule_id: str, captures: tuple[tuple[str, str], ...]) -> str:
    # cached: storing a write group asks for each finding's fingerprint several times, and
    # common failures repeat the same captures across uploads
    parts = [rule_id]
    for key, value in captures:
        if key.lower() in VOLATILE_KEYS:
            continue
        parts.append(f"{key}={normalise_capture(value)}")
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]
