"""The true- and false-positive examples of gitleaks' rules, read from a gitleaks checkout.

gitleaks writes each rule as a Go function that ends in `utils.Validate(r, tps, fps)`; the
examples are string expressions: literals, `+`, `fmt.Sprintf`, `append`, sample generators
(`utils.GenerateSampleSecrets`) and random values from a regex (`secrets.NewSecret`). Without a
Go toolchain here, this module evaluates that small subset of Go itself; whatever falls outside it
is counted as skipped, never guessed. Nothing of gitleaks is copied: the sample templates are read
from the checkout (`cmd/generate/config/utils/generate.go`) at run time.

Each example comes with the random parts generated into it (`frags`): a redactor has caught the
secret when none of them survives, which is stricter than "some text was masked".
"""

from __future__ import annotations

import random
import re
import re._constants as sre_c
import re._parser as sre_parse
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Unsupported(Exception):
    """A Go construct this evaluator does not model: the example is skipped."""


@dataclass(frozen=True)
class Val:
    """A Go string with the randomly generated parts it contains."""

    text: str
    frags: tuple[str, ...] = ()

    def __add__(self, other: Val) -> Val:
        return Val(self.text + other.text, self.frags + other.frags)


@dataclass
class Sample:
    rule: str
    text: str
    frags: tuple[str, ...]


@dataclass
class RuleSamples:
    rule: str
    source: str
    tps: list[Sample] = field(default_factory=list)
    fps: list[Sample] = field(default_factory=list)
    skipped: int = 0  # examples (or whole lists) this evaluator could not evaluate


