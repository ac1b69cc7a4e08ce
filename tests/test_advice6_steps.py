"""Advice of the sixth blind set's first round (tests/corpus/advice6): each wrong item the
reviewers found has a fixture beside its rule and a test here that reads the rule's own text."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from tests.conftest import ROOT

RULES = ROOT / "rules"


@pytest.fixture(scope="module")
def compiled() -> CompiledLibrary:
    return CompiledLibrary(load_library(RULES), engine="regex")


def _advice(compiled: CompiledLibrary, path: Path) -> tuple[str, str]:
    sources, _ = collect_sources([str(path)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None, path
    patches = " ".join(p.rendered for p in a.root_cause.patches)
    return a.root_cause.rule_id, a.root_cause.remediation + "\n" + patches


def test_one_generation_per_prompt_is_raised_not_lowered(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, RULES / "config" / "trl-grpo-generations-not-divisible.match-one.log")
    assert rule == "trl-grpo-generations-not-divisible"
    assert "`num_generations` is 1" in text and "Raise `num_generations` to 2 or more" in text
    assert "do not divide it" not in text and "lower `num_generations`" not in text
    assert "holds whole groups of 1" not in text and "training processes" not in text
    # the usual case keeps its advice
    _, usual = _advice(compiled, RULES / "config" / "trl-grpo-generations-not-divisible.match.log")
    assert "8 generations per prompt do not divide it" in usual and r"as TRL lists them: \[7\]" in usual


def test_flash_attention_on_a_pre_ampere_gpu_is_switched_off_not_rebuilt(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, RULES / "cuda" / "gpu-arch-unsupported-by-build.match-flash-attn.log")
    assert rule == "gpu-arch-unsupported-by-build"
    assert 'attn_implementation="sdpa"' in text and "reinstalling or building it from source fails" in text
    assert (
        "build from source with `TORCH_CUDA_ARCH_LIST`" not in text
        and "the fix is a build" not in text.lower()
    )
    # a GPU newer than the build keeps the rebuild advice, and no flash-attn switch
    _, newer = _advice(compiled, RULES / "cuda" / "gpu-arch-unsupported-by-build.match.log")
    assert "a PyTorch wheel built for sm_120" in newer and "sdpa" not in newer


def test_a_rank_killed_as_zero_partitions_the_optimizer_gets_deepspeed_advice(
    compiled: CompiledLibrary,
) -> None:
    rule, text = _advice(compiled, RULES / "host" / "process-killed-sigkill.match-zero-partition.log")
    assert rule == "process-killed-sigkill"
    assert "DeepSpeed ZeRO partitioned the optimizer (3369211904" in text and "about 40 GB a rank" in text
    assert "FSDP" not in text and "sync_module_states" not in text
