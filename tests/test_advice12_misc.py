"""The twelfth blind set's non-distributed wrong items (tests/corpus/advice12, first contact at
a4274dd): vLLM's `max_model_len=30_000` read as 30 and a higher `gpu_memory_utilization` offered
at 0.95 (vllm#44376), and the other items fixed beside it."""

from __future__ import annotations

from tests.advicekit import facts, flat, patched, root, rule_fixture, set_reader
from tests.conftest import Analyze

read = set_reader("advice12")


# --- vllm#44376: max_model_len=30_000, gpu_memory_utilization=0.95 ------------------------------


def test_vllm_max_model_len_with_digit_groups_and_no_raise_at_095(analyze: Analyze) -> None:
    a = read(analyze, "ab-vllm-44376-kv-cache-max-model-len.log")
    f = root(a, "vllm-kv-cache-insufficient")
    got = facts(a)
    assert got["max_model_len"] == 30000  # "30_000", not 30
    assert got["gpu_memory_utilization"] == 0.95
    text = flat(f)
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
    assert "raise `gpu_memory_utilization` only when the missing memory" in flat(f)
    assert patched(f, "gpu_memory_utilization")


def test_max_model_len_plain_digits_unchanged(analyze: Analyze) -> None:
    a = analyze(b"llm = LLM(model='m', max_model_len=4096.)\nValueError: boom\n", name="x.log")
    assert facts(a)["max_model_len"] == 4096


# --- unsloth#1856: xFormers built for PyTorch 2.6.0+cu124 under a cu128 nightly -----------------


def test_xformers_built_for_other_torch_is_named_with_both_versions(analyze: Analyze) -> None:
    a = read(analyze, "z-unsloth-1856-xformers-built-for-other-torch.log")
    f = root(a, "xformers-built-for-other-torch")
    assert f.failure_class == "python.import_abi_mismatch"
    got = facts(a)
    # the installed torch is the "you have", not the one xformers was built for
    assert got["torch_version"] == "2.8.0.dev20250331+cu128"
    assert (got["torch_version_major"], got["torch_version_minor"]) == (2, 8)
    assert got["gpu_compute_capability"] == 12.0
    text = flat(f)
    assert (
        "xformers was built for PyTorch 2.6.0+cu124 (CUDA 1204), but the torch installed is 2.8.0.dev20250331+cu128"
        in text
    )
    assert "Build xformers from source against this torch" in text
    assert "falls back to PyTorch's SDPA" in text
    assert "Do not go back to torch 2.6.0+cu124" in text
    assert 'TORCH_CUDA_ARCH_LIST="12.0"' in text
    # a nightly: no "install the torch it was built for"
    assert "Or install the torch 2.6.0+cu124 it was built for" not in text


def test_xformers_released_torch_offers_the_matching_wheel(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "python", "xformers-built-for-other-torch.match.log")
    f = root(a, "xformers-built-for-other-torch")
    text = flat(f)
    assert "Reinstall xformers built for torch 2.2.1+cu121" in text
    assert "Or install the torch 2.1.0+cu121 it was built for" in text
    assert "Do not go back" not in text  # no GPU capability in this log
    assert facts(a)["torch_version"] == "2.2.1+cu121"


def test_torch_version_still_read_from_plain_lines(analyze: Analyze) -> None:
    a = analyze(b"PyTorch version: 2.5.1+cu124\nRuntimeError: boom\n", name="x.log")
    got = facts(a)
    assert got["torch_version"] == "2.5.1+cu124"
    assert (got["torch_version_major"], got["torch_version_minor"]) == (2, 5)


# --- LlamaFactory#3119: indexSelectLargeIndex in a pre-training forward --------------------------


def test_embedding_index_assert_has_no_label_advice(analyze: Analyze) -> None:
    a = read(analyze, "z-llamafactory-3119-pt-embedding-index-assert.log")
    f = root(a, "cuda-kernel-assertion-failed")
    text = flat(f)
    assert "Labels:" not in text
    assert "`input_ids.max() < model.get_input_embeddings().num_embeddings`" in text
    assert "`model.resize_token_embeddings(len(tokenizer))`" in text
    # LLaMA-Factory's own switches, the log shows its llmtuner package
    assert "set `resize_vocab: true`" in text
    assert "`overwrite_cache: true`" in text
    assert patched(f, "CUDA_LAUNCH_BLOCKING")


def test_loss_kernel_assert_keeps_label_advice(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "cuda", "cuda-kernel-assertion-failed.match-loss.log")
    text = flat(root(a, "cuda-kernel-assertion-failed"))
    assert "Labels: keep them within `[0, vocab_size)`" in text
    assert "resize_vocab" not in text


# --- litgpt#303: fragmentation with micro_batch_size = 1 and max_split_size_mb 128 -------------

_OOM_303 = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.06 GiB. GPU 0 has a total capacty of"
    " 23.70 GiB of which 1.27 GiB is free. Including non-PyTorch memory, this process has 22.43 GiB memory in use."
    " Of the allocated memory 12.62 GiB is allocated by PyTorch, and 8.65 GiB is reserved by PyTorch but"
    " unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid"
    " fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
)


def test_fragmentation_with_micro_batch_one_names_sequence_length(analyze: Analyze) -> None:
    a = read(analyze, "ab-litgpt-303-oom-fragmentation-8gib.log")
    f = root(a, "cuda-out-of-memory")
    got = facts(a)
    assert got["micro_batch_per_gpu"] == 1
    assert got["alloc_max_split_mb"] == 128
    text = flat(f)
    assert "fewer tokens or sequences per micro batch" not in text
    assert "the micro batch is already 1 sequence" in text
    assert "Cap the sequence length" in text
    assert "`max_split_size_mb` is already set to 128" in text
    # the fragmentation reading leads
    lead = "8.6 GiB is reserved by PyTorch but unallocated"
    assert lead in text and text.index(lead) < text.index("the micro batch is already 1")
    assert patched(f, "PYTORCH_CUDA_ALLOC_CONF")


def test_fragmentation_with_larger_micro_batch_keeps_fewer_sequences(analyze: Analyze) -> None:
    log = b"micro_batch_size=4\n" + _OOM_303.encode()
    a = analyze(log, name="x.log")
    text = flat(root(a, "cuda-out-of-memory"))
    assert "fewer tokens or sequences per micro batch" in text
    assert "the micro batch is already" not in text
    assert "`max_split_size_mb` is already set" not in text


# --- ColossalAI#3172: rank 0 SIGKILLed at step 3/1000 of a Gemini run ---------------------------


def test_colossalai_kill_after_steps_is_not_read_as_start_up(analyze: Analyze) -> None:
    a = read(analyze, "ab-colossalai-3172-rank0-sigkill-host-ram.log")
    f = root(a, "process-killed-sigkill")
    got = facts(a)
    # no loss line (metric_lines 0): the step lines decide
    assert got["train_step_progress"] == "3/1000"
    text = flat(f)
    assert "This log shows no training step" not in text
    assert "sync_module_states" not in text and "low_cpu_mem_usage" not in text
    assert "The log shows training step 3/1000 running before the kill" in text
    assert "at 44096.98 MB (about 43.1 GiB) at step 3/1000" in text
    assert "`placement_policy`" in text  # Gemini, which the log runs


def test_kill_with_no_step_shown_keeps_start_up_reading(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "host", "process-killed-sigkill.match-agent.log")
    text = flat(root(a, "process-killed-sigkill"))
    assert "This log shows no training step before the kill" in text
    assert "running before the kill" not in text
    assert "placement_policy" not in text
