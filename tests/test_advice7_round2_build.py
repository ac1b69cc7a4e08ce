"""Advice of the seventh blind set's second round (tests/corpus/advice7, round-2/review.yaml):
builds, versions and unknowns. Each fix is read from the set's log; where the old advice was right
elsewhere, a rule fixture or a small synthetic log keeps it."""

from __future__ import annotations

from tests.advicekit import facts as _facts
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.advicekit import set_reader
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
_set = set_reader("advice7")


# 1. flash-attn against an NGC container's pre-release torch: build it, do not fetch the wheel

_FORCE = (
    "FLASH_ATTENTION_FORCE_BUILD=TRUE MAX_JOBS=4 pip install --no-build-isolation --no-cache-dir flash-attn"
)


def test_flash_attn_on_a_prerelease_torch_is_built_with_force_build(analyze: Analyze) -> None:
    a = _set(analyze, "q-flashattn-784-undefined-symbol-ngc.log")
    text = _root(a, "python-extension-undefined-symbol").remediation
    assert _facts(a)["torch_version"] == "2.2.0a0+81ea7a4"
    assert "pre-release build, 2.2.0a0+81ea7a4" in text and _FORCE in text
    assert "picks its wheel by torch 2.2 alone" in text
    # the plain reinstall (a matching wheel, or --no-build-isolation without the switch) is gone
    assert "the prebuilt wheel whose name matches the torch version" not in text
    fx = _fixture(analyze, "python", "python-extension-undefined-symbol.match-prerelease.log")
    assert _FORCE in _root(fx, "python-extension-undefined-symbol").remediation


def test_flash_attn_reinstalled_with_pip_in_an_ngc_image_is_built_not_blamed_on_a_shadow_torch(
    analyze: Analyze,
) -> None:
    a = _fixture(analyze, "python", "python-extension-undefined-symbol.match-ngc-pip.log")
    text = _root(a, "python-extension-undefined-symbol").remediation
    assert "`nvcr.io/nvidia/pytorch:23.11-py3`" in text and _FORCE in text
    assert "a different torch is imported" not in text


def test_released_torch_and_the_image_shadow_keep_their_steps(analyze: Analyze) -> None:
    # a released torch ("2.4.0+cu121" read whole): the matching-wheel reinstall stays, no force build
    log = (
        "torch 2.4.0+cu121\n"
        "ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so:"
        " undefined symbol: _ZN3c104cuda9SetDeviceEi\n"
    )
    a = analyze(log)
    text = _root(a, "python-extension-undefined-symbol").remediation
    assert _facts(a)["torch_version"] == "2.4.0+cu121" and "torch_prerelease" not in _facts(a)
    assert "the prebuilt wheel whose name matches the torch version" in text
    assert "FLASH_ATTENTION_FORCE_BUILD" not in text
    # an NGC image's own extension with no pip install in the log: the shadowing torch step stays
    ngc = _fixture(analyze, "python", "python-extension-undefined-symbol.match-ngc-singularity.log")
    assert "a different torch is imported" in _root(ngc, "python-extension-undefined-symbol").remediation


def test_another_extension_on_a_nightly_torch_is_rebuilt_without_flash_attn_switches(
    analyze: Analyze,
) -> None:
    log = (
        "PyTorch version: 2.6.0.dev20241112+cu124\n"
        "ImportError: /opt/venv/lib/python3.11/site-packages/apex/amp_C.cpython-311-x86_64-linux-gnu.so:"
        " undefined symbol: _ZN3c106detail14torchCheckFailEPKcS2_jRKSs\n"
    )
    a = analyze(log)
    text = _root(a, "python-extension-undefined-symbol").remediation
    assert (
        "pre-release build, 2.6.0.dev20241112+cu124" in text and "Rebuild the extension from source" in text
    )
    assert "FLASH_ATTENTION_FORCE_BUILD" not in text
    assert "the prebuilt wheel whose name matches the torch version" not in text


# 2. DeepSpeed 0.9.0's batch check: the release, and which factor the check lost


def test_deepspeed_090_batch_check_is_the_release_not_a_config_error(analyze: Analyze) -> None:
    a = _set(analyze, "q-deepspeed-3228-batch-assert-zero2-regression.log")
    text = _root(a, "deepspeed-batch-size-mismatch").remediation
    assert "pin `deepspeed==0.8.3` or move to 0.9.1 or later" in text and "DeepSpeed #3324" in text
    assert "the accumulation 1 in the message is the config's" in text
    assert "Do not shrink `train_batch_size`" in text
    # the old unconditioned "the batch fits 8 processes" reading is gone
    assert "the batch fits 8 processes" not in text
    assert a.action is not None and a.action.decision == "fix_and_rerun" and a.action.basis == "facts"
    why = " ".join(a.action.why)
    assert "DeepSpeed 0.9.0 counted a world size of 1" in why and "a config error" not in why


