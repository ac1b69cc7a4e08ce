"""A memory estimate the report states (Megatron-LM#525, tests/corpus/advice9: "I figured out this
model should only need 23.3GB" beside an OOM with 28.82 GiB allocated): the cuda-out-of-memory
step that reads the gap between the two as the activations the estimate leaves out, with the gap
computed; absent without an estimate, and where the estimate is not clearly below what was
allocated."""

from __future__ import annotations

import pytest

from app.engine.pipeline.library import Library
from tests.advicekit import RULES, facts, flat, root, rule_fixture, set_reader
from tests.conftest import Analyze

_set = set_reader("advice9")
RULE = "cuda-out-of-memory"
STEP = "above the estimate"


def _oom(allocated: str, *, total: str = "79.19 GiB", cached: str = "1.10 GiB") -> str:
    """torch >= 2.1's allocator message: 2 GiB asked for, 500 MiB free, `allocated` live."""
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        f"capacity of {total} of which 500.00 MiB is free. Including non-PyTorch memory, this process has "
        f"77.00 GiB memory in use. Of the allocated memory {allocated} is allocated by PyTorch, and {cached} "
        "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )


def test_the_reporters_estimate_and_the_gap_above_it(analyze: Analyze) -> None:
    a = _set(analyze, "u-megatron-525-gpt2-large-v100-oom.log")
    f = root(a, RULE)
    got = facts(a)
    assert got["stated_memory_estimate"] == "23.3" and got["stated_memory_estimate_unit"] == "GB"
    # 28.82 GiB allocated less 23.3 GB (21.7 GiB), and less 23.3 GiB were the GB GiB
    assert got["stated_memory_estimate_gib"] == 21.7
    assert got["oom_above_stated_estimate_gib"] == 7.1
    assert got["oom_above_stated_estimate_min_gib"] == 5.5
    text = flat(f)
    assert (
        "The log states an estimate that this job needs 23.3 GB, yet PyTorch's live tensors already held 28.8 GiB"
        in text
    )
    assert (
        "7.1 GiB above the estimate (its GB read as 10^9 bytes, so 21.7 GiB; still 5.5 GiB if they are GiB)"
        in (text)
    )
    assert "leaves out the activations" in text and "turn on activation recomputation" in text
    assert "Allocator settings do not close a gap of that size" in text
    assert (
        "stated_memory_estimate 23.3; stated_memory_estimate_unit GB; oom_already_allocated 28.8 GiB" in text
    )
    # Megatron is only in the reporter's prose: its flags stay out, as do allocator patches
    assert "--recompute-activations" not in text and "--micro-batch-size" not in text
    assert not f.patches


def test_the_rule_fixture_of_the_same_report_gets_it_too(analyze: Analyze) -> None:
    f = root(rule_fixture(analyze, "cuda", "cuda-out-of-memory.match-v100-small-cache.log"), RULE)
    assert "7.1 GiB above the estimate" in flat(f)


@pytest.mark.parametrize(
    "area, name",
    [
        ("cuda", "cuda-out-of-memory.match-hf-flags.log"),
        ("cuda", "cuda-out-of-memory.match.log"),
        ("cuda", "cuda-out-of-memory.match-legacy.log"),
    ],
)
def test_no_step_without_a_stated_estimate(analyze: Analyze, area: str, name: str) -> None:
    a = rule_fixture(analyze, area, name)
    assert not any("estimate" in n for n in facts(a))
    assert STEP not in flat(root(a, RULE))


def test_no_step_where_the_estimate_is_above_what_was_allocated(analyze: Analyze) -> None:
    a = analyze("By my calculation the model should only need 75GB.\n" + _oom("70.00 GiB"))
    assert facts(a)["stated_memory_estimate"] == "75"
    assert "oom_above_stated_estimate_gib" not in facts(a)
    assert STEP not in flat(root(a, RULE))


def test_no_step_where_the_gap_is_within_the_reading_of_gb(analyze: Analyze) -> None:
    # 70 GB is 65.2 GiB: 4.8 GiB below the 70 GiB allocated, but were the GB GiB there is no gap
    a = analyze("It should only need 70 GB.\n" + _oom("70.00 GiB"))
    assert "oom_above_stated_estimate_gib" not in facts(a)
    assert STEP not in flat(root(a, RULE))


