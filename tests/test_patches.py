"""Expressions and config patches: computed values, dialects, diffs of the user's own config."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.models import Analysis
from app.engine.pipeline.expr import ExprError, Missing, Scope, evaluate, render_template
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import PatchSpec
from app.engine.pipeline.patches import ConfigView, compute_patches, config_diff, render_patch
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from app.errors import ConfigFileError
from tests.conftest import ROOT


def test_expressions_compute_from_captures_and_facts() -> None:
    scope = Scope(captures={"chunks": "64", "batch": "32"}, facts={"max_tokens_per_gpu": 9216})
    assert render_template("{chunks}", scope) == 64
    assert render_template("{max(256, max_tokens_per_gpu // 2)}", scope) == 4608
    assert render_template("{ceil_div(chunks, batch) * batch}", scope) == 64
    assert render_template("{pow2_at_least(batch + 1)}", scope) == 64
    assert render_template("batch {batch} -> {chunks}", scope) == "batch 32 -> 64"


@pytest.mark.parametrize(
    "source",
    ["__import__('os').system('true')", "().__class__", "x[0]", "[a for a in b]", "open('f')", "lambda: 1"],
)
def test_expressions_reject_anything_outside_the_whitelist(source: str) -> None:
    with pytest.raises((ExprError, Missing)):
        evaluate(source, Scope(captures={"x": "1", "b": "2"}))


def test_missing_name_raises_missing() -> None:
    with pytest.raises(Missing) as info:
        evaluate("max_tokens_per_gpu // 2", Scope())
    assert info.value.name == "max_tokens_per_gpu"


def _spec(**kw: object) -> PatchSpec:
    return PatchSpec.model_validate({"why": "because", **kw})


def test_missing_value_is_shown_with_a_note_not_dropped() -> None:
    (p,), problems = compute_patches(
        [_spec(target="cli", path=["--max-tokens-per-gpu"], value="{max_tokens_per_gpu // 2}")],
        scope=Scope(),
        config=None,
    )
    assert not p.computed and "max_tokens_per_gpu" in (p.note or "")
    assert p.rendered == "--max-tokens-per-gpu '<?>'"
    assert problems == []


def test_when_guards_a_patch() -> None:
    spec = _spec(target="hydra", path=["models", "policy", "enforce_eager"], value=True, when="tp > 1")
    assert compute_patches([spec], scope=Scope(captures={"tp": "1"}), config=None)[0] == []
    (p,), _ = compute_patches([spec], scope=Scope(captures={"tp": "4"}), config=None)
    assert p.rendered == "models.policy.enforce_eager=True"
    assert compute_patches([spec], scope=Scope(), config=None)[0] == []  # tp unknown: not offered


def test_renderings_per_dialect() -> None:
    (y, h, c, e, off), _ = compute_patches(
        [
            _spec(
                target="yaml", path=["actor_train", "training_args", "per_device_train_batch_size"], value=2
            ),
            _spec(target="hydra", path=["runtime_args", "train_micro_batch_size"], value="{4 // 2}"),
            _spec(target="cli", path=["--sglang-mem-fraction-static"], value="0.7"),
            _spec(target="env", path=["TORCHINDUCTOR_FORCE_DISABLE_CACHES"], value="1"),
            _spec(target="cli", path=["--colocate"], op="flag_off"),
        ],
        scope=Scope(),
        config=None,
    )
    assert y.rendered == "actor_train:\n  training_args:\n    per_device_train_batch_size: 2"
    assert h.rendered == "runtime_args.train_micro_batch_size=2"
    assert c.rendered == "--sglang-mem-fraction-static 0.7"
    assert e.rendered == "export TORCHINDUCTOR_FORCE_DISABLE_CACHES=1"
    assert off.rendered == "remove --colocate"


ROLL_YAML = """\
# ROLL pipeline config
exp_name: grpo-qwen  # keep this comment
rollout_batch_size: 32   # prompts per step
num_return_sequences_in_group: 8
actor_train:
  device_mapping: list(range(0,8))
  training_args:
    per_device_train_batch_size: 1
