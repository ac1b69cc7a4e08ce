"""A rule drafted from the lines of real failures (issue 23's "teach in two minutes"), pure logic.

From a few instances of one failure's error line, the pattern keeps what they share as literal
text and turns what varies into typed captures: numbers, hex ids, paths, hosts, addresses as
the template masks them (`app.engine.templates.mask`), and words that differ between instances
as ``\\S+``. Launcher prefixes (Ray's ``(pid=, ip=)``, ``[rank3]:``) are left out: a rule
matches anywhere in a line. The pattern must match every instance it came from, pass the rule
lint (no anchor, no empty match, no shape that backtracks without end), and match no line of
the healthy baseline; otherwise the draft says why it cannot be published.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# a placeholder -> (capture name, what it matches: bounded, no nested repeats)
_HOLES: dict[str, tuple[str, str]] = {
    "<NUM>": ("num", r"[<>~]?[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?: ?[A-Za-z%]{1,7})?"),
    "<HEX>": ("hex", r"(?:0x)?[0-9a-fA-F]+"),
    "<UUID>": ("uuid", r"[0-9a-fA-F-]{36}"),
    "<IP>": ("ip", r"[0-9a-fA-F.:]+"),
    "<PATH>": ("path", r"\S+"),
    "<URL>": ("url", r"\S+"),
    "<HOST>": ("host", r"[\w.-]+(?::\d+)?"),
    "<DATE>": ("date", r"\S+"),
    "<TIME>": ("time", r"[\d:.,]+"),
    "<ID>": ("id", r"\S+"),
    "<*>": ("word", r"\S+"),
}
_TOKEN = re.compile(r"<(?:NUM|HEX|UUID|IP|PATH|URL|HOST|DATE|TIME|ID|\*)>")
MAX_INSTANCES = 50
MIN_LITERAL = 6  # characters of literal text a pattern needs (else it would match too much)


@dataclass
class Draft:
    pattern: str
    template: str
    captures: list[str]
    title: str
    instances: list[str]  # the lines it was drafted from
    problems: list[str] = field(default_factory=list)  # why it cannot be published as it is

    def as_rule(
        self,
        *,
        rule_id: str,
        failure_class: str,
        title: str | None = None,
        explanation: str | None = None,
        remediation: str | None = None,
        severity: str = "error",
        confidence: float = 0.8,
    ) -> dict[str, Any]:
        """The rule as a YAML file of rules/ holds it (fixtures inline for a site pack)."""
        return {
            "id": rule_id,
            "version": 1,
            "status": "stable",
            "failure_class": failure_class,
            "severity": severity,
            "title": (title or self.title)[:120],
            "match": {"any": [self.pattern]},
            "confidence": confidence,
            "explanation": explanation
            or f"Drafted from {len(self.instances)} line(s) of failures that no rule named: {self.title}.",
            "remediation": remediation or "- Describe the fix here before publishing.",
            "tags": ["site"],
        }


def draft_from_lines(lines: Sequence[str]) -> Draft:
    """A draft from instances of one error line (at least one)."""
    from app.engine.signals import message_of
    from app.engine.templates import TemplateMiner, mask

    msgs = [message_of(x)[:400] for x in lines if x.strip()][:MAX_INSTANCES]
    if not msgs:
        return Draft("", "", [], "", [], ["no line to draft from"])
    # the person picked these lines as one failure: merge more readily than the inbox does
    miner = TemplateMiner(sim_threshold=0.4)
    template = ""
    for m in msgs:
        _cid, template = miner.add(mask(m), masked=True)
    # one template for all (the miner may leave a very different line apart: the last wins)
    template = _common(miner, msgs) or template
    pattern, captures = _pattern(template)
    title = _title(template)
    d = Draft(pattern, template, captures, title, list(lines)[:MAX_INSTANCES])
    d.problems = lint(d.pattern, instances=msgs)
    return d


def _common(miner: Any, msgs: Sequence[str]) -> str | None:
    """The template covering the most instances."""
    from app.engine.templates import mask

    counts: dict[str, int] = {}
    for m in msgs:
        c = miner.match(mask(m), masked=True)
        if c is not None:
            counts[c.template] = counts.get(c.template, 0) + 1
    return max(counts, key=lambda t: (counts[t], -len(t))) if counts else None


def _pattern(template: str) -> tuple[str, list[str]]:
    """The template as a regex: literal text escaped, each hole a named capture of its type."""
    out: list[str] = []
    names: list[str] = []
    pos = 0
    seen: dict[str, int] = {}
    for m in _TOKEN.finditer(template):
        out.append(_literal(template[pos : m.start()]))
        base, rx = _HOLES[m.group(0)]
        seen[base] = seen.get(base, 0) + 1
        name = f"{base}{seen[base]}"
        names.append(name)
        out.append(f"(?P<{name}>{rx})")
        pos = m.end()
    out.append(_literal(template[pos:]))
    return "".join(out), names


def _literal(text: str) -> str:
    # runs of spaces in a template stand for any spacing in the line
    parts = [re.escape(p) for p in re.split(r" +", text)]
    return r" +".join(parts) if len(parts) > 1 else parts[0]


def _title(template: str) -> str:
    words = _TOKEN.sub("…", template).split()
    title = " ".join(words)[:100].strip(" :")
    return title if len(title) >= 5 else f"Site failure: {title}".strip()


def lint(pattern: str, *, instances: Sequence[str], baseline: Sequence[str] = ()) -> list[str]:
    """Why ``pattern`` cannot be a rule's pattern: the library's own checks (no anchor, no
    empty match, no runaway backtracking), enough literal text, every instance matched, no
    healthy line matched."""
    import regex

    from app.engine.pipeline.library import _check_pattern

    problems: list[str] = []
    if not pattern:
        return ["empty pattern"]
    try:
        _check_pattern(pattern)
    except ValueError as exc:
        problems.append(str(exc))
        return problems
    literal = _TOKEN.sub("", _unescape(pattern))
    if len(re.sub(r"\W", "", literal)) < MIN_LITERAL:
        problems.append(
            f"the pattern keeps fewer than {MIN_LITERAL} letters of literal text: it would match too much"
        )
    rx = regex.compile(pattern)
    for line in instances:
        try:
            if rx.search(line, timeout=0.2) is None:
                problems.append(f"does not match an instance it was drafted from: {line[:120]!r}")
        except TimeoutError:
            problems.append(f"too slow on an instance: {line[:120]!r}")
    for line in baseline:
        try:
            if rx.search(line, timeout=0.2) is not None:
                problems.append(f"matches a line of a healthy run: {line[:120]!r}")
                break
        except TimeoutError:
            problems.append("too slow on a line of a healthy run")
            break
    return problems


def _unescape(pattern: str) -> str:
    return re.sub(r"\(\?P<\w+>[^()]*(?:\([^()]*\)[^()]*)*\)", "<*>", pattern).replace("\\", "")


__all__ = ["Draft", "draft_from_lines", "lint"]
