"""The service's fast redaction gives exactly the engine's `redact_stream` output."""

from __future__ import annotations

import io
import random

import pytest

from app import redaction
from app.engine import redact as engine_redact

SECRETS = [
    "export WANDB_API_KEY=0123456789abcdef0123",
    "HF_TOKEN=hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6",
    "aws: AKIAIOSFODNN7EXAMPLE in use",
    "git clone https://user:s3cretPassw0rd@github.com/org/repo",
    "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
    "--hf-token hf_abcdefghijklmnopqrstuvwxyz0123456789",
    "--api-key=sk-proj-abcdefghijklmnopqrstuvwx",
    "slack https://hooks.slack.com/services/T000/B000/XXXXXXXX",
    "token xoxb-1234567890-abcdefghij",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    "-----BEGIN RSA PRIVATE KEY----- MIIEowIBAAKCAQEA -----END RSA PRIVATE KEY-----",
    "password: 'hunter2hunter2'",
    "ghp_" + "A" * 36,
    "perf/total_num_tokens:12673904 - throughput/tokens_per_s: 1234.5",
    '{"access_key": "AbCdEfGhIjKl", "secret": "x"}',
    "vllm: prompt tokens 512, generated tokens 12",
    "ſecret=abcdefghij token in a unicode line ✓",
    "ＴＯＫＥＮ=abcdefghij token",
    "api_key\u00a0=\u00a0abcdefghijk token",
    "email someone@example.com and key rotation",
]
FILLER = [
    "(WorkerDict pid=1, ip=10.0.0.1) step 12 loss 0.123 lr 1e-5",
    "Processed prompts: 100%|█████████| 512/512 [00:10<00:00, 50.1it/s, est. speed input: 5000 toks/s]",
    "[rank3]: NCCL INFO Channel 00/32 : 0[0] -> 1[1] via P2P/IPC",
    "",
    "\r  12%|#2        | 12/100\r  13%|#3        | 13/100",
    "key metrics: none",
]


def _corpus(seed: int, n: int = 4000) -> bytes:
    rnd = random.Random(seed)
    lines = []
    for _ in range(n):
        pool = SECRETS if rnd.random() < 0.2 else FILLER
        line = rnd.choice(pool)
        if rnd.random() < 0.3:
            line = rnd.choice(FILLER) + " " + line
        lines.append(line)
    return ("\n".join(lines) + ("\n" if seed % 2 else "")).encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("seed", range(6))
def test_same_bytes_as_the_engine(seed: int) -> None:
    data = _corpus(seed)
    for chunk in (1 << 20, 4096, 257):  # block boundaries fall everywhere
        fast = b"".join(redaction.fast_redact_stream(io.BytesIO(data), chunk_size=chunk))
        slow = b"".join(engine_redact.redact_stream(io.BytesIO(data), chunk_size=chunk))
        assert fast == slow


def test_secrets_are_gone() -> None:
    out = b"".join(redaction.fast_redact_stream(io.BytesIO("\n".join(SECRETS).encode()))).decode()
    for needle in ("0123456789abcdef0123", "AKIAIOSFODNN7EXAMPLE", "s3cretPassw0rd", "hunter2hunter2"):
        assert needle not in out


def test_fast_path_is_active_and_tied_to_the_engine_rules() -> None:
    # When this fails the engine's redaction table changed: review PATTERNS in app/redaction.py
    # (each must stay a superset of its engine pattern), then update DERIVED_FROM. Until then the
    # service safely falls back to the engine's own (slower) redact_stream.
    assert redaction._engine_fingerprint() == redaction.DERIVED_FROM
    assert [k for k, _p, _c in redaction.PATTERNS] == [k for k, _rx in engine_redact._COMPILED]
    pytest.importorskip("hyperscan")
    assert redaction.fast_path() is not None


def test_random_fragments_same_bytes_as_the_engine() -> None:
    """Lines glued from the fragments the patterns care about: superset gaps would show here."""
    parts = [
        "token",
        "TOKENS",
        "key",
        "api_key",
        "api-key",
        "access-key",
        "secret",
        "passwd",
        "credential",
        "=",
        ":",
        " ",
        "\t",
        '"',
        "'",
        "abcdefgh",
        "12345678",
        "hf_",
        "AKIA",
        "ASIA",
        "@",
        "://",
        "/",
        "bearer ",
        "Bearer\t",
        "--",
        "--hf-",
        "-",
        "_",
        "ghp_",
        "github_pat_",
        "sk-",
        "sk-proj-",
        "eyJ",
        ".",
        "PRIVATE KEY-----",
        "-----BEGIN ",
        "xoxb-",
        "ABCDEFGHIJKLMNOP",
        "a1b2c3d4e5f6g7h8i9j0",
        "é",
        "█",
        "[REDACTED:x]",
        ";",
        ",",
        "{",
        "}",
        "\r",
    ]
    rnd = random.Random(7)
    lines = ["".join(rnd.choice(parts) for _ in range(rnd.randint(1, 14))) for _ in range(20000)]
    data = "\n".join(lines).encode()
    fast = b"".join(redaction.fast_redact_stream(io.BytesIO(data), chunk_size=8192))
    slow = b"".join(engine_redact.redact_stream(io.BytesIO(data), chunk_size=8192))
    assert fast == slow
