"""The eleventh blind set's distributed items (tests/corpus/advice11, first contact at b70bd90):
NCCL dialling a link-local address (verl#726), NCCL's bootstrap trail of INFO return codes
(pytorch#131781), a placement group table stuck at NO_RESOURCES (ray#36836), and the steps of two
collective timeouts (accelerate#3861, torchtune#2676)."""

from __future__ import annotations

from tests.advicekit import CORPUS, decision, facts, root, rule_fixture, set_reader
from tests.conftest import Analyze

read = set_reader("advice11")


# --- verl#726: a connect to 169.254.0.1 while the workers are on 172.19.x ---------------------


def test_link_local_connect_leads_and_is_fixed_not_retried(analyze: Analyze) -> None:
    a = read(analyze, "x-verl-726-nccl-linklocal-169-254.log")
    f = root(a, "nccl-socket-connect-failed")  # not the ncclSystemError it explains
    assert f.failure_class == "nccl.error"
    got = facts(a)
    assert got["nccl_link_local_peer"] == "169.254.0.1"
    assert got["ray_prefix_ip"] == "172.19.230.131"
    text = " ".join(f.remediation.split())
    assert "169.254.0.1 is a link-local address (169.254.0.0/16)" in text
    assert "Ray reaches this job's nodes on 172.19.230.131" in text
    assert "`NCCL_SOCKET_IFNAME=<that interface>` and `GLOO_SOCKET_IFNAME=<same>`" in text
    assert "`runtime_env` (`env_vars`)" in text  # verl: the variables must reach the Ray workers
    # no "interface next to 169.254.0.1": that address is the wrong network
    assert "address next to 169.254.0.1" not in text
    assert decision(a) == "fix_and_rerun"
    why = " ".join(a.action.why)
    assert "NCCL dialled 169.254.0.1, a link-local address" in why
    assert "Retry once" not in why


def test_ncclsystemerror_with_a_routable_connect_keeps_the_plain_steps(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "nccl", "nccl-socket-connect-failed.match-last-error.log")
    f = root(a, "nccl-socket-connect-failed")
    assert "nccl_link_local_peer" not in facts(a)
    text = " ".join(f.remediation.split())
    assert "the one with an address next to 192.0.2.1" in text
    assert "link-local address (169.254" not in text
    assert decision(a) == "fix_and_rerun"
    # an ncclSystemError with no connect line stays that rule's
    plain = analyze(
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275,"
        " unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
    )
    root(plain, "nccl-system-error")


def test_a_veth_peer_gets_the_virtual_interface_step(analyze: Analyze) -> None:
    a = analyze((CORPUS / "advice6" / "o-accelerate-2457-fsdp-nccl-bootstrap-veth.log").read_bytes())
    f = root(a, "nccl-socket-connect-failed")
    text = " ".join(f.remediation.split())
    assert "NCCL connected through veth8299cd8, a virtual interface" in text
    assert "`NCCL_SOCKET_IFNAME=^veth,docker,lo`" in text
    assert "address next to fe80" not in text


# --- pytorch#131781: bootstrap.cc -> 2 in NCCL's INFO trail ----------------------------------


def test_bootstrap_info_trail_is_a_failed_bootstrap_connect(analyze: Analyze) -> None:
    a = read(analyze, "y-pytorch-131781-nccl-bootstrap-connect-multinode.log")
    f = root(a, "nccl-socket-connect-failed")
    assert f.failure_class == "nccl.error" and "bootstrap-info-trail" in f.signatures
    assert f.count == 3  # GPUs [0], [4] and [2] of g105
    assert facts(a)["nccl_net_used"] == "IB"
    text = " ".join(f.remediation.split())
    assert "NCCL on g105 (GPU [0]" in text
    assert "`misc/socket.cc:505 -> 2 (Operation now in progress)`" in text
    assert "`bootstrap.cc:275`" in text
    assert "`Bootstrap : Using <interface>:<address>`" in text
    assert "`NCCL_SOCKET_IFNAME` (and `GLOO_SOCKET_IFNAME`)" in text and "MASTER_ADDR" in text
    assert "IB settings (`NCCL_IB_HCA`" in text and "do not help" in text
    # no step that needs a peer address the trail does not print
    assert "{peer_addr}" not in text and "address next to" not in text
    assert decision(a) == "fix_and_rerun"


