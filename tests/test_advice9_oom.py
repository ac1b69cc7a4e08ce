"""CUDA OOM advice of the ninth blind set (tests/corpus/advice9): the wrong items fixed, each read
from the set's log and, where the old advice was right elsewhere, from a rule fixture, another
corpus log or a small synthetic log that keeps it."""

from __future__ import annotations

import pytest

from app.engine.models import Analysis, Finding
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
CORPUS = ROOT / "tests" / "corpus"
SET = CORPUS / "advice9"
RULE = "cuda-out-of-memory"


def _set(analyze: Analyze, name: str) -> Analysis:
    path = SET / name
    return analyze(path.read_bytes(), name=path.name)


def _log(analyze: Analyze, rel: str) -> Analysis:
    path = ROOT / rel
    return analyze(path.read_bytes(), name=path.name)


def _root(a: Analysis, rule_id: str = RULE) -> Finding:
    assert a.root_cause is not None and a.root_cause.rule_id == rule_id
    return a.root_cause


def _patches(f: Finding) -> dict[str, object]:
    return {".".join(p.path) if p.target == "hydra" else p.path[-1]: p.value for p in f.patches}


def _oom(requested: str, total: str, free: str, process: str, allocated: str, cached: str) -> str:
    """torch >= 2.1's allocator message with the given numbers."""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU 0 has a total "
        f"capacity of {total} of which {free} is free. Including non-PyTorch memory, this process has "
        f"{process} memory in use. Of the allocated memory {allocated} is allocated by PyTorch, and {cached} "
        "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )


ALLOCATOR_KNOBS = ("fragmentation, which expandable segments", "max_split_size_mb:128", "Upgrade torch")

# 1. a small cache beside full live tensors is the allocator's slack, not fragmentation


def test_a_small_cache_on_a_full_gpu_is_not_fragmentation_hf_flags(analyze: Analyze) -> None:
    a = _set(analyze, "u-speechgpt-49-fsdp-oom-activations.log")
    f = _root(a)
    text = f.remediation
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _patches(f)
    assert not any(k in text for k in ALLOCATOR_KNOBS), text
    assert "in a checkpoint save" not in text
    assert "live tensors hold 75.2 GiB of the 78.1 GiB" in text and "2.8 GiB (3.6%)" in text
    assert "not fragmentation" in text
    # the Hugging Face Trainer's own switches, with the log's batch and accumulation
    assert "`--gradient_checkpointing True`" in text
    assert (
        "`--per_device_train_batch_size 1` instead of 2, with 32 gradient accumulation steps instead of 16"
        in text
    )
    assert "same 32 sequences per GPU" in text


def test_a_small_cache_on_a_full_gpu_is_not_fragmentation_megatron(analyze: Analyze) -> None:
    a = _set(analyze, "u-megatron-525-gpt2-large-v100-oom.log")
    # only the reporter's prose and links name Megatron-LM: nothing Megatron prints, so no flags
    assert a.framework is None or a.framework.name != "megatron"
    f = _root(a)
    text = f.remediation
    assert not f.patches
    assert not any(k in text for k in ALLOCATOR_KNOBS), text
    assert "sits in cached blocks" not in text and "`torch.cuda.empty_cache()`" not in text
    assert "live tensors hold 28.8 GiB of the 30.0 GiB" in text and "1.2 GiB (3.8%)" in text
    assert "--recompute-activations" not in text and "--micro-batch-size" not in text
    assert "a smaller micro batch or fewer tokens per GPU, activation recomputation" in text


@pytest.mark.parametrize(
    "rel",
    [
        "tests/corpus/advice7/q-minerva-42-oom-reserved-unallocated.log",  # 37 of 60 GiB cached
        "tests/corpus/advice3/g-aria-24-vllm-worker-oom-fragmented.log",  # 6.5% cached
        "tests/corpus/advice/a-llamacookbook-949-fsdp-fragmentation.log",
        "tests/corpus/advice/a-verl-rllm93-actor-backward-fragmented.log",
        "rules/cuda/cuda-out-of-memory.match.log",  # a request larger than the whole cache
    ],
)
def test_a_large_or_sizable_cache_keeps_the_fragmentation_advice(analyze: Analyze, rel: str) -> None:
    f = _root(_log(analyze, rel))
    assert _patches(f).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    assert "fragmentation, which expandable segments" in f.remediation
    assert "not fragmentation" not in f.remediation


