"""Advice of the ninth blind set (tests/corpus/advice9), NCCL, compile, tokenizer and checkpoint
items: each wrong item and missing decisive step read from the set's log, and where the old advice
was right elsewhere, a rule fixture or a small synthetic log that keeps it."""

from __future__ import annotations

from app.engine.models import Analysis
from tests.advicekit import patched as _patched
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.advicekit import set_reader
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
_set = set_reader("advice9")


def _fact(a: Analysis, name: str) -> object:
    return next((f.value for f in a.facts if f.name == name), None)


# nccl#1504: the first (batched P2P) operation of the group never completed on rank 1

_WATCHDOG = (
    "[rank0]:[E1103 07:34:57.462234381 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
    "Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for "
    "600014 milliseconds before timing out.\n"
)
_STATUS = (
    "[rank0]:[E1103 07:34:57.460801783 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
    "Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {done}.\n"
)


def test_a_first_operation_that_never_completed_is_investigated_not_retried(analyze: Analyze) -> None:
    a = _set(analyze, "u-nccl-1504-first-p2p-op-never-completes.log")
    _root(a, "nccl-watchdog-collective-timeout")
    assert _fact(a, "watchdog_last_completed") == -1
    assert a.action is not None and (a.action.decision, a.action.basis) == ("investigate", "facts")
    why = a.action.why[0]
    assert "first NCCL operation never completed (last completed work -1)" in why
    assert "transient straggler" not in why and "NCCL_P2P_DISABLE=1" in why
    # the group existed and work 1 was enqueued: the rendezvous had worked
    assert a.timeline is not None
    summary = a.timeline["verdict"]["summary"]
    assert "never connected" not in summary and "firewall" not in summary
    assert "the rendezvous had worked" in summary


def test_a_first_batched_p2p_operation_names_the_peer_and_the_p2p_tests(analyze: Analyze) -> None:
    f = _root(
        _set(analyze, "u-nccl-1504-first-p2p-op-never-completes.log"), "nccl-watchdog-collective-timeout"
    )
    text = f.remediation
    assert "OpType=COALESCED: a send or receive, or a group of operations launched together" in text
    assert "rank 1 was waiting for its peer's matching send or receive" in text
    assert "sendrecv_perf -g 2" in text and "`NCCL_P2P_DISABLE=1`" in text and "--ipc=host" in text
    # a first all-reduce is not point-to-point: no peer step, the SeqNum=1 step stays
    ar = _root(analyze(_WATCHDOG.format(seq=1, op="ALLREDUCE")), "nccl-watchdog-collective-timeout")
    assert "sendrecv_perf" not in ar.remediation and "SeqNum=1: the very first collective" in ar.remediation
    # a later P2P batch is not a setup failure
    late = _root(analyze(_WATCHDOG.format(seq=40, op="COALESCED")), "nccl-watchdog-collective-timeout")
    assert "sendrecv_perf" not in late.remediation


def test_a_timeout_after_completed_work_is_still_retried_once(analyze: Analyze) -> None:
    a = analyze(_STATUS.format(seq=1042, done=1041) + _WATCHDOG.format(seq=1042, op="ALLREDUCE"))
    _root(a, "nccl-watchdog-collective-timeout")
    assert _fact(a, "watchdog_last_completed") == 1041
    assert a.action is not None and a.action.decision == "retry"


def test_the_watchdog_status_line_alone_with_minus_one_is_matched(analyze: Analyze) -> None:
    a = _fixture(analyze, "nccl", "nccl-watchdog-collective-timeout.match-followups-first.log")
    f = _root(a, "nccl-watchdog-collective-timeout")
    assert "watchdog-followups" in f.signatures
    assert a.action is not None and a.action.decision == "investigate"


# OpenRLHF#159: the critic (initialised from a LLaMA-based RM) asserted on Baichuan2 token ids


def test_a_critic_index_assert_asks_for_one_tokenizer_not_a_resize(analyze: Analyze) -> None:
    a = _set(analyze, "t-openrlhf-159-critic-vocab-assert.log")
    f = _root(a, "cuda-kernel-assertion-failed")
    text = f.remediation
    assert "resize_token_embeddings" not in text
    assert "The lookup failed in the CriticModelRayActor" in text
    assert "use a reward model trained with the policy's tokenizer" in text
    assert "pass it as `--reward_pretrain` (and `--critic_pretrain`)" in text


def test_an_index_assert_outside_a_critic_keeps_the_resize_step(analyze: Analyze) -> None:
    f = _root(
        _fixture(analyze, "cuda", "cuda-kernel-assertion-failed.match.log"), "cuda-kernel-assertion-failed"
    )
    assert "resize_token_embeddings" in f.remediation and "The lookup failed in the" not in f.remediation
    # the policy's own actor asserting is not a reward model's vocabulary
    own = _root(
        analyze(
            "(ActorModelRayActor pid=12) ../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: "
            "block: [205,0,0], thread: [39,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
        ),
        "cuda-kernel-assertion-failed",
    )
    assert "resize_token_embeddings" in own.remediation and "The lookup failed in the" not in own.remediation


# NeMo-Speech#10192: Slurm's cgroup killed a task when a checkpoint was being created


