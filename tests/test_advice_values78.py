"""advice7/advice8 round 3, "values: some": the values a fix needs, used in the steps' reasoning
(not only quoted in the evidence or the facts table), and steps that a value in the log rules out
left out. Each test runs the real set log (or a rule fixture / a short variant of it) through the
engine."""

from __future__ import annotations

from app.render.markdown import render_markdown
from tests.advicekit import CORPUS, facts, patched, root, rule_fixture, set_reader
from tests.conftest import Analyze

read7 = set_reader("advice7")
read8 = set_reader("advice8")


# --- advice7 p-verl-1431: the memory saver's result and pid; a value for the share only where the
# log states the current one -------------------------------------------------------------------

VERL_1431 = "p-verl-1431-sglang-memsaver-oom-then-nccl-timeout.log"


def test_memory_saver_result_pid_and_the_timeout_are_reasoned_with(analyze: Analyze) -> None:
    f = root(read7(analyze, VERL_1431), "sglang-memory-saver-oom")
    text = f.remediation
    assert "`cu_mem_create` returned CUresult 2 (CUDA_ERROR_OUT_OF_MEMORY)" in text
    assert "The process that ran out of memory is pid 60511" in text
    assert (
        "after 1800000 ms (30 min) on the other rank" in text and "a longer `timeout` will not help" in text
    )
    # the log does not state the rollout's share: no value is offered for it
    assert "lower it to" not in text


def test_the_rollout_share_gets_a_lower_value_only_where_the_log_states_it(analyze: Analyze) -> None:
    log = (CORPUS / "advice7" / VERL_1431).read_text()
    launch = "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=sglang actor_rollout_ref.rollout.gpu_memory_utilization={}\n"
    a = analyze(launch.format("0.6") + log, name=VERL_1431)
    text = root(a, "sglang-memory-saver-oom").remediation
    assert "`actor_rollout_ref.rollout.gpu_memory_utilization=0.6`: lower it to `0.4`" in text
    assert facts(a)["verl_rollout_gpu_util_lower"] == 0.4
    # already low: no lower value is computed, so the step is left out
    low = analyze(launch.format("0.15") + log, name=VERL_1431)
    assert "verl_rollout_gpu_util_lower" not in facts(low)
    assert "lower it to" not in root(low, "sglang-memory-saver-oom").remediation


def test_the_memory_saver_fixture_without_a_timeout_gets_no_timeout_step(analyze: Analyze) -> None:
    text = "[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103\n"
    f = root(analyze(text), "sglang-memory-saver-oom")
    assert "CUresult 2" in f.remediation
    assert "watchdog timeout" not in f.remediation and "pid" not in f.remediation


# --- advice7 p-msswift-6244 / advice8 r-msswift-9416: the 300000 ms wait ---------------------------


def test_the_store_wait_is_reasoned_with(analyze: Analyze) -> None:
    for a in (
        read7(analyze, "p-msswift-6244-grpo-tcpstore-timeout.log"),
        read8(analyze, "r-msswift-9416-group-port-51216-timeout.log"),
    ):
        text = root(a, "dist-rendezvous-timeout").remediation
        assert "This process waited 300000 ms (5 minutes) to connect to the store" in text
        assert "a longer timeout only delays the same failure" in text
        assert "nothing listened on port 51216" in text
        # the general sentence is not repeated beside it
        assert "A longer rendezvous or store timeout does not help" not in text


def test_a_wait_not_in_ms_keeps_the_general_sentence(analyze: Analyze) -> None:
    a = analyze(
        "[E1021 17:41:23.719491800 socket.cpp:1019] [c10d] The client socket has timed out after 30s "
        "while trying to connect to (10.0.0.7, 29500).\n"
    )
    text = root(a, "dist-rendezvous-timeout").remediation
    assert "c10d_connect_timeout_ms" not in facts(a)
    assert "A longer rendezvous or store timeout does not help" in text and "This process waited" not in text


# --- advice7 q-nccl-1698: vendor err 129 and the report's "intermittent" ---------------------------

NCCL_1698 = "q-nccl-1698-roce-retry-exceeded.log"


