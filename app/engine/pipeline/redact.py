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

from app.engine.pipeline.lines import strip_ansi
from app.engine.pipeline.matcher import Matcher, PatternSpec, build_matcher

# Not values: a file path (`GOOGLE_APPLICATION_CREDENTIALS=/etc/gcp/key.json` names where the
# secret is, not the secret) and a chat-template token (`stop_token=<|im_end|>`). A closing
# parenthesis ends a value: `(token=...)` keeps its `)`.
_NOT_VALUE = r"(?!(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]*)*(?:[\s\"',;}{)]|$))(?!<)"
# Nor is code: `token = self.tokenizer.decode(ids)`, `api_key = os.environ["KEY"]`,
# `password = settings.DB_PASSWORD` assign an expression (a call, a subscript, an attribute of a
# lower-case name), `$API_KEY` / `${HF_TOKEN:-}` a shell variable; and a placeholder
# (`ghp_xxxx...`, `pplx-XXXX...`, `****`) hides nothing. Random secrets have none of these shapes.
_NOT_CODE = (
    r"(?![A-Za-z_][\w.]{0,80}[(\[])"  # a call or a subscript
    r"(?!(?-i:[a-z_][a-z0-9_]{0,40})(?:\.[A-Za-z_]\w{0,40}){1,8}(?![\w.-]))"  # an attribute
    r"(?!\$|%\w+%)"  # a shell or Windows variable
    r"(?!(?-i:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?![\w.-]))"  # a name: `access_token=ACCESS_TOKEN`
)
_NOT_FILLER = r"(?![^\s\"'`]{0,80}(?:x{6}|X{6}|\*{4}|#{4}|\.\.\.))"
_VALUE = (
    r"(?!\[REDACTED)"
    + _NOT_VALUE
    + _NOT_CODE
    + _NOT_FILLER
    + r"(?=[^\s\"'`,;}{)]*[A-Za-z]|\d{16})[^\s\"'`,;}{)]{6,}"
)
# Keys whose value is a secret; tokenizer settings (pad_token, eos_token, ...) are not.
_KEY = (
    r"(?:api[_-]?key|secret(?:[_-]?key)?|(?<!pad_|eos_|bos_|unk_|sep_|cls_|mask_)token"
    r"|passw(?:or)?d|passphrase|\bpwd|access[_-]?key|private[_-]?key|client[_-]key[_-]data"
    r"|credentials?)"
)
# How code, configs and env dumps assign: `=`, `:`, `:=`, `::=`, `?=`, `.=`, `=>`, a type in
# between (`api_key: str = ...`, `var token string = ...`), or `setProperty("TOKEN", "...")`.
_ASSIGN = (
    r"(?:[\"'`]?(?:\s*:\s*(?:str|optional\[str\]|secretstr)|\s+string)?\s*(?:=>|:{1,3}=|[?.]=|=|:)"
    r"|[\"']\s*,)\s*[\"'`]?"
)
_GITLAB_PREFIXES = "glpat|glptt|glrt|glrtr|gldt|glsoat|glcbt|glimt|glagent|gloas|glffct|glft"
RULES: list[tuple[str, str]] = [
    # the whole key when it sits in one text (JSON-escaped, or a config read whole), else its
    # BEGIN line (a stream withholds the body lines after it: see below)
    (
        "private-key",
        r"(?P<secret>-----BEGIN [A-Z ]*PRIVATE KEY-----(?!\s*-----END)"
        r"(?:[^-]*-----END [A-Z ]*PRIVATE KEY-----)?)",
    ),
    ("aws-access-key", r"\b" + _NOT_FILLER + r"(?P<secret>(?:AKIA|ASIA)[0-9A-Z]{16})\b"),
    ("alibaba-access-key", r"\b(?P<secret>LTAI[A-Za-z0-9]{12,30})\b"),
    ("tencent-secret-id", r"\b(?P<secret>AKID[A-Za-z0-9]{13,40})\b"),
    ("google-api-key", r"(?<![\w-])" + _NOT_FILLER + r"(?P<secret>AIza[0-9A-Za-z_-]{35})(?![\w-])"),
    ("google-oauth-token", r"\b(?P<secret>ya29\.[0-9A-Za-z_-]{20,})"),
    ("google-client-secret", r"\b(?P<secret>GOCSPX-[0-9A-Za-z_-]{24,})"),
    ("azure-storage-key", r"(?i)AccountKey=(?P<secret>[A-Za-z0-9+/=]{20,})"),
    ("azure-sas", r"[?&]sig=(?P<secret>[A-Za-z0-9%+/=]{16,})"),
    # Entra ID client secrets: three characters, a digit, `Q~`, then 31-34 more
    (
        "azure-client-secret",
        r"(?<![\w~.-])" + _NOT_FILLER + r"(?P<secret>[\w~.]{3}\dQ~[\w~.-]{31,34})(?![\w~.-])",
    ),
    ("gcp-key-id", r"\"private_key_id\"\s*:\s*\"(?P<secret>[0-9a-f]{32,})\""),
    (
        "gitlab-token",
        r"\b"
        + _NOT_FILLER
        + rf"(?P<secret>(?:{_GITLAB_PREFIXES})-[0-9A-Za-z_.-]{{20,}}|GR1348941[0-9A-Za-z_-]{{20,}})",
    ),
    (
        "stripe-key",
        r"\b(?P<secret>(?:sk|rk|pk)_(?:live|test|prod)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9+/=]{24,})",
    ),
    ("databricks-token", r"\b(?P<secret>dapi[a-f0-9]{32}(?:-\d)?)\b"),
    ("npm-token", r"\b(?P<secret>npm_[A-Za-z0-9]{36})\b"),
    ("pypi-token", r"\b(?P<secret>pypi-[A-Za-z0-9_-]{50,})"),
    ("twilio-key", r"\b(?P<secret>SK[0-9a-fA-F]{32})\b"),
    ("sendgrid-key", r"\b(?P<secret>SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64})"),
    ("mailgun-key", r"\b(?P<secret>(?:pub)?key-[0-9a-zA-Z]{32})\b"),
    ("logtriage-token", r"\b(?P<secret>lt_[A-Za-z0-9_-]{40,})"),
    ("wandb-key", r"wandb login (?:--relogin )?(?P<secret>[0-9a-f]{40})\b"),
    (
        "github-token",
        r"\b" + _NOT_FILLER + r"(?P<secret>gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})",
    ),
    # a digit first: `xoxo-indieweb` in a file name is not a token
    (
        "slack-token",
        r"\b" + _NOT_FILLER + r"(?P<secret>xox[abposre]-\d[A-Za-z0-9-]{15,}|xapp-\d-[A-Za-z0-9-]{20,})",
    ),
    # incoming webhooks (`services/`) and Workflow Builder's (`workflows/`, `triggers/`): the URL
    # is the credential
    (
        "slack-webhook",
        r"(?P<secret>(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+)",
    ),
    # Teams incoming webhooks, the tenant's host (`*.webhook.office.com/webhookb2/`) and the
    # older Office 365 one (`outlook.office.com/webhook/`)
    (
        "teams-webhook",
        r"(?P<secret>(?:https?://)?(?:(?<![\w-])[\w-]{1,63}\.webhook\.office\.com/webhookb2"
        r"|outlook\.office(?:365)?\.com/webhook)/[A-Za-z0-9@/_-]{20,})",
    ),
    # Notion integration tokens: `ntn_` + 11 digits + 35 (2024 on), `secret_` + 43 before
    ("notion-token", r"\b(?P<secret>ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})\b"),
    # 30-40 after the prefix, ended: `hf_requiredCharacteristicTypes...` is an identifier
    (
        "huggingface-token",
        r"\b" + _NOT_FILLER + r"(?P<secret>hf_[A-Za-z0-9]{30,40}|api_org_[A-Za-z0-9]{30,40})(?![\w-])",
    ),
    ("sourcegraph-token", r"\b(?P<secret>sgp_(?:local_|[a-fA-F0-9]{16}_)?[a-fA-F0-9]{40})\b"),
    ("openai-key", r"\b(?P<secret>sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,})"),
    ("jwt", r"\b(?P<secret>eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"),
    # The password runs to the last `@` of the authority (`mysql://u:p@ss@host`), the user may be
    # empty (`redis://:pw@host`); `image:tag@sha256:...` is a digest, not a login. The look-ahead:
    # a redacted URL is not a new secret when a stored log is re-triaged.
    (
        "url-credentials",
        r"://[^/\s:@]{0,64}:(?P<secret>(?!\[REDACTED)[^/\s?#\"']{1,128})@(?!sha\d+:)",
    ),
    ("bearer", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{16,})"),
    (
        "authorization",
        r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|token|digest)\s+)?"
        r"(?!bearer\s|\[REDACTED)(?P<secret>[A-Za-z0-9._~+/=-]{8,})",
    ),
    # a header's whole value: every cookie in it may be a session
    (
        "cookie",
        r"(?i)\b(?:set-)?cookie[\"']?\s*[:=]\s*[\"']?(?P<secret>(?!\[REDACTED)[^\s\"'\\][^\"'\\\r\n]{5,})",
    ),
    # ~/.docker/config.json: "auths": {"registry": {"auth": "base64(user:password)"}}
    ("docker-auth", r"\"(?:auth|identitytoken)\"\s*:\s*\"(?P<secret>(?!\[REDACTED)[A-Za-z0-9+/=._-]{8,})\""),
    ("netrc-password", r"\bmachine\s+\S+\s+login\s+\S+\s+password\s+(?P<secret>(?!\[REDACTED)\S+)"),
    # password flags of the CLIs that print in job logs: `twine upload -p`, `az login -p`, `mysql -p`
    (
        "cli-password",
        r"\b(?:twine|az\s+login|mysql|mysqldump|sshpass)\b[^\n]{0,300}?\s(?:-p\s*|--password[= ])"
        r"[\"']?(?P<secret>" + _VALUE + ")",
    ),
    # `curl -u user:password`, `--user`: the pair (a user alone has no colon)
    (
        "user-password",
        r"(?<![^\s\"'])(?:-u|--user)[= ][ \t]*[\"']?(?![^\s\"']*[$<\[%{])(?=[^\s\"']*[A-Za-z])"
        r"(?P<secret>[^\s\"':]*:(?!(?i:password|passwd|pass|token|secret|test)(?![^\s\"'])|[\"'\s]|$)[^\s\"']*)",
    ),
    # .NET / NuGet configs: <add key="ClearTextPassword" value="..." />
    ("config-key-value", rf"(?i)\bkey=\"[\w.-]*{_KEY}[\w.-]*\"\s+value=\"(?P<secret>{_VALUE})\""),
    ("secret-assignment", rf"(?i){_KEY}{_ASSIGN}(?P<secret>{_VALUE})"),
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
        if _not_a_secret(kind, m):
            return str(m.group(0))
        if counts is not None:
            counts[kind] += 1
        a, b = m.span("secret")
        s = m.start()
        whole = m.group(0)
        return str(whole[: a - s]) + f"[REDACTED:{kind}]" + str(whole[b - s :])

    return str(rx.sub(repl, text, timeout=0.5))


