"""Advice of the seventh and eighth blind sets' second round (memory and Ray): reports that had the
right class but not the expert's decisive step with the log's own values. Each fix is read from
the set's log and, where the old advice was right elsewhere, a rule fixture or a small synthetic
log keeps it."""

from __future__ import annotations

from app.engine.models import Analysis
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
SET7 = ROOT / "tests" / "corpus" / "advice7"
SET8 = ROOT / "tests" / "corpus" / "advice8"


def _log(analyze: Analyze, path_dir: object, name: str) -> Analysis:
    path = path_dir / name  # type: ignore[operator]
    return analyze(path.read_bytes(), name=path.name)


# 1. OpenRLHF#516: `ray start --num-cpus=4 --num-gpus=4` and {GPU: 1, CPU: 1} bundles


def test_a_cpu_cap_no_larger_than_the_gpu_bundles_is_named_as_the_blocker(analyze: Analyze) -> None:
    a = _log(analyze, SET7, "p-openrlhf-516-cpu-unschedulable.log")
    text = _root(a, "ray-resource-request-pending").remediation
    assert "started with `--num-cpus=4` and `--num-gpus=4`" in text
    assert "filling the 4 GPUs with such bundles takes all 4 CPUs" in text
    assert "restart Ray without `--num-cpus`" in text and "keeping `--num-gpus=4`" in text
    # nothing ran out of memory: no batch or memory-fraction advice
    assert "gpu_memory_utilization" not in text and "batch" not in text


def test_a_cluster_with_cpus_to_spare_gets_no_cap_step(analyze: Analyze) -> None:
    pending = (
        "Warning: The following resource request cannot be scheduled right now: {'GPU': 1.0, 'CPU': 1.0}. "
        "This is likely due to all cluster resources being claimed by actors.\n"
    )
    roomy = analyze("+ ray start --head --num-cpus=64 --num-gpus=8\n" + pending)
    f = _root(roomy, "ray-resource-request-pending")
    assert "--num-cpus=64" not in f.remediation and "The CPU cap is what blocks it" not in f.remediation
    # the request's own general advice stays
    assert "CPUs block it as surely as GPUs" in f.remediation
    capped = analyze("+ ray start --head --num-cpus=8 --num-gpus=8\n" + pending)
    assert "The CPU cap is what blocks it" in _root(capped, "ray-resource-request-pending").remediation


# 2. NeMo-RL#2937: vLLM's sleep mode backs 56.88 GiB per worker up in host RAM, then a worker dies


def test_a_worker_death_after_sleep_backups_points_at_host_ram(analyze: Analyze) -> None:
    a = _log(analyze, SET7, "p-nemorl-2937-vllm-sleep-cpu-backup-worker-died.log")
    text = _root(a, "ray-worker-crashed").remediation
    assert "copying 56.9 GiB of weights per worker into host RAM" in text
    assert "16 workers printed it" in text and "about 910.1 GiB of host memory across the cluster" in text
    assert "on 10.109.18.239 run `dmesg -T" in text and "PID 1530113" in text
    assert "sleep level 2" in text and "fewer generation workers per node" in text
    # the GPUs just freed their memory: no GPU-side advice
    assert "gpu_memory_utilization" not in text


def test_a_worker_death_without_a_cpu_backup_keeps_the_generic_steps(analyze: Analyze) -> None:
    fx = _fixture(analyze, "ray", "ray-worker-crashed.match.log")
    f = _root(fx, "ray-worker-crashed")
    assert "sleep level 2" not in f.remediation and "dmesg -T" in f.remediation
    # level 2 backs nothing up: 0.00 GiB is no host-memory reading
    died = (RULES / "ray" / "ray-worker-crashed.match.log").read_text()
    level2 = analyze(
        "(EngineCore_DP0 pid=1531) INFO 03-23 07:20:41 [cumem.py:213] CuMemAllocator: sleep freed 23.27 GiB "
        "memory in total, of which 0.00 GiB is backed up in CPU and the rest 23.27 GiB is discarded directly.\n"
        + died
    )
    assert "backed up in CPU" not in _root(level2, "ray-worker-crashed").remediation