def test_an_intermittent_retry_exceeded_leads_with_loss_under_load(analyze: Analyze) -> None:
    a = read7(analyze, NCCL_1698)
    f = root(a, "nccl-ib-completion-error")
    text = f.remediation
    assert "Vendor err 129 (0x81) with status 12" in text and "transport retry counter exceeded" in text
    assert (
        'The report says the error comes and goes ("intermittent"), so mlx5_10 can reach 192.168.3.5' in text
    )
    assert "::ffff:192.168.6.3 here, ::ffff:192.168.6.5 at the peer" in text
    # the loss-under-load reading leads, not the hedge between it and an unreachable peer
    assert "Either this NIC cannot reach the peer's at all" not in text
    assert text.index("Vendor err 129") < text.index("comes and goes") < text.index("Check the link")
    assert patched(f, "NCCL_IB_TIMEOUT")
    assert a.action is not None and a.action.decision == "retry" and not a.action.exclude_hosts
    assert "comes and goes" in " ".join(a.action.why) and "network team" in " ".join(a.action.why)


def test_a_retry_exceeded_not_called_intermittent_keeps_the_hedge(analyze: Analyze) -> None:
    lines = (CORPUS / "advice7" / NCCL_1698).read_text().splitlines()[1:]
    a = analyze("\n".join(lines) + "\n", name=NCCL_1698)
    f = root(a, "nccl-ib-completion-error")
    assert "Either this NIC cannot reach the peer's at all" in f.remediation
    assert "comes and goes (" not in f.remediation and not patched(f, "NCCL_IB_TIMEOUT")
    assert "Vendor err 129 (0x81)" in f.remediation
    assert a.action is not None and a.action.decision == "retry_excluding"


def test_vendor_err_is_read_only_with_status_12(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "hardware", "nccl-ib-completion-error.match-local-protection.log")
    (f,) = [x for x in a.findings if x.rule_id == "nccl-ib-completion-error"]
    assert "Vendor err" not in f.remediation and "transport retry counter" not in f.remediation


# --- advice7 q-sglang-5594: a connect that failed at once --------------------------------------


def test_a_failed_connect_is_its_own_finding_with_the_host_and_both_interfaces(analyze: Analyze) -> None:
    a = read7(analyze, "q-sglang-5594-nccl-socket-connect-abort.log")
    f = root(a, "nccl-socket-connect-failed")
    assert a.framework is not None and a.framework.name == "sglang"
    assert "remote process exited" not in f.title
    text = f.remediation
    assert "NCCL on h100-15 (GPU [7]) could not open a TCP connection to 10.0.0.82, port 38455" in text
    assert "`NCCL_SOCKET_IFNAME` and `GLOO_SOCKET_IFNAME`" in text
    assert "all_reduce_perf" in text and "--dist-init-addr" in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    assert "Retry once" not in render_markdown(a)


def test_a_connection_lost_mid_run_stays_a_remote_error(analyze: Analyze) -> None:
    for name in ("nccl-remote-error.match-socket.log", "nccl-remote-error.match-socket-recv.log"):
        a = rule_fixture(analyze, "nccl", name)
        root(a, "nccl-remote-error")
        assert all(f.rule_id != "nccl-socket-connect-failed" for f in a.findings)


def test_a_connect_failure_without_nccls_prefix_names_no_host(analyze: Analyze) -> None:
    f = root(
        rule_fixture(analyze, "nccl", "nccl-socket-connect-failed.match-last-error.log"),
        "nccl-socket-connect-failed",
    )
    assert "NCCL could not open a TCP connection to 192.0.2.1, port 52822 (No route to host)" in f.remediation
    assert "NCCL on " not in f.remediation and "--dist-init-addr" not in f.remediation


# --- advice8 s-s1-61: the allocated/unallocated split, a target length, no DeepSpeed label -------

S1_61 = "s-s1-61-fsdp-32b-oom-block32768.log"


def test_the_oom_split_and_a_target_length_are_reasoned_with(analyze: Analyze) -> None:
    a = read8(analyze, S1_61)
    text = root(a, "cuda-out-of-memory").remediation
    assert (
        "76.8 GiB is allocated by PyTorch to live tensors and only 372.5 MiB is reserved but unallocated"
        in text
    )
    assert "not fragmented" in text
    assert "16384 tokens, half of the 32768 the launch sets" in text
    assert "ds_config_grad_acc" not in facts(a) and facts(a)["gradient_accumulation_steps"] == 1