def test_the_share_of_the_cache_decides(analyze: Analyze) -> None:
    # speechgpt's numbers with a tenth of the reservation cached: fragmentation again
    big = _root(analyze(_oom("172.00 MiB", "79.15 GiB", "161.62 MiB", "78.98 GiB", "70.00 GiB", "8.00 GiB")))
    assert _patches(big).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    small = _root(
        analyze(_oom("172.00 MiB", "79.15 GiB", "161.62 MiB", "78.98 GiB", "75.25 GiB", "2.84 GiB"))
    )
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _patches(small) and "not fragmentation" in small.remediation
    # a request as large as all of the cache can only be served by cache and free memory combined
    whole = _root(analyze(_oom("3.00 GiB", "79.15 GiB", "2.00 GiB", "78.98 GiB", "75.25 GiB", "2.84 GiB")))
    assert _patches(whole).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    # torch <= 2.0's wording: the reserved total and its allocated part
    old = (
        "RuntimeError: CUDA out of memory. Tried to allocate 786.00 MiB (GPU 0; 31.74 GiB total capacity; "
        "{} GiB already allocated; 577.12 MiB free; 29.97 GiB reserved in total by PyTorch)\n"
    )
    assert "sits in cached blocks" not in _root(analyze(old.format("28.82"))).remediation
    assert "sits in cached blocks" in _root(analyze(old.format("24.00"))).remediation


def test_no_hf_steps_where_checkpointing_is_on_or_the_batch_is_one(analyze: Analyze) -> None:
    oom = _oom("172.00 MiB", "79.15 GiB", "161.62 MiB", "78.98 GiB", "75.25 GiB", "2.84 GiB")
    on = _root(
        analyze("torchrun train.py --per_device_train_batch_size 2 --gradient_checkpointing True\n" + oom)
    )
    assert "`--gradient_checkpointing True`" not in on.remediation
    logged = _root(
        analyze("torchrun train.py --per_device_train_batch_size 2\nGradient checkpointing enabled.\n" + oom)
    )
    assert "`--gradient_checkpointing True`" not in logged.remediation
    off = _root(
        analyze("torchrun train.py --per_device_train_batch_size 2 --gradient_checkpointing False\n" + oom)
    )
    assert "`--gradient_checkpointing True`" in off.remediation
    # an odd micro batch goes to 1, the accumulation takes the rest
    odd = _root(
        analyze("torchrun train.py --per_device_train_batch_size 3 --gradient_accumulation_steps 4\n" + oom)
    )
    assert (
        "`--per_device_train_batch_size 1` instead of 3, with 12 gradient accumulation steps instead of 4"
        in (odd.remediation)
    )
    # no launch flags, no Trainer steps
    bare = _root(analyze(oom))
    assert "Hugging Face" not in bare.remediation and "--gradient_checkpointing" not in bare.remediation
    # the rule's fixture from another public thread: batch 1, so checkpointing but no batch step
    fx = _root(_log(analyze, "rules/cuda/cuda-out-of-memory.match-hf-flags.log"))
    assert "`--gradient_checkpointing True`" in fx.remediation
    assert "gradient accumulation steps instead of" not in fx.remediation


def test_megatron_recomputation_follows_what_the_dump_shows(analyze: Analyze) -> None:
    dump = "------------------------ arguments ------------------------\n  recompute_granularity ........... {}\n"
    oom = _oom("786.00 MiB", "31.74 GiB", "577.12 MiB", "31.00 GiB", "28.82 GiB", "1.15 GiB")
    full = _root(analyze(dump.format("full") + oom)).remediation
    assert "--recompute-activations" not in full and "--recompute-granularity" not in full
    sel = _root(analyze(dump.format("selective") + oom)).remediation
    assert (
        "selective recomputation is on (`selective`)" in sel
        and "`--recompute-activations` (selective" not in sel
    )
    none = _root(analyze(dump.format("None") + oom)).remediation
    assert "`--recompute-activations` (selective" in none
    # prose that names Megatron is no Megatron job
    prose = analyze("why does Megatron need so much memory?\n" + oom)
    assert prose.framework is None or prose.framework.name != "megatron"
    assert "--recompute-activations" not in _root(prose).remediation


# 2. an OOM while the model loads: the weights, not a step's activations


def test_an_oom_while_loading_the_model_is_about_the_weights(analyze: Analyze) -> None:
    a = _set(analyze, "t-llamafactory-9510-oom-at-load-model.log")
    f = _root(a)
    text = f.remediation
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _patches(f)
    assert "not the step's peak" not in text and "a smaller micro batch" not in text
    assert "activation recomputation" not in text and "fewer tokens" not in text
    assert "It failed while the model was being loaded (`load_model` in the traceback)" in text
    assert "ZeRO-3" in text and "quantized" in text and "add GPUs or nodes" in text
    assert "oom_allocated_by_pytorch 77.9 GiB; oom_total 79.3 GiB" in text