# 3. accelerate#1519: ~43.7 GiB of GPU 1 held by another rank of the same multi-node launch


def test_memory_held_outside_a_multinode_rank_is_read_as_a_second_rank(analyze: Analyze) -> None:
    a = _log(analyze, SET7, "q-accelerate-1519-oom-foreign-process.log")
    text = _root(a, "cuda-out-of-memory").remediation
    assert "Of this GPU's 79.3 GiB, 735.7 MiB was free and this process held 34.9 GiB" in text
    assert "about 43.7 GiB held outside this process" in " ".join(text.split())
    assert "`[gpu187:N]:`" in text and "another rank of this same job placed on the same GPU" in text
    assert "`--num_machines $SLURM_NNODES --machine_rank $SLURM_NODEID`" in " ".join(text.split())
    assert "srun --ntasks-per-node=1" in text
    # not a leftover: the leftover-process step is gone
    assert "stop a leftover process" not in text


_LEGACY_OOM = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB (GPU 1; 79.35 GiB total "
    "capacity; 33.66 GiB already allocated; 735.69 MiB free; 34.89 GiB reserved in total by PyTorch)\n"
)


def test_the_same_oom_without_a_node_prefix_keeps_the_leftover_step(analyze: Analyze) -> None:
    plain = analyze(_LEGACY_OOM)
    text = _root(plain, "cuda-out-of-memory").remediation
    assert "stop a leftover process" in text and "another rank of this same job" not in text
    # torchrun's prefix without accelerate: torchrun's own flags
    tr = analyze("".join(f"[node3:1]:{line}\n" for line in _LEGACY_OOM.splitlines()))
    t = " ".join(_root(tr, "cuda-out-of-memory").remediation.split())
    assert "Start one torchrun per node" in t and "--nnodes $SLURM_NNODES --node_rank $SLURM_NODEID" in t
    assert "--num_machines" not in t


# 4. vllm#798: "Proxy Call to rank 7 failed (Connect)" with the group on two Ray hosts


def test_a_proxy_connect_failure_across_two_hosts_names_them(analyze: Analyze) -> None:
    a = _log(analyze, SET7, "q-vllm-798-ray-proxy-connect-rank7.log")
    text = " ".join(_root(a, "nccl-internal-error").remediation.split())
    assert "proxy call to rank 7 failed at `Connect`" in text
    assert "this output comes from 10.58.226.15 and the Ray worker that raised it ran on 10.58.226.18" in text
    assert "`NCCL_SOCKET_IFNAME` to the interface that links 10.58.226.15 and 10.58.226.18" in text
    assert "open the ports between the two hosts" in text
    assert "keep `--tensor-parallel-size` at most the GPUs of one node" in text
    assert "gpu_memory_utilization" not in text and "RAY_IGNORE_UNHANDLED_ERRORS" not in text


def test_an_internal_error_without_a_proxy_connect_gets_no_host_steps(analyze: Analyze) -> None:
    fx = _fixture(analyze, "nccl", "nccl-internal-error.match-dataparallel.log")
    text = _root(fx, "nccl-internal-error").remediation
    assert "Proxy call" not in text and "proxy call" not in text and "NCCL_SOCKET_IFNAME" in text
    # one host: the connect failure without the cross-host reading
    one = analyze(
        "(LLMEngine pid=1, ip=10.0.0.5) ncclInternalError: Internal check failed.\n"
        "(LLMEngine pid=1, ip=10.0.0.5) Proxy Call to rank 3 failed (Connect)\n"
        "(LLMEngine pid=1, ip=10.0.0.5) ray::RayWorker.execute_method() (pid=2, ip=10.0.0.5, actor_id=ab)\n"
    )
    t = " ".join(_root(one, "nccl-internal-error").remediation.split())
    assert "proxy call to rank 3 failed at `Connect`" in t and "spans two hosts" not in t


# 5. OpenRLHF#332: Ray's kill at step 32 = gradient_accumulation_steps with ZeRO-3 optimizer offload


