"""Secrets never reach a report, a store or Slack."""

from __future__ import annotations

import io
from collections import Counter

import pytest

from app.engine.pipeline.redact import redact_stream, redact_text
from tests.conftest import Analyze

SECRETS = [
    ("aws-access-key", "creds AKIAIOSFODNN7EXAMPLE in env", "AKIAIOSFODNN7EXAMPLE"),
    (
        "huggingface-token",
        "HF token hf_abcdefghijklmnopqrstuvwxyzABCDEF1234",
        "hf_abcdefghijklmnopqrstuvwxyzABCDEF1234",
    ),
    ("openai-key", "OPENAI=sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstuvwx"),
    ("github-token", "ghp_" + "Kq9Zt3Wm8Ln2" * 3, "ghp_" + "Kq9Zt3Wm8Ln2" * 3),
    ("slack-token", "bot xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("url-credentials", "pulling https://alice:s3cr3tpass@git.example.com/repo.git", "s3cr3tpass"),
    ("secret-assignment", "WANDB_API_KEY=0123456789abcdef0123", "0123456789abcdef0123"),
    ("secret-assignment", "'password': 'hunter2hunter2'", "hunter2hunter2"),
    ("secret-flag", "python train.py --hf-token abcdef123456", "abcdef123456"),
    ("bearer", "Authorization: Bearer abcdefghijklmnop.qrstuv", "abcdefghijklmnop.qrstuv"),
]


@pytest.mark.parametrize(("kind", "line", "secret"), SECRETS)
def test_each_kind_is_redacted(kind: str, line: str, secret: str) -> None:
    out = redact_text(line)
    assert secret not in out
    assert "[REDACTED:" in out


@pytest.mark.parametrize(
    "line",
    [
        "KeyError: 'input_ids'",
        "num_tokens: 4096",
        "NCCL_IB_TIMEOUT=22",
        "email me at a@b.c",
        "max_tokens=8192",
    ],
)
def test_ordinary_lines_are_untouched(line: str) -> None:
    assert redact_text(line) == line


def test_evidence_and_captures_are_redacted(analyze: Analyze) -> None:
    log = (
        "export WANDB_API_KEY=0123456789abcdef0123\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
        "capacity of 79.25 GiB of which 0 bytes is free. token=abcdefSECRET99\n"
    )
    a = analyze(log)
    dumped = a.model_dump_json()
    assert "abcdefSECRET99" not in dumped and "0123456789abcdef0123" not in dumped
    assert any("redacted secrets" in w for w in a.warnings)


def test_stream_redaction_is_line_aligned_and_lossless_elsewhere() -> None:
    body = b"".join(b"line %d ok\n" % i for i in range(50_000))
    data = body + b"HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEF1234\n" + body
    out = b"".join(redact_stream(io.BytesIO(data), chunk_size=4096))
    assert b"hf_abcdefghijklmnopqrstuvwxyz" not in out
    assert out.replace(b"[REDACTED:huggingface-token]", b"").count(b"\n") == data.count(b"\n")
    assert out.startswith(body) and out.endswith(body)


KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1c7+9z5Pad\nQW2xdGVzdGtleWJvZHkxMjM0\n-----END RSA PRIVATE KEY-----\n"


def test_multiline_private_key_is_withheld_line_for_line() -> None:
    data = b"before\n" + KEY.encode() + b"after\n"
    out = b"".join(redact_stream(io.BytesIO(data)))
    assert b"MIIE" not in out and b"QW2x" not in out
    assert out == b"before\n" + b"[REDACTED:private-key]\n" * 4 + b"after\n"


def test_key_split_across_blocks_and_missing_end_is_bounded() -> None:
    data = b"x\n" * 10 + KEY.encode() + b"y\n" * 10
    out = b"".join(redact_stream(io.BytesIO(data), chunk_size=16))
    assert out.count(b"[REDACTED:private-key]") == 4 and out.endswith(b"y\n" * 10)
    no_end = b"-----BEGIN PRIVATE KEY-----\n" + b"AAAA\n" * 300
    out = b"".join(redact_stream(io.BytesIO(no_end)))
    assert out.count(b"[REDACTED:private-key]") == 201  # BEGIN line + at most 200 body lines
    assert out.endswith(b"AAAA\n" * 99)


def test_json_escaped_key_on_one_line() -> None:
    line = '{"private_key": "' + KEY.replace("\n", "\\n") + '", "x": 1}'
    out = redact_text(line)
    assert "MIIE" not in out and '"x": 1' in out


def test_pathological_line_is_withheld_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    import regex

    from app.engine.pipeline import redact

    slow = regex.compile(r"(a|aa)+c")
    monkeypatch.setattr(redact, "_PATTERNS", {"slow": slow.pattern})
    monkeypatch.setattr(redact, "_rx", lambda kind: slow)
    assert redact.redact_text("a" * 60) == "[REDACTED:unverifiable-line]"


def test_stream_redaction_equals_line_by_line_redaction() -> None:
    # The multi-pattern prefilter only skips lines: every line comes out as redact_text makes it.
    import random

    rng = random.Random(5)
    pieces = [line for _, line, _ in SECRETS] + ["plain line", "num_tokens: 7", "pad_token: <s>", "x@y", ""]
    lines = [
        rng.choice(pieces) + ("" if rng.random() < 0.5 else f" tail{rng.randint(0, 9)}") for _ in range(5000)
    ]
    data = "\n".join(lines).encode() + b"\n"
    out = b"".join(redact_stream(io.BytesIO(data), chunk_size=4096)).decode()
    assert out.splitlines() == [redact_text(line) for line in lines]


def _hint_probes() -> list[str]:
    """Lines with and without secrets, in the case and Unicode variants `(?i)` rules match."""
    base = [line for _, line, _ in SECRETS] + [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "hook https://hooks.slack.com/services/T000/B000/abcdefgh",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
        "token eyJ0eXAiOiJKV1QifQ.eyJ0eXBlIjoiYWNjZXNzIn0.abcdefghijklmn",
        "session ASIAABCDEFGHIJKLMNOP ok",
        "user xoxp-0987654321-zyxwvutsrq",
        "HF_HOME=/x hf_ZYXWVUTSRQPONMLKJIHGFEDCBA98765",
        "key sk-ant-ZYXWVUTSRQPONMLKJIHGF",
        "github_pat_" + "b" * 40,
        "ACCESS_KEY: 'abcdefgh1234'",
        "Credentials = abcdefgh1234",
        "--wandb-api-key=abcdef12345",
        "pad_token: <|endoftext|> eos_token=abcdefgh1",
        "https://alice:[REDACTED:url-credentials]@git.example.com",
        "plain line, num_tokens: 12673904",
    ]
    probes: list[str] = []
    for line in base:
        probes += [line, line.upper(), line.lower(), "x" + line, f"\x1b[1m{line}\x1b[0m"]
        # characters `regex` folds to ASCII letters under (?i), beyond str.lower()
        probes += [line.replace("i", "\u0130"), line.replace("s", "\u017f"), line.replace("k", "\u212a")]
    return probes


def test_literal_hints_skip_only_rules_that_cannot_match(monkeypatch: pytest.MonkeyPatch) -> None:
    from collections import Counter

    from app.engine.pipeline import redact

    assert {kind for kind, _ in redact.RULES} <= set(redact._HINTS)  # every rule gets the fast path
    probes = _hint_probes()
    fast_counts: Counter[str] = Counter()
    fast = [redact_text(line, fast_counts) for line in probes]
    monkeypatch.setattr(redact, "_HINTS", {})  # every rule on every line, as before the hints
    full_counts: Counter[str] = Counter()
    full = [redact_text(line, full_counts) for line in probes]
    assert fast == full
    assert fast_counts == full_counts
    assert fast_counts["secret-assignment"] > 0 and fast_counts["bearer"] > 0


def test_report_redacts_what_the_stored_copy_still_holds(analyze: Analyze) -> None:
    # The service scans the stream-redacted copy of an upload, yet triage must still redact its
    # evidence: the stream sees raw bytes, where an ANSI colour code glued to a token hides it
    # from `\b`; the evidence is the normalised line, escape codes removed.
    token = "hf_abcdefghijklmnopqrstuvwxyzABCDEF1234"
    raw = (
        'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
        f"RuntimeError: login failed for \x1b[1m{token}\x1b[0m\n"
    ).encode()
    stored = b"".join(redact_stream(io.BytesIO(raw)))
    a = analyze(stored)
    assert a.findings and any("login failed" in e.text for f in a.findings for e in f.evidence)
    assert token not in a.model_dump_json()


def test_stream_redacts_secrets_hidden_behind_ansi_codes() -> None:
    token = "hf_abcdefghijklmnopqrstuvwxyzABCDEF1234"
    coloured = b"\x1b[36m(WorkerDict pid=4121, ip=10.0.0.3)\x1b[0m step 12 loss 1.25\n"
    raw = coloured * 3 + f"export HF_TOKEN=\x1b[1m{token}\x1b[0m\n".encode() + coloured
    for chunk_size in (1 << 20, 64):  # the secret's line alone in a block, and with others
        out = b"".join(redact_stream(io.BytesIO(raw), chunk_size=chunk_size))
        assert token.encode() not in out
        assert b"[REDACTED:huggingface-token]" in out
        lines = out.splitlines(keepends=True)
        assert lines[:3] == [coloured] * 3 and lines[4] == coloured  # colours kept where no secret
    # no secret anywhere: the block comes back as it was, escapes and all
    assert b"".join(redact_stream(io.BytesIO(coloured * 50))) == coloured * 50


def test_redacted_url_is_not_a_new_secret() -> None:
    first: Counter[str] = Counter()
    once = redact_text("fetch https://user:s3cretPassw0rd@example.com/x", first)
    again: Counter[str] = Counter()
    assert redact_text(once, again) == once
    assert first["url-credentials"] == 1 and not again


def test_xml_element_value_on_its_own_line() -> None:
    # pretty-printed XML (a Maven settings.xml dumped by a build step) puts the value alone
    data = (
        b"<server>\n  <password>\n    Zq9Wm2Xr7Lp4\n  </password>\n  <id>\n    nexus-01\n  </id>\n</server>\n"
    )
    for chunk_size in (1 << 20, 22):  # the opening tag ending a block, and not
        counts: Counter[str] = Counter()
        out = b"".join(redact_stream(io.BytesIO(data), chunk_size=chunk_size, counts=counts))
        assert out == data.replace(b"Zq9Wm2Xr7Lp4", b"[REDACTED:secret-assignment]")
        assert counts["secret-assignment"] == 1
    # a tag with no value after it, or a number, is left as it was
    calm = b"<tokenizer>\n  <name>gpt2</name>\n</tokenizer>\n<max_tokens>\n  4096\n</max_tokens>\n"
    assert b"".join(redact_stream(io.BytesIO(calm))) == calm


def test_rule_kinds_are_unique() -> None:
    # a kind names its compiled rule and its hint: a second rule under the same kind would
    # silently replace the first
    from app.engine.pipeline import redact

    assert len(redact.RULES) == len(redact._PATTERNS)


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        ("curl -u ci-bot:Zq9Wm2Xr7Lp4 https://nexus.internal/upload", "Zq9Wm2Xr7Lp4"),
        ('<add key="ClearTextPassword" value="Nq4Rs7Tv1Wx3" />', "Nq4Rs7Tv1Wx3"),
        ('twilioToken := "SK48611e891d9df52c646c804e78574589"', "SK48611e891d9df52c646c804e78574589"),
        ("DISCORD_CLIENT_SECRET ?= 918273645546372819", "918273645546372819"),
        ('System.setProperty("ASANA_TOKEN", "Ab3Cd5Ef7Gh9Ij")', "Ab3Cd5Ef7Gh9Ij"),
        ("api_key: str = 'Kq9Zt3Wm8Ln2Vb'", "Kq9Zt3Wm8Ln2Vb"),
        ("posting to hooks.slack.com/services/T024T/B0BB7/AZAAA9u0pA4ad666eMgbi555", "AZAAA9u0pA4ad666"),
    ],
)
def test_assignment_spellings_and_more_kinds(line: str, secret: str) -> None:
    assert secret not in redact_text(line)


