"""The eighth blind set's unknowns (tests/corpus/advice8, issue 22): each of the five logs no
rule named is read from the set and must get its class, its rule and the advice its facts choose."""

from __future__ import annotations

from app.engine.models import Analysis
from tests.conftest import ROOT, Analyze

SET = ROOT / "tests" / "corpus" / "advice8"


def _run(analyze: Analyze, name: str) -> Analysis:
    path = SET / name
    return analyze(path.read_bytes(), name=path.name)


def _facts(a: Analysis) -> dict[str, object]:
    return {f.name: f.value for f in a.facts}


def test_skyrl_batch_below_the_dp_stride_is_named_with_the_stride(analyze: Analyze) -> None:
    a = _run(analyze, "r-skyrl-1609-batch-2-below-dp-stride-3.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "skyrl-batch-smaller-than-dp"
    assert a.root_cause.failure_class == "config.batch_smaller_than_dp"
    facts = _facts(a)
    # DP 6 (policy and reference on 6 GPUs), 4 samples per prompt, 2 prompts: stride 3, none kept
    assert (facts["skyrl_dp"], facts["n_samples_per_prompt"], facts["skyrl_train_batch_size"]) == (6, 4, 2)
    assert (facts["skyrl_stride"], facts["skyrl_kept_prompts"], facts["skyrl_samples"]) == (3, 0, 8)
    text = a.root_cause.remediation
    assert "stride = 6 / gcd(6, 4) = 3" in text and "a multiple of 3" in text
    # the start-up check's product passes and is said not to be enough
    assert "(8 samples >= 6) passed" in text
    assert [(p.path, p.value) for p in a.root_cause.patches] == [(["trainer", "train_batch_size"], 3)]
    assert a.action is not None and a.action.decision == "fix_and_rerun"


def test_areal_server_launch_failed_sends_the_reader_to_the_server_log(analyze: Analyze) -> None:
    a = _run(analyze, "r-areal-240-sglang-server-launch-failed.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "sglang-server-unreachable"
    assert a.root_cause.failure_class == "sglang.server_unreachable"
    assert "areal-wait-for-server" in a.root_cause.signatures
    text = a.root_cause.remediation
    assert "llm_server.log" in text and "setup_timeout" in text
    assert "training never started" in text
    # the trainer's own traceback is a symptom, not a second cause
    assert [f.failure_class for f in a.findings if f is not a.root_cause] == ["python.unhandled_exception"]


def test_a_placement_group_pinned_to_an_unknown_node_ip_is_not_a_gpu_shortage(analyze: Analyze) -> None:
    a = _run(analyze, "s-spark-vllm-docker-227-placement-group-node-ip.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "ray-placement-group-node-ip-missing"
    assert a.root_cause.failure_class == "ray.unschedulable_resources"
    assert a.framework is not None and a.framework.name == "vllm"
    facts = _facts(a)
    assert facts["pg_pinned_node_ip"] == "192.168.50.192"
    assert (facts["vllm_local_gpus"], facts["vllm_ray_world_size"]) == (1, 2)
    text = a.root_cause.remediation
    assert "`node:192.168.50.192`" in text and "VLLM_HOST_IP" in text
    assert "--node-ip-address=192.168.50.192" in text
    # TP 2 over two 1-GPU nodes is the intent: the advice keeps it
    assert "keep the parallel size" in text and "lower `--tensor-parallel-size`" not in text


def test_nvml_bus_id_not_found_points_at_the_containers_host_identity(analyze: Analyze) -> None:
    a = _run(analyze, "s-nccl-1529-two-containers-nvml-busid-not-found.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "nccl-nvml-busid-not-found"
    assert a.root_cause.failure_class == "nccl.error"
    assert a.root_cause.captures["nvml_host"] == "ucpe-resource033018034100"
    text = a.root_cause.remediation
    assert "NCCL_HOSTID" in text and "one container" in text
    # a setup that fails on every start: not a retry
    assert a.action is not None and a.action.decision == "fix_and_rerun"


def test_the_nvml_warning_alone_is_not_a_failure(analyze: Analyze) -> None:
    path = SET.parent / "fresh5" / "b-nccl-1066-nvml-handle-warn-init.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert all(f.rule_id != "nccl-nvml-busid-not-found" for f in a.findings)


def test_eight_srun_tasks_each_starting_deepspeed_clash_with_themselves(analyze: Analyze) -> None:
    a = _run(analyze, "s-deepspeed-3916-srun-8-tasks-eaddrinuse-29600.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "dist-address-in-use"
    assert a.root_cause.failure_class == "dist.address_in_use"
    facts = _facts(a)
    assert (facts["bind_port"], facts["slurm_ntasks_per_node"]) == (29600, 8)
    assert facts["per_node_launcher"] == "deepspeed" and facts["slurm_launcher_per_task"] is True
    text = a.root_cause.remediation
    assert "8 launchers start on every node" in text and "port 29600" in text
    assert "`--ntasks-per-node=1`" in text and "changing the port alone" in text
    # neither a new port nor a leftover process is the fix here
    assert "deepspeed --master_port <free port>" not in text
    assert "Port 29600 is taken on this host" not in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    assert "whatever the port" in " ".join(a.action.why)
