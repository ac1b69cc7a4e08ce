"""Advice of the tenth blind set's first contact (tests/corpus/advice10): a CUDA OOM whose log says
memory grows every step, an OOM while the trainer is built with ZeRO-3 not active, SkyRL's
step-wise mini-batch assertion, a Ray memory-monitor kill with the per-worker share of host RAM,
and a second vLLM engine on a GPU the first one already holds. Each is read from the set's log
and, where the old advice must stay, from a rule fixture or a short synthetic log."""

from __future__ import annotations

from tests.advicekit import facts as _facts
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.advicekit import set_reader
from tests.conftest import ROOT, Analyze

_set = set_reader("advice10")


def _set_text(name: str) -> str:
    return (ROOT / "tests" / "corpus" / "advice10" / name).read_text()


OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"
    " of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.68 GiB memory in use. Of the"
    " allocated memory 75.10 GiB is allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.\n"
)

# 1. memory that grows from step to step: something is kept between steps, not only the sizes


def test_an_oom_whose_log_says_memory_grows_each_step_gets_the_retained_graph(analyze: Analyze) -> None:
    a = _set(analyze, "v-verifiers-661-trainer-oom-logits.log")
    text = _root(a, "cuda-out-of-memory").remediation
    assert 'The log says memory grows from step to step ("memory accumulates with each step")' in text
    assert "something is kept from one step to the next" in text
    assert "This process held 59.1 GiB of the GPU's 95.0 GiB when it asked for 37.0 GiB more" in text
    assert (
        "under `torch.no_grad()` or from `.detach()`ed tensors (an entropy or KL from detached logits)"
        in text
    )
    assert "`torch.cuda.memory_allocated()` once per step" in text
    # the near miss and the smaller micro batch stay: half of the expert's step
    assert "a smaller micro batch or fewer tokens per GPU" in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    why = a.action.why[0]
    assert "memory grows from step to step" in why and "set by the job's sizes" not in why
    assert _facts(a)["memory_grows_per_step"] == "memory accumulates with each step"


def test_other_wordings_of_growth_count_and_an_oom_without_it_keeps_the_sizes(analyze: Analyze) -> None:
    grows = analyze("GPU memory keeps increasing every iteration until it crashes:\n" + OOM)
    text = _root(grows, "cuda-out-of-memory").remediation
    assert 'memory grows from step to step ("memory keeps increasing every iteration")' in text
    # the same OOM without the statement: the sizes' verdict, no retention step
    plain = analyze(OOM)
    assert "memory grows" not in _root(plain, "cuda-out-of-memory").remediation
    assert plain.action is not None and "Memory use is set by the job's sizes" in plain.action.why[0]
    fixture = _fixture(analyze, "cuda", "cuda-out-of-memory.match-full-gpu.log")
    assert "memory grows" not in _root(fixture, "cuda-out-of-memory").remediation
    assert fixture.action is not None and "Memory use is set by the job's sizes" in fixture.action.why[0]


# 2. an OOM while the trainer is built: the model placed whole on one GPU, ZeRO-3 not active


def test_an_oom_in_trainer_construction_is_an_unsharded_model_not_a_step(analyze: Analyze) -> None:
    a = _set(analyze, "w-llamafactory-1936-zero3-not-active-oom.log")
    text = _root(a, "cuda-out-of-memory").remediation
    assert "It failed while the trainer was being built (`PairwiseTrainer` in the traceback)" in text
    assert "batch size, sequence length and gradient checkpointing do not matter yet" in text
    assert "Process 62200 holds 22.0 GiB of this GPU's 23.6 GiB (PyTorch's tensors 21.5 GiB of it)" in text
    assert "and 93.8 MiB is left" in text and "The model is not partitioned" in text
    assert "pass `--deepspeed <zero3 config>.json`" in text
    assert "Process 62201, listed with 398.0 MiB on this GPU" in text
    # no step's peak: no smaller batch, no checkpointing, no allocator setting
    assert "The peak of this step is too high" not in text
    assert "a smaller micro batch" not in text and "PYTORCH_CUDA_ALLOC_CONF=" not in text
    f = _facts(a)
    assert f["trainer_init_frame"] == "PairwiseTrainer" and f["oom_at_load"] is True
    assert f["oom_listed_gib_pid"] == 62200 and "training_step_frame" not in f


def test_trainer_construction_needs_its_frames_and_loading_keeps_its_own_step(analyze: Analyze) -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in main\n'
        "    trainer = Trainer(\n"
        '  File "/usr/lib/python3.10/site-packages/transformers/trainer.py", line 495, in __init__\n'
        "    self._move_model_to_device(model, args.device)\n"
    )
    oom = OOM.replace(
        "Including non-PyTorch memory, this process has 77.68 GiB memory in use.",
        "Process 4242 has 77.68 GiB memory in use.",
    )
    a = analyze(tb + oom)
    text = _root(a, "cuda-out-of-memory").remediation
    assert "It failed while the trainer was being built (`Trainer` in the traceback)" in text
    assert "Process 4242 holds 77.7 GiB" in text
    assert "pass `--deepspeed <zero3 config>.json`" in text  # transformers' Trainer in the traceback
    assert "The peak of this step is too high" not in text
    # no Trainer of Hugging Face or LLaMA-Factory named: no --deepspeed flag
    plain = analyze(
        tb.replace("/usr/lib/python3.10/site-packages/transformers/trainer.py", "/src/mytrainer.py") + oom
    )
    text = _root(plain, "cuda-out-of-memory").remediation
    assert "It failed while the trainer was being built" in text and "--deepspeed" not in text
    # a trainer's training loop is still a step
    step = analyze(tb.replace("line 495, in __init__", "line 1539, in train") + oom)
    text = _root(step, "cuda-out-of-memory").remediation
    assert "It failed while the trainer was being built" not in text
    assert "The peak of this step is too high" in text
    # loading the model keeps its own step
    load = _fixture(analyze, "cuda", "cuda-out-of-memory.match-load-model.log")
    text = _root(load, "cuda-out-of-memory").remediation
    assert "It failed while the model was being loaded (`load_model` in the traceback)" in text
    assert "trainer was being built" not in text and "--deepspeed" not in text


