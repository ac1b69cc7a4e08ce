"""Pattern shapes that backtrack exponentially (ReDoS), found before a rule is loaded.

The verifier runs each rule's regex on the lines the fast matcher reported, with a time budget
(`scan.VERIFY_TIMEOUT`): a pathological line costs at most that and a warning. The lint keeps
the shapes that make a budget necessary out of the library in the first place. Two shapes,
each an ambiguity a backtracking engine explores in every combination on a near-miss:

- a repeat inside a repeat with nothing between the inner repeat and the next turn of the outer
  one that the inner could not also match: `(a+)+`, `(.*)*`, `(\\w+\\s?)*` (while `(\\d+\\.)+`
  is fine: the `.` ends each turn);
- two unbounded repeats side by side over overlapping characters: `\\w*\\w*`, `.*.*`.

Characters are compared on a sample (ASCII plus a few others), enough to tell `\\d` from `.`.
Patterns the standard library's parser does not read (`regex`-only syntax) are not checked.
(An alternation of single characters under a repeat, `(a|a)*`, is parsed into a character class
and is not a risk for either engine.)
"""

from __future__ import annotations

import importlib
import re
from typing import Any

# the parser behind `re` (private, and typed as absent: read through importlib)
C: Any = importlib.import_module("re._constants")
P: Any = importlib.import_module("re._parser")

_SAMPLE = [chr(i) for i in range(128)] + ["é", "中", "\u00a0"]
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", None))
_UNBOUNDED = C.MAXREPEAT


def _compiled_class(node: tuple[Any, Any]) -> re.Pattern[str] | None:
    """A one-character node as a regex for testing sample characters."""
    op, av = node
    sub = P.SubPattern(P.State(), [node])
    try:
        return re.compile(_unparse(op, av, sub), re.DOTALL)
    except (re.error, ValueError):
        return None


def _unparse(op: Any, av: Any, sub: Any) -> str:
    if op is C.LITERAL:
        return re.escape(chr(av))
    if op is C.NOT_LITERAL:
        return "[^" + re.escape(chr(av)) + "]"
    if op is C.ANY:
        return "."
    if op is C.IN:
        parts = []
        negate = False
        for iop, iav in av:
            if iop is C.NEGATE:
                negate = True
            elif iop is C.LITERAL:
                parts.append(re.escape(chr(iav)))
            elif iop is C.RANGE:
                parts.append(re.escape(chr(iav[0])) + "-" + re.escape(chr(iav[1])))
            elif iop is C.CATEGORY:
                parts.append(_CATEGORY.get(iav, ""))
        return "[" + ("^" if negate else "") + "".join(parts) + "]"
    raise ValueError(op)


_CATEGORY = {
    C.CATEGORY_DIGIT: r"\d",
    C.CATEGORY_NOT_DIGIT: r"\D",
    C.CATEGORY_SPACE: r"\s",
    C.CATEGORY_NOT_SPACE: r"\S",
    C.CATEGORY_WORD: r"\w",
    C.CATEGORY_NOT_WORD: r"\W",
}


def _first(items: list[tuple[Any, Any]]) -> tuple[set[str], bool]:
    """The sample characters a sequence can start with, and whether it can match empty."""
    chars: set[str] = set()
    for op, av in items:
        got, empty = _first_node(op, av)
        chars |= got
        if not empty:
            return chars, False
    return chars, True


def _first_node(op: Any, av: Any) -> tuple[set[str], bool]:
    if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
        rx = _compiled_class((op, av))
        return ({c for c in _SAMPLE if rx.fullmatch(c)} if rx else set(_SAMPLE)), False
    if op in _REPEATS and op is not None:
        lo, _hi, body = av
        chars, empty = _first(list(body))
        return chars, empty or lo == 0
    if op is C.SUBPATTERN:
        return _first(list(av[-1]))
    if op is C.BRANCH:
        chars, empty = set(), False
        for alt in av[1]:
            c, e = _first(list(alt))
            chars |= c
            empty = empty or e
        return chars, empty
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
        return set(), True
    return set(_SAMPLE), True  # groupref and others: assume the worst, they are rare


def _walk(items: list[tuple[Any, Any]], inside_repeat: bool) -> str | None:
    for i, (op, av) in enumerate(items):
        if op in _REPEATS and op is not None:
            _lo, hi, body = av
            body = list(body)
            unbounded = hi == _UNBOUNDED
            if unbounded and op is not getattr(C, "POSSESSIVE_REPEAT", None):
                found = _nested(body)
                if found:
                    return found
                nxt = items[i + 1] if i + 1 < len(items) else None
                # only when something required comes after them: a pair that ends the pattern
                # matches at once, it never has to give characters back
                after = [_first_node(o, a)[1] for o, a in items[i + 2 :]]
                if nxt and nxt[0] in _REPEATS and nxt[1][1] == _UNBOUNDED and not all(after):
                    a, _ = _first(body)
                    b, _ = _first(list(nxt[1][2]))
                    if a & b:
                        return "two unbounded repeats side by side over the same characters"
            inner = _walk(body, inside_repeat or unbounded)
            if inner:
                return inner
        elif op is C.SUBPATTERN:
            inner = _walk(list(av[-1]), inside_repeat)
            if inner:
                return inner
        elif op is C.BRANCH:
            for alt in av[1]:
                inner = _walk(list(alt), inside_repeat)
                if inner:
                    return inner
    return None


