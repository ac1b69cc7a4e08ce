"""The twelfth blind set's non-distributed wrong items (tests/corpus/advice12, first contact at
a4274dd): vLLM's `max_model_len=30_000` read as 30 and a higher `gpu_memory_utilization` offered
at 0.95 (vllm#44376), and the other items fixed beside it."""

from __future__ import annotations

from tests.advicekit import facts, patched, root, rule_fixture, set_reader
from tests.conftest import Analyze

read = set_reader("advice12")


def _text(f) -> str:  # type: ignore[no-untyped-def]
    return " ".join(f.remediation.split())


# --- vllm#44376: max_model_len=30_000, gpu_memory_utilization=0.95 ------------------------------


def test_vllm_max_model_len_with_digit_groups_and_no_raise_at_095(analyze: Analyze) -> None:
    a = read(analyze, "ab-vllm-44376-kv-cache-max-model-len.log")
    f = root(a, "vllm-kv-cache-insufficient")
    got = facts(a)
    assert got["max_model_len"] == 30000  # "30_000", not 30
    assert got["gpu_memory_utilization"] == 0.95
    text = _text(f)
    assert "`gpu_memory_utilization` is already 0.95, so a higher fraction has nothing left to give" in text
    assert "Lower `max_model_len` from 30000" in text
    assert "at most the 13528 tokens vLLM estimates fit" in text
    assert "raise `gpu_memory_utilization`" not in text
    assert not patched(f, "--gpu-memory-utilization")
    assert patched(f, "--max-model-len")
    assert not any("gpu-memory-utilization" in w for w in a.warnings)


def test_vllm_lower_fraction_still_offers_raising_it(analyze: Analyze) -> None:
    # the rule's own fixture at a fraction below 0.95 keeps the raise step and its patch
    a = rule_fixture(analyze, "vllm", "vllm-kv-cache-insufficient.match.log")
    f = root(a, "vllm-kv-cache-insufficient")
    assert facts(a)["gpu_memory_utilization"] < 0.95
    assert "raise `gpu_memory_utilization` only when the missing memory" in _text(f)
    assert patched(f, "gpu_memory_utilization")


def test_max_model_len_plain_digits_unchanged(analyze: Analyze) -> None:
    a = analyze(b"llm = LLM(model='m', max_model_len=4096.)\nValueError: boom\n", name="x.log")
    assert facts(a)["max_model_len"] == 4096