"""


def test_yaml_diff_keeps_comments_and_order(tmp_path: Path) -> None:
    cfg = tmp_path / "roll.yaml"
    cfg.write_text(ROLL_YAML)
    view = ConfigView.load(cfg)
    assert view.find_leaf("rollout_batch_size") == 32
    assert view.get_path(["actor_train", "device_mapping"]) == "list(range(0,8))"
    patches, _ = compute_patches(
        [
            _spec(target="yaml", path=["rollout_batch_size"], value="{chunks}"),
            _spec(target="yaml", path=["system_envs", "NVTE_TORCH_COMPILE"], value="'0'"),
        ],
        scope=Scope(captures={"chunks": "64"}, config=view),
        config=view,
    )
    diff = config_diff(view, patches)
    assert diff is not None
    assert "-rollout_batch_size: 32   # prompts per step" in diff
    assert "+rollout_batch_size: 64   # prompts per step" in diff
    assert "+system_envs:" in diff
    assert "keep this comment" not in "".join(ln for ln in diff.splitlines() if ln.startswith(("-", "+")))
    assert cfg.read_text() == ROLL_YAML  # the user's file is never written


SLIME_SH = """\
#!/bin/bash
python train.py \\
   --actor-num-nodes 1 \\
   --max-tokens-per-gpu 9216 \\
   --use-dynamic-batch-size
