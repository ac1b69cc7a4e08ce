"""Advice of the eighth blind set's first round (tests/corpus/advice8): the wrong items fixed,
each read from the set's log and, where the other side can be shown, from a rule fixture or a
small synthetic log that keeps the old advice."""

from __future__ import annotations

from app.engine.models import Analysis, Finding
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
SET = ROOT / "tests" / "corpus" / "advice8"


def _set(analyze: Analyze, name: str) -> Analysis:
    path = SET / name
    return analyze(path.read_bytes(), name=path.name)


def _fixture(analyze: Analyze, area: str, name: str) -> Analysis:
    path = RULES / area / name
    return analyze(path.read_bytes(), name=path.name)


def _root(a: Analysis, rule_id: str) -> Finding:
    assert a.root_cause is not None and a.root_cause.rule_id == rule_id
    return a.root_cause


def _patched(f: Finding, key: str) -> bool:
    return any(p.path and p.path[-1] == key for p in f.patches)


# 1. torchrun --standalone on several nodes: each node rendezvouses with itself, every run


def test_standalone_torchrun_on_several_nodes_is_fixed_not_retried(analyze: Analyze) -> None:
    a = _set(analyze, "s-openvla-175-torchrun-standalone-multinode-rdzv-timeout.log")
    f = _root(a, "dist-rendezvous-timeout")
    assert a.action is not None and (a.action.decision, a.action.basis) == ("fix_and_rerun", "facts")
    assert "torchrun --standalone" in a.action.why[0] and "$WORLD_SIZE" in a.action.why[0]
    text = f.remediation
    assert "Drop `--standalone`" in text and "--rdzv-endpoint $MASTER_ADDR:$MASTER_PORT" in text
    # not the missing-process reading: nothing is missing, the nodes wait on different stores
    assert "Count the ranks that started" not in text and "never joined or stopped answering" not in text
    fx = _fixture(analyze, "dist", "dist-rendezvous-timeout.match-standalone.log")
    assert fx.action is not None and fx.action.decision == "fix_and_rerun"
    assert "`--nnodes=2`" in _root(fx, "dist-rendezvous-timeout").remediation


def test_a_rendezvous_timeout_without_standalone_keeps_its_steps(analyze: Analyze) -> None:
    a = _fixture(analyze, "dist", "dist-rendezvous-timeout.match-elastic.log")
    f = _root(a, "dist-rendezvous-timeout")
    assert a.action is not None and a.action.decision == "retry"
    assert "--standalone" not in f.remediation and "never joined or stopped answering" in f.remediation
    # one node with --standalone is what the flag is for: no fix from it
    one = analyze(
        "+ torchrun --standalone --nnodes=1 --nproc-per-node=8 train.py\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
    )
    assert one.action is not None and one.action.decision == "retry"
    assert "Drop `--standalone`" not in _root(one, "dist-rendezvous-timeout").remediation


def test_a_port_clash_on_several_nodes_gets_no_standalone_patch(analyze: Analyze) -> None:
    single = _fixture(analyze, "dist", "dist-address-in-use.match.log")
    assert _patched(_root(single, "dist-address-in-use"), "--standalone")
    log = (RULES / "dist" / "dist-address-in-use.match.log").read_text()
    multi = analyze("+ torchrun --nnodes=2 --node_rank=0 --nproc-per-node=8 train.py\n" + log)
    assert not _patched(_root(multi, "dist-address-in-use"), "--standalone")


# 2. expandable_segments only for a torch that has it (2.1+)

_OLD_OOM = (
    "RuntimeError: CUDA out of memory. Tried to allocate 2.29 GiB (GPU 0; 31.72 GiB total capacity; "
    "19.22 GiB already allocated; 1.88 GiB free; 28.32 GiB reserved in total by PyTorch)\n"
)
_NEW_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.29 GiB. GPU 0 has a total capacity of "
    "31.72 GiB of which 1.88 GiB is free. Including non-PyTorch memory, this process has 29.80 GiB memory in "
    "use. Of the allocated memory 19.22 GiB is allocated by PyTorch, and 9.10 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)


def test_an_old_torch_gets_no_expandable_segments(analyze: Analyze) -> None:
    a = _set(analyze, "s-megatron-60-allreduce-flatten-oom-mp2-dp8.log")
    f = _root(a, "cuda-out-of-memory")
    assert not _patched(f, "PYTORCH_CUDA_ALLOC_CONF")
    text = f.remediation
    assert "came with torch 2.1" in text and "`torch.cuda.empty_cache()`" in text
    assert "If it still fails with expandable segments" not in text
    # the fragmentation is still read, from torch <= 2.0's reserved total and allocated part
    assert "about 9.1 GiB sits in cached blocks no tensor uses" in text
    # the old message shape alone says it
    assert not _patched(_root(analyze(_OLD_OOM), "cuda-out-of-memory"), "PYTORCH_CUDA_ALLOC_CONF")


