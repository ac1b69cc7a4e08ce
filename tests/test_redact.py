"""Secrets never reach a report, a store or Slack."""

from __future__ import annotations

import io

import pytest

from app.engine.redact import redact_stream, redact_text
from tests.conftest import Analyze

SECRETS = [
    ("aws-access-key", "creds AKIAIOSFODNN7EXAMPLE in env", "AKIAIOSFODNN7EXAMPLE"),
    (
        "huggingface-token",
        "HF token hf_abcdefghijklmnopqrstuvwxyzABCDEF1234",
        "hf_abcdefghijklmnopqrstuvwxyzABCDEF1234",
    ),
    ("openai-key", "OPENAI=sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstuvwx"),
    ("github-token", "ghp_" + "a" * 36, "ghp_" + "a" * 36),
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
