"""advice7 round 5's "values: some/none" (tests/corpus/advice7/round-5/review.yaml): three values the
log states and the fix needs, now used in a step's text and not only in the facts table: when the
SkyRL saves slowed (fine until step 72, over 15 minutes at step 72, the export at step 73 failed),
the vLLM V1 engine's check that found no memory for the KV cache, and the 7B model's host RAM with
the killed pid in the kernel-log search. Each is checked where the fact is missing too."""

from __future__ import annotations

from tests.advicekit import facts, flat, root, rule_fixture, set_reader
from tests.conftest import Analyze

_set = set_reader("advice7")


# 1. SkyRL#266: the saves slowed within one run, at step 72


def test_save_past_timeout_says_when_the_saves_slowed(analyze: Analyze) -> None:
    a = _set(analyze, "p-skyrl-266-hf-save-601s-timeout.log")
    f = root(a, "checkpoint-save-past-timeout")
    assert {
        "save_fine_until_step": 72,
        "save_slow_step": 72,
        "save_slow_took": "over 15 mins",
        "save_failed_step": 73,
    }.items() <= facts(a).items()
    text = flat(f)
    assert (
        "The log says a save at step 72 already took over 15 mins and the save at step 73 then failed: "
        "the saves slowed down within this run" in text
    )
    assert (
        "(the log: save_fine_until_step 72; save_slow_step 72; save_slow_took over 15 mins; save_failed_step 73)"
        in (text)
    )
    # computed: twice the 15-minute save, not twice this 601.62 s one
    assert "a timeout of at least twice that is 30 minutes (1800 s)" in text
    # the old wording spoke of growth between runs
    assert "from run to run" not in text
    # the trainer's timer shows no earlier save here (its first save is this one)
    assert "The first save this log times" not in text


def test_save_steps_are_left_out_where_the_log_does_not_say_when(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "dist", "checkpoint-save-past-timeout.match.log")
    text = flat(root(a, "checkpoint-save-past-timeout"))
    assert "`save_hf_model` took 601.62 s: just past 600 s (10 minutes)" in text
    assert "The log says a save at step" not in text and "The slowest save the log reports" not in text
    assert "from run to run" not in text


_TIMER = (
    "(skyrl_entrypoint pid=77) 2025-09-08 {t} | INFO     | skyrl_train.trainer:train:359 - "
    "Finished: '{phase}', time cost: {secs}s\n"
)
_FAIL = 'Traceback (most recent call last):\n  File "main_base.py", line 288, in main\nRuntimeError: boom\n'


def test_an_earlier_shorter_save_in_the_timer_lines_reads_as_growth_within_the_run(analyze: Analyze) -> None:
    body = (
        _TIMER.format(t="20:01:02.000", phase="save_checkpoints", secs="41.20")
        + _TIMER.format(t="20:03:10.000", phase="generate", secs="38.71")
        + _TIMER.format(t="22:36:45.019", phase="save_hf_model", secs="601.62")
        + _FAIL
    )
    text = flat(root(analyze(body), "checkpoint-save-past-timeout"))
    assert (
        "The first save this log times took 41.2 s and this one 601.62 s: the saves grew within this run"
        in (text)
    )
    # no prose about steps: no step numbers, no computed timeout from them
    assert "at step" not in text and "30 minutes" not in text


# 2. verl#2245: vLLM's V1 check_enough_kv_cache_memory found no memory for the KV cache


def test_no_cache_memory_reasons_from_the_v1_check(analyze: Analyze) -> None:
    a = _set(analyze, "p-verl-2245-vllm-v1-no-kv-cache-memory.log")
    f = root(a, "vllm-kv-cache-insufficient")
    assert facts(a)["vllm_v1_kv_check"] == "check_enough_kv_cache_memory"
    text = flat(f)
    assert "The error comes from vLLM's V1 engine: its check `check_enough_kv_cache_memory`" in text
    assert (
        "when the memory left for the KV cache is zero or less, before it compares anything with `max_model_len`"
        in (text)
    )
    assert "a colocated trainer's among them" in text
    assert "(the log: vllm_v1_kv_check check_enough_kv_cache_memory;" in text
    # the verl step stays, after it
    verl = text.index("it runs inside verl's `WorkerDict` beside the FSDP actor")
    assert text.index("V1 engine") < verl
    assert "actor_rollout_ref.actor.fsdp_config.param_offload=True" in text


