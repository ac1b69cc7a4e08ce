"""Advice of the ninth blind set's second round (tests/corpus/advice9, round-2 "values: some"): the
steps reason with the values the log states (the signal and the workers a launcher stopped, the
nodes `ray status` lists, the MASTER_PORT that did not reach the launcher, the GPU's and the
node's memory, ...), each read from the set's log and, where the old advice must stay for other
logs, from a rule fixture or a small synthetic log."""

from __future__ import annotations

from tests.advicekit import facts as _facts
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.advicekit import set_reader
from tests.conftest import Analyze

_set = set_reader("advice9")


# 1. the launcher's SIGHUP: the signal and the workers it stopped


def test_sighup_names_the_signal_and_the_workers_the_launcher_stopped(analyze: Analyze) -> None:
    a = _set(analyze, "t-axolotl-2215-launcher-sighup.log")
    f = _root(a, "torchelastic-sighup")
    assert _facts(a)["launcher_closed_pids"] == "46807, 46808, 46809"
    assert _facts(a)["launcher_closing_signal"] == "SIGHUP"
    assert "got signal 1 (SIGHUP) and passed it on to its workers, processes 46807, 46808, 46809" in (
        f.remediation
    )


def test_workers_stopped_with_sigterm_get_no_sighup_step(analyze: Analyze) -> None:
    # the agent's SIGTERM after a worker failed is not the hang-up: the pids are read, the step is not shown
    a = analyze(
        "W1221 17:13:59.240000 46660 torch/distributed/elastic/agent/server/api.py:704] Received 1 death "
        "signal, shutting down workers\n"
        "W1221 17:13:59.241000 46660 torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
        "700 closing signal SIGTERM\n"
    )
    f = _root(a, "torchelastic-sighup")
    assert _facts(a)["launcher_closing_signal"] == "SIGTERM"
    assert "passed it on to its workers" not in f.remediation
    # and the elder fixture with SIGHUP lines keeps its step, with its own pids
    old = _fixture(analyze, "job", "torchelastic-sighup.match.log")
    assert "processes 2704351, 2704352" in _root(old, "torchelastic-sighup").remediation


# 2. the 96 GB H20s of a colocated slime job


def test_memory_saver_oom_reasons_with_the_gpus_capacity(analyze: Analyze) -> None:
    a = _set(analyze, "t-slime-274-memory-saver-oom.log")
    text = _root(a, "cuda-out-of-memory").remediation
    assert _facts(a)["gpu_memory_stated_gb"] == 96
    assert "Each GPU has 96 GB, and the engine's static share is taken from all of it" in text
    assert "the engine keeps about 48 GB of each GPU and leaves the trainer the other 48 GB" in text
    assert "about 9.6 GB more" in text
    # the GPU's size is not stated: the step is left out, the slime step stays
    no_size = analyze(
        "Error Context: Training via ray.get(actor_model.async_train(...))\n"
        "[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=csrc/utils.h func=cu_mem_create line=187\n"
    )
    other = _root(no_size, "cuda-out-of-memory").remediation
    assert "Each GPU has" not in other and "It failed in the training phase" in other


# 3. the MASTER_PORT that never reached `swift sft`


def test_a_master_port_that_did_not_reach_swift_goes_on_its_command_line(analyze: Analyze) -> None:
    a = _set(analyze, "t-msswift-3988-port-29500-in-use.log")
    text = _root(a, "dist-address-in-use").remediation
    assert {
        "master_port_env": 29501,
        "env_port_launcher": "swift sft",
        "master_port_not_applied": True,
    }.items() <= (_facts(a).items())
    assert "The log sets `MASTER_PORT=29501`, yet the store still tried port 29500" in text
    assert "`MASTER_PORT=29501 swift sft ...`" in text
    # torchrun's flags are not swift's
    assert "torchrun --master_port" not in text and "--standalone" not in text


def test_a_torchrun_job_keeps_torchruns_port_advice(analyze: Analyze) -> None:
    bind = (
        "RuntimeError: The server socket has failed to listen on any local network address. port: 29500, "
        "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use\n"
    )
    plain = _root(analyze(bind), "dist-address-in-use").remediation
    assert "`torchrun --master_port`" in plain and "MASTER_PORT=29501" not in plain
    # MASTER_PORT set and ignored, launcher unknown: the command line, with torchrun's own option
    unknown = _root(analyze("export MASTER_PORT=29501\n" + bind), "dist-address-in-use").remediation
    assert "`torchrun --master_port 29501`" in unknown and "swift" not in unknown
    # swift with no port set: its environment variable, not torchrun's flags
    swift = _root(analyze("$ swift sft --model Qwen\n" + bind), "dist-address-in-use").remediation
    assert "`MASTER_PORT=<free port> swift sft ...`" in swift and "--standalone" not in swift


