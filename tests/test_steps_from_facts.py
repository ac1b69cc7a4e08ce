"""Steps chosen by what the log states about a death (tests/corpus/advice3: public logs): a dead
Ray actor's steps follow from Ray's exit type, detail and context lines, never a fixed checklist."""

from __future__ import annotations

from pathlib import Path

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage

ADVICE3 = Path("tests/corpus/advice3")
ADVICE4 = Path("tests/corpus/advice4")
ADVICE5 = Path("tests/corpus/advice5")


def _analysis(compiled: CompiledLibrary, path: Path):  # type: ignore[no-untyped-def]
    sources, _ = collect_sources([str(path)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


def _remediation(compiled: CompiledLibrary, name: str) -> str:
    a = _analysis(compiled, ADVICE3 / name)
    assert a.root_cause is not None
    return a.root_cause.remediation


def test_an_actor_killed_at_its_pods_memory_limit_is_sent_to_the_pod(compiled: CompiledLibrary) -> None:
    text = _remediation(compiled, "g-agentr1-33-taskrunner-k8s-memory.log")
    assert "kubectl describe pod" in text and "resources.limits.memory" in text
    # Ray's detail names the pod's limit: the node-level OOM-killer step is not the lead
    assert "vanished without a Python error" not in text


def test_a_vanished_actor_is_named_with_its_pid_and_node(compiled: CompiledLibrary) -> None:
    text = _remediation(compiled, "g-oneshotrlvr-14-workerdict-died.log")
    assert "pid 1504364 on 172.24.67.40" in text and "worker-*-1504364.err" in text
    # Ray named no pod limit here: the pod step is not the lead, the container note is a clause
    assert "exceeded its Kubernetes pod's memory limit" not in text and "says nothing of why" not in text
    assert "another rank" not in text


def test_vllms_placement_group_wait_names_its_gpus_node_and_wait(compiled: CompiledLibrary) -> None:
    text = _remediation(compiled, "h-vllm-gpustack-5181-pg-4gpu-timeout.log")
    assert "4.0 GPUs" in text and "172.16.11.65" in text and "1800 s" in text
    assert "--tensor-parallel-size" in text
    # a vLLM server has no trainer: the RL step about trainer plus rollout GPUs is not shown
    assert "trainer" not in text.lower()


def test_an_hcas_access_violation_leads_and_points_at_memory_registration(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE3 / "h-other-nccl-1710-ib-access-violation.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "nccl-ib-port-error"
    assert "node201" in a.root_cause.evidence[0].text
    assert "NCCL_NET_GDR_LEVEL=0" in a.root_cause.remediation
    assert "ibstat" not in a.root_cause.remediation.split("if it stays")[0]
    # the log already has NCCL's INFO lines: no patch asking for them
    assert not any(p.path == ["NCCL_DEBUG"] for f in a.findings for p in f.patches)


def test_vllm_v0s_kv_check_gives_its_numbers_and_the_length_that_fits(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE3 / "g-vllm-12865-kv-cache-131072.log")
    assert a.root_cause is not None
    assert "58496" in a.root_cause.remediation and "131072" in a.root_cause.remediation
    assert {p.path[0]: p.value for p in a.root_cause.patches}.get("--max-model-len") == 58496


def test_a_save_on_one_rank_only_is_named_over_the_timeout_it_caused(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE4 / "j-moss-275-save-rank0-only-nccl-timeout.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "deepspeed-save-checkpoint-not-on-every-rank"
    assert "on every rank" in a.root_cause.remediation
    assert any(f.failure_class == "nccl.collective_timeout" and f.role == "symptom" for f in a.findings)


def test_a_fake_tensor_compile_error_gets_its_own_step_not_the_cache(compiled: CompiledLibrary) -> None:
    sources, _ = collect_sources(
        [str(ADVICE4 / "k-other-modernbert-198-inductor-faketensor-dataparallel.log")]
    )
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None and a.root_cause.rule_id == "torch-compile-backend-failed"
    text = a.root_cause.remediation
    assert "FakeTensors" in text and "DataParallel" in text
    assert "TORCHINDUCTOR_CACHE_DIR" not in text


def test_an_early_collective_across_nodes_names_the_network_too(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE4 / "j-sglang-3606-two-node-first-allreduce-timeout.log")
    assert a.root_cause is not None
    assert "NCCL_SOCKET_IFNAME" in a.root_cause.remediation and "never reached it" in a.root_cause.remediation


def test_deepspeeds_overlap_comm_only_for_deepspeed_jobs(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE4 / "i-other-glm4-174-grad-norm-nan.log")
    assert a.root_cause is not None
    assert "overlap_comm" not in a.root_cause.remediation
    assert "climbed over the steps before" in a.root_cause.remediation


def test_nccl_transport_settings_the_job_sets_are_named(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE4 / "j-instructglm-3-nccl-timeout-env-overrides.log")
    assert a.root_cause is not None
    text = a.root_cause.remediation
    assert "NCCL_P2P_DISABLE=1" in text and "NCCL_SOCKET_IFNAME=eth1" in text and "defaults" in text
    assert "(300 minutes)" in text


def test_a_client_that_never_reached_the_store_gets_the_endpoint_not_a_head_count(
    compiled: CompiledLibrary,
) -> None:
    a = _analysis(compiled, ADVICE4 / "j-pytorch-107021-c10d-rdzv-connect-timeout.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "dist-rendezvous-timeout"
    text = a.root_cause.remediation
    assert "nc -zv 192.0.0.1 1234" in text
    assert "Count the ranks that started" not in text


def test_tgis_launcher_gets_its_own_port_flag_not_torchruns(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE5 / "m-tgi-1156-shard-port-29500-in-use.log")
    assert a.root_cause is not None
    text = a.root_cause.remediation
    assert "text-generation-launcher --master-port" in text
    assert "torchrun --master_port" not in text and "MASTER_PORT=$((" not in text
    assert not any(p.path == ["--standalone"] for p in a.root_cause.patches)


def test_one_process_killed_while_loading_is_not_told_about_every_rank(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE5 / "l-heretic-8-gpt-oss-120b-load-killed.log")
    assert a.root_cause is not None
    text = a.root_cause.remediation
    assert "3/15" in text and "each rank reads the whole model" not in text


def test_a_nan_grad_norm_with_a_finite_loss_is_not_sent_to_the_data(compiled: CompiledLibrary) -> None:
    a = _analysis(compiled, ADVICE5 / "l-xtuner-187-grad-norm-nan-fp16.log")
    assert a.root_cause is not None
    text = a.root_cause.remediation
    assert "(2.5128)" in text and "overflowed step" in text
    assert "inspect that batch" not in text