def test_no_cache_memory_without_the_v1_frame_gets_no_v1_step(analyze: Analyze) -> None:
    a = analyze(
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/site-packages/vllm/worker/worker.py", line 420, in raise_if_cache_size_invalid\n'
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine.\n"
    )
    text = flat(root(a, "vllm-kv-cache-insufficient"))
    assert "vllm_v1_kv_check" not in facts(a)
    assert "V1 engine" not in text
    assert "vLLM found no memory at all for the cache (no block)" in text


# 3. FastChat#568: a 7B model loading in one process, SIGKILLed


def test_sigkill_while_loading_estimates_host_ram_and_greps_for_the_pid(analyze: Analyze) -> None:
    a = _set(analyze, "q-fastchat-568-fsdp-load-sigkill.log")
    f = root(a, "process-killed-sigkill")
    assert facts(a)["model_size_b"] == 7 and facts(a)["nproc_per_node"] == 1
    text = flat(f)
    assert 'dmesg -T | grep -i -E "killed process 27657|out of memory"' in text
    assert 'grep -i -E "killed process|out of memory"' not in text
    assert "An estimate of the host RAM this load needs: the model has about 7B parameters" in text
    assert "builds it in fp32, 4 bytes a parameter" in text
    # computed: 7 x 4 = 28 GB per process, x 1 process; half in fp16/bf16
    assert "about 28 GB per process for the weights alone" in text
    assert "for the node 1 x 28 GB = 28 GB (`--nproc_per_node 1`)" in text
    assert "it is about 14 GB per process" in text
    assert "(the log: model_size_b 7.0; nproc_per_node 1)" in text
    # the single-process FSDP loading step stays
    assert "in the only process (`--nproc_per_node 1`, FSDP `full_shard`)" in text


def test_the_estimate_uses_the_stated_dtype_and_the_processes_on_the_node(analyze: Analyze) -> None:
    body = (
        "torchrun --nproc_per_node=4 train.py --model_name_or_path /models/llama-13b --fsdp full_shard\n"
        "model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, torch_dtype=torch.bfloat16)\n"
        "Loading checkpoint shards:   0%|          | 0/3 [00:00<?, ?it/s]\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 "
        "(pid: 4242) of binary: /usr/bin/python\n"
    )
    a = analyze(body)
    text = flat(root(a, "process-killed-sigkill"))
    assert facts(a)["hf_load_dtype"] == "bfloat16"
    assert "loaded in bfloat16 as the log asks, 2 bytes a parameter: about 26 GB per process" in text
    assert "for the node 4 x 26 GB = 104 GB (`--nproc_per_node 4`)" in text
    assert "builds it in fp32" not in text
    assert '"killed process 4242|out of memory"' in text


def test_no_estimate_without_the_model_size_or_the_process_count(analyze: Analyze) -> None:
    shards = "Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s]\n"
    kill = (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 "
        "(pid: 27657) of binary: /usr/bin/python\n"
    )
    no_size = analyze(
        "torchrun --nproc_per_node=1 train.py --model_name_or_path /models/vicuna --fsdp full_shard\n"
        + shards
        + kill
    )
    no_count = analyze(
        "python train.py --model_name_or_path /models/vicuna-7b --fsdp full_shard\n" + shards + kill
    )
    for a in (no_size, no_count):
        text = flat(root(a, "process-killed-sigkill"))
        assert "An estimate of the host RAM" not in text
        # the pid still goes into the kernel-log search
        assert '"killed process 27657|out of memory"' in text


def test_a_kill_with_no_pid_keeps_the_plain_kernel_log_search(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "host", "process-killed-sigkill.match-bare.log")
    text = flat(root(a, "process-killed-sigkill"))
    assert 'dmesg -T | grep -i -E "killed process|out of memory"' in text
