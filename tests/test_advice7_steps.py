"""Advice of the seventh blind set's first round (tests/corpus/advice7): the wrong items fixed
so far, each read from the rule's own fixture or the set's log."""

from __future__ import annotations

from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
SET = ROOT / "tests" / "corpus" / "advice7"


def test_nccl_hitting_cuda_802_is_the_fabric_manager_not_a_retry(analyze: Analyze) -> None:
    path = RULES / "nccl" / "nccl-unhandled-cuda-error.match-802.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.rule_id == "nccl-unhandled-cuda-error"
    text = a.root_cause.remediation
    assert "Fabric Manager" in text and "`system not yet initialized`" in text
    # the error string is in the log already: no NCCL_DEBUG patch to find it
    assert not [p for p in a.root_cause.patches if p.path == ["NCCL_DEBUG"]]
    assert a.action is not None and a.action.decision == "investigate"
    assert "no cause of its own" not in " ".join(a.action.why)
    # another CUDA failure under NCCL gets no Fabric Manager step
    other = RULES / "nccl" / "nccl-unhandled-cuda-error.match.log"
    b = analyze(other.read_bytes(), name=other.name)
    assert b.root_cause is not None and "Fabric Manager" not in b.root_cause.remediation


def test_an_nccl_connection_to_a_named_peer_is_not_called_causeless(analyze: Analyze) -> None:
    path = SET / "q-sglang-5594-nccl-socket-connect-abort.log"
    a = analyze(path.read_bytes(), name=path.name)
    # a connect that failed outright has its own rule since nccl-socket-connect-failed v1
    assert a.root_cause is not None and a.root_cause.rule_id == "nccl-socket-connect-failed"
    why = " ".join(a.action.why if a.action else [])
    assert "could not open a TCP connection to a peer" in why and "no cause of its own" not in why
    assert "NCCL_SOCKET_IFNAME" in why and "firewall" in why


def test_an_early_collective_is_not_called_tiny(analyze: Analyze) -> None:
    path = SET / "q-monai-685-allreduce-timeout-seq7.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.rule_id == "nccl-watchdog-collective-timeout"
    text = a.root_cause.remediation
    assert "SeqNum=7" in text and "tiny" not in text and "A longer timeout will not help" not in text
    assert "one rank preparing a dataset or cache alone" in text


def test_a_bus_error_in_ncclgroupend_gets_no_dataloader_stopgap(analyze: Analyze) -> None:
    path = SET / "q-megatron-516-nccl-sigbus-shm.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.failure_class == "host.shm_exhausted"
    text = a.root_cause.remediation
    assert "num_workers" not in text and "NCCL_SHM_DISABLE=1" in text


def test_no_memory_for_any_cache_block_is_not_a_max_length_problem(analyze: Analyze) -> None:
    path = SET / "p-verl-2245-vllm-v1-no-kv-cache-memory.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.rule_id == "vllm-kv-cache-insufficient"
    text = a.root_cause.remediation
    assert "a shorter `max_model_len` cannot help" in text and "Raise `gpu_memory_utilization`" in text
    assert "Lower `max_model_len` to what the job needs" not in text
    assert not [p for p in a.root_cause.patches if p.path == ["--max-model-len"]]


def test_verl_sft_gets_no_ppo_trainer_key(analyze: Analyze) -> None:
    path = SET / "p-verl-1158-sft-alltoall-epoch-hang.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.rule_id == "nccl-watchdog-collective-timeout"
    assert "actor_rollout_ref" not in a.root_cause.remediation
    assert not [p for p in a.root_cause.patches if p.path[:1] == ["actor_rollout_ref"]]


def test_an_fsdp_finetune_killed_loading_shards_gets_fsdp_loading_not_device_map(analyze: Analyze) -> None:
    path = SET / "q-fastchat-568-fsdp-load-sigkill.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.failure_class == "host.oom_killed"
    text = a.root_cause.remediation
    # one process (--nproc_per_node 1): no loading on one rank for the others
    assert "in the only process (`--nproc_per_node 1`, FSDP `full_shard`)" in text
    assert "fsdp_cpu_ram_efficient_loading" not in text and 'device_map="auto"' not in text


def test_an_oom_other_processes_explain_blames_the_gpu_not_the_job(analyze: Analyze) -> None:
    path = SET / "q-accelerate-1519-oom-foreign-process.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.failure_class == "cuda.out_of_memory"
    assert "43.7 GiB held outside this process" in a.root_cause.remediation
    assert "size this job for what is left" not in a.root_cause.remediation
    why = " ".join(a.action.why if a.action else [])
    assert "Other processes held enough of this GPU" in why and "set by the job's sizes" not in why


def test_sglang_memory_saver_oom_leads_the_nccl_timeouts_after_it(analyze: Analyze) -> None:
    path = SET / "p-verl-1431-sglang-memsaver-oom-then-nccl-timeout.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.rule_id == "sglang-memory-saver-oom"
    assert a.root_cause.failure_class == "cuda.out_of_memory"
    assert any(f.failure_class == "nccl.collective_timeout" and f.role == "symptom" for f in a.findings)
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    assert "actor_rollout_ref.rollout.gpu_memory_utilization" in a.root_cause.remediation  # verl's log


def test_retry_exceeded_is_not_asserted_unreachable(analyze: Analyze) -> None:
    path = SET / "q-nccl-1698-roce-retry-exceeded.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.failure_class == "hardware.network_ib_error"
    text = a.root_cause.remediation
    assert "never got an answer" not in text and "so this NIC cannot reach" not in text
    # the report says it is intermittent: the loss under load leads (nccl-ib-completion-error v8)
    assert "so mlx5_10 can reach 192.168.3.5: the path works and loses packets under load" in text
    assert "PFC and ECN" in text


def test_deepspeed_090_world_size_of_one_is_the_release(analyze: Analyze) -> None:
    path = SET / "q-deepspeed-3228-batch-assert-zero2-regression.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert a.root_cause is not None and a.root_cause.rule_id == "deepspeed-batch-size-mismatch"
    text = a.root_cause.remediation
    assert "pin `deepspeed==0.8.3` or move to 0.9.1 or later" in text and "DeepSpeed #3324" in text
    assert "DeepSpeed did not see the others" not in text and 'train_batch_size` to "auto"' not in text
