"""The wrong items of the fifth regrade (advice7 round 5, advice9 round 4, reviewers yn/yq at
4de06c9): Ray's delivery form and log folders for a verl SFT job that runs under torchrun, and a
colocated engine's memory share for an OOM while LLaMA-Factory's SFT loaded the weights."""

from __future__ import annotations

from app.engine.pipeline.patches import ray_env_block
from app.engine.pipeline.triage import RAY_WORKER_LOGS
from app.render.markdown import render_markdown
from tests.advicekit import CORPUS, facts, flat, root, rule_fixture, set_reader
from tests.conftest import Analyze

_seven = set_reader("advice7")
_nine = set_reader("advice9")
_one = set_reader("advice")
_four = set_reader("advice4")

RAY_FORM = "As a Ray `runtime_env`"
RAY_LOGS = "/tmp/ray/session_latest/logs"


# 1. verl#1158: verl's SFT trainer under torchrun ([rankN]: prefixes, sft_trainer.yaml), no Ray


def test_a_verl_sft_job_without_ray_lines_gets_no_ray_delivery_form_nor_ray_logs(analyze: Analyze) -> None:
    a = _seven(analyze, "p-verl-1158-sft-alltoall-epoch-hang.log")
    assert a.stats["frameworks_detected"] == ["verl"]
    f = root(a, "nccl-watchdog-collective-timeout")
    # the flight recorder's variables stay, as plain exports
    assert {p.path[-1] for p in f.patches} >= {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT"}
    report = render_markdown(a)
    assert "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000" in report
    assert RAY_FORM not in report and "runtime_env" not in report
    assert RAY_LOGS not in report and not any("Ray" in s for s in a.next_steps)
    assert any("collect the logs of all ranks and run logtriage" in s for s in a.next_steps)


def test_a_verl_job_with_rays_own_lines_keeps_both(analyze: Analyze) -> None:
    # verl#5414: the same kind of hang in a PPO run whose workers print as "(WorkerDict pid=...)"
    a = _one(analyze, "b-verl-5414-qwen3next-ulysses-alltoall-timeout.log")
    assert {"verl", "ray"} <= set(a.stats["frameworks_detected"])
    report = render_markdown(a)
    assert RAY_FORM in report and RAY_LOGS in report
    assert any(RAY_WORKER_LOGS.strip() in s for s in a.next_steps)


def test_rays_dedup_line_alone_shows_ray(analyze: Analyze) -> None:
    # verl#2844: no framework path, but Ray's "[repeated 27x across cluster]" folds the workers' lines
    a = _seven(analyze, "p-verl-2844-sglang-megatron-8k-rollout-timeout.log")
    assert "ray" in a.stats["frameworks_detected"]
    report = render_markdown(a)
    assert RAY_FORM in report and RAY_LOGS in report


def test_vllms_own_worker_prefixes_are_not_ray(analyze: Analyze) -> None:
    # vLLM's multiprocessing executor prefixes its workers' lines itself, without Ray
    log = (
        "(VllmWorkerProcess pid=2421) INFO 05-02 10:00:00 worker.py:100] loading weights\n"
        "(EngineCore_DP0 pid=3111) INFO 05-02 10:00:01 core.py:70] initialized\n"
        "(Worker_TP1 pid=3112) INFO 05-02 10:00:01 gpu_worker.py:80] ready\n"
    )
    assert "ray" not in analyze(log).stats["frameworks_detected"]
    for ray_line in (
        "(pid=3456) INFO starting\n",
        "(TaskRunner pid=812) step 3\n",
        "(LLMEngine pid=2347640, ip=10.58.226.15) INFO ready\n",
        "(RolloutWorker pid=311) hello [repeated 3x across cluster]\n",
    ):
        assert "ray" in analyze(ray_line).stats["frameworks_detected"], ray_line


def test_a_framework_name_alone_does_not_put_a_job_on_ray() -> None:
    from app.engine.pipeline.patches import runs_on_ray

    assert not runs_on_ray(["verl", "pytorch"]) and not runs_on_ray(["openrlhf", "deepspeed"])
    assert runs_on_ray(["verl", "ray"]) and runs_on_ray(["slime"]) and runs_on_ray(["chatlearn"])


def test_openrlhf_under_torchrun_gets_no_ray_block(analyze: Analyze) -> None:
    # OpenRLHF's actor under torchrun's "[rank1]:" prefix (no Ray line): CUDA_LAUNCH_BLOCKING as an export
    a = rule_fixture(analyze, "cuda", "cuda-device-side-assert.match.log")
    assert "openrlhf" in a.stats["frameworks_detected"] and "ray" not in a.stats["frameworks_detected"]
    assert a.root_cause is not None
    assert any(p.path[-1] == "CUDA_LAUNCH_BLOCKING" for p in a.root_cause.patches)
    assert ray_env_block(a.root_cause.patches, frameworks=a.stats["frameworks_detected"]) is None
    assert RAY_FORM not in render_markdown(a)


def test_ray_based_rule_steps_follow_rays_lines_not_verls_name(analyze: Analyze) -> None:
    # Tool-Star (verl) on Ray: the Ray-based step of te-torch-compile-backend-failed stays
    on_ray = _nine(analyze, "t-toolstar-11-backendcompilerfailed.log")
    assert "Ray-based jobs: set `TORCHDYNAMO_DISABLE` in the `runtime_env`" in flat(
        root(on_ray, "te-torch-compile-backend-failed")
    )
    # the same TypeError from a verl trainer under torchrun: verl's own step, no Ray form
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/workspace/verl/verl/trainer/fsdp_sft_trainer.py", line 120, in fit\n'
        "[rank0]: TypeError: BackendCompilerFailed.__init__() missing 1 required positional argument: "
        "'inner_exception'\n"
    )
    a = analyze(log)
    assert a.stats["frameworks_detected"][0] == "verl" and "ray" not in a.stats["frameworks_detected"]
    text = flat(root(a, "te-torch-compile-backend-failed"))
    assert "TORCHDYNAMO_DISABLE" in text and "runtime_env" not in text


