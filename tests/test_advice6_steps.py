"""Advice of the sixth blind set's first round (tests/corpus/advice6): each wrong item the
reviewers found has a fixture beside its rule and a test here that reads the rule's own text."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"


def _advice(analyze: Analyze, path: Path) -> tuple[str, str]:
    """The root cause's rule and its remediation with the patches, as the report shows them."""
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None, path
    patches = " ".join(p.rendered for p in a.root_cause.patches)
    return a.root_cause.rule_id, a.root_cause.remediation + "\n" + patches


def test_one_generation_per_prompt_is_raised_not_lowered(analyze: Analyze) -> None:
    rule, text = _advice(analyze, RULES / "config" / "trl-grpo-generations-not-divisible.match-one.log")
    assert rule == "trl-grpo-generations-not-divisible"
    assert "`num_generations` is 1" in text and "Raise `num_generations` to 2 or more" in text
    assert "do not divide it" not in text and "lower `num_generations`" not in text
    assert "holds whole groups of 1" not in text and "training processes" not in text
    # the usual case keeps its advice
    _, usual = _advice(analyze, RULES / "config" / "trl-grpo-generations-not-divisible.match.log")
    assert "8 generations per prompt do not divide it" in usual and r"as TRL lists them: \[7\]" in usual


def test_flash_attention_on_a_pre_ampere_gpu_is_switched_off_not_rebuilt(analyze: Analyze) -> None:
    rule, text = _advice(analyze, RULES / "cuda" / "gpu-arch-unsupported-by-build.match-flash-attn.log")
    assert rule == "gpu-arch-unsupported-by-build"
    assert 'attn_implementation="sdpa"' in text and "reinstalling or building it from source fails" in text
    assert (
        "build from source with `TORCH_CUDA_ARCH_LIST`" not in text
        and "the fix is a build" not in text.lower()
    )
    # a GPU newer than the build keeps the rebuild advice, and no flash-attn switch
    _, newer = _advice(analyze, RULES / "cuda" / "gpu-arch-unsupported-by-build.match.log")
    assert "a PyTorch wheel built for sm_120" in newer and "sdpa" not in newer


def test_a_rank_killed_as_zero_partitions_the_optimizer_gets_deepspeed_advice(
    analyze: Analyze,
) -> None:
    rule, text = _advice(analyze, RULES / "host" / "process-killed-sigkill.match-zero-partition.log")
    assert rule == "process-killed-sigkill"
    assert "DeepSpeed ZeRO partitioned the optimizer (3369211904" in text and "about 40 GB a rank" in text
    assert "FSDP" not in text and "sync_module_states" not in text
