"""Advice of the eleventh blind set (tests/corpus/advice11), the memory items: each wrong item or
missing decisive step fixed, read from the set's log, with a short log keeping the old advice
where it was right."""

from __future__ import annotations

from tests.advicekit import facts, root, set_reader
from tests.conftest import Analyze

_set = set_reader("advice11")

_OOM_OLD = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 31.75 GiB "
    "total capacity; {alloc} already allocated; 62.19 MiB free; {reserved} reserved in total by "
    "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
)


# Lightning#18134: ZeRO-3's parameter gather with 30.25 GiB of 31.75 GiB already allocated


def test_a_zero3_gather_on_a_full_gpu_means_the_model_was_built_unsharded(analyze: Analyze) -> None:
    a = _set(analyze, "y-lightning-18134-zero3-offload-gather-oom.log")
    f = root(a, "cuda-out-of-memory")
    got = facts(a)
    assert got["zero3_gather_frame"] == "fetch_sub_module" and got["zero3_gather_full"] is True
    text = f.remediation
    assert "It failed while ZeRO-3 gathered a module's parameters (`fetch_sub_module`" in text
    assert "with 30.2 GiB of the GPU's 31.8 GiB already allocated" in text
    assert "deepspeed.zero.Init()" in text and "configure_model()" in text
    assert "stage3_max_live_parameters" in text
    # the expert's wrong_here: fewer tokens / more offload as the fix
    assert "The peak of this step is too high" not in text
    assert "optimizer-state offload" not in text


def test_a_zero3_gather_with_room_left_keeps_the_peak_step(analyze: Analyze) -> None:
    log = _OOM_OLD.format(alloc="10.25 GiB", reserved="10.67 GiB") + (
        '  File "/x/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 424, in __all_gather_params\n'
    )
    a = analyze(log.encode())
    got = facts(a)
    assert got["zero3_gather_frame"] == "__all_gather_params" and got["zero3_gather_full"] is False
    text = root(a, "cuda-out-of-memory").remediation
    assert "ZeRO-3 gathered" not in text


# RLinf#255: 419 MiB process listed first, 14.85 GiB held by process 2797307


def test_the_process_holding_the_memory_is_named_not_the_first_listed(analyze: Analyze) -> None:
    a = _set(analyze, "x-rlinf-255-4090-model-load-shared-gpu-oom.log")
    text = root(a, "cuda-out-of-memory").remediation
    assert "This GPU is shared" in text
    assert "almost all of it is process 2797307 with 14.8 GiB" in text
    assert "`ps -p 2797307`" in text and "ps -p 2086283" not in text
    assert "give the process that failed a GPU of its own" in text
    assert "this process held 8.0 GiB" in text


def test_a_single_named_other_process_keeps_the_old_step(analyze: Analyze) -> None:
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB. GPU 0 has a total "
        "capacity of 23.64 GiB of which 264.00 MiB is free. Process 2797307 has 14.85 GiB memory in use. "
        "Including non-PyTorch memory, this process has 8.50 GiB memory in use. Of the allocated memory "
        "7.63 GiB is allocated by PyTorch, and 40.11 MiB is reserved by PyTorch but unallocated.\n"
    )
    text = root(analyze(log.encode()), "cuda-out-of-memory").remediation
    assert "the message names process 2797307 with 14.8 GiB" in text
    assert "This GPU is shared" not in text


# vllm#16199: KV cache 3584 < 4096 at 0.98 leads over the later CUDA-graph OOM; AWQ already int4


def test_the_kv_cache_shortfall_leads_over_the_later_graph_capture_oom(analyze: Analyze) -> None:
    a = _set(analyze, "y-vllm-16199-gemma3-awq-24g-kv-cache.log")
    f = root(a, "vllm-kv-cache-insufficient")
    assert a.root_cause is not None and a.root_cause.failure_class == "vllm.kv_cache_insufficient"
    got = facts(a)
    assert got["vllm_quantized_model"] == "gaunernst/gemma-3-27b-it-int4-awq"
    assert got["vllm_weights_loaded"] == "17.6110 GiB"
    text = f.remediation
    assert "The KV cache holds 3584 tokens and one request at the max length needs 4096" in text
    assert "`gpu_memory_utilization` is already 0.98" in text
    assert "lowering it shrinks the cache below 3584 tokens" in text
    assert "is already quantized" in text and "smaller or quantized model" not in text
    assert "`--max-model-len 3584`" in text and "--kv-cache-dtype fp8" in text
    assert "Loading the weights took 17.6110 GiB of the GPU's 21.99GiB" in text
    assert "0.98 x 21.99GiB = 21.55GiB" in text and "Add `--enforce-eager`" in text
    assert "0.05 lower" not in text


def test_a_kv_shortfall_of_an_unquantized_model_keeps_the_quantize_option(analyze: Analyze) -> None:
    log = (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 --gpu-memory-utilization 0.98\n"
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that "
        "can be stored in KV cache (20000). Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.\n"
    )
    a = analyze(log.encode())
    assert "vllm_quantized_model" not in facts(a)
    text = root(a, "vllm-kv-cache-insufficient").remediation
    assert "a smaller or quantized model" in text and "already quantized" not in text


def test_an_oom_without_a_kv_error_stays_the_root(analyze: Analyze) -> None:
    log = (
        "INFO 04-07 15:54:56 [worker.py:267] the current vLLM instance can use total_gpu_memory "
        "(21.99GiB) x gpu_memory_utilization (0.98) = 21.55GiB\n"
        "ERROR 04-07 15:55:35 [engine.py:448] RuntimeError: CUDA error: out of memory\n"
    )
    a = analyze(log.encode())
    assert a.root_cause is not None and a.root_cause.rule_id == "cuda-out-of-memory"