def test_an_old_torch_is_read_from_its_python_or_its_version(analyze: Analyze) -> None:
    frame = '  File "/opt/conda/lib/python3.{}/site-packages/torch/_utils.py", line 229, in _flatten_dense_tensors\n'
    old = _root(analyze(frame.format(7) + _NEW_OOM), "cuda-out-of-memory")
    assert not _patched(old, "PYTORCH_CUDA_ALLOC_CONF")
    new = _root(analyze(frame.format(10) + _NEW_OOM), "cuda-out-of-memory")
    assert _patched(new, "PYTORCH_CUDA_ALLOC_CONF") and "came with torch 2.1" not in new.remediation
    named = _root(analyze("PyTorch version: 2.0.1\n" + _NEW_OOM), "cuda-out-of-memory")
    assert not _patched(named, "PYTORCH_CUDA_ALLOC_CONF")
    newer = _root(analyze("PyTorch version: 2.3.1\n" + _NEW_OOM), "cuda-out-of-memory")
    assert _patched(newer, "PYTORCH_CUDA_ALLOC_CONF")
    # nothing said about the version: still offered (the rule's own fixture)
    fx = _root(_fixture(analyze, "cuda", "cuda-out-of-memory.match.log"), "cuda-out-of-memory")
    assert _patched(fx, "PYTORCH_CUDA_ALLOC_CONF")


# 3. CUDA error 804: the forward-compatibility package is what failed


def test_error_804_gets_no_forward_compatibility_route(analyze: Analyze) -> None:
    a = _set(analyze, "s-vllm-5510-ray-tp-error-804-forward-compat.log")
    text = _root(a, "cuda-driver-too-old").remediation
    assert "lets a newer runtime run on an older driver" not in text
    assert "The compat package is what failed here" in text and "Upgrade the host driver" in text
    assert "use a build or image made for the installed driver's CUDA version" in text
    fx = _root(_fixture(analyze, "cuda", "cuda-driver-too-old.match-804.log"), "cuda-driver-too-old")
    assert "lets a newer runtime run on an older driver" not in fx.remediation
    # another driver mismatch (803) keeps the compat package as a route
    other = _root(_fixture(analyze, "cuda", "cuda-driver-too-old.match-803.log"), "cuda-driver-too-old")
    assert "lets a newer runtime run on an older driver" in other.remediation
    assert "what failed here" not in other.remediation


# 4. a near miss is not the peak; one sequence per micro batch cannot be cut


def test_a_near_miss_oom_with_micro_batch_one_points_at_the_sequence_length(analyze: Analyze) -> None:
    a = _set(analyze, "s-s1-61-fsdp-32b-oom-block32768.log")
    text = _root(a, "cuda-out-of-memory").remediation
    assert "10-20%" not in text and "freeing that much elsewhere" not in text
    assert "not the step's peak" in text and "does not say how small a cut is enough" in text
    assert "sequences per micro batch" not in text and "a smaller micro batch" not in text
    assert "`--block_size=32768`" in text and "activation" in text and "offload" in text


def test_a_near_miss_oom_with_a_larger_micro_batch_still_cuts_it(analyze: Analyze) -> None:
    log = (
        "+ torchrun --nproc-per-node 8 train/sft.py --per_device_train_batch_size=4 --block_size=4096\n"
        "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 76.00 MiB. GPU 2 has a total "
        "capacity of 79.10 GiB of which 67.88 MiB is free. Including non-PyTorch memory, this process has "
        "79.02 GiB memory in use. Of the allocated memory 76.77 GiB is allocated by PyTorch, and 372.49 MiB "
        "is reserved by PyTorch but unallocated.\n"
    )
    text = _root(analyze(log), "cuda-out-of-memory").remediation
    assert "a smaller micro batch" in text and "not the step's peak" in text
    assert "already one sequence per GPU" not in text


# 5. torch's CUDA OOM wrapped by Ray is not Ray's host-memory monitor


def test_a_ray_wrapped_torch_oom_is_not_called_a_host_memory_kill(analyze: Analyze) -> None:
    a = _set(analyze, "r-skyrl-pr1221-colocated-engine-holds-gpu.log")
    _root(a, "cuda-out-of-memory")
    assert not [f for f in a.findings if f.rule_id == "ray-node-out-of-memory"]
    fx = _fixture(analyze, "ray", "ray-node-out-of-memory.nomatch-torch-oom.log")
    assert not [f for f in fx.findings if f.rule_id == "ray-node-out-of-memory"]
    # the wrapper's header alone stays open between the two
    alone = _fixture(analyze, "ray", "ray-node-out-of-memory.match-raytask.log")
    assert {"ray-node-out-of-memory", "cuda-out-of-memory"} <= {f.rule_id for f in alone.findings}


# 6. a sudden NaN: the settings first, a bad sample only as one possibility