def test_a_training_oom_after_loading_keeps_the_step_advice(analyze: Analyze) -> None:
    oom = _oom("56.00 MiB", "79.33 GiB", "49.81 MiB", "79.27 GiB", "77.92 GiB", "150.18 MiB")
    loading = (
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/transformers/modeling_utils.py", line 3754, in from_pretrained\n'
        "    ) = cls._load_pretrained_model(\n"
    )
    assert "It failed while the model was being loaded" in _root(analyze(loading + oom)).remediation
    # the same frame with a training step under it: the step's peak
    step = loading + '  File "/opt/trainer.py", line 12, in training_step\n    loss.backward()\n'
    text = _root(analyze(step + oom)).remediation
    assert "It failed while the model was being loaded" not in text and "not the step's peak" in text
    # a pasted script that loads the model, and no traceback: nothing says where it failed
    script = "def main():\n    model = AutoModelForCausalLM.from_pretrained(args.model)\n"
    text = _root(analyze(script + oom)).remediation
    assert "It failed while the model was being loaded" not in text and "not the step's peak" in text


# 3. verl with every role's state on 22 GB cards: offload, the rollout's share, GRPO


def test_verl_without_offload_gets_its_offload_keys_not_shorter_sequences(analyze: Analyze) -> None:
    a = _set(analyze, "t-verl-1141-a10-actor-critic-oom.log")
    assert a.framework is not None and a.framework.name == "verl"
    f = _root(a)
    text = f.remediation
    assert "Train on shorter sequences" not in text and "sets the activations" not in text
    assert "`actor_rollout_ref.actor.fsdp_config.param_offload=True`" in text
    assert "`critic.model.fsdp_config.optimizer_offload=True`" in text
    assert "`algorithm.adv_estimator=grpo`" in text and "`critic.model.path=$llama3b_path`" in text
    assert "`actor_rollout_ref.rollout.gpu_memory_utilization=0.4`" in text and "lower it to 0.3" in text
    assert "verl_gpus_per_node 4; oom_total 22.0 GiB" in text
    p = _patches(f)
    assert p["actor_rollout_ref.actor.fsdp_config.param_offload"] == "True"
    assert p["actor_rollout_ref.ref.fsdp_config.param_offload"] == "True"
    assert p["critic.model.fsdp_config.param_offload"] == "True"
    assert p["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.3
    assert "PYTORCH_CUDA_ALLOC_CONF" not in p


def test_verl_with_offload_on_or_without_a_critic(analyze: Analyze) -> None:
    log = (SET / "t-verl-1141-a10-actor-critic-oom.log").read_text()
    offloaded = log.replace(
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4\\",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4\\\nactor_rollout_ref.actor.fsdp_config.param_offload=True\\",
    )
    f = _root(analyze(offloaded))
    assert "fsdp_config" not in f.remediation and not any("fsdp_config" in k for k in _patches(f))
    # with the states offloaded, one sequence per micro batch is what is left to cut
    assert "Train on shorter sequences" in f.remediation
    grpo = _root(analyze(log.replace("algorithm.kl_ctrl.kl_coef=0.001", "algorithm.adv_estimator=grpo")))
    assert "`actor_rollout_ref.actor.fsdp_config.param_offload=True`" in grpo.remediation
    assert "critic.model.fsdp_config" not in grpo.remediation
    assert not any(k.startswith("critic.") for k in _patches(grpo))
    # another framework's job with one sequence per micro batch keeps the sequence-length step
    s1 = _root(_log(analyze, "tests/corpus/advice8/s-s1-61-fsdp-32b-oom-block32768.log"))
    assert "Train on shorter sequences (`--block_size=32768`" in s1.remediation
    assert "fsdp_config" not in s1.remediation


# 4. slime: torch_memory_saver failing inside the training call is the trainer's, not the rollout's


def test_slime_memory_saver_oom_in_training_lowers_sglangs_share(analyze: Analyze) -> None:
    a = _set(analyze, "t-slime-274-memory-saver-oom.log")
    assert a.framework is not None and a.framework.name == "slime"
    f = _root(a)
    text = f.remediation
    assert "mapped its released memory back" not in text
    assert "before the rollout starts" not in text
    assert "It failed in the training phase (`actor_model.async_train` in the traceback)" in text
    assert "`--sglang-mem-fraction-static`" in text and "about 0.5" in text
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _patches(f)


def test_slime_share_patch_and_the_engine_resume_case(analyze: Analyze) -> None:
    log = (SET / "t-slime-274-memory-saver-oom.log").read_text()
    for given, lower in (("0.7", 0.5), ("0.5", 0.4)):
        f = _root(analyze(f"python train.py --colocate --sglang-mem-fraction-static {given}\n" + log))
        assert _patches(f)["--sglang-mem-fraction-static"] == lower
        assert f"from {given} to {lower}" in f.remediation and "about 0.5" not in f.remediation
    # the engine resuming its memory (verl + SGLang, no training call): the rollout-side reading stays
    fx = _root(_log(analyze, "rules/cuda/cuda-out-of-memory.match-memory-saver.log"))
    assert "mapped its released memory back" in fx.remediation
    assert "It failed in the training phase" not in fx.remediation
