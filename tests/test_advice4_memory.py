"""Memory advice of the fourth blind set (tests/corpus/advice4): a vLLM run recognised from how the
user started it gets the engine's levers (not a trainer's), other processes are read from torch
1.x's numbers, fp32 weights are named, SGLang's weights decide between the fraction and "the model
does not fit", and OpenRLHF's launch flags give its own steps and patches."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from tests.conftest import ROOT

RULES = ROOT / "rules"
OOM = "cuda/cuda-out-of-memory"
TRAINER = ("a smaller micro batch", "activation recomputation", "optimizer-state offload")


@pytest.fixture(scope="module")
def compiled() -> CompiledLibrary:
    return CompiledLibrary(load_library(RULES), engine="regex")


def _advice(compiled: CompiledLibrary, path: Path) -> tuple[str, str, str | None]:
    sources, _ = collect_sources([str(path)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None, path
    patches = " ".join(str(p) for p in a.root_cause.patches)
    framework = a.framework.name if a.framework else None
    return a.root_cause.rule_id, a.root_cause.remediation + "\n" + patches, framework


def _fixture(name: str) -> Path:
    return RULES / f"{OOM}.{name}.log"


def test_vllm_script_with_other_processes_gets_the_utilization_that_fits(compiled: CompiledLibrary) -> None:
    rule, text, framework = _advice(compiled, _fixture("match-vllm-other-processes"))
    assert rule == "cuda-out-of-memory" and framework == "vllm"
    assert "gpu_memory_utilization=0.55" in text, "44.56 GiB less ~16 GiB held by others: 0.55 of the GPU"
    assert "other processes already hold about 16.1 GiB" in text
    assert "leaves about 16.1 GiB held outside this process's allocator" in text
    for word in TRAINER:
        assert word not in text, f"trainer advice for a vLLM script: {word}"
    assert "quantized" not in text, "opt-125m is tiny: the pool, not the model, is the problem"
    assert "expandable_segments" not in text


def test_vllm_fp32_weights_say_dtype_half(compiled: CompiledLibrary) -> None:
    rule, text, framework = _advice(compiled, _fixture("match-vllm-fp32"))
    assert rule == "cuda-out-of-memory" and framework == "vllm"
    assert "`dtype float`" in text and "`--dtype half`" in text
    assert "26.1 GiB for its weights alone in fp32" in text
    assert "no bf16" in text
    for word in (*TRAINER, "--max-model-len", "--gpu-memory-utilization"):
        assert word not in text, f"advice that cannot fit fp32 weights: {word}"


def test_vllm_bf16_run_gets_no_fp32_step(compiled: CompiledLibrary, tmp_path: Path) -> None:
    src = _fixture("match-vllm-fp32").read_text().replace("--dtype=float", "--dtype=bfloat16")
    log = tmp_path / "job.log"
    log.write_text(src)
    _, text, framework = _advice(compiled, log)
    assert framework == "vllm"
    assert "fp32 weights" not in text and "--dtype half" not in text
    for word in TRAINER:
        assert word not in text, f"trainer advice for a vLLM server: {word}"


def test_dtype_float_outside_vllm_is_not_read(compiled: CompiledLibrary, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "python train.py --model /m/Qwen2-7B --dtype=float\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has a total capacity"
        " of 21.67 GiB of which 4.06 MiB is free. Including non-PyTorch memory, this process has 21.65 GiB"
        " memory in use. Of the allocated memory 21.32 GiB is allocated by PyTorch, and 1018.00 KiB is"
        " reserved by PyTorch but unallocated.\n"
    )
    _, text, _ = _advice(compiled, log)
    assert "fp32 weights" not in text and "--dtype half" not in text


def test_sglang_without_weight_line_keeps_fraction_but_not_alone(compiled: CompiledLibrary) -> None:
    rule, text, framework = _advice(compiled, _fixture("match-sglang-16gb"))
    assert rule == "cuda-out-of-memory" and framework == "sglang"
    assert "Lower `--mem-fraction-static`" in text
    assert "a model much above 5B does not fit" in text
    assert "`--tp-size 2`" in text and "quantized checkpoint" in text


def test_sglang_weights_filling_the_gpu_say_the_model_does_not_fit(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    # the 16 GB OOM with SGLang's weight-loading line in front (as model_runner.py prints it)
    src = _fixture("match-sglang-16gb").read_text().splitlines()
    load = (
        "[2025-04-20 16:41:50 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16,"
        " avail mem=1.52 GB, mem usage=13.21 GB."
    )
    log = tmp_path / "job.log"
    log.write_text("\n".join([src[0], load, *src[1:]]) + "\n")
    _, text, framework = _advice(compiled, log)
    assert framework == "sglang"
    assert "SGLang's weights alone take 13.21 GB" in text and "the model does not fit this GPU" in text
    assert "Lower `--mem-fraction-static`" not in text, "no fraction leaves room beside the weights"
    assert "If a lower `--mem-fraction-static` still fails" not in text


def test_openrlhf_ppo_gets_its_flags_from_the_launch_script(compiled: CompiledLibrary) -> None:
    rule, text, framework = _advice(compiled, _fixture("match-openrlhf-ppo"))
    assert rule == "cuda-out-of-memory" and framework == "openrlhf"
    assert "`openrlhf.cli.train_ppo_ray`" in text and "`--ref_num_gpus_per_node`" in text
    assert "ZeRO stage 2" in text and "--zero_stage 3" in text
    assert "--adam_offload" in text and "--gradient_checkpointing" in text
    assert "--micro_train_batch_size 1" in text and "--micro_rollout_batch_size 2" in text
    assert "gpu_memory_utilization" not in text and "vLLM" not in text, "no vLLM engine in a non-Ray run"
    assert "expandable_segments" not in text


def test_openrlhf_flags_already_on_are_not_offered(compiled: CompiledLibrary, tmp_path: Path) -> None:
    src = _fixture("match-openrlhf-ppo").read_text()
    src = src.replace("--zero_stage 2", "--zero_stage 3").replace(
        "--bf16 \\", "--bf16 \\\n   --adam_offload \\"
    )
    src = src.replace("--micro_train_batch_size 2", "--micro_train_batch_size 1")
    log = tmp_path / "job.log"
    log.write_text(src)
    _, text, _ = _advice(compiled, log)
    assert "ZeRO stage" not in text and "--zero_stage 3" not in text
    assert "--micro_train_batch_size" not in text, "1 cannot be halved"
    assert "`--adam_offload` is not among" not in text and "--adam_offload" not in text.split("\n")[-1]
    assert "`--gradient_checkpointing` is not among" in text
    assert "--micro_rollout_batch_size 2" in text


def test_openrlhf_steps_need_openrlhf(compiled: CompiledLibrary, tmp_path: Path) -> None:
    # the same flags under another launcher: no OpenRLHF step, no OpenRLHF patch
    src = _fixture("match-openrlhf-ppo").read_text().replace("openrlhf.cli.train_ppo", "my_trainer.main")
    log = tmp_path / "job.log"
    log.write_text(src.replace("[launch.py:319:sigkill_handler]", "[launch]"))
    _, text, framework = _advice(compiled, log)
    assert framework != "openrlhf"
    assert "OpenRLHF" not in text and "--zero_stage" not in text and "--micro_rollout_batch_size" not in text