"""


def test_launch_script_flags_are_read_and_edited(tmp_path: Path) -> None:
    cfg = tmp_path / "run.sh"
    cfg.write_text(SLIME_SH)
    view = ConfigView.load(cfg)
    assert view.kind == "script"
    scope = Scope(config=view)
    assert scope.lookup("max_tokens_per_gpu") == 9216
    patches, _ = compute_patches(
        [
            _spec(target="cli", path=["--max-tokens-per-gpu"], value="{max_tokens_per_gpu // 2}"),
            _spec(target="env", path=["TORCHINDUCTOR_FORCE_DISABLE_CACHES"], value="1"),
        ],
        scope=scope,
        config=view,
    )
    diff = config_diff(view, patches)
    assert diff is not None
    assert "+   --max-tokens-per-gpu 4608 \\" in diff
    assert "+export TORCHINDUCTOR_FORCE_DISABLE_CACHES=1" in diff


def test_hydra_override_adds_plus_for_keys_the_config_lacks(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("models:\n  policy:\n    tensor_model_parallel_size: 2\n")
    view = ConfigView.load(cfg)
    (p,), _ = compute_patches(
        [_spec(target="hydra", path=["models", "policy", "enforce_eager"], value=True)],
        scope=Scope(),
        config=view,
    )
    assert p.rendered == "+models.policy.enforce_eager=True"
    assert render_patch(p.model_copy(update={"op": "unset"})) == "~models.policy.enforce_eager"


def test_unparseable_config_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n  b: }")
    with pytest.raises(ConfigFileError, match="bad.yaml"):
        ConfigView.load(bad)
    with pytest.raises(ConfigFileError):
        ConfigView.load(tmp_path / "missing.yaml")


def test_ray_job_scripts_get_env_in_runtime_env_not_export(tmp_path: Path) -> None:
    cfg = tmp_path / "submit.sh"
    cfg.write_text("ray job submit --address=http://127.0.0.1:8265 -- python3 train.py --lr 1e-6\n")
    view = ConfigView.load(cfg)
    patches, _ = compute_patches(
        [_spec(target="env", path=["TORCHINDUCTOR_FORCE_DISABLE_CACHES"], value="1")],
        scope=Scope(),
        config=view,
    )
    diff = config_diff(view, patches)
    assert diff is not None and "export" not in diff
    assert (
        """+ray job submit --runtime-env-json='{"env_vars": {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}}' --address"""
        in diff
    )
    cfg.write_text(
        """ray job submit --runtime-env-json='{"pip": ["x"], "env_vars": {"A": "1"}}' -- python3 t.py\n"""
    )
    view = ConfigView.load(cfg)
    diff = config_diff(view, patches)
    assert diff is not None
    assert """{"pip": ["x"], "env_vars": {"A": "1", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}}""" in diff


def test_a_computed_value_that_cannot_work_is_not_offered() -> None:
    spec = PatchSpec.model_validate(
        {
            "target": "env",
            "path": ["GPU_MEM"],
            "value": "{min(0.95, round(util + 0.1, 2))}",
            "valid": "value > util",
            "why": "more room for the KV cache",
        }
    )
    ok, problems = compute_patches([spec], scope=Scope(captures={"util": "0.8"}), config=None)
    assert [p.value for p in ok] == [0.9] and problems == []
    # already at the ceiling: raising it is impossible, so no patch (and the reason is kept)
    none, problems = compute_patches([spec], scope=Scope(captures={"util": "0.95"}), config=None)
    assert none == [] and "fails `value > util`" in problems[0]
    inf = PatchSpec.model_validate({"target": "env", "path": ["X"], "value": "{a / b}", "why": "ratio"})
    none, problems = compute_patches([inf], scope=Scope(captures={"a": "1e308", "b": "1e-308"}), config=None)
    assert none == [] and "not a number" in problems[0]


def test_framework_patches_appear_only_for_the_detected_framework() -> None:
    from app.engine.pipeline.patches import select_specs

    general = PatchSpec.model_validate(
        {"target": "env", "path": ["NCCL_DEBUG"], "value": "WARN", "why": "more detail"}
    )
    slime = PatchSpec.model_validate(
        {
            "target": "cli",
            "path": ["--sglang-mem-fraction-static"],
            "value": "0.7",
            "why": "headroom",
            "frameworks": ["slime"],
        }
    )
    assert select_specs([general, slime], []) == [general]  # a plain PyTorch job: no SGLang flag
    assert select_specs([general, slime], ["pytorch"]) == [general]
    assert select_specs([general, slime], ["slime", "sglang"]) == [general, slime]


def _report(compiled: CompiledLibrary, text: str, tmp_path: Path) -> Analysis:
    log = tmp_path / "job.log"
    log.write_text(text)
    sources, _ = collect_sources([str(log)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


def _patched(a: Analysis) -> dict[str, object]:
    return {p.path[-1]: p.value for f in a.findings for p in f.patches}


IB_ERROR = (ROOT / "rules" / "hardware" / "nccl-ib-completion-error.match.log").read_text()
# real step lines of the 2-GPU corpus trainer (tests/corpus/gpu/straggler-timeout)
STEPS = "".join(
    line + "\n"
    for line in (ROOT / "tests/corpus/gpu/straggler-timeout/console.log").read_text().splitlines()
    if " trainer: step " in line
)


def test_a_longer_ib_timeout_only_after_the_job_had_been_training(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    assert STEPS.count("\n") >= 10
    at_start = _report(compiled, IB_ERROR, tmp_path)
    assert at_start.root_cause is not None and at_start.root_cause.captures.get("wc_status") == "12"
    assert "NCCL_IB_TIMEOUT" not in _patched(at_start), "status 12 before any step: an unreachable peer"
    mid_run = _report(compiled, STEPS + IB_ERROR, tmp_path)
    assert _patched(mid_run).get("NCCL_IB_TIMEOUT") == "22", "status 12 after training ran: congestion"


def test_a_report_patches_each_setting_once_the_root_causes_way(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    # nccl-remote-error (a symptom here) asks for NCCL_DEBUG=WARN; the IB error needs INFO (the
    # excerpt without NCCL's INFO lines: where they are in the log, INFO is on already)
    warn_only = "".join(line + "\n" for line in IB_ERROR.splitlines() if "NCCL INFO" not in line)
    a = _report(compiled, warn_only, tmp_path)
    keys = [(p.target, tuple(p.path)) for f in a.findings for p in f.patches]
    assert len(keys) == len(set(keys))
    assert a.root_cause is not None
    assert {p.path[-1]: p.value for p in a.root_cause.patches}["NCCL_DEBUG"] == "INFO"
    assert _patched(a)["NCCL_DEBUG"] == "INFO"
    assert "NCCL_DEBUG" not in _patched(_report(compiled, IB_ERROR, tmp_path))


def test_the_ray_runtime_env_form_only_for_a_job_on_ray(compiled: CompiledLibrary, tmp_path: Path) -> None:
    from app.render.markdown import render_markdown

    oom = (ROOT / "rules" / "cuda" / "cuda-out-of-memory.match.log").read_text()  # a verl worker's
    on_ray = _report(compiled, oom, tmp_path)
    assert "PYTORCH_CUDA_ALLOC_CONF" in _patched(on_ray)
    assert "As a Ray `runtime_env`" in render_markdown(on_ray)
    # the message alone, as a plain torchrun job prints it (no Ray prefix, no verl paths)
    plain = "".join(line.split(") ", 1)[-1] + "\n" for line in oom.splitlines() if "OutOfMemoryError" in line)
    torchrun = _report(compiled, plain, tmp_path)
    assert "PYTORCH_CUDA_ALLOC_CONF" in _patched(torchrun)
    assert "As a Ray `runtime_env`" not in render_markdown(torchrun), "Ray advice for a job not on Ray"


def _root_remediation(compiled: CompiledLibrary, path: Path) -> str:
    sources, _ = collect_sources([str(path)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None and a.root_cause.failure_class == "cuda.out_of_memory"
    return a.root_cause.remediation


def test_oom_steps_follow_the_numbers_of_its_message(compiled: CompiledLibrary) -> None:
    gpu = ROOT / "tests" / "corpus" / "gpu"
    # another process holds 43.5 GiB of rank 1's GPU (tests/corpus/generators/gpu/oom_colocated.py)
    colocated = _root_remediation(compiled, gpu / "oom-colocated" / "console.log")
    assert "- Other processes hold 45.7 GiB of this GPU" in colocated
    assert "(the log: oom_total 79.2 GiB; oom_free 31.9 GiB; oom_this_process 1.6 GiB)" in colocated
    assert "The request alone" not in colocated
    # 200 GiB asked of a 139.8 GiB GPU: no setting helps; others hold little
    too_big = _root_remediation(compiled, gpu / "cuda-oom" / "console.log")
    assert "- The request alone (200.0 GiB) is larger than this GPU (139.8 GiB)" in too_big
    assert "Other processes hold" not in too_big


def test_a_full_disk_is_advised_by_what_was_writing(compiled: CompiledLibrary, tmp_path: Path) -> None:
    def steps(path: Path) -> str:
        sources, _ = collect_sources([str(path)])
        a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
        assert a.root_cause is not None and a.root_cause.failure_class == "host.disk_full"
        return a.root_cause.remediation

    ckpt = steps(ROOT / "rules" / "host" / "host-disk-full.match.log")
    assert "- It was saving a checkpoint" in ckpt and "datasets cache" not in ckpt
    # huggingface/datasets writing its Arrow cache (LlamaFactory#275): no checkpoint advice
    cache = steps(ROOT / "tests" / "corpus" / "advice" / "d-llamafactory-275-datasets-cache-enospc.log")
    assert "- It was writing the datasets cache" in cache and "checkpoint" not in cache
    bare = tmp_path / "enospc.log"
    bare.write_text("OSError: [Errno 28] No space left on device\n")
    unknown = steps(bare)
    assert "- If it was saving a checkpoint" in unknown and "It was saving" not in unknown


def _analysed(compiled: CompiledLibrary, path: Path) -> Analysis:
    sources, _ = collect_sources([str(path)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


ADVICE = ROOT / "tests" / "corpus" / "advice"


def test_a_socket_failure_is_not_given_infiniband_advice(compiled: CompiledLibrary) -> None:
    # NCCL's bootstrap cannot reach the other node: "returned 113(No route to host)" (sglang#3820)
    a = _analysed(compiled, ADVICE / "b-sglang-3820-multinode-nccl-bootstrap-no-route.log")
    assert a.root_cause is not None
    text = a.root_cause.remediation
    assert (
        "- NCCL on node5 (GPU [6]) could not open a TCP connection to 10.0.0.4, port 56849 (No route to host)"
        in text
    )
    assert "ibstat" not in text
    # NCCL_DEBUG is INFO already (its lines are in the log): no patch lowering it to WARN
    assert "NCCL_DEBUG" not in _patched(a)


def test_transformer_engine_advice_only_where_it_runs(compiled: CompiledLibrary) -> None:
    # an Inductor failure in nnU-Net (no Transformer Engine): Triton lacks libcuda.so
    a = _analysed(compiled, ADVICE / "c-nnunet-2164-inductor-libcuda-so-not-found.log")
    assert a.root_cause is not None
    assert "NVTE_TORCH_COMPILE" not in a.root_cause.remediation and "NVTE_TORCH_COMPILE" not in _patched(a)
    assert "`TRITON_LIBCUDA_PATH`" in a.root_cause.remediation
    with_te = _analysed(compiled, ROOT / "rules" / "torch" / "te-torch-compile-backend-failed.match.log")
    assert _patched(with_te).get("NVTE_TORCH_COMPILE") == "0"


def test_grpo_advice_follows_the_terms_of_trls_check(compiled: CompiledLibrary, tmp_path: Path) -> None:
    # TRL 0.14-0.16: "(7 x 1)": processes x per-device, no accumulation (open-r1#217)
    old = _analysed(compiled, ADVICE / "c-openr1-217-grpo-num-generations-vs-7-procs.log")
    assert old.root_cause is not None
    assert "Gradient accumulation is not part of this check" in old.root_cause.remediation
    assert "raising them works too" not in old.root_cause.remediation
    # the later form counts the accumulation steps: "(2 x 4 x 3)"
    log = tmp_path / "grpo.log"
    log.write_text(
        "ValueError: The effective train batch size (2 x 4 x 3) must be evenly divisible by the "
        "number of generations per prompt (5). Given the current effective train batch size, the "
        "valid values for the number of generations are: [2, 3, 4, 6, 8, 12].\n"
    )
    new = _analysed(compiled, log)
    assert new.root_cause is not None
    assert "gradient accumulation steps in that batch (3 now)" in new.root_cause.remediation
    assert "not part of this check" not in new.root_cause.remediation


def test_a_condition_holds_only_on_what_the_log_states() -> None:
    from app.engine.pipeline.expr import holds

    scope = Scope(facts={"free": 10, "name": "x"})
    assert holds(None, scope) and holds("free > 5", scope)
    assert not holds("free > 50", scope)
    assert not holds("missing > 0", scope), "a value the log does not state: the advice is left out"
    with pytest.raises(ExprError):
        holds("name > 5", scope)  # a string against a number: the caller reports it


def test_an_out_of_range_value_is_an_expression_error_not_a_crash() -> None:
    huge = int("9" * 400) * 2**30  # an OOM message "asking" for 10^400 GiB, in bytes
    with pytest.raises(ExprError, match="out of range"):
        evaluate("a / b * 100", Scope(facts={"a": huge, "b": 3}))
    assert evaluate("a // b", Scope(facts={"a": huge, "b": huge})) == 1  # exact integers stay exact


ADVICE3 = ROOT / "tests" / "corpus" / "advice3"
TRAINER_KNOBS = (
    "activation recomputation",
    "smaller micro batch",
    "per micro batch",
    "optimizer-state offload",
)


def test_an_inference_engine_oom_gets_the_engines_levers_not_a_trainers(compiled: CompiledLibrary) -> None:
    # vLLM's multiprocessing worker (Aria#24): fragmentation, then the engine's own limits
    aria = _analysed(compiled, ADVICE3 / "g-aria-24-vllm-worker-oom-fragmented.log")
    assert aria.root_cause is not None
    text = aria.root_cause.remediation
    assert "inference engine's forward (`VllmWorkerProcess`)" in text
    assert "`--max-num-seqs`" in text and "fragmentation, which expandable segments" in text
    assert "in a training step, fewer tokens" not in text
    assert _patched(aria).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    # vLLM's Ray worker (DeepSeek-V3#205): detected as vLLM from its prefix; the weights fill the GPU
    ray = _analysed(compiled, ADVICE3 / "g-deepseekv3-205-vllm-ray-4090-sampler-oom.log")
    assert ray.root_cause is not None and ray.framework is not None and ray.framework.name == "vllm"
    text = ray.root_cause.remediation
    assert "(`RayWorkerWrapper`)" in text and "already hold 22.8 GiB of the GPU's 23.6 GiB" in text
    assert "`--max-num-seqs`" in text
    assert not any(k in text for k in TRAINER_KNOBS), text
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _patched(ray)
    # torchchat's generation (torchchat#1341): framework-neutral engine advice, no vLLM flags
    chat = _analysed(compiled, ADVICE3 / "g-torchchat-1341-llama32-11b-4090-oom.log")
    assert chat.root_cause is not None
    text = chat.root_cause.remediation
    assert "(`torchchat`)" in text and "quantized weights" in text
    assert not any(k in text for k in TRAINER_KNOBS), text
    assert "--max-num-seqs" not in text and "--mem-fraction-static" not in text


def test_a_training_oom_keeps_the_trainer_advice(compiled: CompiledLibrary) -> None:
    # verl's actor backward (rllm#93): fragmentation, then the training-step fallback
    a = _analysed(compiled, ADVICE / "a-verl-rllm93-actor-backward-fragmented.log")
    assert a.root_cause is not None
    text = a.root_cause.remediation
    assert "in a training step, fewer tokens or sequences per micro batch" in text
    assert "inference engine" not in text


def test_a_raw_cuda_oom_gets_no_allocator_patch(compiled: CompiledLibrary, tmp_path: Path) -> None:
    # NeMo-RL#2702: torch.AcceleratorError in the policy worker's setup(), no allocator numbers
    a = _analysed(compiled, ADVICE3 / "g-nemorl-2702-megatron-conversion-oom.log")
    assert a.root_cause is not None
    text = a.root_cause.remediation
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _patched(a)
    assert "It failed during start-up (`setup` in the traceback)" in text and "nvidia-smi" in text
    assert not any(k in text for k in TRAINER_KNOBS), text
    assert "reserved by PyTorch but unallocated" not in text
    # inside a training step: the step's peak
    step = _analysed(compiled, ROOT / "rules" / "cuda" / "cuda-out-of-memory.match-raw-step.log")
    assert step.root_cause is not None
    assert "It failed inside a training step (`train_step`" in step.root_cause.remediation
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _patched(step)
    # the allocator's tail without its numbers (a cut message) keeps the patch
    cut = tmp_path / "cut.log"
    cut.write_text(
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )
    tail = _analysed(compiled, cut)
    assert tail.root_cause is not None
    assert _patched(tail).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"


def test_a_wake_up_oom_names_ms_swift_flags_only_for_ms_swift(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    # ms-swift#7324: 32B over TP 4 at 0.3: the fraction barely holds the weights, lowering it is no fix
    a = _analysed(compiled, ROOT / "rules" / "vllm" / "vllm-sleep-wakeup-oom.match-msswift.log")
    assert a.root_cause is not None and a.root_cause.rule_id == "vllm-sleep-wakeup-oom"
    text = a.root_cause.remediation
    assert "`--sleep_level 1`" in text and "`--offload_model true --offload_optimizer true`" in text
    assert "Do not lower the engine's memory fraction (0.3)" in text and "16.0 GB per GPU" in text
    assert "Lower the engine's memory fraction" not in text
    # the same error with no ms-swift and no model size: the fraction step, no ms-swift flags
    bare = tmp_path / "wake.log"
    bare.write_text("RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62\n")
    b = _analysed(compiled, bare)
    assert b.root_cause is not None
    assert "Lower the engine's memory fraction" in b.root_cause.remediation
    assert "--sleep_level" not in b.root_cause.remediation


def test_generation_inside_a_trainer_is_not_an_inference_engine(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    frames = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 812, in '
        "_generate_and_score_completions\n"
        '  File "/usr/lib/python3.11/site-packages/transformers/generation/utils.py", line 2215, in generate\n'
    )
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of "
        "79.11 GiB of which 30.00 MiB is free. Including non-PyTorch memory, this process has 79.00 GiB memory in "
        "use. Of the allocated memory 78.10 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but "
        "unallocated.\n"
    )
    log = tmp_path / "grpo.log"
    log.write_text(frames + oom)
    a = _analysed(compiled, log)
    assert a.root_cause is not None
    assert "inference engine" not in a.root_cause.remediation
    assert "optimizer-state offload" in a.root_cause.remediation
    # the same frames without the trainer: HF generate alone is an inference forward
    log.write_text(frames.replace("trl/trainer/grpo_trainer.py", "app/serve.py") + oom)
    b = _analysed(compiled, log)
    assert b.root_cause is not None
    assert "inference engine's forward (`generate`)" in b.root_cause.remediation