# Made-up values that a regex cannot tell from a secret, judged once a rule has matched (so only
# on the few lines that hold a candidate). A value made of repeated characters only (`xxx:yyy`,
# `0000-0000`) or holding a word that says "fill me in" (`RANDOMSTRINGHERE`, `changeme`); a vendor
# token whose body is mostly runs of one character (`AIzaaaaa...`, `sgp_55555dAAAAA...aaaaaaaa`);
# after a credential's name, another name (`secretKey: api-key`, `token = "telegram_api_token"`:
# letters only, a reference to where the secret is) or a command substitution
# (`KEY=`etcdctl get k``). A random secret is mostly such runs, or holds a given 6-letter word, with a
# probability under 1e-7. Fill in a generic assignment (`ageToken = "AGE-SECRET-KEY-1QQQ..."`)
# stays redacted: a name that says "token" vouches for its value more than its shape does.
# Base64 bodies are never judged (zero bytes encode as `AAAA...`), nor whole headers or URLs.
_NEVER_MADE_UP = frozenset(
    {
        "private-key",
        "azure-storage-key",
        "azure-sas",
        "docker-auth",
        "jwt",
        "pypi-token",
        "cookie",
        "slack-webhook",
        "teams-webhook",
        "url-credentials",
        "bearer",
        "authorization",
        "netrc-password",
    }
)
# rules whose value is free text after a credential's name
_NAMED_VALUE = frozenset(
    {"secret-assignment", "config-key-value", "secret-flag", "cli-password", "user-password"}
)
_SEGMENT = regex.compile(r"[A-Za-z0-9]+")
_FILL = regex.compile(r"(.)\1{3,}")
_FILL_WORD = regex.compile(r"(?i)placeholder|changeme|dummy|random")
_NAME = regex.compile(r"(?i)[a-z]+(?:[_.:-][a-z]+)*:?")
_CRED_WORD = regex.compile(r"(?i)secret|token|api[_-]?key|credential")


