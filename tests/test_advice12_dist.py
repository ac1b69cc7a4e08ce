"""The twelfth blind set's distributed and Ray items (tests/corpus/advice12, first contact at
a4274dd): a worker that exited with a code after a SIGTERM (slime#1740), a 0.9-GPU actor pending
inside a placement group while the GPUs are free (ray#42683), a ZeRO-3 all-gather hang
(DeepSpeed#5008), two nodes launched with disagreeing rendezvous settings (LLaMA-Factory#7326) and
two verl Ray items (verl#2596, verl#2987)."""

from __future__ import annotations

from tests.advicekit import decision, facts, flat, root, set_reader
from tests.conftest import Analyze

read = set_reader("advice12")


# --- slime#1740: "Worker exits with an exit code 1" ... "The process receives a SIGTERM" ---------


def test_k8s_memory_worker_exit_code_is_read_not_denied(analyze: Analyze) -> None:
    a = read(analyze, "z-slime-1740-worker-sigterm-k8s-memory.log")
    f = root(a, "ray-actor-died")
    got = facts(a)
    assert got["ray_worker_exit_code"] == "1"
    assert got["ray_worker_sigterm"] == "SIGTERM"
    text = flat(f)
    assert "no exit code" not in text
    assert "received a SIGTERM and exited with exit code 1" in text
    assert "kubectl describe pod <pod>" in text
    assert "resources.limits.memory" in text


def test_k8s_memory_worker_without_exit_code_keeps_old_reading(analyze: Analyze) -> None:
    # advice3's agentr1#33: "Worker exits with an exit code None": killed from outside
    from tests.advicekit import set_reader as _sr

    a = _sr("advice3")(analyze, "g-agentr1-33-taskrunner-k8s-memory.log")
    f = root(a, "ray-actor-died")
    assert facts(a)["ray_worker_exit_code"] == "None"
    text = flat(f)
    assert "it ended with no exit code: killed from outside" in text
    assert "exited with exit code" not in text


# --- ray#42683: {'GPU': 0.9} pending in a placement group, 1.9 reserved, ~1.0 used, 4.0 total ---


def test_pg_fractional_gpu_pending_is_a_mismatch_not_a_shortage(analyze: Analyze) -> None:
    a = read(analyze, "ab-ray-42683-pg-actor-pending-gpus-free.log")
    f = root(a, "ray-resource-request-pending")
    got = facts(a)
    assert got["ray_pg_gpus_reserved"] == 1.9
    assert got["pending_pg_demand_gpus"] == 0.9
    assert got["ray_pg_bundle_has_room"] is True
    text = flat(f)
    assert "This is not a shortage: the cluster has 4.0 GPUs of which 3.0 are free" in text
    assert "reserve 1.9 GPU of which 1.0 is used, so 0.9 GPU is reserved and idle" in text
    assert "`placement_group_bundle_index`" in text
    assert "121.07GiB used of 121.07GiB reserved" in text and "`accelerator_type`" in text
    assert "Size each task, actor or bundle to what one node has free" not in text
    assert "ray list actors" not in text
    assert "no node has the GPUs or CPUs" not in f.title
    assert decision(a) == "fix_and_rerun"
    why = " ".join(a.action.why)
    assert "asks for more than the cluster has" not in why
    assert "The cluster has the GPUs: 4.0 in all with 3.0 free" in why


def test_pending_demand_without_pg_room_keeps_sizing_step(analyze: Analyze) -> None:
    a = analyze(
        b"Usage:\n 0.0/64.0 CPU\n 8.0/8.0 GPU\nDemands:\n {'GPU': 1.0}: 1+ pending tasks/actors\n",
        name="ray-status.log",
    )
    f = root(a, "ray-resource-request-pending")
    assert "ray_pg_bundle_has_room" not in facts(a)
    text = flat(f)
    assert "Size each task, actor or bundle to what one node has free" in text
    assert "ray list actors" in text
    assert "asks for more than the cluster has" in " ".join(a.action.why)


# --- DeepSpeed#5008: rank 3's _ALLGATHER_BASE SeqNum 211067 waited 1800000 ms ------------------


def test_zero_allgather_hang_is_investigated_not_retried(analyze: Analyze) -> None:
    a = read(analyze, "ab-deepspeed-5008-zero3-allgather-timeout.log")
    f = root(a, "nccl-watchdog-collective-timeout")
    got = facts(a)
    assert got["watchdog_allgather_ranks"] == 8
    assert got["watchdog_timeout_rank"] == 3
    assert "moe_model_named" not in got  # the log names no MoE model
    text = flat(f)
    assert "Rank 3 waited the whole 1800000 ms (30 minutes) in all-gather SeqNum 211067" in text
    assert "a gather over 8 ranks" in text
    assert "find the rank that is not at SeqNum 211067" in text
    assert "set_z3_leaf_modules" not in text  # only where the log shows an MoE model
    assert decision(a) == "investigate"
    why = " ".join(a.action.why)
    assert "Retry once" not in why and "transient straggler" not in why
    assert "parameter all-gather (sequence 211067)" in why


