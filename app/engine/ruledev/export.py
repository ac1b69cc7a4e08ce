"""Export the compiled pattern table for other tools (the grep/ripgrep side of the bench).

Python `regex` syntax is turned into POSIX ERE that both GNU `grep -E` and ripgrep accept.
Lookarounds and inline flags have no ERE form; they are dropped, so the exported set is a
superset (what a prefilter would match), which is fair for a throughput comparison.
"""

from __future__ import annotations

import re

from app.engine.pipeline.scan import CompiledLibrary

_CLASS_IN_BRACKET = {"d": "0-9", "s": "[:space:]", "w": "[:alnum:]_", "t": "\t"}
_CLASS = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "s": "[[:space:]]",
    "S": "[^[:space:]]",
    "w": "[[:alnum:]_]",
    "W": "[^[:alnum:]_]",
    "t": "\t",
}


def _class_end(p: str, i: int) -> int:
    """The index after the `]` closing the character class that opens at p[i]."""
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1
    while j < len(p) and p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    return j + 1


def to_ere(p: str) -> str:
    out: list[str] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\" and i + 1 < n:
            nxt = p[i + 1]
            if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", p[i + 2 : i + 4]):
                out.append(chr(int(p[i + 2 : i + 4], 16)))  # ERE has no \x escape: the byte itself
                i += 4
                continue
            out.append(_CLASS.get(nxt, "\\" + nxt if not nxt.isalnum() or nxt in "bB" else nxt))
            i += 2
        elif c == "[":
            j = i + 1
            body: list[str] = []
            if j < n and p[j] == "^":
                body.append("^")
                j += 1
            literal_bracket = False
            while j < n and (p[j] != "]" or (j == i + 1)):
                if p[j] == "\\" and j + 1 < n:
                    e = p[j + 1]
                    if e == "]":
                        literal_bracket = True
                    elif e == "-":
                        body.append("-") if not body or body[-1] != "-" else None
                    else:
                        body.append(_CLASS_IN_BRACKET.get(e, e))
                    j += 2
                else:
                    body.append(p[j])
                    j += 1
            inner = "".join(body)
            if "-" in inner[1:-1] and inner.count("-") and not any(r in inner for r in ("0-9", "a-z", "A-Z")):
                inner = inner.replace("-", "") + "-"  # a literal dash must come last in ERE
            if literal_bracket:
                inner = ("]" + inner) if not inner.startswith("^") else ("^]" + inner[1:])
            out.append("[" + inner + "]")
            i = j + 1
        elif c == "(" and p.startswith("(?", i):
            if p.startswith("(?P<", i):
                i = p.index(">", i) + 1
                out.append("(")
            elif p.startswith("(?:", i):
                i += 3
                out.append("(")
            elif p[i + 2 : i + 3] in ("=", "!") or p.startswith("(?<=", i) or p.startswith("(?<!", i):
                depth, j = 0, i
                while j < n:
                    if p[j] == "\\":
                        j += 2
                        continue
                    if p[j] == "[":  # a class may hold parentheses: skip it whole
                        j = _class_end(p, j)
                        continue
                    depth += p[j] == "("
                    depth -= p[j] == ")"
                    j += 1
                    if depth == 0:
                        break
                i = j
            else:  # inline flags such as (?i)
                i = p.index(")", i) + 1
        elif c in "*+?}" and i + 1 < n and p[i + 1] == "?":
            out.append(c)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def to_grep_patterns(compiled: CompiledLibrary, *, include_all: bool = False) -> list[str]:
    """The rules' patterns (with `include_all`, also probes, facts and framework detectors; never
    the metric gates, which only pick lines for the metric parser)."""
    roles = ("any", "all", "not")
    return [
        to_ere(e.text) for e in compiled.entries if e.role in roles or (include_all and e.role != "metric")
    ]