def _flatten(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """A sequence with plain (capturing or not) groups opened up."""
    out: list[tuple[Any, Any]] = []
    for op, av in items:
        if op is C.SUBPATTERN:
            out.extend(_flatten(list(av[-1])))
        else:
            out.append((op, av))
    return out


def _nested(body: list[tuple[Any, Any]]) -> str | None:
    """An unbounded repeat in the body of an unbounded repeat, with no required element after it
    (before the outer repeat turns) that it cannot match itself."""
    seq = _flatten(body)
    for i, (op, av) in enumerate(seq):
        if op in _REPEATS and op is not None and av[1] == _UNBOUNDED:
            inner_chars, _ = _first(list(av[2]))
            separated = False
            # what follows it in this turn, then what precedes it in the next turn
            for sop, sav in seq[i + 1 :] + seq[:i]:
                chars, empty = _first_node(sop, sav)
                if not empty and not (chars & inner_chars):
                    separated = True
                    break
            if not separated:
                return "a repeat nested in a repeat with nothing to tell their turns apart"
    return None


def backtracking_risk(pattern: str) -> str | None:
    """Why `pattern` can backtrack exponentially, or None."""
    try:
        parsed = P.parse(pattern)
    except Exception:  # regex-only syntax: not checked here
        return None
    return _walk(list(parsed), False)


# --- adversarial lines (for tests and `bench/redos_bench.py`) ---------------------------------

_PREFERRED = "a0_ -.:/=x"


def _pick(op: Any, av: Any, avoid: str = "") -> str:
    """A character the one-character node matches (a plain one when it can)."""
    rx = _compiled_class((op, av))
    if rx is None:
        return "a"
    for c in _PREFERRED + "".join(_SAMPLE):
        if c not in avoid and rx.fullmatch(c):
            return c
    return "a"


def _example(items: list[tuple[Any, Any]]) -> str:
    """A short string the sequence matches (lookarounds and back-references aside)."""
    out = []
    for op, av in items:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            out.append(_pick(op, av))
        elif op in _REPEATS and op is not None:
            out.append(_example(list(av[2])) * av[0])
        elif op is C.SUBPATTERN:
            out.append(_example(list(av[-1])))
        elif op is C.BRANCH:
            out.append(_example(list(av[1][0])))
    return "".join(out)


def _runs(items: list[tuple[Any, Any]]) -> list[tuple[str, str, str]]:
    """(before, body, after) for every unbounded repeat of the pattern: the shortest text that
    reaches the repeat, one turn of its body, and what completes the match after it."""
    found: list[tuple[str, str, str]] = []

    def visit(seq: list[tuple[Any, Any]], before: str, after: str) -> None:
        for i, (op, av) in enumerate(seq):
            pre = before + _example(seq[:i])
            post = _example(seq[i + 1 :]) + after
            if op in _REPEATS and op is not None:
                body = list(av[2])
                if av[1] == _UNBOUNDED:
                    found.append((pre, _example(body) or "a", post))
                visit(body, pre, post)
            elif op is C.SUBPATTERN:
                visit(list(av[-1]), pre, post)
            elif op is C.BRANCH:
                for alt in av[1]:
                    visit(list(alt), pre, post)

    visit(items, "", "")
    return found


def adversarial_lines(pattern: str, length: int = 16_000) -> list[str]:
    """Lines that make a backtracking engine work hardest on `pattern`, each about `length`
    characters: for every unbounded repeat, what reaches it followed by a long run of what it
    loops on (its body, each character of the body, the text that follows it repeated) and then
    a character that breaks the match, with the rest of a match after it so that no required
    literal is missing (an engine that checks for one first would otherwise skip the work)."""
    try:
        parsed = list(P.parse(pattern))
    except Exception:
        return []
    whole = _example(parsed)
    lines: list[str] = []
    for pre, body, post in _runs(parsed):
        fillers = {body, *body, post[:-1] if len(post) > 1 else ""}
        for fill in sorted(f for f in fillers if f):
            run = pre + fill * max(1, length // len(fill))
            lines.append(run)  # the match is cut short: what follows the repeat never comes
            lines.append(run + "\x7f" + whole)  # ... and a whole match later on the line
    return list(dict.fromkeys(lines))