def test_bootstrap_trail_needs_the_socket_and_init_lines(analyze: Analyze) -> None:
    # a single bootstrap return code with no socket error above it is not this failure
    a = analyze(
        "g105:26921:27058 [0] NCCL INFO Using network IB\n"
        "g105:26921:27058 [0] NCCL INFO bootstrap.cc:275 -> 2\n"
    )
    assert a.root_cause is None or a.root_cause.rule_id != "nccl-socket-connect-failed"
    fx = rule_fixture(analyze, "nccl", "nccl-socket-connect-failed.match-bootstrap-info.log")
    assert root(fx, "nccl-socket-connect-failed").captures["bootstrap_line"] == "275"


# --- ray#36836: placement_group_table() with NO_RESOURCES ------------------------------------


def test_placement_group_table_no_resources_names_the_bundle(analyze: Analyze) -> None:
    a = read(analyze, "y-ray-36836-placement-group-pending-gpu.log")
    f = root(a, "ray-resource-request-pending")
    assert f.failure_class == "ray.unschedulable_resources" and "pg-table-no-resources" in f.signatures
    assert f.captures["pg_table_attempts"] == "197"
    text = " ".join(f.remediation.split())
    assert "`scheduling_state: NO_RESOURCES` after 197 scheduling attempts" in text
    assert "asks for GPU 1.0 and CPU 4.0 (`unit_resources`) on one node" in text
    assert "`available_node_types`" in text and "GPU >= 1.0 and CPU >= 4.0" in text
    assert "`max_workers`" in text
    assert decision(a) == "fix_and_rerun"


def test_a_placed_group_is_not_pending(analyze: Analyze) -> None:
    a = analyze(
        "-  placement_group_id: a88e62c5ef38022c30b3546938ec04000000\n"
        "  state: CREATED\n"
        "    unit_resources:\n"
        "      GPU: 1.0\n"
        "      CPU: 4.0\n"
        "    scheduling_attempt: 1\n"
        "    scheduling_state: FINISHED\n"
    )
    assert a.root_cause is None or a.root_cause.rule_id != "ray-resource-request-pending"


# --- accelerate#3861: a 687-element broadcast that waited 600 s --------------------------------


def test_small_broadcast_timeout_means_ranks_out_of_step(analyze: Analyze) -> None:
    a = read(analyze, "y-accelerate-3861-validation-broadcast-timeout.log")
    f = root(a, "nccl-watchdog-collective-timeout")
    got = facts(a)
    assert (got["watchdog_seq_num"], got["watchdog_broadcast_numel"]) == (22, 687)
    text = " ".join(f.remediation.split())
    assert "BROADCAST of only 687 elements (sequence 22, well after start-up)" in text
    assert "waiting 600084 ms is not bandwidth" in text
    assert "Make every rank run the same collectives in the same order" in text
    assert "`accelerator.gather_for_metrics`" in text and "`accelerator.wait_for_everyone()`" in text
    assert "`InitProcessGroupKwargs(timeout=timedelta(...))`" in text
    assert decision(a) == "investigate"  # not "retry once, transient straggler"
    assert "broadcast of only 687 elements (sequence 22)" in " ".join(a.action.why)


def test_a_tensor_parallel_allgather_of_that_size_keeps_its_verdict(analyze: Analyze) -> None:
    # SGLang's TP all-gather of 19008 elements is the model's own: every rank issues it
    a = analyze((CORPUS / "fresh4" / "a-sglang-1693-allgather-watchdog-crash.log").read_bytes())
    f = root(a, "nccl-watchdog-collective-timeout")
    assert "watchdog_broadcast_numel" not in facts(a)
    assert "Make every rank run the same collectives" not in f.remediation
    assert decision(a) == "retry"


# --- torchtune#2676: the gloo barrier after save_checkpoint waited 30 minutes -----------------


def test_barrier_after_checkpoint_save_points_at_the_save(analyze: Analyze) -> None:
    a = read(analyze, "y-torchtune-2676-gloo-barrier-timeout-save-checkpoint.log")
    f = root(a, "gloo-collective-timeout")
    got = facts(a)
    assert got["barrier_in_traceback"] == "barrier" and got["oom_in_save"] == "save_checkpoint"
    text = " ".join(f.remediation.split())
    assert (
        "waited 1800000 ms (30 minutes) in `torch.distributed.barrier()` called from `save_checkpoint`"
        in text
    )
    assert "Read rank 0's log and check the output filesystem" in text
    assert "`timeout=timedelta(hours=2)`" in text
    assert decision(a) == "fix_and_rerun"
    assert "the barrier inside save_checkpoint" in " ".join(a.action.why)


def test_a_gloo_timeout_outside_a_save_keeps_the_plain_advice(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "nccl", "gloo-collective-timeout.match.log")
    f = root(a, "gloo-collective-timeout")
    assert "called from `save_checkpoint`" not in f.remediation
    assert "barrier_in_traceback" not in facts(a) or "oom_in_save" not in facts(a)