def test_a_kill_at_the_first_optimizer_step_with_offload_is_the_optimizer_state(analyze: Analyze) -> None:
    a = _log(analyze, SET7, "p-openrlhf-332-70b-zero3-offload-host-oom.log")
    text = " ".join(_root(a, "ray-node-out-of-memory").remediation.split())
    assert "kill at step 32 and the job accumulates gradients over 32 micro-batches" in text
    assert "first optimizer step" in text and "(`ZeRO3 optim offload`)" in text
    assert "Spread the trained models over more nodes" in text and "stop offloading one of them" in text
    assert "node_host_memory_stated 1600GB" in text
    assert "only moves the kill to an earlier step" in text
    # not the growth reading of a sleeping engine
    assert "sleep level 2" not in text


def test_a_ray_oom_without_the_reported_step_gets_no_optimizer_step(analyze: Analyze) -> None:
    fx = _fixture(analyze, "ray", "ray-node-out-of-memory.match-summary.log")
    text = _root(fx, "ray-node-out-of-memory").remediation
    assert "first optimizer step" not in text and "Find which processes held the memory" in text
    # a kill at another step than the accumulation: no first-step reading
    later = analyze(
        "this error occurred at step 40 when the gradient_accumulation_steps was set to 32, with --adam_offload\n"
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    )
    assert "first optimizer step" not in _root(later, "ray-node-out-of-memory").remediation


# 6. verl#2245: vLLM V1 finds no KV-cache memory beside the FSDP actor in the WorkerDict


def test_no_cache_blocks_beside_the_verl_actor_offloads_the_actor(analyze: Analyze) -> None:
    a = _log(analyze, SET7, "p-verl-2245-vllm-v1-no-kv-cache-memory.log")
    text = " ".join(_root(a, "vllm-kv-cache-insufficient").remediation.split())
    assert "runs inside verl's `WorkerDict` beside the FSDP actor" in text
    assert "`actor_rollout_ref.actor.fsdp_config.param_offload=True`" in text
    assert "`actor_rollout_ref.actor.fsdp_config.optimizer_offload=True`" in text
    assert "`actor_rollout_ref.ref.fsdp_config.param_offload=True`" in text
    assert "(`actor_rollout_ref.rollout.gpu_memory_utilization`, to 0.6-0.7 where it is set lower)" in text
    # the GPU is not "used by nothing else": the 0.85-0.9 advice is gone
    assert "where nothing else uses the GPU" not in text and "free the GPU of other processes" not in text


def test_no_cache_blocks_outside_verl_keeps_the_general_step(analyze: Analyze) -> None:
    fx = _fixture(analyze, "vllm", "vllm-kv-cache-insufficient.match-zero-blocks.log")
    text = _root(fx, "vllm-kv-cache-insufficient").remediation
    assert "about 0.85-0.9 where nothing" in " ".join(text.split()) and "WorkerDict" not in text


# 7. NoisyRollout#7: Ray's kill at step 46-47 in both runs, with vLLM sleeping and waking each step


def test_a_kill_many_steps_in_with_vllm_sleep_is_host_growth(analyze: Analyze) -> None:
    a = _log(analyze, SET7, "p-noisyrollout-7-host-oom-step46.log")
    text = " ".join(_root(a, "ray-node-out-of-memory").remediation.split())
    assert "The report puts the kill at step 46" in text and "host memory growing step by step" in text
    assert "Use the vLLM version the framework's release asks for" in text and "sleep level 2" in text
    assert "save checkpoints before step 46" in text
    assert "in two separate runs" in text and "ray_oom_node_ip 10.76.236.66" in text
    assert "first optimizer step" not in text
    assert "RAY_memory_monitor_refresh_ms=0`) does not fix it" in text


def test_a_ray_oom_without_vllm_sleep_gets_no_sleep_step(analyze: Analyze) -> None:
    log = (
        "The same problem happened at around step 46 in two separate runs.\n"
        + (RULES / "ray" / "ray-node-out-of-memory.match-summary.log").read_text()
    )
    text = _root(analyze(log), "ray-node-out-of-memory").remediation
    assert "sleep level 2" not in text and "Find which processes held the memory" in text


# 8. Qwen-VL-Series-Finetune#135: the kernel's kill of one DeepSpeed rank, the launcher's of the rest