# AMVUR#2: rank 2 SIGKILLed (-9, pid 36071), <NO OTHER FAILURES>


def test_a_sigkilled_rank_gets_the_host_memory_leak_hunt(analyze: Analyze) -> None:
    a = _set(analyze, "y-amvur-2-rank2-sigkill-host-oom.log")
    f = root(a, "process-killed-sigkill")
    got = facts(a)
    assert got["torchrun_failed_rank"] == 2
    text = f.remediation
    assert "Rank 2 (pid 36071) exited with -9: SIGKILL" in text
    assert "shows pid 36071" in text and "`.detach().cpu()`" in text
    assert "only rank 2 died" in text


def test_a_sigkill_without_torchruns_rank_keeps_the_generic_advice(analyze: Analyze) -> None:
    a = analyze(
        b"[launch.py:341:sigkill_handler] Killing subprocess 230\nexits with return code = -9\n"
        b"subprocess.CalledProcessError: Command '['python']' died with <Signals.SIGKILL: 9>.\n"
    )
    text = root(a, "process-killed-sigkill").remediation
    assert "Check the node's kernel log" in text and "exited with -9: SIGKILL, sent from outside" not in text


# unsloth#465: accelerate's fp32 upcast of the logits, 9.47 GiB on a 14.75 GiB T4, batch 2 x 4


def test_the_fp32_logits_upcast_names_the_batch_and_accumulation(analyze: Analyze) -> None:
    a = _set(analyze, "x-unsloth-465-t4-18k-context-logits-oom.log")
    got = facts(a)
    assert got["oom_fp32_upcast_frame"] == "_convert_to_fp32"
    assert (got["unsloth_batch_per_device"], got["unsloth_grad_accum"]) == (2, 4)
    text = root(a, "cuda-out-of-memory").remediation
    assert "accelerate's `_convert_to_fp32` (`tensor.float()`)" in text
    assert "batch size per device 2 -> 1 with gradient accumulation 4 -> 8" in text
    assert "expandable_segments" not in text and "ps -p 2116" not in text


def test_an_fp32_upcast_without_unsloths_banner_keeps_the_numbers_only(analyze: Analyze) -> None:
    log = (
        '  File "/x/accelerate/utils/operations.py", line 781, in _convert_to_fp32\n'
        "    return tensor.float()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.47 GiB. GPU 0 has a total "
        "capacity of 14.75 GiB of which 3.78 GiB is free.\n"
    )
    text = root(analyze(log.encode()), "cuda-out-of-memory").remediation
    assert "accelerate's `_convert_to_fp32`" in text and "fewer sequences per micro batch" in text
    assert "gradient accumulation 4 -> 8" not in text


# ms-swift#3848: the one named process is the rank itself; the reporter saw memory creep up


def test_a_hard_wrapped_message_still_reads_pytorchs_share_and_the_creep(analyze: Analyze) -> None:
    a = _set(analyze, "x-msswift-3848-grpo-a800-40g-oom.log")
    got = facts(a)
    assert got["oom_named_process_is_self"] is True
    assert got["memory_grows_reported"] == "GPU memory usage is gradually increasing"
    assert "memory_grows_per_step" not in got
    text = root(a, "cuda-out-of-memory").remediation
    assert "The only process the message names, 3679748 with 38.5 GiB, is this process itself" in text
    assert "(36.3 GiB of it allocated by PyTorch" in text
    # the colocated engine's share only where the log shows an engine (regrade 5, LlamaFactory#9510):
    # this excerpt is the OOM message alone, its colocated vLLM only in the issue text
    assert "lower the engine's memory fraction" not in text and "over the 1.4 GiB request" not in text
    assert "Log `torch.cuda.memory_allocated()` once per step" in text
    assert "its climb alone is no leak" in text
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments" not in text


def test_memory_said_to_grow_per_step_keeps_the_leak_step(analyze: Analyze) -> None:
    log = (
        "Memory usage grows with every step.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.42 GiB. GPU 4 has a total "
        "capacity of 39.56 GiB of which 1.05 GiB is free.\n"
    )
    text = root(analyze(log.encode()), "cuda-out-of-memory").remediation
    assert "something is kept from one step to the next" in text and "The report says" not in text


# ROLL#80: actor_infer-12 vanished (SYSTEM_ERROR, EOF) on 33.195.34.104


def test_a_dead_roll_rollout_worker_gets_the_host_memory_checks(analyze: Analyze) -> None:
    a = _set(analyze, "x-roll-80-actor-infer-host-oom.log")
    assert a.framework is not None and a.framework.name == "roll"
    got = facts(a)
    assert (got["roll_dead_actor"], got["roll_dead_actor_cluster"]) == ("actor_infer-12", "actor_infer")
    text = root(a, "ray-actor-died").remediation
    assert "The dead actor is `actor_infer-12`, one of ROLL's `actor_infer` workers" in text
    assert "on 33.195.34.104 (pid 17871)" in text
    assert "watch the host memory of the `actor_infer` workers across steps" in text
    # not in this excerpt: vLLM's multimodal preprocessor
    assert "disable_mm_preprocessor_cache" not in text


def test_a_dead_actor_outside_roll_gets_no_roll_step(analyze: Analyze) -> None:
    log = (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: WorkerDict\n\tactor_id: 3e72\n\tpid: 17871\n\tname: rollout-3\n\tip: 10.0.0.1\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker "
        "exit detail: Worker unexpectedly exits with a connection error code 2. End of file.\n"
    )
    a = analyze(log.encode())
    text = root(a, "ray-actor-died").remediation
    assert "vanished without a Python error" in text and "ROLL" not in text