def test_zero_allgather_hang_with_moe_model_names_leaf_modules(analyze: Analyze) -> None:
    log = (
        "[2024-01-25 02:00:00,000] [INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1]}\n"
        "model: MixtralForCausalLM\n"
        "[E ProcessGroupNCCL.cpp:852] [Rank 1] NCCL watchdog thread terminated with exception: [Rank 1] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52, OpType=_ALLGATHER_BASE, "
        "NumelIn=1024, NumelOut=2048, Timeout(ms)=1800000) ran for 1800061 milliseconds before timing out.\n"
        "[2024-01-25 03:17:26,042] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 11\n"
    )
    a = analyze(log.encode(), name="ds-moe.log")
    f = root(a, "nccl-watchdog-collective-timeout")
    text = flat(f)
    assert "The model is a mixture of experts (MixtralForCausalLM)" in text
    assert "set_z3_leaf_modules" in text


# --- LlamaFactory#7326: NNODES=3 RANK=0/1 with MASTER_ADDR 192.168.100.1 / .2 ---------------------


def test_llamafactory_nodes_launched_for_different_rendezvous(analyze: Analyze) -> None:
    a = read(analyze, "z-llamafactory-7326-multinode-rendezvous-mismatch.log")
    f = root(a, "dist-rendezvous-timeout")
    assert f.failure_class == "dist.rendezvous_timeout"
    got = facts(a)
    assert got["launch_rank0_master_addr"] == "192.168.100.1"
    assert got["launch_rank1_master_addr"] == "192.168.100.2"
    assert got["llamafactory_rdzv_endpoint"] == "10.224.32.93:29500"
    text = flat(f)
    assert "node 0 was given `MASTER_ADDR=192.168.100.1` and node 1 `MASTER_ADDR=192.168.100.2`" in text
    assert "both with `NNODES=3`, and the rank was passed as `RANK=`" in text
    assert "`10.224.32.93:29500`, with 1 process(es) per node" in text
    assert "its own `NODE_RANK` (0 to 2)" in text
    assert "`MASTER_PORT=29500`" in text and "nc -zv" in text
    assert decision(a) == "fix_and_rerun"


def test_llamafactory_launch_with_one_address_is_no_finding(analyze: Analyze) -> None:
    log = (
        "FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 llamafactory-cli train a.yaml\n"
        "FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 llamafactory-cli train a.yaml\n"
        "[INFO|2025-03-16 05:16:14] llamafactory.cli:157 >> Initializing 8 distributed tasks at: 10.0.0.1:29500\n"
    )
    a = analyze(log.encode(), name="lf-ok.log")
    assert a.root_cause is None or a.root_cause.rule_id != "dist-rendezvous-timeout"
    assert "launch_node_master_addr_differs" not in facts(a)


# --- verl#2596: n_gpus_per_node=3, nnodes=2 on a 4-GPU head and a 2-GPU worker, STRICT_PACK * 3 --


def test_verl_strict_pack_pool_larger_than_the_small_node(analyze: Analyze) -> None:
    a = read(analyze, "z-verl-2596-strict-pack-uneven-nodes.log")
    f = root(a, "ray-resource-request-pending")
    got = facts(a)
    assert (got["stated_head_node_gpus"], got["stated_worker_node_gpus"]) == (4, 2)
    assert got["pending_strict_pack_bundles"] == 3
    text = flat(f)
    assert "`trainer.n_gpus_per_node`=3 bundles with `STRICT_PACK`" in text
    assert "the 2-GPU node can never hold 3 of them" in text
    assert "`trainer.n_gpus_per_node=2` with `trainer.nnodes=2`" in text
    assert "`trainer.nnodes=1 trainer.n_gpus_per_node=4`" in text
    assert "`tensor_model_parallel_size=4`" in text
    assert "give Ray more CPUs" not in text  # the CPU of each bundle is not what blocks it
    assert "`trainer.nnodes x trainer.n_gpus_per_node` GPUs must be free" not in text
    assert decision(a) == "fix_and_rerun"
    why = " ".join(a.action.why)
    assert "asks for more than the cluster has" not in why
    assert "smallest node has 2" in why


# --- verl#2987: WorkerDict pid 909447 died inside AsyncSglangServer.wake_up() ------------------


def test_verl_workerdict_died_in_wake_up_points_at_its_pid(analyze: Analyze) -> None:
    a = read(analyze, "z-verl-2987-colocated-workerdict-died-on-wakeup.log")
    f = root(a, "ray-actor-died")
    got = facts(a)
    assert got["ray_wake_up_call"] == "AsyncSglangServer.wake_up"
    assert got["ray_dead_name"] == "gxgUtgWorkerDict_0:1"
    text = flat(f)
    assert "(gxgUtgWorkerDict_0:1, pid 909447), not the `AsyncSglangServer.wake_up()`" in text
    assert "worker-*-909447.err" in text and "for a kill of 909447" in text
    assert "memory is the likely cause" in text
    assert decision(a) == "investigate"
    why = " ".join(a.action.why)
    assert "died inside AsyncSglangServer.wake_up()" in why
    assert "a lost node or a preemption" not in why