def test_the_victims_numbers_and_the_launchers_kills_are_read(analyze: Analyze) -> None:
    a = _log(analyze, SET8, "s-qwenvl-finetune-135-deepspeed-save-host-oom.log")
    text = " ".join(_root(a, "host-oom-killer").remediation.split())
    assert "The kernel killed PID 410126, which held 21.9 GiB of anonymous memory" in text
    assert "14.4 GiB of shared memory" in text and "36.3 GiB in all" in text
    assert "DeepSpeed's launcher then killed its other ranks" in text and "not failures of their own" in text
    assert "If the kill came while a checkpoint was written" in text and "Save less often" in text
    assert "gradient checkpointing" not in text and "batch size" not in text


def test_a_save_shown_in_the_log_keeps_its_own_step(analyze: Analyze) -> None:
    fx = _fixture(analyze, "host", "host-oom-killer.match-checkpoint.log")
    text = _root(fx, "host-oom-killer").remediation
    assert "The log mentions a checkpoint save" in text and "If the kill came while a checkpoint" not in text
    plain = _fixture(analyze, "host", "host-oom-killer.match.log")
    t = _root(plain, "host-oom-killer").remediation
    assert "DeepSpeed's launcher" not in t and "If the kill came while a checkpoint" not in t
    assert "The kernel killed PID 23793" in t and "shared memory" not in t


# 9. Megatron-LM#60: the OOM is the local DDP's one flat copy of all gradients


def test_the_flat_gradient_copy_asks_for_a_bucketed_all_reduce(analyze: Analyze) -> None:
    a = _log(analyze, SET8, "s-megatron-60-allreduce-flatten-oom-mp2-dp8.log")
    text = " ".join(_root(a, "cuda-out-of-memory").remediation.split())
    assert "Megatron-LM's local DDP (`--DDP-impl local`) in `allreduce_params`" in text
    assert "`_flatten_dense_tensors(grads)`" in text and "the 2.3 GiB asked is that copy" in text
    assert "`--DDP-impl torch`" in text and "bucket_cap_mb" in text
    # the fragmentation reading stays with it
    assert "about 9.1 GiB sits in cached blocks no tensor uses" in text


def test_the_same_oom_without_the_ddp_frames_has_no_ddp_step(analyze: Analyze) -> None:
    plain = analyze(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.29 GiB (GPU 0; 31.72 GiB total capacity; "
        "19.22 GiB already allocated; 1.88 GiB free; 28.32 GiB reserved in total by PyTorch)\n"
    )
    text = _root(plain, "cuda-out-of-memory").remediation
    assert "--DDP-impl" not in text and "sits in cached blocks no tensor uses" in text


# 10. Xinference#3659: the 9637888-byte /dev/shm segment, on worker 192.168.83.194


def test_the_segment_size_and_the_worker_host_are_used(analyze: Analyze) -> None:
    a = _log(analyze, SET8, "s-xinference-3659-vllm-nccl-shm-segment.log")
    text = " ".join(_root(a, "nccl-shm-segment-failed").remediation.split())
    assert "NCCL asked for a 9.2 MiB segment (9637888 bytes) in /dev/shm" in text
    assert "The error was raised in the process at 192.168.83.194 (pid 2747" in text
    assert "the container that runs the model on 192.168.83.194 is the one whose /dev/shm must grow" in text
    assert "NCCL_SOCKET_IFNAME" not in text and "gpu_memory_utilization" not in text


def test_a_segment_failure_without_an_actor_address_names_no_host(analyze: Analyze) -> None:
    fx = _fixture(analyze, "host", "nccl-shm-segment-failed.match.log")
    text = _root(fx, "nccl-shm-segment-failed").remediation
    assert "(9637888 bytes)" in text and "raised in the process at" not in text
    # xoscar's 0.0.0.0 is no host
    anywhere = analyze(
        "torch.distributed.DistBackendError: [address=0.0.0.0:33045, pid=2747] NCCL error: unhandled system error\n"
        "Error while creating shared memory segment /dev/shm/nccl-qYLNSv (size 9637888)\n"
    )
    assert "raised in the process at" not in _root(anywhere, "nccl-shm-segment-failed").remediation