def _mostly_fill(body: str) -> bool:
    filled = sum(len(m.group(0)) for m in _FILL.finditer(body))
    return bool(filled >= 8 and 2 * filled >= len(body))


def _not_a_secret(kind: str, m: regex.Match[str]) -> bool:
    """Whether rule `kind`'s match `m` holds a made-up value (above), to be left as it is."""
    if kind in _NEVER_MADE_UP:
        return False
    value = str(m.group("secret"))
    segments = _SEGMENT.findall(value)
    if not segments:
        return False
    if all(len(set(seg)) == 1 for seg in segments) or _FILL_WORD.search(value):
        return True
    if kind not in _NAMED_VALUE:
        # the body: the longest alphanumeric piece (a prefix or a numeric id is not the secret)
        return _mostly_fill(max(segments, key=len))
    if _NAME.fullmatch(value) and _CRED_WORD.search(value):
        return True
    a, b = m.span("secret")
    return m.string[a - 1 : a] == "`" and m.string[b : b + 1] in (" ", "\t")  # `...` runs a command


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
    "google-oauth-token": (("ya29.",), False),
    "google-client-secret": (("GOCSPX-",), False),
    "azure-client-secret": (("Q~",), False),
    "azure-storage-key": (("accountkey=",), True),
    "azure-sas": (("sig=",), False),
    "gcp-key-id": (('"private_key_id"',), False),
    "gitlab-token": (
        (*(f"{p}-" for p in _GITLAB_PREFIXES.split("|")), "GR1348941"),
        False,
    ),
    "stripe-key": (("_live_", "_test_", "_prod_", "whsec_"), False),
    "databricks-token": (("dapi",), False),
    "npm-token": (("npm_",), False),
    "pypi-token": (("pypi-",), False),
    "twilio-key": (("SK",), False),
    "sendgrid-key": (("SG.",), False),
    "mailgun-key": (("key-",), False),
    "logtriage-token": (("lt_",), False),
    "wandb-key": (("wandb login",), False),
    "authorization": (("authorization",), True),
    "github-token": (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), False),
    "slack-token": (("xox", "xapp-"), False),
    "slack-webhook": (("hooks.slack.com/",), False),
    "teams-webhook": (
        (".webhook.office.com/webhookb2/", "outlook.office.com/webhook/", "outlook.office365.com/webhook/"),
        False,
    ),
    "notion-token": (("ntn_", "secret_"), False),
    "sourcegraph-token": (("sgp_",), False),
    "huggingface-token": (("hf_", "api_org_"), False),
    "openai-key": (("sk-",), False),
    "jwt": (("eyJ",), False),
    "url-credentials": (("://",), False),
    "bearer": (("bearer",), True),
    "cookie": (("cookie",), True),
    "docker-auth": (('"auth"', '"identitytoken"'), False),
    "netrc-password": (("machine",), False),
    "cli-password": (("twine", "login", "mysql", "sshpass"), False),
    "user-password": (("-u ", "-u=", "--user ", "--user="), False),
    "config-key-value": (("key=",), True),
    # one per alternative of _KEY
    "secret-assignment": (
        ("api", "secret", "token", "passw", "passphrase", "pwd", "access", "private", "client", "credential"),
        True,
    ),
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
    specs = [PatternSpec(p.replace(r"\b", r"(?:\b|m)")) for _, p in RULES]
    # an element whose value is on the next line (below): its opening tag alone is a candidate
    return build_matcher([*specs, PatternSpec(_XML_OPEN.pattern.decode())])