# 5. SkyRL's step-wise mini-batches: the sequences per step follow the turns


def test_skyrl_stepwise_mini_batch_assertion_is_named_with_its_numbers(analyze: Analyze) -> None:
    a = _set(analyze, "v-skyrl-1501-stepwise-minibatch-divisible.log")
    text = _root(a, "skyrl-mini-batch-not-divisible").remediation
    assert "1032 sequences reached the trainer and its mini-batches hold 512 each: 1032 = 2 x 512 + 8" in text
    assert 'Step-wise training is on (the log: "stepwise mode")' in text
    assert "this step's 1032 is 8 more than 2 x 512 = 1024" in text
    assert "The batch settings are not wrong" in text and "Upgrade SkyRL" in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    assert "Step-wise training makes the sequences of a step follow the turns" in a.action.why[0]
    assert "a config error" not in a.action.why[0]
    # without step-wise training in the log: where the count changes, not the step-wise story
    fx = _fixture(analyze, "config", "skyrl-mini-batch-not-divisible.match.log")
    text = _root(fx, "skyrl-mini-batch-not-divisible").remediation
    assert "The log does not show step-wise training" in text and "Step-wise training is on" not in text
    assert fx.action is not None and "The batch sizes do not divide" in fx.action.why[0]


# 3. a Ray memory-monitor kill with the workers' share of host memory: cut what each worker holds


def test_a_ray_kill_with_the_per_worker_share_of_host_memory_cuts_each_workers_footprint(
    analyze: Analyze,
) -> None:
    a = _set(analyze, "v-prime-59-ray-node-oom.log")
    text = _root(a, "ray-node-out-of-memory").remediation
    assert (
        "The log puts 8 worker processes at 12.1% of host memory each: 8 x 12.1% = 96.8% of the node" in text
    )
    assert "close to or past Ray's kill threshold (95% of the node's memory by default)" in text
    assert "a smaller rollout batch, CPU offload of parameters or optimizer state turned off" in text
    assert "or a node with more RAM" in text
    assert "a rollout batch of 1024 prompts with 4 responses each, at least 4096 sequences" in text
    assert "halving it (512 prompts" in text
    # host memory: no GPU-side lever
    assert "gpu_memory_utilization" not in text and "micro batch" not in text
    f = _facts(a)
    assert (f["host_mem_process_count"], f["host_mem_pct_per_process"], f["host_mem_pct_total"]) == (
        8,
        12.1,
        96.8,
    )
    # a node far from full (4 x 12.1%), and a kill without the figures: neither step
    half = analyze(
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "I see 4 PIDs in top, at 12.1% per PID before the crash.\n"
    )
    assert "of host memory each" not in _root(half, "ray-node-out-of-memory").remediation
    fx = _fixture(analyze, "ray", "ray-node-out-of-memory.match-workers.log")
    text = _root(fx, "ray-node-out-of-memory").remediation
    assert "of host memory each" not in text and "rollout batch of" not in text


# 4. a second vLLM engine on a GPU the first one holds: its fraction must cover what is in use


def test_a_second_vllm_engine_sees_the_first_ones_memory_as_its_own_peak(analyze: Analyze) -> None:
    a = _set(analyze, "w-vllm-4242-second-engine-same-gpu.log")
    f = _root(a, "vllm-kv-cache-insufficient")
    assert f.signatures == ["profile-over-budget"]
    # the captures are the engine that failed (the second profile line), not the first one
    assert (f.captures["vllm_prof_free"], f.captures["vllm_prof_total"]) == ("16070606848", "23609475072")
    assert f.first_line == 13 and [e.line for e in f.evidence] == [13]  # not the first engine's line 1
    text = f.remediation
    assert "An engine found 16.07 GB free of 23.61 GB when it profiled the GPU" in text
    assert "7.54 GB (32%) was already in use" in text
    assert "`gpu_memory_utilization` 0.2 x 23.61 GB = 4.72 GB" in text
    assert "(0.2 x 23.61 GB - its peak 3.1 GB) / 360448 bytes = the 4499 blocks it reported" in text
    assert "(7.54 + 1.62) / 23.61 = 0.388, e.g. `gpu_memory_utilization=0.4`" in text
    assert "or run each engine on its own GPU" in text
    # the generic advice for one engine is not offered: no shorter max length
    assert "Lower `max_model_len`" not in text and not f.patches
    assert _facts(a)["vllm_profile_consistent"] is True


def test_the_second_engine_needs_a_budget_below_its_use_and_numbers_that_agree(analyze: Analyze) -> None:
    log = _set_text("w-vllm-4242-second-engine-same-gpu.log")
    lines = log.splitlines(keepends=True)
    # the first engine alone: within its budget, nothing to report
    first = analyze("".join(lines[:7]))
    assert not any(x.rule_id == "vllm-kv-cache-insufficient" for x in first.findings)
    # the first engine's blocks do not follow from its numbers: no fraction computed from them
    odd = analyze(log.replace("# GPU blocks: 4499", "# GPU blocks: 3000"))
    text = _root(odd, "vllm-kv-cache-insufficient").remediation
    assert "7.54 GB (32%) was already in use" in text and "raise that engine's fraction above 32%" in text
    assert "gpu_memory_utilization=0.4" not in text and "confirms the formula" not in text
