"""Secret redaction: nothing unredacted is stored, shown or sent.

Secrets become ``[REDACTED:kind]``. Training logs leak secrets in predictable places: env dumps
(``WANDB_API_KEY=...``), launcher command lines (``--hf-token ...``), URLs with credentials,
cloud-provider keys in tracebacks, PEM blocks. Each rule names the secret with a ``secret`` group,
so only the value is replaced and the key stays readable.

Values must contain a letter: metrics such as ``total_num_tokens:12673904`` are not secrets, and
tokenizer settings (``pad_token: <|endoftext|>``) are not either.

``redact_text`` handles one string (evidence lines, captures). ``redact_stream`` streams a whole
log (for the stored blob): the rules are compiled into the scanner's multi-pattern matcher (in
prefilter mode: it may over-report, never miss), so only candidate lines reach the regexes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import cache, lru_cache
from typing import BinaryIO

import regex

from app.engine.lines import strip_ansi
from app.engine.matcher import Matcher, PatternSpec, build_matcher

# Not values: a file path (`GOOGLE_APPLICATION_CREDENTIALS=/etc/gcp/key.json` names where the
# secret is, not the secret) and a chat-template token (`stop_token=<|im_end|>`). A closing
# parenthesis ends a value: `(token=...)` keeps its `)`.
_NOT_VALUE = r"(?!(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]*)*(?:[\s\"',;}{)]|$))(?!<)"
_VALUE = r"(?!\[REDACTED)" + _NOT_VALUE + r"(?=[^\s\"',;}{)]*[A-Za-z])[^\s\"',;}{)]{6,}"
# Keys whose value is a secret; tokenizer settings (pad_token, eos_token, ...) are not.
_KEY = (
    r"(?:api[_-]?key|secret(?:[_-]?key)?|(?<!pad_|eos_|bos_|unk_|sep_|cls_|mask_)token"
    r"|passw(?:or)?d|access[_-]?key|credentials?)"
)
RULES: list[tuple[str, str]] = [
    # the whole key when it sits on one line (JSON-escaped), else its BEGIN line (see below)
    (
        "private-key",
        r"(?P<secret>-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[^-\n]*-----END [A-Z ]*PRIVATE KEY-----)?)",
    ),
    ("aws-access-key", r"\b(?P<secret>(?:AKIA|ASIA)[0-9A-Z]{16})\b"),
    ("alibaba-access-key", r"\b(?P<secret>LTAI[A-Za-z0-9]{12,30})\b"),
    ("tencent-secret-id", r"\b(?P<secret>AKID[A-Za-z0-9]{13,40})\b"),
    ("google-api-key", r"(?P<secret>AIza[0-9A-Za-z_-]{35})"),
    ("azure-storage-key", r"(?i)AccountKey=(?P<secret>[A-Za-z0-9+/=]{20,})"),
    ("azure-sas", r"[?&]sig=(?P<secret>[A-Za-z0-9%+/=]{16,})"),
    ("gcp-key-id", r"\"private_key_id\"\s*:\s*\"(?P<secret>[0-9a-f]{32,})\""),
    ("gitlab-token", r"\b(?P<secret>glpat-[A-Za-z0-9_-]{20,})"),
    ("stripe-key", r"\b(?P<secret>(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,})"),
    ("logtriage-token", r"\b(?P<secret>lt_[A-Za-z0-9_-]{40,})"),
    ("wandb-key", r"wandb login (?:--relogin )?(?P<secret>[0-9a-f]{40})\b"),
    ("github-token", r"\b(?P<secret>gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
    ("slack-token", r"\b(?P<secret>xox[abposr]-[A-Za-z0-9-]{10,})"),
    ("slack-webhook", r"(?P<secret>https://hooks\.slack\.com/services/[A-Za-z0-9/]+)"),
    ("huggingface-token", r"\b(?P<secret>hf_[A-Za-z0-9]{30,})"),
    ("openai-key", r"\b(?P<secret>sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,})"),
    ("jwt", r"\b(?P<secret>eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"),
    # the look-ahead: a redacted URL is not a new secret when a stored log is re-triaged
    ("url-credentials", r"://[^/\s:@]{1,64}:(?P<secret>(?!\[REDACTED)[^/\s@]{1,128})@"),
    ("bearer", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{16,})"),
    (
        "authorization",
        r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|token|digest)\s+)?"
        r"(?!bearer\s|\[REDACTED)(?P<secret>[A-Za-z0-9._~+/=-]{8,})",
    ),
    ("secret-assignment", rf"(?i){_KEY}[\"']?\s*[=:]\s*[\"']?(?P<secret>{_VALUE})"),
    ("secret-flag", r"(?i)--[\w-]*(?:api-key|token|secret|password)[= ](?P<secret>" + _VALUE + ")"),
]


_PATTERNS = dict(RULES)


@cache
def _rx(kind: str) -> regex.Pattern[str]:
    # each rule compiles the first time a text may hold its secret: most runs need few of them
    return regex.compile(_PATTERNS[kind])


_KEY_END = regex.compile(rb"-----END [A-Z ]*PRIVATE KEY-----")


def _sub_secret(kind: str, rx: regex.Pattern[str], text: str, counts: Counter[str] | None) -> str:
    def repl(m: regex.Match[str]) -> str:
        if counts is not None:
            counts[kind] += 1
        a, b = m.span("secret")
        s = m.start()
        whole = m.group(0)
        return str(whole[: a - s]) + f"[REDACTED:{kind}]" + str(whole[b - s :])

    return str(rx.sub(repl, text, timeout=0.5))


# Literals of which every match of a rule contains at least one: a rule runs only on text that
# holds one of its literals, and the rule itself still decides. Most lines hold no secret, and
# twelve `regex` calls with a timeout cost ~30 µs a line, the `in` tests ~5 µs. `True` marks
# literals compared case-insensitively, as the rule's `(?i)` does. A kind missing here always runs.
_HINTS: dict[str, tuple[tuple[str, ...], bool]] = {
    "private-key": (("-----BEGIN ",), False),
    "aws-access-key": (("AKIA", "ASIA"), False),
    "alibaba-access-key": (("LTAI",), False),
    "tencent-secret-id": (("AKID",), False),
    "google-api-key": (("AIza",), False),
    "azure-storage-key": (("accountkey=",), True),
    "azure-sas": (("sig=",), False),
    "gcp-key-id": (('"private_key_id"',), False),
    "gitlab-token": (("glpat-",), False),
    "stripe-key": (("_live_", "_test_"), False),
    "logtriage-token": (("lt_",), False),
    "wandb-key": (("wandb login",), False),
    "authorization": (("authorization",), True),
    "github-token": (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), False),
    "slack-token": (("xox",), False),
    "slack-webhook": (("https://hooks.slack.com/services/",), False),
    "huggingface-token": (("hf_",), False),
    "openai-key": (("sk-",), False),
    "jwt": (("eyJ",), False),
    "url-credentials": (("://",), False),
    "bearer": (("bearer",), True),
    # one per alternative of _KEY
    "secret-assignment": (("api", "secret", "token", "passw", "access", "credential"), True),
    "secret-flag": (("--",), False),  # no letters: case does not matter
}


@cache
def _hint_rx(literals: tuple[str, ...]) -> regex.Pattern[str]:
    return regex.compile("(?i)" + "|".join(regex.escape(h) for h in literals))


def _may_match(kind: str, text: str) -> bool:
    """False only when rule `kind` cannot match `text` (it lacks every literal of the rule)."""
    hint = _HINTS.get(kind)
    if hint is None:
        return True
    literals, ignore_case = hint
    if ignore_case:
        if not text.isascii():
            # Beyond ASCII `regex` folds more than str.lower() does ("\u0130" matches "i",
            # "\u017f" matches "s"): let it decide. Literals only: linear, no timeout needed.
            return _hint_rx(literals).search(text) is not None
        text = text.lower()  # on ASCII text, `regex`'s case-insensitive match is just this
    # a plain loop: any() over a generator costs ~0.2 µs more a call, x12 rules x every line
    for h in literals:  # noqa: SIM110
        if h in text:
            return True
    return False


def redact_text(text: str, counts: Counter[str] | None = None) -> str:
    """Redact one line or value. A line too pathological to check is withheld whole."""
    try:
        for kind in _PATTERNS:
            # checked on the text as the earlier rules left it, as the rule itself sees it
            if _may_match(kind, text):
                text = _sub_secret(kind, _rx(kind), text, counts)
    except TimeoutError:
        if counts is not None:
            counts["unverifiable-line"] += 1
        return "[REDACTED:unverifiable-line]"
    return text


@lru_cache(maxsize=1)
def _matcher() -> Matcher:
    # A colour code glued to a token (`\x1b[1mhf_...`) defeats `\b` on the raw bytes, yet the
    # reports strip escapes and would show the token: a word boundary may also be the `m` that
    # ends a colour code. Candidates can only be more; `_redact_line` checks each line on its
    # text without escapes too.
    return build_matcher([PatternSpec(p.replace(r"\b", r"(?:\b|m)")) for _, p in RULES])


LONG_LINE_CUT = 1 << 20  # the most of one line held at once
KEY_MAX_LINES = 200  # a PEM key body is ~50 lines; never withhold more after a BEGIN line


def redact_stream(
    src: BinaryIO, *, chunk_size: int = 1 << 20, counts: Counter[str] | None = None
) -> Iterator[bytes]:
    """Yield the redacted log in line-aligned chunks; bytes outside redacted lines are kept.
    `counts` (when given) gains one per secret replaced, by kind: the report's redaction summary."""
    matcher = _matcher()
    carry = b""
    key_lines = 0  # lines of a multi-line PEM key body still to withhold
    while True:
        block = src.read(chunk_size)
        if not block:
            if carry:
                out, key_lines = _redact_block(carry, matcher, key_lines, counts)
                yield out
            return
        block = carry + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            # a line longer than a chunk is redacted in pieces cut after a delimiter: holding
            # more of it bought nothing and cost the scan worker its memory on one-line logs
            if len(block) < max(chunk_size, LONG_LINE_CUT):
                carry = block
                continue
            cut = _forced_cut(block)
        carry = block[cut:]
        out, key_lines = _redact_block(block[:cut], matcher, key_lines, counts)
        yield out