LONG_LINE_CUT = 1 << 20  # the most of one line held at once
KEY_MAX_LINES = 200  # a PEM key body is ~50 lines; never withhold more after a BEGIN line


def redact_stream(
    src: BinaryIO, *, chunk_size: int = 1 << 20, counts: Counter[str] | None = None
) -> Iterator[bytes]:
    """Yield the redacted log in line-aligned chunks; bytes outside redacted lines are kept.
    `counts` (when given) gains one per secret replaced, by kind: the report's redaction summary."""
    matcher = _matcher()
    carry = b""
    # lines of a multi-line PEM key body still to withhold, or _VALUE_NEXT: the block ended with
    # an XML element's opening tag whose value may be the next line
    key_lines = 0
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


# Secret values hold none of these bytes: cutting a huge line just after one never splits a
# value. It may still part a value from its key (`password: ` | `hunter2`, `Bearer ` | `...`):
# `_forced_cut` also checks that no rule's match (key and value) spans the cut.
_SAFE_CUT = regex.compile(rb"[\s,;\"'<>(){}\[\]|]")
_TOKEN_END = regex.compile(rb"[^A-Za-z0-9_%+/=.~:@-]")
CUT_WINDOW = 1 << 16
CUT_CONTEXT = 1 << 10  # a key and its value are closer than this
CUT_TRIES = 256