def test_a_host_oom_at_a_checkpoint_save_turns_async_and_parallel_save_off(analyze: Analyze) -> None:
    f = _root(_set(analyze, "u-nemo-10192-slurm-host-oom-at-checkpoint.log"), "host-oom-killer")
    text = f.remediation
    assert 'The log mentions a checkpoint save ("when a checkpoint is being created")' in text
    assert "Turn off asynchronous and parallel checkpoint saving" in text and "`--mem=0`" in text
    assert "killed task 3 on as01r3b17" in text
    # not an RL job: no rollout buffers, no roles
    assert "rollout" not in text and "roles" not in text


def test_a_trainers_save_line_and_async_save_are_read(analyze: Analyze) -> None:
    f = _root(_fixture(analyze, "host", "host-oom-killer.match-checkpoint.log"), "host-oom-killer")
    assert 'The log mentions a checkpoint save ("Saving checkpoint")' in f.remediation
    nemo = _root(
        analyze(
            "[NeMo I 2025-05-22 20:08:53 model_checkpoint:497] Scheduled async checkpoint save for "
            "/ckpt/step=18.ckpt\n"
            "slurmstepd: error: Detected 1 oom_kill event in StepId=8538204.0. Some of the step tasks have "
            "been OOM Killed.\n"
        ),
        "host-oom-killer",
    )
    assert "Asynchronous checkpoint saving is on (`Scheduled async checkpoint save`)" in nemo.remediation
    # a kill with no save in the log gets neither
    plain = _root(_fixture(analyze, "host", "host-oom-killer.match-slurm.log"), "host-oom-killer")
    assert "checkpoint save" not in plain.remediation and "Asynchronous checkpoint" not in plain.remediation


def test_an_rl_jobs_host_oom_keeps_the_rollout_advice(analyze: Analyze) -> None:
    a = analyze(
        '  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 1181, in fit\n'
        "Out of memory: Killed process 23793 (python) total-vm:9000000kB, anon-rss:506500kB, file-rss:0kB\n"
    )
    assert a.framework is not None and a.framework.name == "verl"
    f = _root(a, "host-oom-killer")
    assert "RL jobs: shrink the rollout buffers" in f.remediation


# TRL#3158: TRL's vLLM server and the trainer on the one A100 the report states


def test_trl_server_mode_on_one_gpu_gets_colocate_or_no_vllm(analyze: Analyze) -> None:
    a = _set(analyze, "t-trl-3158-duplicate-gpu-single-a100.log")
    f = _root(a, "nccl-duplicate-gpu")
    text = f.remediation
    assert "TRL's vLLM server mode" in text and "`CUDA_VISIBLE_DEVICES=0 trl vllm-serve" in text
    assert '`vllm_mode="colocate"`' in text and "`use_vllm=False`" in text
    assert "The log says 1 GPU is available" in text
    assert "This is TRL 0.16.0: colocate mode" in text
    # the reason is printed already ("Duplicate GPU detected"): no NCCL_DEBUG=WARN
    assert not _patched(f, "NCCL_DEBUG") and "NCCL_DEBUG=WARN" not in text


def test_a_duplicate_gpu_outside_trl_keeps_the_mapping_advice(analyze: Analyze) -> None:
    f = _root(_fixture(analyze, "nccl", "nccl-duplicate-gpu.match.log"), "nccl-duplicate-gpu")
    assert "TRL's vLLM server mode" not in f.remediation and "one GPU per rank" in f.remediation
    # without the duplicate-GPU line the reason is unknown: NCCL_DEBUG=WARN still offered
    bare = _root(
        analyze("RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)\n"),
        "nccl-duplicate-gpu",
    )
    assert _patched(bare, "NCCL_DEBUG") and "Rerun with `NCCL_DEBUG=WARN`" in bare.remediation
    # the weight-sync line alone, with no sign of TRL, is not taken for TRL
    other = _root(
        analyze(
            "NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 40\n"
            'self.pynccl_comm = PyNcclCommunicator(pg, device="cuda:0")\n'
        ),
        "nccl-duplicate-gpu",
    )
    assert "TRL's vLLM server mode" not in other.remediation


# Tool-Star#11: a torch.compile failure in a verl worker behind Ray's unpickling error


def test_a_hidden_compile_failure_disables_compilation_and_reads_the_worker(analyze: Analyze) -> None:
    a = _set(analyze, "t-toolstar-11-backendcompilerfailed.log")
    f = _root(a, "te-torch-compile-backend-failed")
    text = f.remediation
    assert _patched(f, "TORCHDYNAMO_DISABLE")
    assert "Ray could not rebuild the worker's exception on the caller" in text
    assert (
        "`(WorkerDict pid=...)` lines" in text and "`actor_rollout_ref.actor.use_torch_compile=False`" in text
    )
    # Ray failed to unpickle it; torch built it fine
    assert "torch could not even build" not in text and "reproduce on one process without Ray" not in text


def test_a_hidden_compile_failure_outside_verl_and_ray(analyze: Analyze) -> None:
    a = _fixture(analyze, "torch", "te-torch-compile-backend-failed.match.log")
    f = _root(a, "te-torch-compile-backend-failed")
    # the ROLL fixture keeps Transformer Engine's switch
    assert _patched(f, "NVTE_TORCH_COMPILE") and _patched(f, "TORCHDYNAMO_DISABLE")
    assert "use_torch_compile" not in f.remediation
    plain = _root(
        analyze(
            "TypeError: BackendCompilerFailed.__init__() missing 1 required positional argument: 'inner_exception'\n"
        ),
        "te-torch-compile-backend-failed",
    )
    assert "Ray could not rebuild" not in plain.remediation and "WorkerDict" not in plain.remediation
    assert "`TORCHDYNAMO_DISABLE=1`" in plain.remediation