def test_a_shared_gpu_is_not_called_full_of_its_own_tensors(analyze: Analyze) -> None:
    f = root(rule_fixture(analyze, "cuda", "cuda-out-of-memory.match-shared-gpu.log"), "cuda-out-of-memory")
    assert "full of this process's own tensors" not in f.remediation


def test_deepspeeds_own_check_still_reads_the_config_accumulation(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "config", "deepspeed-batch-size-mismatch.match-accumulation.log")
    assert facts(a)["ds_config_grad_acc"] == 4 and facts(a)["ds_acc_lost"] == 4


# --- advice8 s-vllm-13061: a share already at 0.98 is not offered higher ------------------------

VLLM_13061 = "s-vllm-13061-tp2-4090-kv-cache-81536.log"


def test_a_share_already_high_is_not_offered_higher(analyze: Analyze) -> None:
    a = read8(analyze, VLLM_13061)
    f = root(a, "vllm-kv-cache-insufficient")
    assert facts(a)["gpu_memory_utilization"] == 0.98
    assert "`gpu_memory_utilization` is already 0.98" in f.remediation
    assert "a higher `gpu_memory_utilization`" not in f.remediation
    assert not patched(f, "--gpu-memory-utilization") and patched(f, "--max-model-len")


def test_a_lower_share_keeps_the_hedged_option(analyze: Analyze) -> None:
    log = (
        (CORPUS / "advice8" / VLLM_13061)
        .read_text()
        .replace("--gpu_memory_utilization=0.98", "--gpu_memory_utilization=0.8")
    )
    f = root(analyze(log, name=VLLM_13061), "vllm-kv-cache-insufficient")
    assert (
        "a higher `gpu_memory_utilization` gives only where" in f.remediation
        and "is already" not in f.remediation
    )


# --- advice8 s-nccl-1529: both processes print the same host ------------------------------------

NCCL_1529 = "s-nccl-1529-two-containers-nvml-busid-not-found.log"


def test_the_shared_host_name_of_both_processes_is_the_evidence(analyze: Analyze) -> None:
    a = read8(analyze, NCCL_1529)
    text = root(a, "nccl-nvml-busid-not-found").remediation
    # the remediation is Markdown: a value's brackets are escaped
    assert "GPU \\[2\\] (pid 6897) and GPU \\[3\\] (pid 6898) all print the same host name" in text
    assert "ucpe-resource033018034100" in text and "if other ranks print the same host name" not in text


def test_one_process_alone_keeps_the_conditional_step(analyze: Analyze) -> None:
    f = root(
        rule_fixture(analyze, "nccl", "nccl-nvml-busid-not-found.match.log"), "nccl-nvml-busid-not-found"
    )
    one = "\n".join(
        ln for ln in (CORPUS / "advice8" / NCCL_1529).read_text().splitlines() if ":6898:" not in ln
    )
    g = root(analyze(one + "\n", name=NCCL_1529), "nccl-nvml-busid-not-found")
    for x in (f, g):
        assert "all print the same host name" not in x.remediation
    assert "if other ranks print the same host name" in g.remediation


# --- advice8 s-openvla-175: --nnodes counts nodes ------------------------------------------------


def test_nnodes_from_world_size_is_checked_against_the_nodes(analyze: Analyze) -> None:
    a = read8(analyze, "s-openvla-175-torchrun-standalone-multinode-rdzv-timeout.log")
    text = root(a, "dist-rendezvous-timeout").remediation
    assert "`--nnodes=$WORLD_SIZE`: `--nnodes` counts nodes (machines), not processes" in text
    assert "it must be 2, not 16" in text


def test_nnodes_given_a_number_gets_no_such_step(analyze: Analyze) -> None:
    log = (CORPUS / "advice8" / "s-openvla-175-torchrun-standalone-multinode-rdzv-timeout.log").read_text()
    a = analyze(log.replace("--nnodes=$WORLD_SIZE", "--nnodes=2"), name="openvla.log")
    text = root(a, "dist-rendezvous-timeout").remediation
    assert "counts nodes (machines)" not in text and "--standalone" in text