def test_an_accumulation_the_config_asks_for_is_named_as_the_lost_factor(analyze: Analyze) -> None:
    a = _fixture(analyze, "config", "deepspeed-batch-size-mismatch.match-accumulation.log")
    text = _root(a, "deepspeed-batch-size-mismatch").remediation
    assert "asks for 4 gradient accumulation steps and DeepSpeed was given 1" in text
    assert "256 = 8 x 4 x 8" in text and "make them agree on 4" in text
    assert "0.9.0" not in text and "DeepSpeed counted 1" not in text
    # the same on DeepSpeed 0.9.0: the accumulation, not the release
    log = (RULES / "config" / "deepspeed-batch-size-mismatch.match-accumulation.log").read_text()
    b = analyze("DeepSpeed info: version=0.9.0\n" + log)
    assert "pin `deepspeed==0.8.3`" not in _root(b, "deepspeed-batch-size-mismatch").remediation
    assert b.action is not None and "counted a world size of 1" not in " ".join(b.action.why)


def test_a_batch_mismatch_on_another_release_keeps_the_config_verdict(analyze: Analyze) -> None:
    a = _fixture(analyze, "config", "deepspeed-batch-size-mismatch.match.log")
    text = _root(a, "deepspeed-batch-size-mismatch").remediation
    assert 'Set `train_batch_size` to "auto"' in text and "0.8.3" not in text
    assert a.action is not None and "a config error that repeats" in " ".join(a.action.why)


# 3. CUDA 802 under NCCL: no peer-access or NCCL-init OOM bullets


def test_cuda_802_gets_no_p2p_or_oom_bullets(analyze: Analyze) -> None:
    a = _set(analyze, "p-llamafactory-8968-b200-cuda-802-fabricmanager.log")
    text = _root(a, "nccl-unhandled-cuda-error").remediation
    assert "Fabric Manager" in text
    assert "NCCL_P2P_DISABLE" not in text and "--ipc=host" not in text and "NCCL_CUMEM_ENABLE" not in text
    assert "Out of memory at NCCL init" not in text and "Rerun with `NCCL_DEBUG=INFO`" not in text


def test_p2p_and_oom_failures_under_nccl_keep_their_bullets(analyze: Analyze) -> None:
    p2p = _fixture(analyze, "nccl", "nccl-unhandled-cuda-error.match-p2p-ipc.log")
    text = _root(p2p, "nccl-unhandled-cuda-error").remediation
    assert "`peer access is not supported between these two devices`" in text
    assert "NCCL_P2P_DISABLE=1" in text and "--ipc=host" in text and "Out of memory at NCCL init" not in text
    oom = _fixture(analyze, "nccl", "nccl-unhandled-cuda-error.match.log")
    f = next(f for f in oom.findings if f.rule_id == "nccl-unhandled-cuda-error")
    assert "Out of memory at NCCL init" in f.remediation and "NCCL_P2P_DISABLE" not in f.remediation
    # no Cuda failure line at all: both readings stay, phrased as conditions, and NCCL_DEBUG=INFO
    bare = analyze(
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275,"
        " unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
    )
    t = _root(bare, "nccl-unhandled-cuda-error").remediation
    assert "If the Cuda failure NCCL then prints is `invalid argument`" in t
    assert "Out of memory at NCCL init" in t and "Rerun with `NCCL_DEBUG=INFO`" in t


# 4. vLLM V0's max-seq-len check with its count cut off, and NUM_GPUs beside a TP of 1


def test_vllm_max_seq_len_message_cut_before_its_count_is_named(analyze: Analyze) -> None:
    a = _set(analyze, "q-apiforopenllm-259-vllm-kv-cache-tp1.log")
    text = _root(a, "vllm-kv-cache-insufficient").remediation
    assert "One request at the max length 32768 does not fit" in text
    assert "set `max_model_len` to at most that N" in text
    assert "Set TENSOR_PARALLEL_SIZE=2" in text and "NUM_GPUs=2 but TENSOR_PARALLEL_SIZE=1" in text
    assert "at most the length vLLM estimates" not in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"


def test_vllm_v0_with_its_count_and_tp_that_uses_every_gpu_keep_their_steps(analyze: Analyze) -> None:
    a = _fixture(analyze, "vllm", "vllm-kv-cache-insufficient.match-v0.log")
    text = _root(a, "vllm-kv-cache-insufficient").remediation
    assert "The KV cache holds 21088 tokens" in text and "this log cuts it off" not in text
    log = (
        "NUM_GPUs=2\nTENSOR_PARALLEL_SIZE=2\n"
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be"
        " stored in KV cache (15248). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
        " when initializing the engine.\n"
    )
    b = analyze(log)
    t = _root(b, "vllm-kv-cache-insufficient").remediation
    assert "The KV cache holds 15248 tokens" in t and "Set TENSOR_PARALLEL_SIZE" not in t