# 2. LlamaFactory#9510: run_sft ran out of memory in load_model; no rollout engine anywhere

ENGINE = "lower the engine's memory fraction"


def test_an_oom_while_loading_weights_gets_no_colocated_engine_step(analyze: Analyze) -> None:
    a = _nine(analyze, "t-llamafactory-9510-oom-at-load-model.log")
    got = facts(a)
    assert got["oom_at_load"] is True and "rollout_engine_shown" not in got
    text = flat(root(a, "cuda-out-of-memory"))
    assert "The only process the message names, 415557 with 79.3 GiB, is this process itself" in text
    assert "there is nothing to kill" in text
    assert "It failed while the model was being loaded (`load_model` in the traceback)" in text
    assert ENGINE not in text and "colocated RL" not in text and "cut the tokens per step" not in text


def test_an_engine_shown_at_load_still_gets_no_engine_step(analyze: Analyze) -> None:
    # an engine in the job does not make the step apply while the weights load (no step has run)
    log = (
        b"INFO 05-02 10:00:00 llm_engine.py:100] Initializing an LLM engine (v0.4.0) with config: model='x'\n"
    )
    a = analyze(log + (CORPUS / "advice9" / "t-llamafactory-9510-oom-at-load-model.log").read_bytes())
    assert facts(a)["rollout_engine_shown"] is True
    assert ENGINE not in flat(root(a, "cuda-out-of-memory"))


def test_an_engine_the_log_shows_keeps_the_engine_step(analyze: Analyze) -> None:
    # vLLM#2140: vLLM's own frames in the traceback; the step names what showed the engine
    a = _four(analyze, "i-vllm-2140-fp32-weights-2080ti.log")
    assert facts(a)["rollout_engine_shown"] is True
    text = flat(root(a, "cuda-out-of-memory"))
    assert "Where a rollout or inference engine runs inside this same process (colocated RL)" in text
    assert ENGINE in text and "inference_engine_seen vllm" in text
    # the same from the colocated launch flag alone (ms-swift GRPO with vLLM in the trainer's process)
    msg = (CORPUS / "advice11" / "x-msswift-3848-grpo-a800-40g-oom.log").read_bytes()
    flag = b"swift rlhf --rlhf_type grpo --use_vllm true --vllm_mode colocate --sleep_level 1\n"
    b = analyze(flag + msg)
    assert facts(b)["engine_launch_seen"] == "--vllm_mode colocate"
    assert ENGINE in flat(root(b, "cuda-out-of-memory"))


def test_no_engine_step_where_the_log_shows_none(analyze: Analyze) -> None:
    # OpenRLHF's non-Ray train_ppo generates with HF (its expert: no vLLM engine here); ms-swift#3848
    # is the OOM message alone (its colocated vLLM is only in the issue text)
    for a in (
        _four(analyze, "k-openrlhf-398-ppo-colocated-40g-oom.log"),
        set_reader("advice11")(analyze, "x-msswift-3848-grpo-a800-40g-oom.log"),
    ):
        text = flat(root(a, "cuda-out-of-memory"))
        assert "is this process itself" in text and ENGINE not in text
