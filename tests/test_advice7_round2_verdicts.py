"""Verdicts and timeline of the seventh and eighth blind sets' round-2 grades (tests/corpus/advice7,
tests/corpus/advice8): each wrong item and missing decisive step read from the set's log, and
where the old advice was right elsewhere, a rule fixture or a small synthetic log that keeps it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.engine.models import Analysis
from app.engine.pipeline.library import load_library
from app.errors import RuleError
from app.render.markdown import render_markdown
from tests.advicekit import patched as _patched
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
SET7 = ROOT / "tests" / "corpus" / "advice7"
SET8 = ROOT / "tests" / "corpus" / "advice8"


def _set(analyze: Analyze, name: str) -> Analysis:
    path = (SET7 if name.startswith(("p-", "q-")) else SET8) / name
    return analyze(path.read_bytes(), name=path.name)


def _fact(a: Analysis, name: str) -> object:
    return next((f.value for f in a.facts if f.name == name), None)


def _summary(a: Analysis) -> str:
    assert a.timeline is not None and a.timeline.get("verdict")
    return str(a.timeline["verdict"]["summary"])


_WATCHDOG = (
    "[rank{r}]:[E731 20:21:07.659674566 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
    "Process group watchdog thread terminated with exception: [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, "
    "Timeout(ms)=600000) ran for 600089 milliseconds before timing out.{suffix}\n"
)


# verl#2844: "I encounter the following error repeatedly", 10 tokens work and 8k fail, the one
# watchdog line folds 27 ranks' lines ("[repeated 27x across cluster]")


def test_a_timeout_the_report_says_repeats_is_fixed_not_retried(analyze: Analyze) -> None:
    a = _set(analyze, "p-verl-2844-sglang-megatron-8k-rollout-timeout.log")
    _root(a, "nccl-watchdog-collective-timeout")
    assert _fact(a, "failure_repeats_stated") == "repeatedly"
    assert a.action is not None and (a.action.decision, a.action.basis) == ("fix_and_rerun", "facts")
    assert 'The report says the failure comes back ("repeatedly")' in a.action.why[0]
    assert "often a transient straggler" not in " ".join(a.action.why)
    assert "Retry once" not in render_markdown(a)


def test_a_timeout_without_a_stated_repeat_stays_a_retry(analyze: Analyze) -> None:
    a = analyze(_WATCHDOG.format(r=3, suffix=""))
    assert a.action is not None and a.action.decision == "retry"
    # a report that it comes and goes is no repeat, whatever else it says
    b = analyze("It fails every time, well, not always: intermittent.\n" + _WATCHDOG.format(r=3, suffix=""))
    assert _fact(b, "failure_repeats_stated") == "every time"
    assert _fact(b, "failure_intermittent_stated") == "not always"
    assert b.action is not None and b.action.decision == "retry"
    # "not always" is not "always"
    c = analyze("The job does not always fail at this step.\n" + _WATCHDOG.format(r=3, suffix=""))
    assert _fact(c, "failure_repeats_stated") is None
    assert c.action is not None and c.action.decision == "retry"


def test_rays_dedup_suffix_counts_in_the_ranks_and_the_timeline(analyze: Analyze) -> None:
    a = _set(analyze, "p-verl-2844-sglang-megatron-8k-rollout-timeout.log")
    f = _root(a, "nccl-watchdog-collective-timeout")
    assert f.ranks == [30] and f.ranks_folded == 27
    summary = _summary(a)
    assert "only rank" not in summary
    assert "stands for 27 alike lines across the Ray cluster" in summary
    assert "more ranks than rank 30 timed out" in summary
    md = render_markdown(a)
    assert "ranks: 30 · hosts: - · Ray's log dedup folded 27 alike lines" in md
    assert "only rank 30" not in md


def test_a_lone_rank_without_the_dedup_suffix_is_still_the_only_one(analyze: Analyze) -> None:
    a = analyze(_WATCHDOG.format(r=5, suffix=""))
    assert _summary(a).startswith("only rank 5 timed out")
    f = _root(a, "nccl-watchdog-collective-timeout")
    assert f.ranks_folded == 0 and "dedup" not in render_markdown(a)
    # Ray's first dedup carries its note after the suffix: still counted
    b = analyze(
        _WATCHDOG.format(
            r=5,
            suffix=" [repeated 3x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 "
            "to disable log deduplication, or see https://docs.ray.io/en/master/ray-observability/"
            "user-guides/configure-logging.html#log-deduplication for more options.)",
        )
    )
    assert _root(b, "nccl-watchdog-collective-timeout").ranks_folded == 3
    assert "only rank" not in _summary(b)


def test_the_validation_rollout_is_where_the_report_places_it(analyze: Analyze) -> None:
    a = _set(analyze, "p-verl-2844-sglang-megatron-8k-rollout-timeout.log")
    text = _root(a, "nccl-watchdog-collective-timeout").remediation
    assert (
        'The report places the failure in the rollout on the validation data ("rollout on the validation data")'
        in text
    )
    assert "`py-spy dump` the engine's worker processes" in text and "requests retracted" in text
    assert "a shorter maximum response length for validation, or no validation before training" in text
    assert "The report says responses of 8k tokens fail where short ones run" in text
    assert "runs correctly with vLLM as its rollout engine" in text and "Keep vLLM for this job" in text
    # the start-up reading (and its network checks) gives way to the rollout the report names
    assert "NCCL_SOCKET_IFNAME" not in text and "job was still starting up" not in text


def test_a_start_up_timeout_without_a_rollout_keeps_the_start_up_step(analyze: Analyze) -> None:
    a = _fixture(analyze, "nccl", "nccl-watchdog-collective-timeout.match-startup.log")
    text = _root(a, "nccl-watchdog-collective-timeout").remediation
    assert "the job was still" in text and "starting up" in text
    assert "rollout on the validation data" not in text


# verl#1158: the SFT run hangs "when transitioning from epoch 1 to epoch 2" in an ALLTOALL of PG 2


def test_a_hang_at_an_epoch_boundary_is_fixed_not_retried(analyze: Analyze) -> None:
    a = _set(analyze, "p-verl-1158-sft-alltoall-epoch-hang.log")
    f = _root(a, "nccl-watchdog-collective-timeout")
    assert a.action is not None and (a.action.decision, a.action.basis) == ("fix_and_rerun", "facts")
    assert '("transitioning from epoch 1 to epoch 2")' in a.action.why[0]
    assert "transient straggler" not in " ".join(a.action.why)
    text = f.remediation
    assert "`drop_last=False`" in text and "drop_last=True)" in text
    assert "num_replicas=<data-parallel size>, rank=<data-parallel rank>" in text
    assert "process group 2, not the default group (0)" in text
    assert "enqueued work up to 4489 and completed 4485" in text
    assert "`ulysses_sequence_parallel_size=1` (the SFT trainer's top-level key)" in text
    assert "actor_rollout_ref" not in text
    # a longer timeout is not offered for a hang at a fixed point
    assert "Raise the timeout only" not in text and "A longer timeout is not the fix here" in text


def test_a_timeout_with_no_fixed_point_keeps_the_timeout_advice(analyze: Analyze) -> None:
    a = analyze(_WATCHDOG.format(r=3, suffix=""))
    text = _root(a, "nccl-watchdog-collective-timeout").remediation
    assert "Raise the timeout only when the wait is legitimate" in text
    assert "epoch boundary" not in text and "A longer timeout is not the fix here" not in text


# nccl#1698: every line's prefix names mycl-g2, the host whose mlx5_10 saw the failed completion


def test_the_ib_error_host_comes_from_nccls_line_prefix(analyze: Analyze) -> None:
    # the log's NCCL lines without the reporter's sentence (that it is intermittent leads to a
    # retry instead: tests/test_advice_values78.py)
    lines = (SET7 / "q-nccl-1698-roce-retry-exceeded.log").read_text().splitlines()[1:]
    a = analyze("\n".join(lines) + "\n", name="q-nccl-1698-roce-retry-exceeded.log")
    _root(a, "nccl-ib-completion-error")
    assert a.action is not None and a.action.decision == "retry_excluding"
    assert a.action.exclude_hosts == ["mycl-g2"]
    why = " ".join(a.action.why)
    assert "mycl-g2 (`nccl_ib_error_host`): leave it out" in why
    assert "names no host" not in why and "names no host" not in render_markdown(a)
    assert "Retry the job without mycl-g2." in render_markdown(a)


def test_an_ib_error_with_no_host_still_says_so(analyze: Analyze) -> None:
    a = analyze(
        "transport/net_ib.cc:2244 NCCL WARN NET/IB: Got completion from peer 192.168.3.5<53908> with "
        "status=12 opcode=129 len=1048576 vendor err 129 (Recv) localGid ::ffff:192.168.6.3 "
        "remoteGids::ffff:192.168.6.5 hca mlx5_10\n"
    )
    _root(a, "nccl-ib-completion-error")
    assert a.action is not None and a.action.decision == "retry_excluding" and not a.action.exclude_hosts
    assert "The log names no host for the fault" in " ".join(a.action.why)


def test_a_verdicts_host_fact_must_exist(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    text = (rules / "verdicts.yaml").read_text()
    assert "hosts: [nccl_ib_error_host]" in text
    (rules / "verdicts.yaml").write_text(text.replace("hosts: [nccl_ib_error_host]", "hosts: [no_such_fact]"))
    with pytest.raises(RuleError, match=r"`hosts` names no fact \['no_such_fact'\]"):
        load_library(rules)


# verl#161: torch's wrapper first, NCCL's "Duplicate GPU detected : rank 1 and rank 0 ..." after it


def test_the_duplicate_gpu_line_after_torchs_wrapper_is_read(analyze: Analyze) -> None:
    a = _set(analyze, "p-verl-161-duplicate-gpu-main-generation.log")
    f = _root(a, "nccl-duplicate-gpu")
    assert f.captures == {"rank_a": "1", "rank_b": "0", "bus_id": "10"}
    assert "no duplicate-GPU line shows here" not in f.remediation
    assert not _patched(f, "NCCL_DEBUG") and "NCCL_DEBUG=WARN" not in f.remediation
    assert "rank 1 and rank 0 of one communicator are on the same GPU" in f.remediation
    # verl's generation script named by its file name: the Ray worker advice, conditionally
    assert _fact(a, "main_generation_script") == "main_generation.py"
    text = f.remediation
    assert "if that is verl's generation entry point" in text
    assert "`ray.get_gpu_ids()`" in text and "Upgrade Ray" in text and "`max_colocate_count=1`" in text
    fx = _root(_fixture(analyze, "nccl", "nccl-duplicate-gpu.match-last-error.log"), "nccl-duplicate-gpu")
    assert fx.captures == {"rank_a": "0", "rank_b": "1", "bus_id": "2000"}
    assert "main_generation" not in fx.remediation


def test_the_wrapper_alone_still_asks_for_nccls_reason(analyze: Analyze) -> None:
    f = _root(_fixture(analyze, "nccl", "nccl-duplicate-gpu.match-wrapper.log"), "nccl-duplicate-gpu")
    assert f.signatures == ["invalid-usage"] and not f.captures
    assert _patched(f, "NCCL_DEBUG") and "no duplicate-GPU line shows here" in f.remediation


def test_verl_detected_gets_the_ray_isolation_step(analyze: Analyze) -> None:
    a = analyze(
        '(WorkerDict pid=9123, ip=10.0.0.5) File "/opt/verl/verl/workers/fsdp_workers.py", line 219\n'
        "(WorkerDict pid=9123, ip=10.0.0.5) Duplicate GPU detected : rank 9 and rank 1 both on CUDA device 34000\n"
    )
    assert a.framework is not None and a.framework.name == "verl"
    text = _root(a, "nccl-duplicate-gpu").remediation
    assert "verl: its workers are Ray actors" in text and "if that is verl's" not in text


# prime-rl PR 3186: rank 13 waited in an expert-parallel all-to-all issued by a backward pass


def test_a_collective_of_the_backward_pass_is_investigated_not_retried(analyze: Analyze) -> None:
    a = _set(analyze, "r-primerl-pr3186-ep-alltoall-timeout-rank13.log")
    f = _root(a, "nccl-watchdog-collective-timeout")
    assert _fact(a, "collective_in_backward") == "#4 backward"
    assert a.action is not None and (a.action.decision, a.action.basis) == ("investigate", "facts")
    assert "issued by the backward pass" in a.action.why[0] and "Retry once" not in render_markdown(a)
    text = f.remediation
    assert "every member of process group 3 issues once per backward" in text
    assert (
        "Rank 1 of that group waited in sequence 1438 with work up to 1441 queued and 1437 completed" in text
    )
    assert "fix the divergence on the member that is short" in text
    assert "expert-parallel dispatch and combine" in text and "torch.compile off" in text
    assert "Raise the timeout only" not in text


def test_a_forward_collective_stack_gets_no_backward_step(analyze: Analyze) -> None:
    a = analyze(
        "[rank13]:[E804 23:05:54.516665906 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1438, OpType=ALLTOALL_BASE, NumelIn=195004416, "
        "NumelOut=195004416, Timeout(ms)=600000) ran for 600093 milliseconds before timing out.\n"
        "[rank13]:[E804 23:05:54.518322344 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: \n"
        "#0 all_to_all_single from /venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:4829\n"
        "#2 forward from /venv/lib/python3.12/site-packages/torch/distributed/nn/functional.py:430\n"
    )
    assert _fact(a, "collective_in_backward") is None
    assert a.action is not None and a.action.decision == "retry"
    assert "backward pass" not in _root(a, "nccl-watchdog-collective-timeout").remediation


# ms-swift#9416 and ms-swift#6244: the trainer could not reach the weight-sync store on port 51216


def test_ms_swifts_rollout_server_is_named_for_its_group_port(analyze: Analyze) -> None:
    a = _set(analyze, "r-msswift-9416-group-port-51216-timeout.log")
    f = _root(a, "dist-rendezvous-timeout")
    assert a.action is not None and (a.action.decision, a.action.basis) == ("investigate", "facts")
    assert "Port 51216 is the default weight-sync group port" in a.action.why[0]
    assert "often a node that started late" not in " ".join(a.action.why)
    text = f.remediation
    assert "ms-swift's trainer was connecting to its external vLLM server" in text
    assert "`swift rollout` is up" in text and "`/init_communicator/`" in text
    assert "`unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY`" in text and "`no_proxy`" in text
    assert "same ms-swift, TRL and vLLM versions" in text
    # a store on this machine: no flat "not 127.0.0.1"
    assert "not 127.0.0.1" not in text and "The store is on this machine (127.0.0.1:51216)" in text


def test_the_group_port_alone_names_the_server_conditionally(analyze: Analyze) -> None:
    a = _set(analyze, "p-msswift-6244-grpo-tcpstore-timeout.log")
    f = _root(a, "dist-rendezvous-timeout")
    assert a.action is not None and a.action.decision == "investigate"
    text = f.remediation
    assert "If this job trains against an external vLLM server (`trl vllm-serve`, `swift rollout`)" in text
    assert "check that the server is up on 10.156.33.26" in text and "add 10.156.33.26 to `no_proxy`" in text
    assert "ms-swift's trainer was connecting" not in text
    # another host: the interface and firewall advice stays
    assert "`nc -zv 10.156.33.26 51216`" in text and "The store is on this machine" not in text
    fx = _fixture(analyze, "dist", "dist-rendezvous-timeout.match-trl-group-port.log")
    assert fx.action is not None and fx.action.decision == "investigate"


def test_a_store_on_another_port_is_no_vllm_server(analyze: Analyze) -> None:
    a = _fixture(analyze, "dist", "dist-rendezvous-timeout.match.log")
    f = _root(a, "dist-rendezvous-timeout")
    assert a.action is not None and a.action.decision == "retry"
    assert "weight-sync" not in f.remediation and "not 127.0.0.1" in f.remediation
    local = analyze(
        "[E526 03:50:39.898939042 socket.cpp:1028] [c10d] The client socket has timed out after 300000ms "
        "while trying to connect to (127.0.0.1, 29500).\n"
    )
    text = _root(local, "dist-rendezvous-timeout").remediation
    assert "The store is on this machine (127.0.0.1:29500)" in text and "weight-sync" not in text
    assert local.action is not None and local.action.decision == "retry"