def _forced_cut(block: bytes) -> int:
    """Where to cut a line too long to hold whole: after a delimiter in its last 64 KiB, the
    last one that no secret's match (with its key) spans, so a secret straddling the cut is
    seen whole in the next piece. A 64 KiB run without any delimiter is cut before the last
    byte no token holds, and a run without that either where it is (no secret kind is that
    long); in both, before a match that reaches the cut and may go on."""
    tail = max(0, len(block) - CUT_WINDOW)
    cuts: list[int] = [m.end() for m in _SAFE_CUT.finditer(block, tail)]
    if not cuts:
        # before the last byte no token holds (`&` of a query string): the token after it, with
        # its key (`&sig=...`), goes whole to the next piece; a match reaching the end may too
        soft = [m.start() for m in _TOKEN_END.finditer(block, tail)]
        cut = soft[-1] if soft and soft[-1] > 0 else len(block)
        start = _spanning(block, cut)
        return start if start else cut
    # first the cuts with a whole context after them in this block, so that a match spanning
    # one can be seen; a line dense with keys gets a bounded number of tries
    far = [c for c in cuts if c <= len(block) - CUT_CONTEXT]
    near = [c for c in cuts if c > len(block) - CUT_CONTEXT]
    for c in [*reversed(far), *reversed(near)][:CUT_TRIES]:
        if _spanning(block, c) is None:
            return c
    return far[-1] if far else cuts[-1]


def _spanning(block: bytes, cut: int) -> int | None:
    """Where a rule's whole match (key and value) around `cut` starts when it spans the cut
    (or ends right at the end of `block`, where it may go on); None when none does."""
    lo = max(0, cut - CUT_CONTEXT)
    before = block[lo:cut].decode("utf-8", "surrogateescape")
    text = before + block[cut : cut + CUT_CONTEXT].decode("utf-8", "surrogateescape")
    at = len(before)
    open_end = cut + CUT_CONTEXT >= len(block)
    try:
        for kind in _PATTERNS:
            if _may_match(kind, text):
                for m in _rx(kind).finditer(text, timeout=0.5):
                    if m.start() < at and (at < m.end() or (open_end and m.end() == len(text))):
                        return lo + len(text[: m.start()].encode("utf-8", "surrogateescape"))
    except TimeoutError:
        return lo
    return None


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
    if key_lines == _VALUE_NEXT:
        pos, key_lines = _element_value(block, 0, out, counts), 0
    elif key_lines:
        pos, key_lines = _withhold_key(block, 0, key_lines, out)
    for ls in sorted(starts):
        if ls < pos:
            continue  # already withheld as part of a key body, or an element's value
        le = block.find(b"\n", ls)
        le = len(block) if le < 0 else le
        out.append(block[pos:ls])
        out.append(_redact_line(block[ls:le], counts))
        pos = le
        if _KEY_BEGIN_ONLY.search(block, ls, le):
            out.append(block[le : le + 1])
            pos, key_lines = _withhold_key(block, le + 1, KEY_MAX_LINES, out)
        elif _XML_OPEN.search(block, ls, le):
            if le + 1 >= len(block):
                key_lines = _VALUE_NEXT
                continue
            out.append(block[le : le + 1])
            pos = _element_value(block, le + 1, out, counts)
    out.append(block[pos:])
    return b"".join(out), key_lines


# `<apiToken>` (any name holding a secret key) alone on its line: pretty-printed XML puts the
# value on the next one, where no rule sees a key. Lower-case here, as `(?i)` rules match.
_XML_OPEN = regex.compile(
    rb"(?i)<[\w.-]{0,40}?(?:api[_-]?key|secret|token|passw(?:or)?d|credentials?|access[_-]?key)"
    rb"[\w.-]{0,40}>[ \t\r]*$"
)
_XML_VALUE = regex.compile(rb"[ \t]*(?![.\d]*[ \t\r]*$)([^\s<>\"']{6,})[ \t\r]*")
_VALUE_NEXT = -1


def _element_value(block: bytes, start: int, out: list[bytes], counts: Counter[str] | None) -> int:
    """Redact the line at `start` when it is a lone value (the element's); return the position
    after what was written."""
    nl = block.find(b"\n", start)
    le = len(block) if nl < 0 else nl
    m = _XML_VALUE.fullmatch(block, start, le)
    if m is None or m.group(1).startswith(b"[REDACTED"):
        return start
    if counts is not None:
        counts["secret-assignment"] += 1
    out.append(block[start : m.start(1)] + b"[REDACTED:secret-assignment]" + block[m.end(1) : le])
    return le


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
