"""Failure fingerprints: the same failure on another day, job or node gets the same fingerprint.

A fingerprint is the rule id plus its captures with the volatile parts normalised away (numbers,
hex ids, addresses, paths' digits, host and rank names), hashed. "CUDA OOM tried to allocate
1.96 GiB" and "... 2.10 GiB" recur as one failure; an ECC error and an OOM never do.

Versioned, like Sentry's grouping configs. Storage keeps recurrence ("seen N times") per
fingerprint, so changing how one is computed would split every stored failure from its repeats.
Instead the algorithm is a registered *version* (``VERSIONS``; ``CURRENT`` computes new ones), and
each stored analysis records the version its fingerprints were computed with
(``analyses.fingerprint_version``). Stored rows are never rewritten: a lookup matches each stored
row by the algorithm it was stored with. ``matching(rule_id, captures)`` is the failure's
fingerprint under every registered version, and recurrence sums the counters of all of them. For
that to count each stored analysis once, a new version must hash its own number in (``_v1`` is
the one exception, being what rows stored before versions hold), so two versions never produce
the same key. Re-triage recomputes an analysis with the current version.

Adding a version: write ``_vN``, register it in ``VERSIONS``, point ``CURRENT`` at it; nothing
stored changes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from functools import lru_cache

Captures = tuple[tuple[str, str], ...]  # sorted (key, value) pairs

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


def _v1(rule_id: str, captures: Captures) -> str:
    parts = [rule_id]
    for key, value in captures:
        if key.lower() in VOLATILE_KEYS:
            continue
        parts.append(f"{key}={normalise_capture(value)}")
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


VERSIONS: dict[int, Callable[[str, Captures], str]] = {1: _v1}
CURRENT = 1


def fingerprint(rule_id: str, captures: Mapping[str, str], *, version: int | None = None) -> str:
    """The fingerprint under `version` (default: the current one)."""
    return _fingerprint(version or CURRENT, rule_id, tuple(sorted(captures.items())))


def matching(rule_id: str, captures: Mapping[str, str]) -> list[str]:
    """The failure's fingerprint under every registered version, the current one first: the keys
    under which stored repeats of it may be counted."""
    items = tuple(sorted(captures.items()))
    out = [_fingerprint(CURRENT, rule_id, items)]
    for v in sorted(VERSIONS, reverse=True):
        fp = _fingerprint(v, rule_id, items)
        if fp not in out:
            out.append(fp)
    return out


@lru_cache(maxsize=4096)
def _fingerprint(version: int, rule_id: str, captures: Captures) -> str:
    # cached: storing a write group asks for each finding's fingerprint several times, and
    # common failures repeat the same captures across uploads
    return VERSIONS[version](rule_id, captures)