def test_a_sudden_nan_does_not_blame_the_data_first(analyze: Analyze) -> None:
    a = _set(analyze, "s-automodel-1883-fsdp2-sdpa-bs2-nan.log")
    text = _root(a, "metric-not-finite").remediation
    # grad norm was 9.9 the step before: the "broke at once" branch, settings first
    assert "or a bad sample." not in text and "Check first what differs from a run that trained" in text
    assert "it broke at once" in text
    assert "the cause when the NaN comes back at the same batch" in text
    assert "`attn_implementation` sdpa" in text and "2 sequences per GPU" in text
    assert "`eager` or `flash_attention_2`" in text


def test_a_nan_after_a_normal_value_without_sdpa_gets_no_attention_step(analyze: Analyze) -> None:
    log = (
        "+ torchrun --nproc-per-node=8 finetune.py --model.attn_implementation=eager --step_scheduler.local_batch_size=2\n"
        "step 10 | loss 2.6030 | grad_norm 9.9375\n"
        "step 11 | loss 2.3224 | grad_norm nan\n"
    )
    text = _root(analyze(log), "metric-not-finite").remediation
    assert (
        "Check first what differs from a run that trained" in text and "bad sample in its batch" not in text
    )
    assert "SDPA kernels" not in text
    # a value that had climbed first is still divergence
    dschat = _root(_fixture(analyze, "numerics", "metric-not-finite.match-dschat.log"), "metric-not-finite")
    assert "which is divergence" in dschat.remediation


# reviewers' note: ranks out of step are investigated, not retried


def test_a_collective_one_rank_never_reached_is_investigated(analyze: Analyze) -> None:
    a = _set(analyze, "s-gcd-6-ddp-broadcast-timeout-rank0-missing.log")
    _root(a, "nccl-watchdog-collective-timeout")
    assert a.action is not None and (a.action.decision, a.action.basis) == ("investigate", "facts")
    assert "rank(s) 0 never reached" in a.action.why[0] and "transient" not in a.action.why[0]
    # one rank's timeout alone shows no rank out of step: retried once (test_verdict has the words)
    one = analyze(
        "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1042, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.\n"
    )
    assert one.action is not None and one.action.decision == "retry"


# round 1's regrade: a log whose watchdog printed the failed collective's stack has the recorder on


def test_a_printed_collective_stack_means_the_flight_recorder_is_on(analyze: Analyze) -> None:
    a = _set(analyze, "r-primerl-pr3186-ep-alltoall-timeout-rank13.log")
    f = _root(a, "nccl-watchdog-collective-timeout")
    assert not [p for p in f.patches if p.path == ["TORCH_NCCL_TRACE_BUFFER_SIZE"]]
    assert "Turn on the flight recorder" not in f.remediation
    assert "The flight recorder is already on" in f.remediation
    # "not found, potentially because FlightRecorder is disabled": still told to turn it on
    off = _root(
        _fixture(analyze, "nccl", "nccl-watchdog-collective-timeout.match-startup.log"),
        "nccl-watchdog-collective-timeout",
    )
    assert [p for p in off.patches if p.path == ["TORCH_NCCL_TRACE_BUFFER_SIZE"]]
    assert "Turn on the flight recorder" in off.remediation


def test_the_first_bad_step_is_the_earliest_step_not_the_earliest_line(analyze: Analyze) -> None:
    a = _set(analyze, "s-automodel-1883-fsdp2-sdpa-bs2-nan.log")
    # a summary line above the metrics names step 12's loss; grad norm was NaN at step 11
    assert "`grad_norm` was `nan` first at step 11" in _root(a, "metric-not-finite").remediation
    # two ranks' lines interleaved: rank 1 printed step 8's NaN after rank 0's step 9
    log = (
        "[rank0]: step 7 | loss 2.10 | grad_norm 1.20\n"
        "[rank0]: step 9 | loss nan | grad_norm 1.30\n"
        "[rank1]: step 8 | loss 2.00 | grad_norm nan\n"
    )
    assert "`grad_norm` was `nan` first at step 8" in _root(analyze(log), "metric-not-finite").remediation


def test_verl_seeing_a_whole_fraction_of_its_gpus_is_told_to_join_the_cluster(analyze: Analyze) -> None:
    f = _root(_set(analyze, "r-verl-3358-gpus-16-of-32.log"), "ray-infeasible-resource-request")
    assert "verl sees 16.0 GPUs and wants 32: an exact fraction" in f.remediation
    assert "`RAY_ADDRESS=auto`" in f.remediation
    # not a whole fraction (12 of 16): no step about missing nodes
    other = analyze(
        "ValueError: Total available GPUs 12.0 is less than total desired GPUs 16\n"
        '  File "/home/verl/verl/trainer/ppo/ray_trainer.py", line 134, in _check_resource_available\n'
    )
    assert other.root_cause is not None and "an exact fraction" not in other.root_cause.remediation
