"""Steps of real rules on their fixtures: a step shows where the log's facts and framework hold it,
and another framework's (or a wrong) step does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from tests.conftest import ROOT

RULES = ROOT / "rules"


@pytest.fixture(scope="module")
def compiled() -> CompiledLibrary:
    return CompiledLibrary(load_library(RULES), engine="regex")


def _advice(compiled: CompiledLibrary, fixture: str) -> tuple[str, str]:
    sources, _ = collect_sources([str(RULES / fixture)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None, fixture
    patches = " ".join(str(p) for p in a.root_cause.patches)
    return a.root_cause.rule_id, a.root_cause.remediation + "\n" + patches


def test_heads_tp_on_sglang_names_sglang_flag_and_the_sizes(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, "config/megatron-heads-not-divisible-by-tp.match-sglang.log")
    assert rule == "megatron-heads-not-divisible-by-tp"
    assert "use 4 or 2" in text
    assert "(8 also divides 16" in text
    assert "`--tp-size 4`" in text
    assert "num_query_groups" not in text, "Megatron's key shown to an SGLang server"
    assert "batch" not in text, "trainer batch advice shown to an inference server"
    assert "--tensor-parallel-size" not in text


def test_heads_tp_on_kv_heads_gives_the_divisors_only(compiled: CompiledLibrary) -> None:
    _, text = _advice(compiled, "config/megatron-heads-not-divisible-by-tp.match-kv-heads.log")
    assert "use 2 or 1" in text
    assert "also divides" not in text, "no size above 4 divides 2"
    assert "num_query_groups" not in text and "--tp-size" not in text and "batch" not in text


def test_heads_tp_numbers_step_needs_a_head_count(compiled: CompiledLibrary) -> None:
    # ColossalAI's divide(all_head_size, attention_head_size): the divisor is not a TP size
    _, text = _advice(compiled, "config/megatron-heads-not-divisible-by-tp.match-divide.log")
    assert "The check split" not in text


def test_heads_tp_on_megatron_keeps_its_wording(compiled: CompiledLibrary) -> None:
    _, text = _advice(compiled, "config/megatron-heads-not-divisible-by-tp.match.log")
    assert "use 4 or 2" in text
    assert "`num_query_groups`" in text
    assert "--tp-size" not in text, "SGLang's flag shown for a Megatron trainer's check"


def test_disk_full_outside_hf_trainer_gets_no_save_total_limit(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, "host/host-disk-full.match-torch-save.log")
    assert rule == "host-disk-full"
    assert "rotate or delete old checkpoints" in text
    assert "save_total_limit" not in text, "HF Trainer's key shown to a job that is not HF Trainer"


def test_disk_full_under_hf_trainer_names_save_total_limit(compiled: CompiledLibrary, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2385, in _save_checkpoint\n'
        "    self.save_model(output_dir, _internal_call=True)\n"
        '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 628, in save\n'
        "    _save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)\n"
        "OSError: [Errno 28] No space left on device\n"
    )
    sources, _ = collect_sources([str(log)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None and a.root_cause.rule_id == "host-disk-full"
    assert "`save_total_limit`" in a.root_cause.remediation


def test_driver_too_old_names_the_wheel_tag_of_the_drivers_cuda(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, "cuda/cuda-driver-too-old.match-colab-101.log")
    assert rule == "cuda-driver-too-old"
    assert "CUDA 10.1" in text and "+cu101" in text and "torch_stable.html" in text
    assert "cu124" not in text and "--index-url" not in text
    assert "hosted notebook" in text


def test_driver_too_old_new_driver_uses_the_index_url(compiled: CompiledLibrary) -> None:
    _, text = _advice(compiled, "cuda/cuda-driver-too-old.match.log")
    assert "CUDA 12.8" in text and "whl/cu128" in text
    assert "hosted notebook" not in text, "no notebook in this log"
    assert "cu124" not in text


def test_address_in_use_under_accelerate_names_its_port_flag(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, "dist/dist-address-in-use.match-accelerate.log")
    assert rule == "dist-address-in-use"
    assert "--main_process_port" in text
    assert "--master_port" not in text and "--standalone" not in text
    assert "ss -ltnp" in text


def test_address_in_use_without_accelerate_keeps_torchrun_advice(compiled: CompiledLibrary) -> None:
    _, text = _advice(compiled, "dist/dist-address-in-use.match-tcpstore-1x.log")
    assert "--master_port" in text
    assert "--main_process_port" not in text


def test_duplicate_rank_blames_the_rank_mapping_not_the_network(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, "nccl/nccl-duplicate-rank.match.log")
    assert rule == "nccl-duplicate-rank"
    assert "Rank 1 of 8 was claimed twice" in text
    assert "--node_rank" not in text, "no torchrun in this log"
    assert "NCCL_SOCKET_IFNAME=" not in text


def test_duplicate_rank_under_lightning_names_its_trainer_arguments(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        '  File "/opt/conda/lib/python3.9/site-packages/pytorch_lightning/trainer/trainer.py", line 650, in fit\n'
        "hpc-25-14:18569:18835 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 ranks has already checked in\n"
    )
    sources, _ = collect_sources([str(log)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None and a.root_cause.rule_id == "nccl-duplicate-rank"
    assert "num_nodes" in a.root_cause.remediation and "--ntasks-per-node" in a.root_cause.remediation


def test_settling_loss_scale_is_called_normal_and_is_no_root_cause(compiled: CompiledLibrary) -> None:
    sources, _ = collect_sources([str(RULES / "numerics/fp16-loss-scale-settling.match.log")])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is None, "a settling loss scale is not a failure"
    finding = next(f for f in a.findings if f.rule_id == "fp16-loss-scale-settling")
    assert "Nothing to fix" in finding.remediation and "from 8192 to 4096" in finding.remediation
    assert "learning rate" not in finding.remediation
    assert not any("hardware faults" in s for s in a.next_steps), "no hardware checklist for a benign log"


def test_collapsing_loss_scale_is_still_a_failure(compiled: CompiledLibrary) -> None:
    rule, _ = _advice(compiled, "numerics/fp16-loss-scale-collapse.match.log")
    assert rule == "fp16-loss-scale-collapse"