@pytest.mark.parametrize(
    "line",
    [
        "curl -u username:token https://example.com",
        'curl -u "${USER}:${PASS}" https://example.com',
        "docker run -u 1000:1000 verl:latest",
        "python -u train.py --max_token 16384",
        "GET /cgi-bin/create?access_token=ACCESS_TOKEN",
        "AKIAXXXXXXXXXXXXXXXX",
        "HF_TOKEN=hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "<tokenizer>",
    ],
)
def test_placeholders_and_variables_are_not_secrets(line: str) -> None:
    assert redact_text(line) == line


@pytest.mark.parametrize(
    "line",
    [
        # only repeated characters, or a word that asks to be filled in
        'curl --user "aaa:bbb" https://nexus.internal/upload',
        "DB_PASSWORD=changeme-before-deploy",
        "WANDB_API_KEY=RANDOMKEYGOESHERE",
        "HF_TOKEN=your-dummy-value",
        # a vendor token whose body is mostly runs of one character
        "pushing with ghp_" + "q" * 36,
        "hf_" + "7" * 20 + "Ab" + "c" * 12,
        # after a credential's name: another name (a reference), a command's output
        "    - secretKey: hf-token",
        "api_key=my_api_key",
        'token = "wandb_api_token:"',
        "export AWS_SECRET_ACCESS_KEY=`aws-vault exec ci -- printenv KEY`",
        # a PEM block with nothing in it
        "-----BEGIN RSA PRIVATE KEY----------END RSA PRIVATE KEY-----",
    ],
)
def test_made_up_values_are_not_secrets(line: str) -> None:
    assert redact_text(line) == line
    assert b"".join(redact_stream(io.BytesIO(line.encode() + b"\n"))) == line.encode() + b"\n"


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        # the same places with a value that could be real
        ('curl --user "aaa:Zq9Wm2Xr7Lp4" https://nexus.internal/upload', "Zq9Wm2Xr7Lp4"),
        ("pushing with ghp_" + "q" * 16 + "Kq9Zt3Wm8Ln2Vb7Xc4Rt6", "Kq9Zt3Wm8Ln2Vb7Xc4Rt6"),
        ("    - secretKey: hf-token-7f3a9c", "hf-token-7f3a9c"),
        ("export AWS_SECRET_ACCESS_KEY=`Zq9Wm2Xr7Lp4`", "Zq9Wm2Xr7Lp4"),
        # fill after a credential's name stays redacted: the name vouches for it
        ("DEPLOY_TOKEN=QQQQQQQQQQQQQQQQQQQQ-v1", "QQQQQQQQ"),
        ("-----BEGIN RSA PRIVATE KEY-----MIIEowIBAAKCAQEAzQ3f-----END RSA PRIVATE KEY-----", "MIIEow"),
        # base64 bodies are never judged: zero bytes encode as AAAA
        ('"auth": "AAAAAAAAAAAAAAAAAAAAAAAAdXNlcjpwdw=="', "dXNlcjpwdw"),
    ],
)
def test_values_that_could_be_real_stay_redacted(line: str, secret: str) -> None:
    assert secret not in redact_text(line)
    assert secret.encode() not in b"".join(redact_stream(io.BytesIO(line.encode() + b"\n")))