# 4. NeMo-RL's placement group: the 1000 s it already waited, the node count before leftovers


def test_the_placement_group_wait_uses_its_timeout_and_leads_with_the_nodes(analyze: Analyze) -> None:
    a = _set(analyze, "t-nemorl-2352-gym-pg-timeout.log")
    text = _root(a, "ray-resource-request-pending").remediation
    assert "The driver already waited 1000 s for `helper_pg` (`timeout=1000`)" in text
    assert "one still not placed after 1000 s is waiting for nodes that have not joined" in text
    nodes = text.index("NeMo-RL needs 8 nodes here")
    assert nodes < text.index("The driver already waited 1000 s") < text.index("ray list actors")


# 5. the OOM at load: the process the message names is this one


def test_the_only_process_named_by_the_oom_is_this_one(analyze: Analyze) -> None:
    a = _set(analyze, "t-llamafactory-9510-oom-at-load-model.log")
    text = _root(a, "cuda-out-of-memory").remediation
    assert _facts(a)["oom_named_process_is_self"] is True
    assert "The only process the message names, 415557 with 79.3 GiB, is this" in text
    assert "77.9 GiB of it allocated by PyTorch" in text and "there is nothing to kill" in text
    assert "find what it is" not in text


def test_another_process_holding_the_gpu_is_still_named_to_stop(analyze: Analyze) -> None:
    a = analyze(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.33 GiB of which 1.00 GiB is free. Process 999 has 40.00 GiB memory in use. Of the "
        "allocated memory 30.00 GiB is allocated by PyTorch, and 500.00 MiB is reserved by PyTorch but "
        "unallocated.\n"
    )
    text = _root(a, "cuda-out-of-memory").remediation
    assert "oom_named_process_is_self" not in _facts(a)
    # 40 GiB against PyTorch's 30.5: more than this process, not named as itself
    assert "is this process itself" not in text and "there is nothing to kill" not in text


# 6. a task larger than any node: the 2 nodes `ray status` lists


def test_ray_status_nodes_size_the_split_and_it_never_fits(analyze: Analyze) -> None:
    a = _set(analyze, "u-ray-50348-single-task-16gpu-two-nodes.log")
    f = _root(a, "ray-resource-request-pending")
    assert {"ray_active_nodes": 2, "ray_gpus_per_node": 8}.items() <= _facts(a).items()
    assert "16.0 GPUs on 2 nodes (8 each if they are alike)" in f.remediation
    assert "this request can never be scheduled on this cluster" in f.remediation
    assert '2 actors with `num_gpus=8`, or a placement group of 2 `{"GPU": 8}` bundles' in f.remediation
    assert "right now" not in f.title


def test_without_the_node_list_the_split_stays_hedged(analyze: Analyze) -> None:
    a = analyze(
        "Pending:\n (no pending nodes)\nUsage:\n 0.0/384.0 CPU\n 0.0/16.0 GPU\n"
        "Demands:\n {'GPU': 16.0}: 1+ pending tasks/actors\n"
    )
    text = _root(a, "ray-resource-request-pending").remediation
    assert "ray_active_nodes" not in _facts(a)
    assert "with 8 per node, two actors with `num_gpus=8`" in text and "so it can never be scheduled" in text
    # Ray 1.x counts nodes by type, and v2 lists idle nodes apart: both are counted
    v1 = analyze(
        "Active:\n 1 ray.head.default\n 3 ray.worker.gpu\nPending:\n (no pending nodes)\n"
        "Usage:\n 0.0/64.0 CPU\n 0.0/32.0 GPU\nDemands:\n {'GPU': 16.0}: 1+ pending tasks/actors\n"
    )
    assert _facts(v1)["ray_active_nodes"] == 4
    v2 = analyze(
        "Active:\n (no active nodes)\nIdle:\n 1 node_9a8e4a65cdc3\n 1 node_9749a2bf68e5\nPending:\n"
        " (no pending nodes)\nUsage:\n 0.0/16.0 GPU\nDemands:\n {'GPU': 16.0}: 1+ pending tasks/actors\n"
    )
    assert _facts(v2)["ray_active_nodes"] == 2