# Secrets hold none of these bytes: cutting a huge line just after one never splits a secret.
_SAFE_CUT = regex.compile(rb"[\s,;\"'<>(){}\[\]|]")
CUT_WINDOW = 1 << 16


def _forced_cut(block: bytes) -> int:
    """Where to cut a line too long to hold whole: after the last delimiter in its last 64 KiB,
    so a token straddling the cut is seen whole in the next piece. A 64 KiB run without any
    delimiter is cut where it is: no secret kind is that long."""
    tail = max(0, len(block) - CUT_WINDOW)
    last = None
    for m in _SAFE_CUT.finditer(block, tail):
        last = m
    return last.end() if last is not None else len(block)


def _redact_line(line: bytes, counts: Counter[str] | None = None) -> bytes:
    """A candidate line, redacted; checked as the reports will show it (escapes removed) too."""
    text = line.decode("utf-8", "surrogateescape")
    if "\x1b" in text:
        plain = strip_ansi(text)
        red = redact_text(plain, counts)
        if red != plain:
            return red.encode("utf-8", "surrogateescape")  # the line loses its colours, not more
    return redact_text(text, counts).encode("utf-8", "surrogateescape")


def _redact_block(
    block: bytes, matcher: Matcher, key_lines: int, counts: Counter[str] | None = None
) -> tuple[bytes, int]:
    hits: list[tuple[int, int]] = []
    matcher.scan(memoryview(block), hits)
    starts = {block.rfind(b"\n", 0, end) + 1 for _, end in hits}
    if not starts and not key_lines:
        return block, 0
    out: list[bytes] = []
    pos = 0
    if key_lines:
        pos, key_lines = _withhold_key(block, 0, key_lines, out)
    for ls in sorted(starts):
        if ls < pos:
            continue  # already withheld as part of a key body
        le = block.find(b"\n", ls)
        le = len(block) if le < 0 else le
        out.append(block[pos:ls])
        out.append(_redact_line(block[ls:le], counts))
        pos = le
        if _KEY_BEGIN_ONLY.search(block, ls, le):
            out.append(block[le : le + 1])
            pos, key_lines = _withhold_key(block, le + 1, KEY_MAX_LINES, out)
    out.append(block[pos:])
    return b"".join(out), key_lines


_KEY_BEGIN_ONLY = regex.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----(?![^-\n]*-----END)")


def _withhold_key(block: bytes, start: int, budget: int, out: list[bytes]) -> tuple[int, int]:
    """Replace key-body lines from `start` up to its END line (or `budget` lines); return the
    position after them and the budget left for the next block (0 once END was seen)."""
    pos, n = start, 0
    while pos < len(block) and n < budget:
        nl = block.find(b"\n", pos)
        le = len(block) if nl < 0 else nl
        is_end = _KEY_END.search(block, pos, le) is not None
        out.append(b"[REDACTED:private-key]" + block[le : le + 1])
        pos, n = le + 1, n + 1
        if is_end:
            return min(pos, len(block)), 0
    return min(pos, len(block)), (budget - n if pos >= len(block) else 0)