# -- Go tokens ---------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+|//[^\n]*|/\*.*?\*/)
  | (?P<nl>\n)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<chr>'(?:[^'\\\n]|\\.)+')
  | (?P<num>\d+(?:\.\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<op>\.\.\.|:=|==|!=|&&|\|\||<=|>=|[-+*/%(){}\[\],;:=<>!&|.])
    """,
    re.S | re.X,
)


def _go_string(tok: str) -> str:
    if tok[0] == "`":
        return tok[1:-1].replace("\r", "")
    body = tok[1:-1]
    # Go's interpreted-string escapes are a subset of Python's: decode them the same way
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")


def tokenize(src: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            out.append(("op", src[pos]))
            pos += 1
            continue
        pos = m.end()
        kind = m.lastgroup or "op"
        if kind != "ws":
            out.append((kind, m.group()))
    return out


# -- random values from a regex (what secrets.NewSecret does) ----------------------------------

_PRINTABLE = string.ascii_letters + string.digits + "_-+/="
_CATEGORY = {
    sre_c.CATEGORY_DIGIT: string.digits,
    sre_c.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    sre_c.CATEGORY_SPACE: " ",
    sre_c.CATEGORY_NOT_DIGIT: string.ascii_letters,
    sre_c.CATEGORY_NOT_WORD: "-.",
    sre_c.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
}


def _charset(items: list[tuple[Any, Any]]) -> str:
    chars: list[str] = []
    negate = False
    for op, arg in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            chars.append(chr(arg))
        elif op is sre_c.RANGE:
            chars.extend(chr(c) for c in range(arg[0], arg[1] + 1))
        elif op is sre_c.CATEGORY:
            chars.extend(_CATEGORY.get(arg, string.ascii_letters))
        else:
            raise Unsupported(f"charset item {op}")
    if negate:
        return "".join(c for c in _PRINTABLE if c not in chars) or "x"
    return "".join(chars)


def _gen(parsed: Any, rng: random.Random, out: list[str]) -> None:
    for op, arg in parsed:
        if op is sre_c.LITERAL:
            out.append(chr(arg))
        elif op is sre_c.NOT_LITERAL:
            out.append(rng.choice([c for c in _PRINTABLE if ord(c) != arg]))
        elif op is sre_c.ANY:
            out.append(rng.choice(string.ascii_letters))
        elif op is sre_c.IN:
            out.append(rng.choice(_charset(arg)))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = arg
            hi = lo + 10 if hi == sre_c.MAXREPEAT else hi
            for _ in range(rng.randint(lo, max(lo, hi))):
                _gen(sub, rng, out)
        elif op is sre_c.SUBPATTERN:
            _gen(arg[-1], rng, out)
        elif op is sre_c.BRANCH:
            _gen(rng.choice(arg[1]), rng, out)
        elif op in (sre_c.AT, sre_c.ASSERT, sre_c.ASSERT_NOT):
            continue
        else:
            raise Unsupported(f"regex op {op}")


def random_match(pattern: str, rng: random.Random) -> str:
    # Go's RE2 spells a few things differently; the rest of its syntax Python's parser reads
    py = pattern.replace(r"\z", r"\Z").replace("[[:alnum:]]", "[A-Za-z0-9]")
    try:
        parsed = sre_parse.parse(py)
    except re.error as exc:
        raise Unsupported(f"regex {pattern!r}: {exc}") from exc
    out: list[str] = []
    _gen(parsed, rng, out)
    return "".join(out)


# -- a small Go expression evaluator -----------------------------------------------------------

_CHARSETS = {  # utils.Hex("32") and friends: the character class is read from patterns.go
    "Numeric": r"[0-9]{%s}",
    "Hex": r"[a-f0-9]{%s}",
    "AlphaNumeric": r"[a-z0-9]{%s}",
    "AlphaNumericExtendedShort": r"[a-z0-9_-]{%s}",
    "AlphaNumericExtended": r"[a-z0-9=_\-]{%s}",
    "AlphaNumericExtendedLong": r"[a-z0-9\/=_\+\-]{%s}",
}


class Evaluator:
    def __init__(self, templates: list[str], single: str, charsets: dict[str, str], seed: int) -> None:
        self.templates = templates  # GenerateSampleSecrets' formats ({i}, {I}, {s})
        self.single = single  # GenerateSampleSecret's format (%s, %s)
        self.charsets = charsets
        self.rng = random.Random(seed)

    def call(self, name: str, args: list[Any]) -> Any:
        short = name.rsplit(".", 1)[-1]
        if name == "secrets.NewSecret":
            text = random_match(_text(args[0]), self.rng)
            return Val(text, (text,))
        if name.startswith("utils.") and short in self.charsets:
            return Val(self.charsets[short] % _text(args[0]))
        if name == "utils.Hex8_4_4_4_12":
            return Val("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        if name == "utils.GenerateSampleSecrets":
            ident, secret = _text(args[0]), args[1]
            return [
                Val(
                    t.replace("{i}", ident).replace("{I}", ident.upper()).replace("{s}", secret.text),
                    secret.frags,
                )
                for t in self.templates
            ]
        if name == "utils.GenerateSampleSecret":
            return Val(
                self.single.replace("%s", _text(args[0]), 1).replace("%s", args[1].text, 1), args[1].frags
            )
        if name == "fmt.Sprintf":
            fmt, rest = args[0], args[1:]
            parts = re.split(r"(%[sdvq%])", fmt.text)
            text, frags, i = "", list(fmt.frags), 0
            for p in parts:
                if p == "%%":
                    text += "%"
                elif re.fullmatch(r"%[sdvq]", p):
                    if i >= len(rest) or not isinstance(rest[i], Val):
                        raise Unsupported("Sprintf args")
                    text += rest[i].text
                    frags += rest[i].frags
                    i += 1
                else:
                    text += p
            return Val(text, tuple(frags))
        if name == "strings.Repeat":
            return Val(_text(args[0]) * int(_text(args[1])))
        if name in ("strings.ToUpper", "strings.ToLower"):
            v = args[0]
            f = str.upper if short == "ToUpper" else str.lower
            return Val(f(v.text), tuple(f(x) for x in v.frags))
        if name == "append":
            base = list(args[0] or [])
            for a in args[1:]:
                base.extend(a if isinstance(a, list) else [a])
            return base
        raise Unsupported(f"call {name}")


def _text(v: Any) -> str:
    if not isinstance(v, Val):
        raise Unsupported("not a string")
    return v.text


class _Parser:
    """Expressions over a token list; statements are found by the caller."""

    def __init__(self, toks: list[tuple[str, str]], ev: Evaluator, env: dict[str, Any]) -> None:
        self.toks = toks
        self.i = 0
        self.ev = ev
        self.env = env
        self.skipped = 0

    def peek(self, k: int = 0) -> tuple[str, str]:
        j = self.i
        n = -1
        while j < len(self.toks):
            if self.toks[j][0] != "nl":
                n += 1
                if n == k:
                    return self.toks[j]
            j += 1
        return ("eof", "")

    def next(self) -> tuple[str, str]:
        while self.i < len(self.toks) and self.toks[self.i][0] == "nl":
            self.i += 1
        if self.i >= len(self.toks):
            return ("eof", "")
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, s: str) -> None:
        t = self.next()
        if t[1] != s:
            raise Unsupported(f"expected {s!r}, got {t[1]!r}")

    def expr(self) -> Any:
        v = self.primary()
        while self.peek()[1] == "+":
            self.next()
            w = self.primary()
            if not (isinstance(v, Val) and isinstance(w, Val)):
                raise Unsupported("+ on non-strings")
            v = v + w
        return v

    def primary(self) -> Any:
        kind, tok = self.next()
        if kind in ("raw", "str"):
            return Val(_go_string(tok))
        if kind == "num":  # strings.Repeat("a", 3)
            return Val(tok)
        if tok == "nil":
            return None
        if tok == "[":  # []string{...}
            self.expect("]")
            self.next()  # the element type
            return self.items("}")
        if tok == "map":  # map[string]string{"path": "content", ...}: the contents
            self.expect("[")
            self.next()
            self.expect("]")
            self.next()
            return self.items("}", keyed=True)
        if kind == "ident":
            if self.peek()[1] == "(":
                self.next()
                args = self.args(tolerant=tok == "append")
                return self.ev.call(tok, args)
            if tok in self.env:
                return self.env[tok]
            raise Unsupported(f"name {tok}")
        raise Unsupported(f"token {tok!r}")

    def args(self, tolerant: bool = False) -> list[Any]:
        out: list[Any] = []
        while self.peek()[1] != ")":
            if self.peek()[0] == "eof":
                raise Unsupported("unclosed call")
            start = self.i
            try:
                v = self.expr()
            except Unsupported:
                if not tolerant or not out:
                    raise
                self.i = start  # an example appended to a list: skip it alone
                self._skip_element(")")
                self.skipped += 1
                v = []
            if self.peek()[1] == "...":
                self.next()
            out.append(v)
            if self.peek()[1] == ",":
                self.next()
        self.next()
        return out

    def items(self, close: str, keyed: bool = False) -> list[Any]:
        self.expect("{")
        out: list[Any] = []
        while self.peek()[1] != close:
            if self.peek()[0] == "eof":
                raise Unsupported("unclosed list")
            start = self.i
            try:
                v = self.expr()
                if keyed and self.peek()[1] == ":":
                    self.next()
                    v = self.expr()
                out.append(v)
            except Unsupported:
                # one example this evaluator cannot read: skip to the next element of the list
                self.i = start
                self._skip_element(close)
                self.skipped += 1
            if self.peek()[1] == ",":
                self.next()
        self.next()
        return out

    def _skip_element(self, close: str) -> None:
        depth = 0
        while True:
            k, t = self.peek()
            if k == "eof":
                return
            if depth == 0 and t in (",", close):
                return
            if t in "([{":
                depth += 1
            elif t in ")]}":
                depth -= 1
            self.next()


_FUNC = re.compile(r"^func\s+(\w+)\s*\([^)]*\)[^{\n]*\{\n(.*?)^\}", re.M | re.S)


def _templates(utils_dir: Path) -> tuple[list[str], str, dict[str, str]]:
    src = (utils_dir / "generate.go").read_text()
    m = re.search(r"samples\s*:=\s*map\[string\]string\{(.*?)\n\t\}", src, re.S)
    if m is None:
        raise SystemExit("gitleaks_samples: GenerateSampleSecrets' templates not found")
    p = _Parser(tokenize("map[string]string{" + m.group(1) + "\n}"), Evaluator([], "", {}, 0), {})
    templates = [v.text for v in p.primary()]
    single = re.search(r"func GenerateSampleSecret\(.*?Sprintf\((\"(?:[^\"\\]|\\.)*\"|`[^`]*`)", src, re.S)
    fmt = _go_string(single.group(1)) if single else '%s_api_token = "%s"'
    charsets = dict(_CHARSETS)
    pat_src = (utils_dir / "patterns.go").read_text()
    for name, body in re.findall(
        r"func (\w+)\(size string\) string \{\s*return fmt\.Sprintf\(`([^`]*)`", pat_src
    ):
        charsets[name] = body
    return templates, fmt, charsets


def _statements(body: str, p: _Parser) -> None:
    """Run the assignments of a function body that build example lists."""
    toks = p.toks
    i = 0
    while i < len(toks):
        kind, tok = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if (
            kind == "ident"
            and "." not in tok
            and nxt in (":=", "=")
            and (i == 0 or toks[i - 1][0] == "nl" or toks[i - 1][1] in ("{", ";", "var"))
        ):
            p.i = i + 2
            try:
                p.env[tok] = p.expr()
            except Unsupported:
                p.env.pop(tok, None)
                p.env.setdefault("__failed__", set()).add(tok)
            i = max(p.i, i + 1)
            continue
        i += 1


def load(checkout: Path, seed: int = 7) -> list[RuleSamples]:
    """Every rule's examples, from a gitleaks work tree (`cmd/generate/config/...`)."""
    base = checkout / "cmd" / "generate" / "config"
    templates, single, charsets = _templates(base / "utils")
    ev = Evaluator(templates, single, charsets, seed)
    out: list[RuleSamples] = []
    for path in sorted((base / "rules").glob("*.go")):
        src = path.read_text()
        for m in _FUNC.finditer(src):
            body = m.group(2)
            call = re.search(r"utils\.Validate(?:WithPaths)?\(\s*\w+\s*,\s*(\w+)\s*,\s*(\w+)\s*\)", body)
            rid = re.search(r'RuleID:\s*"([^"]+)"', body)
            if call is None or rid is None:
                continue
            p = _Parser(tokenize(body), ev, {})
            _statements(body, p)
            rs = RuleSamples(rule=rid.group(1), source=path.name, skipped=p.skipped)
            failed = p.env.get("__failed__", set())
            for name, dest in ((call.group(1), rs.tps), (call.group(2), rs.fps)):
                if name == "nil":
                    continue
                if name in failed or name not in p.env:
                    rs.skipped += 1
                    continue
                for v in p.env[name] or []:
                    if isinstance(v, Val):
                        dest.append(Sample(rs.rule, v.text, v.frags))
            out.append(rs)
    return out
