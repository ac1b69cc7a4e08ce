"""Advice set 4, configuration and environment failures: TGI's warm-up OOM, the container runtime's
CUDA requirement, a DeepSpeed op's failed JIT build, launchers of one Slurm job clashing on a port
and a vLLM API server's HTTP port. Each step shows where the log's facts hold it, and the steps
that do not apply there stay out."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from tests.conftest import ROOT

RULES = ROOT / "rules"
CORPUS = ROOT / "tests" / "corpus" / "advice4"


@pytest.fixture(scope="module")
def compiled() -> CompiledLibrary:
    return CompiledLibrary(load_library(RULES), engine="regex")


def _advice(compiled: CompiledLibrary, path: Path) -> tuple[str, str]:
    sources, _ = collect_sources([str(path)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None, path
    patches = " ".join(str(p) for p in a.root_cause.patches)
    return a.root_cause.rule_id, a.root_cause.remediation + "\n" + patches


def _log(tmp_path: Path, text: str) -> Path:
    log = tmp_path / "job.log"
    log.write_text(text)
    return log


# --- TGI warm-up OOM ------------------------------------------------------------------------


def test_tgi_warmup_oom_gets_tgi_levers_with_the_logs_numbers(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, RULES / "cuda/tgi-warmup-out-of-memory.match.log")
    assert rule == "tgi-warmup-out-of-memory"
    assert "`--max-batch-prefill-tokens`" in text
    assert "`--max-batch-total-tokens`" in text and "`--max-input-length`" in text
    assert "needed 4.8 GiB more with 16.1 GiB already allocated on a GPU of 22.2 GiB" in text
    assert "a higher `--cuda-memory-fraction` cannot help" in text
    assert "expandable_segments" not in text, "fragmentation advice for a request larger than free memory"
    assert "--gpu-memory-utilization" not in text and "--mem-fraction-static" not in text


def test_tgi_prefill_message_names_the_prefill_tokens(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, RULES / "cuda/tgi-warmup-out-of-memory.match-prefill.log")
    assert rule == "tgi-warmup-out-of-memory"
    assert "The warm-up batch had 4096 prefill tokens" in text
    assert "already allocated" not in text, "no allocator numbers in this log"


def test_tgi_shard_traceback_with_torchs_oom_leads_with_the_tgi_rule(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    log = _log(
        tmp_path,
        "ERROR text_generation_launcher: Method Warmup encountered an error.\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.9/site-packages/text_generation_server/models/flash_causal_lm.py",'
        " line 729, in warmup\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB (GPU 0; 22.20 GiB total"
        " capacity; 19.50 GiB already allocated; 1.01 GiB free; 20.10 GiB reserved in total by PyTorch)\n"
        "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease"
        " `--max-batch-prefill-tokens`\n",
    )
    rule, text = _advice(compiled, log)
    assert rule == "tgi-warmup-out-of-memory"
    assert "The warm-up batch had 4096 prefill tokens" in text
    assert "gradient checkpointing" not in text.lower()


# --- the container runtime's CUDA requirement -------------------------------------------------


def test_container_requirement_names_required_cuda_driver_and_branch(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, CORPUS / "j-vllm-5635-container-requires-cuda124.log")
    assert rule == "cuda-driver-too-old"
    assert "needs CUDA >= 12.4" in text
    assert "host driver 530 supports CUDA up to 12.1" in text
    assert "(R550 or newer)" in text
    assert "Nothing in the image ran" in text
    assert "`NVIDIA_DISABLE_REQUIRE=1` only skips this check" in text
    assert "Install the program's build for the driver's CUDA" not in text
    assert "its branch was released with CUDA" not in text, (
        "the generic driver step repeats the container step"
    )


def test_container_requirement_go_form_reads_the_drivers_cuda(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, RULES / "cuda/cuda-driver-too-old.match-container-go.log")
    assert rule == "cuda-driver-too-old"
    assert "needs CUDA >= 13.0" in text and "supports CUDA 12.6" in text and "(R580 or newer)" in text


def test_container_requirement_beyond_the_table_names_no_branch(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    log = _log(
        tmp_path,
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.2, please update your driver\n",
    )
    rule, text = _advice(compiled, log)
    assert rule == "cuda-driver-too-old"
    assert "released with CUDA 13.2 or later" in text
    assert "(R" not in text, "no driver branch is known for that CUDA"


# --- DeepSpeed's JIT-built op ---------------------------------------------------------------------


def test_fused_adam_so_missing_points_at_the_build(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, CORPUS / "k-deepspeed-4889-fused-adam-so-missing.log")
    assert rule == "torch-extension-jit-build-failed"
    assert "rm -rf /root/.cache/torch_extensions/py39_cu121/fused_adam" in text
    assert "torch was built with CUDA 12.1" in text
    assert "`DS_BUILD_FUSED_ADAM=1 pip install deepspeed" in text
    assert "`ds_report`" in text
    assert "batch" not in text and "rank 0" not in text


def test_jit_build_outside_deepspeed_gets_no_deepspeed_keys(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    log = _log(
        tmp_path,
        "ImportError: /home/u/.cache/torch_extensions/py310_cu118/my_kernel/my_kernel.so: "
        "cannot open shared object file: No such file or directory\n",
    )
    rule, text = _advice(compiled, log)
    assert rule == "torch-extension-jit-build-failed"
    assert "torch was built with CUDA 11.8" in text
    assert "DS_BUILD" not in text and "ds_report" not in text and "torch_adam" not in text


def test_deepspeed_cuda_mismatch_names_both_versions(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, RULES / "python/torch-extension-jit-build-failed.match-cuda-mismatch.log")
    assert rule == "torch-extension-jit-build-failed"
    assert "CUDA 11.8 there, torch built with 12.1" in text


# --- ports --------------------------------------------------------------------------------------


def test_slurm_tasks_per_node_with_launchers_gets_one_launcher_per_node(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, CORPUS / "j-megatron-1371-slurm-eaddrinuse.log")
    assert rule == "dist-address-in-use"
    assert "`#SBATCH --ntasks-per-node=1`" in text
    assert "8 launchers start on every node" in text
    assert "`SLURM_NODEID`" in text
    assert "or launch on another free port" not in text
    assert "kill it if it is a leftover" not in text
    assert "give each job on a node its own one" not in text
    assert "--standalone" not in text


def test_one_task_per_node_keeps_the_port_steps(compiled: CompiledLibrary, tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        "#SBATCH --ntasks-per-node=1\n"
        "export NODE_RANK=$SLURM_NODEID\n"
        "RuntimeError: The server socket has failed to listen on any local network address. port: 12341, "
        "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use\n",
    )
    rule, text = _advice(compiled, log)
    assert rule == "dist-address-in-use"
    assert "ntasks-per-node=1`" not in text and "SLURM_PROCID" not in text
    assert "Port 12341 is taken on this host" in text


def test_vllm_api_server_port_gets_its_own_port_step(compiled: CompiledLibrary) -> None:
    rule, text = _advice(compiled, CORPUS / "j-vllm-5899-api-server-port-in-use.log")
    assert rule == "dist-address-in-use"
    assert "Port 4400 is the `--port` of the vLLM API server" in text
    assert "Give each server its own `--port`" in text
    assert "the job's MASTER_PORT" not in text and "MASTER_PORT=$((" not in text
    assert "torchrun" not in text and "--standalone" not in text
    assert "Several vLLM servers per node" not in text, "the same advice twice"