def test_an_estimate_in_gib_gives_one_gap(analyze: Analyze) -> None:
    a = analyze("Estimated memory usage is about 50 GiB per GPU.\n" + _oom("70.00 GiB"))
    got = facts(a)
    assert got["stated_memory_estimate_unit"] == "GiB"
    assert got["oom_above_stated_estimate_gib"] == 20.0
    assert "oom_above_stated_estimate_min_gib" not in got
    text = flat(root(a, RULE))
    assert (
        "The log states an estimate that this job needs 50 GiB" in text
        and "20.0 GiB above the estimate" in text
    )
    assert "if they are GiB" not in text


def test_megatron_flags_only_where_the_log_shows_megatron(analyze: Analyze) -> None:
    log = "> initializing torch distributed ...\nThe model should need about 40 GB.\n" + _oom("70.00 GiB")
    a = analyze(log)
    assert a.framework is not None and a.framework.name == "megatron"
    text = flat(root(a, RULE))
    assert STEP in text
    assert "`--recompute-activations`" in text and "`--micro-batch-size`" in text


@pytest.mark.parametrize(
    "name, fact",
    [
        # LlamaFactory#9510: the weights fill the GPU while the model loads, no activations yet
        ("cuda-out-of-memory.match-load-model.log", "oom_at_load"),
        # DeepSeek-V3#205: a vLLM Ray worker's sampler, the engine's own levers
        ("cuda-out-of-memory.match-vllm-ray-sampler.log", "inference_engine_seen"),
        # SGLang's scheduler died of it: its static pool, not activations
        ("cuda-out-of-memory.match-sglang-server.log", "sglang_child_failed"),
    ],
)
def test_no_step_at_load_or_in_an_inference_engine(analyze: Analyze, name: str, fact: str) -> None:
    log = (RULES / "cuda" / name).read_text()
    a = analyze("I figured out this model should only need 10GB.\n" + log)
    got = facts(a)
    assert got.get(fact) and got.get("oom_above_stated_estimate_gib")
    assert STEP not in flat(root(a, RULE))


@pytest.mark.parametrize(
    "line",
    [
        "The 14B model needs much more than 24GB",
        "It will take 2 GB more than before",
        "it should use 10GB/s of bandwidth",
        "It requires about 40GB of disk space",
        "Loading weights took 12.5 GB",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB",
        "model weights take 15.02GiB; non_torch_memory takes 0.12GiB",
    ],
)
def test_ordinary_lines_state_no_estimate(analyze: Analyze, line: str) -> None:
    assert "stated_memory_estimate" not in facts(analyze(line + "\n"))


@pytest.mark.parametrize(
    "line, value, unit",
    [
        ("I figured out this model should only need 23.3GB which is much smaller than 32GB", "23.3", "GB"),
        ("The model needs about 40 GB", "40", "GB"),
        ("estimated memory: 23.3 GB", "23.3", "GB"),
        ("the theoretical memory footprint is 23 GiB", "23", "GiB"),
        ("I calculated that it would need ~30GB", "30", "GB"),
        ("按我的计算应该只需要23.3GB显存", "23.3", "GB"),
    ],
)
def test_the_phrasings_of_an_estimate(analyze: Analyze, line: str, value: str, unit: str) -> None:
    got = facts(analyze(line + "\n"))
    assert (got.get("stated_memory_estimate"), got.get("stated_memory_estimate_unit")) == (value, unit)


def test_the_unit_is_read_from_the_same_phrase_as_the_number(library: Library) -> None:
    specs = {f.name: f for f in library.facts}
    number, unit = specs["stated_memory_estimate"], specs["stated_memory_estimate_unit"]
    assert len(number.patterns) == len(unit.patterns) > 0
    for n, u in zip(number.patterns, unit.patterns, strict=True):
        assert n.count("(?P<value>") == u.count("(?P<value>") == 1
        # the same pattern with the value group on the number or on the unit
        assert n.replace("(?P<value>", "(?:") == u.replace("(?P<value>", "(?:")