# 7. the host OOM at a checkpoint save: 512 GB for 4 GPUs, offload and CPU init already off


def test_host_oom_at_a_save_uses_the_nodes_memory_and_what_is_already_off(analyze: Analyze) -> None:
    a = _set(analyze, "u-nemo-10192-slurm-host-oom-at-checkpoint.log")
    text = _root(a, "host-oom-killer").remediation
    assert "Each node has 512 GB of host memory for its 4 GPUs, about 128 GB per rank" in text
    assert "The job already runs with `cpu_offloading: false` and `use_cpu_initialization: false`" in text
    assert "load weights once" not in text and "avoid CPU offload" not in text


def test_a_host_oom_without_those_settings_keeps_the_general_step(analyze: Analyze) -> None:
    a = analyze("srun: error: node7: task 0: Out Of Memory\n")
    text = _root(a, "host-oom-killer").remediation
    assert "Lower host memory per node: load weights once" in text
    assert "The job already runs with" not in text and "per rank with one task per GPU" not in text


# 8. accelerate: num_processes is the total over the machines


def test_accelerate_num_processes_is_the_total_over_machines(analyze: Analyze) -> None:
    a = _set(analyze, "u-accelerate-3658-multinode-no-main-process-ip.log")
    text = _root(a, "dist-rendezvous-timeout").remediation
    assert _facts(a)["accelerate_procs_per_machine"] == 4
    assert "`num_processes: 8` is the total over all machines, so each of the 2 machines starts 4" in text


# 9. Xid 109: both drivers tried, one consumer card, the pin_memory workaround


def test_xid_109_with_two_drivers_tried_on_a_workstation_card(analyze: Analyze) -> None:
    a = _set(analyze, "u-pytorch-74235-xid109-ctx-switch-timeout.log")
    text = _root(a, "gpu-xid-context-switch-timeout").remediation
    assert "The log says drivers 520.56 and 525.89 were both tried" in text
    assert "try one newer branch than 525.89" in text
    assert "The RTX 4090 is a workstation's card" in text and "Run the job on another GPU or node" not in text
    assert "`DataLoader(..., pin_memory=False)`" in text


def test_xid_109_on_a_server_keeps_the_other_node(analyze: Analyze) -> None:
    a = analyze(
        "NVRM: Xid (PCI:0000:3b:00): 109, pid=4124, name=python, Ch 00000028, errorString CTX SWITCH "
        "TIMEOUT, Info 0x2c014\n"
    )
    text = _root(a, "gpu-xid-context-switch-timeout").remediation
    assert "Run the job on another GPU or node" in text and "workstation" not in text
    assert "were both tried" not in text


# 11. the node of the rank that missed the hub file


def test_the_rank_missing_the_hub_file_is_named_with_its_node(analyze: Analyze) -> None:
    a = _set(analyze, "u-milabench-281-hf-cache-race-rank14.log")
    text = _root(a, "hf-model-files-race").remediation
    assert "Rank 14, on node cn-n001, found the snapshot" in text
    assert "look at\ncn-n001's copy" in text or "look at cn-n001's copy" in text
    # without milabench's prefix: the rank alone, as before
    bare = analyze(
        '[rank11]: FileNotFoundError: No such file or directory: "/tmp/cache/huggingface/hub/models--org--m/'
        'snapshots/1e128c8891e52218b74cde8f26dbfc701cb99d79/vae/model.safetensors"\n'
    )
    assert "Rank 11 found the snapshot" in _root(bare, "hf-model-files-race").remediation


# 12. the two models behind the critic's vocabulary assert


def test_the_critic_assert_names_the_two_models_the_log_names(analyze: Analyze) -> None:
    a = _set(analyze, "t-openrlhf-159-critic-vocab-assert.log")
    text = _root(a, "cuda-kernel-assertion-failed").remediation
    assert (
        "The log names the models: `baichuan-inc/Baichuan2-13B-Base` and the reward model "
        "`rm-anthropic_hh-lmsys-oasst-webgpt.pt`"
    ) in text
    # no model named: no such step
    old = _fixture(analyze, "cuda", "cuda-kernel-assertion-failed.match.log")
    assert "The log names the models" not in _root(old, "cuda-kernel-assertion-failed").remediation
