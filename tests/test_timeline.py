"""The timeline: collective forensics, last sign of life, phases, fail-slow, on real 2-GPU logs
(tests/corpus/gpu, made by tests/corpus/generators/gpu) and on small cases built from their lines."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from app.engine.timeline.builder import judge_collectives
from app.engine.timeline.failslow import change_point
from app.engine.timeline.model import CollectiveRow, phase_of

GPU = Path("tests/corpus/gpu")


def _analyse(compiled: CompiledLibrary, *paths: Path):  # type: ignore[no-untyped-def]
    sources, _ = collect_sources([str(p) for p in paths])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


def _row(
    rank: int, seq: int, numel: int = 100, enq: int | None = None, done: int | None = None
) -> CollectiveRow:
    return CollectiveRow(
        rank=rank,
        seq=seq,
        op="ALLREDUCE",
        numel_in=numel,
        numel_out=numel,
        last_enqueued=enq,
        last_completed=done,
    )


def test_ranks_on_different_sequences_are_a_desync_naming_the_one_behind() -> None:
    (v,) = judge_collectives([_row(0, 31, enq=31, done=30), _row(1, 30, enq=30, done=29)], {0, 1})
    assert (v.kind, v.ranks, v.failure_class, v.seq) == ("desync", [1], "dist.collective_mismatch", 30)


def test_different_sequences_without_a_group_id_are_not_compared() -> None:
    # torch < 2.6 watchdog lines carry no process-group id: rank 0's line may come from the
    # tensor-parallel group and rank 7's from the data-parallel one
    rows = [_row(0, 96120), _row(7, 64088)]
    for r in rows:
        r.pg_known = False
    (v,) = judge_collectives(rows, {0, 7})
    assert v.failure_class is None and v.kind == "uniform" and "cannot be compared" in v.summary
    # the same rows with their group known are a desync
    for r in rows:
        r.pg_known = True
    (d,) = judge_collectives(rows, {0, 7})
    assert d.failure_class == "dist.collective_mismatch"


def test_ranks_that_enqueued_the_same_work_but_completed_less_are_not_a_desync() -> None:
    # both issued 6464 collectives; rank 3 finished one fewer (vllm-project/vllm#23448)
    rows = [_row(0, 5730, enq=6464, done=5729), _row(3, 5729, enq=6464, done=5728)]
    (v,) = judge_collectives(rows, {0, 3})
    assert (v.kind, v.ranks, v.failure_class) == ("straggler", [3], None)
    assert "issued the same collectives" in v.summary


def test_watchdog_lines_of_one_rank_on_several_sequences_mark_the_group_unknown(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    log = tmp_path / "nemo.log"
    log.write_text(
        "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25624887 milliseconds before timing out.\n"
        "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96125, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625593 milliseconds before timing out.\n"
        "[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64088, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625251 milliseconds before timing out.\n"
    )
    a = _analyse(compiled, log)
    assert a.root_cause is not None and a.root_cause.failure_class == "nccl.collective_timeout"


def test_same_sequence_different_size_is_a_mismatch_and_the_rank_ahead_is_named() -> None:
    rows = [_row(0, 161, numel=1, enq=161, done=160), _row(1, 161, numel=32_800_000, enq=184, done=160)]
    (v,) = judge_collectives(rows, {0, 1})
    assert v.kind == "mismatch" and v.ranks == [1] and "ran ahead" in v.summary
    assert "1 elements" in v.summary and "32,800,000 elements" in v.summary


def test_the_first_collective_never_completing_is_a_missing_peer_or_the_transport() -> None:
    (v,) = judge_collectives([_row(0, 1, enq=1, done=-1), _row(1, 1, enq=1, done=-1)], {0, 1})
    assert v.kind == "first_collective" and v.failure_class is None
    # the group exists and its work was enqueued: the rendezvous had worked (nccl#1504)
    assert "never connected" not in v.summary and "the rendezvous had worked" in v.summary
    assert "a peer never reached this collective" in v.summary


def test_uniform_timeouts_name_the_ranks_that_never_reported() -> None:
    (v,) = judge_collectives([_row(0, 9, enq=9, done=8), _row(1, 9, enq=9, done=8)], {0, 1, 2, 3})
    assert v.kind == "uniform" and v.ranks == [2, 3] and v.failure_class is None
    (s,) = judge_collectives([_row(0, 9, enq=9, done=8)], {0, 1})
    assert s.kind == "straggler" and s.ranks == [1]


def test_a_subgroup_rank_is_keyed_by_torchruns_global_rank(compiled: CompiledLibrary) -> None:
    # verl-project/verl#5414: "[Rank 1]" is global rank 7's rank in the sequence-parallel group;
    # rank 0's line is only its dump-signal notice, so rank 0 is not said to lag
    a = _analyse(compiled, Path("rules/nccl/nccl-watchdog-collective-timeout.match-subgroup.log"))
    summary = a.timeline["verdict"]["summary"]
    assert "only rank 7 (rank 1 of its process group)" in summary and "never joined" not in summary


def test_subgroup_ranks_of_unnamed_groups_are_not_compared() -> None:
    rows = [_row(13, 216, enq=220, done=215), _row(15, 57, enq=57, done=56)]
    for r in rows:
        r.pg_known = False
        r.subgroup_rank = 1
    (v,) = judge_collectives(rows, {13, 15})
    assert v.failure_class is None and "cannot be compared" in v.summary


@pytest.mark.parametrize(
    ("text", "phase"),
    [
        ("INFO [rank0] trainer: saving checkpoint to /ckpt/step_10", "checkpoint"),
        ("INFO [rank1] trainer: eval: 16 prompts", "eval"),
        ("INFO [rank1] trainer: rollout: generating 16 x 16 tokens", "rollout"),
        ("INFO [rank0] trainer: step 12 loss 0.33", "train"),
        ("INFO [rank0] trainer: init_process_group(backend=nccl)", "launch"),
        ("2024-05-07 15:51:09,140 - root - INFO - Starting training step on epoch 3", "train"),
        ("INFO starting workers", "launch"),
        ("something else", None),
    ],
)
def test_phases(text: str, phase: str | None) -> None:
    assert phase_of(text) == phase


def test_change_point_finds_a_step_up_and_ignores_noise() -> None:
    flat = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0]
    assert change_point(flat) is None
    stepped = [1.0] * 10 + [3.0, 3.1, 2.9, 3.0, 3.2, 3.0, 3.1, 2.95, 3.05, 3.0]
    cp = change_point(stepped)
    assert cp is not None and cp[0] == 10 and 2.8 < cp[1] < 3.3


# --- on the real runs --------------------------------------------------------------------------


def test_skipped_collective_names_rank_1_in_the_train_phase(compiled: CompiledLibrary) -> None:
    a = _analyse(compiled, GPU / "skipped-collective" / "console.log")
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    v = a.timeline["verdict"]
    assert v["kind"] == "desync" and v["ranks"] == [1] and v["phase"] == "train"
    rows = {r["rank"]: r for r in a.timeline["collectives"]}
    assert (rows[0]["seq"], rows[0]["last_enqueued"]) == (31, 31)
    assert (rows[1]["seq"], rows[1]["last_enqueued"]) == (30, 30)
    assert rows[0]["time"].startswith("2026-11-23T20:12:30")  # glog time, year from the ISO lines
    # the NCCL timeouts fold under the desync
    timeout = next(f for f in a.findings if f.failure_class == "nccl.collective_timeout")
    assert timeout.role == "symptom"


def test_torchs_own_mismatch_check_is_read(compiled: CompiledLibrary) -> None:
    a = _analyse(compiled, GPU / "mismatched-size-debug-detail" / "console.log")
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    assert (
        "TensorShape" not in a.timeline["verdict"]["summary"] and "[17]" in a.timeline["verdict"]["summary"]
    )


def test_torch_2_6s_barrier_fingerprint_without_separator_is_read(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    log = tmp_path / "barrier.log"
    log.write_text(
        "  RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=1OpType=BARRIER), but Rank 2 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=0OpType=BARRIER).\n"
    )
    a = _analyse(compiled, log)
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    summary = a.timeline["verdict"]["summary"]
    assert "rank 1: BARRIER at sequence 1 vs rank 2: BARRIER at sequence 0" in summary


def test_a_rank_that_exits_silently_is_named_from_its_last_line(compiled: CompiledLibrary) -> None:
    a = _analyse(compiled, GPU / "silent-rank-death" / "console.log")
    assert 1 in a.timeline["verdict"]["ranks"]
    ranks = {r["rank"]: r for r in a.timeline["ranks"]}
    assert ranks[1]["last_activity"] is not None and ranks[1]["phase"] == "train"


def test_per_rank_files_of_torchrun_log_dir_carry_their_rank(compiled: CompiledLibrary) -> None:
    files = sorted((GPU / "skipped-collective" / "ranks").rglob("*.log"))
    assert files
    a = _analyse(compiled, *files)
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    assert a.timeline["verdict"]["ranks"] == [1]


@pytest.mark.parametrize("corpus", ["gpu", "gloo"])
def test_a_slowdown_is_dated_and_traced_to_the_rank_that_slowed(
    compiled: CompiledLibrary, corpus: str
) -> None:
    # rank 1's rollout gets slower from step 40 (tests/corpus/generators/gpu/fail_slow.py); rank 0
    # waits for it in the gradient all-reduce, so its train time grows too
    a = _analyse(compiled, Path("tests/corpus") / corpus / "fail-slow" / "console.log")
    assert a.root_cause is None  # the job finished: nothing failed, but it got slow
    slow = a.timeline["slowdown"]
    assert slow["slowest_rank"] == 1 and slow["phase"] == "rollout"
    assert 40 <= slow["from_step"] <= 60 and slow["factor"] > 3
    assert any(v["kind"] == "fail_slow" for v in a.timeline["verdicts"])


def test_py_spy_dumps_of_the_ranks_are_merged_and_the_odd_rank_named(compiled: CompiledLibrary) -> None:
    d = GPU / "hang-pyspy"
    a = _analyse(compiled, d / "console.log", d / "pyspy_rank0.txt", d / "pyspy_rank1.txt")
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    v = a.timeline["verdict"]
    assert v["ranks"] == [1] and v["phase"] == "eval"
    stacks = a.timeline["stacks"]
    assert stacks["ranks"] == [0, 1] and stacks["odd_ranks"] == [1]
    where = {tuple(g["ranks"]): g["where"][0] for g in stacks["groups"]}
    assert where[(0,)].startswith("gather (") and "evaluate" in where[(1,)]
    # without the dumps the watchdog alone only says rank 1 timed out
    b = _analyse(compiled, d / "console.log")
    assert b.timeline["stacks"] is None


# --- where each rank stopped, who got further (app.engine.timeline.forensics) ------------------------------

GLOO = Path("tests/corpus/gloo")


def _sites(text: str) -> dict[int, object]:
    from app.engine.pipeline.lines import parse_context
    from app.engine.timeline.forensics import call_sites

    lines = []
    for n, raw in enumerate(text.splitlines(), 1):
        ctx = parse_context(raw)
        lines.append(("f.log", n, ctx.rank, ctx.message))
    return call_sites(lines)  # type: ignore[return-value]


def test_a_traceback_names_the_collective_user_code_called_and_where() -> None:
    # rank 0's lines of tests/corpus/gloo/ckpt-gather-deadlock/console.log, library frames kept
    text = "\n".join(
        [
            "[default0]:[rank0]: Traceback (most recent call last):",
            '[default0]:[rank0]:   File "/work/gen/trainlib.py", line 310, in fit',
            "[default0]:[rank0]:     self.save_checkpoint(step)",
            '[default0]:[rank0]:   File "/work/gen/ckpt_gather_deadlock.py", line 28, in save_checkpoint',
            "[default0]:[rank0]:     dist.gather_object(self.data_state, states, dst=0)",
            '[default0]:[rank0]:   File "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper',
            "[default0]:[rank0]:     return func(*args, **kwargs)",
            '[default0]:[rank0]:   File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3445, in gather_object',
            "[default0]:[rank0]:     all_gather(object_size_list, local_size, group=group)",
            '[default0]:[rank0]:   File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4001, in all_gather',
            "[default0]:[rank0]:     work.wait()",
            "[default0]:[rank0]: RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 30000ms for send operation to complete",
        ]
    )
    cs = _sites(text)[0]
    assert cs.collective == "gather_object"  # the call user code made, not all_gather inside it
    assert (cs.user.func, cs.user.line) == ("save_checkpoint", 28)
    assert cs.error.startswith("RuntimeError:") and "Timed out" in cs.error
    assert cs.describe() == "gather_object in save_checkpoint (ckpt_gather_deadlock.py:28)"


def test_the_watchdogs_stack_of_the_failed_collective_is_read_innermost_first() -> None:
    text = "\n".join(
        [
            "[default1]:[rank1]:[E1123 20:17:33.260412563 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: ",
            "[default1]:#0 barrier from /v/site-packages/torch/distributed/distributed_c10d.py:5030",
            "[default1]:#1 wrapper from /v/site-packages/torch/distributed/c10d_logger.py:83",
            "[default1]:#2 save_checkpoint from /work/gen/ckpt_gather_deadlock.py:35",
            "[default1]:#3 fit from /work/gen/trainlib.py:310",
            "[default1]:",
        ]
    )
    cs = _sites(text)[1]
    assert cs.source == "watchdog" and cs.collective == "barrier"
    assert (cs.user.func, cs.user.line) == ("save_checkpoint", 35) and cs.frames[0].func == "fit"


def test_progress_comparison_is_not_fooled_by_lines_every_step_repeats() -> None:
    from app.engine.timeline.forensics import Progress, compare, normalise, ordering

    step = ["rollout: generating 16 x 16 tokens", "train: update on 16 sequences"]
    common = [*step, "step 9 loss 0.81 step_time 0.008", *step, "step 10 loss 0.77 step_time 0.009"]
    r0 = Progress([normalise(x) for x in [*common, "saving checkpoint to /c/global_step_10"]])
    # rank 1 saved and went on into step 11: its last line is one rank 0 printed in step 10
    r1 = Progress(
        [
            normalise(x)
            for x in [*common, "saving checkpoint to /c/global_step_10", "checkpoint saved (0.01s)", *step]
        ]
    )
    assert compare(r1, r0) == 1 and compare(r0, r1) == -1
    assert ordering({0: r0, 1: r1}) == ([1], [0])
    # the same lines on both: the logs cannot tell
    assert compare(Progress(list(r0.lines)), r0) == 0
    # the last step reported decides first
    assert compare(Progress(r0.lines, last_step=12), Progress(r1.lines, last_step=11)) == 1
    assert normalise("INFO [rank1] pid=706 took 90.01s") == normalise("INFO [rank0] pid=705 took 0.02s")


def test_a_collective_completed_on_one_rank_but_not_the_other_is_a_desync() -> None:
    # hang-pyspy: rank 1's watchdog fired on 26; rank 0 (dumping on its signal) completed 26
    status = CollectiveRow(rank=0, last_enqueued=26, last_completed=26)
    (v,) = judge_collectives([_row(1, 26, numel=1, enq=26, done=25), status], {0, 1})
    assert (v.kind, v.ranks, v.failure_class) == ("completion", [1], "dist.collective_mismatch")
    # a rank that never enqueued it lags: a straggler, no desync
    status = CollectiveRow(rank=1, last_enqueued=23, last_completed=23)
    (s,) = judge_collectives([_row(0, 24, enq=24, done=23), status], {0, 1})
    assert (s.kind, s.ranks, s.failure_class) == ("straggler", [1], None)


@pytest.mark.parametrize(
    ("text", "phase"),
    [
        (
            "INFO [rank1] trainer: step 10 loss 0.74 step_time 90.041 rollout_time 0.004 train_time 90.0",
            "train",
        ),
        ("INFO [rank0] heartbeat: alive step=10 phase=checkpoint maxrss_mb=1844", "checkpoint"),
        ("INFO [rank0] trainer: eval step 10 eval_reward 0.5156", "eval"),
    ],
)
def test_the_first_keyword_or_a_phase_field_decides_the_phase(text: str, phase: str) -> None:
    assert phase_of(text) == phase


@pytest.mark.parametrize(
    ("corpus", "case", "kind", "ranks", "phase"),
    [
        # gloo prints no watchdog table: the ranks' tracebacks and progress lines say it
        ("gloo", "ckpt-barrier-deadlock", "callsite", [1], "checkpoint"),
        ("gloo", "ckpt-gather-deadlock", "callsite", [1], "checkpoint"),
        ("gloo", "skipped-collective", "mismatch", [1], "train"),
        ("gloo", "straggler-timeout", "straggler", [1], "train"),
        ("gloo", "silent-rank-death", "vanished", [1], "train"),
        # NCCL: one rank completed the collective the other still waits in; garbage object sizes
        ("gpu", "ckpt-barrier-deadlock", "completion", [1], "checkpoint"),
        ("gpu", "hang-pyspy", "completion", [1], "eval"),
        ("gpu", "ckpt-gather-deadlock", "mismatch", [1], "checkpoint"),
        ("gpu", "silent-rank-death", "vanished", [1], "train"),
        ("gpu", "straggler-timeout", "straggler", [1], "train"),
        # no heartbeat: rank 1 is silent while stuck; it woke after the timeout (its last lines are
        # in eval), or was still asleep when torchrun SIGTERMed it; the barrier desync's other rank
        ("gpu", "silent-straggler", "straggler", [1], "train"),
        ("gpu", "stuck-rank-sigterm", "straggler", [1], "train"),
        ("gpu", "silent-ckpt-barrier-deadlock", "mismatch", [1], "checkpoint"),
    ],
)
def test_hangs_and_desyncs_name_the_rank_and_phase(
    compiled: CompiledLibrary, corpus: str, case: str, kind: str, ranks: list[int], phase: str
) -> None:
    a = _analyse(compiled, Path("tests/corpus") / corpus / case / "console.log")
    v = a.timeline["verdict"]
    assert (v["kind"], v["ranks"], v["phase"]) == (kind, ranks, phase), v["summary"]


def test_a_real_oom_is_not_mistaken_for_a_desync(compiled: CompiledLibrary) -> None:
    # rank 1 asks for 200 GiB in its own forward: an OOM outside any collective stays the cause
    a = _analyse(compiled, GPU / "cuda-oom" / "console.log")
    assert a.root_cause is not None and a.root_cause.failure_class == "cuda.out_of_memory"
    assert not any(v["failure_class"] for v in a.timeline["verdicts"])


def test_healthy_runs_get_no_verdict_with_a_class(compiled: CompiledLibrary) -> None:
    for path in (GPU / "healthy-nccl-info" / "console.log", GLOO / "healthy-dist-debug-info" / "console.log"):
        a = _analyse(compiled, path)
        assert a.root_cause is None
        assert not any(v["failure_class"] for v in (a.timeline or {}).get("verdicts", []))


def test_torchruns_first_failure_names_the_killed_rank_when_nothing_else_does(
    compiled: CompiledLibrary,
) -> None:
    a = _analyse(compiled, GPU / "silent-rank-death-sigkill" / "console.log")
    assert a.root_cause is not None and a.root_cause.failure_class == "host.oom_killed"
    v = a.timeline["verdict"]
    assert v["kind"] == "first_failure" and v["ranks"] == [1] and "Signal 9" in v["summary"]


# --- flight recorder dumps (app.engine.timeline.flight) -----------------------------------------------------


def test_a_flight_recorder_pickle_is_read_as_text_and_judged(compiled: CompiledLibrary) -> None:
    d = GPU / "ckpt-barrier-deadlock"
    a = _analyse(compiled, d / "nccl_trace_rank_0", d / "nccl_trace_rank_1")
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    v = a.timeline["verdict"]
    assert v["kind"] == "flight_recorder" and v["seq"] == 27 and v["phase"] == "checkpoint"
    assert "all_gather" in v["summary"] and "all_reduce_barrier" in v["summary"]
    ev = a.root_cause.evidence[0].text
    assert ev.startswith("[FR rank ") and "save_checkpoint (ckpt_gather_deadlock.py:" in ev


def test_a_pickle_that_asks_for_any_class_is_refused_not_run(tmp_path: Path) -> None:
    import pickle

    from app.engine.timeline import flight

    class Boom:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("ran",))

    evil = pickle.dumps({"version": "2.10", "pg_status": {}, "entries": [Boom()]}, protocol=2)
    assert flight.load(evil) is None
    ok = pickle.dumps({"version": "2.10", "pg_status": {}, "entries": []}, protocol=2)
    assert flight.load(ok) == {"version": "2.10", "pg_status": {}, "entries": []}
    assert flight.load(b"\x80\x02}q\x00(X") is None  # truncated
    assert flight.load(pickle.dumps([1, 2], protocol=2)) is None  # not a dump's shape
    p = tmp_path / "nccl_trace_rank_3"
    p.write_bytes(evil)
    assert flight.read_dump(p, rank=3) is None


# --- the timeline in the reports ---------------------------------------------------------------------


def test_text_and_markdown_reports_show_the_verdict_and_a_row_per_rank(compiled: CompiledLibrary) -> None:
    from app.render.markdown import render_markdown
    from app.render.text import render_text

    a = _analyse(compiled, GPU / "silent-rank-death" / "console.log")
    text = render_text(a, width=110)
    block = text.split("TIMELINE\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "rank 1 printed no error" in block[0]
    head = next(i for i, ln in enumerate(block) if ln.split()[:2] == ["rank", "phase"])
    rows = {ln.split()[1] if ln.lstrip().startswith(">") else ln.split()[0]: ln for ln in block[head + 1 :]}
    assert set(rows) == {"0", "1"}
    assert rows["1"].lstrip().startswith(">") and not rows["0"].lstrip().startswith(">")  # the named rank
    assert "20:12:00" in rows["1"] and "20:13:30" in rows["0"]  # its last line, and the other's
    assert "90 s" in rows["1"] or "91 s" in rows["1"]  # how much earlier it went quiet
    md = render_markdown(a)
    table = md.split("## Timeline", 1)[1]
    assert "| **1** |" in table and "| 0 |" in table and "(phase: **train**)" in table


def test_a_single_process_log_gets_no_rank_table(compiled: CompiledLibrary, tmp_path: Path) -> None:
    from app.render.text import render_text

    log = tmp_path / "one.log"
    log.write_text(
        'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nValueError: bad\n'
    )
    assert "TIMELINE" not in render_text(_analyse(compiled, log))


def _two_hosts(path: Path, *, skew: float, slow_steps: tuple[int, ...] = ()) -> Path:
    """4 ranks on 2 hosts whose host node-b2 clock is `skew` s ahead; rank 3 stops at step 25
    and the others time out 10 min later. `slow_steps`: steps host node-b2 printed 30 s late
    (a straggling step, not a clock)."""
    import datetime as dt

    t0 = dt.datetime(2026, 11, 23, 10, 0, 0)
    host = {0: "node-a1", 1: "node-a1", 2: "node-b2", 3: "node-b2"}
    out = []
    for step in range(1, 41):
        for r in range(4):
            if r == 3 and step > 25:
                continue
            late = 30 if step in slow_steps and host[r] == "node-b2" else 0
            t = t0 + dt.timedelta(seconds=step * 10 + late + (skew if host[r] == "node-b2" else 0))
            out.append(
                f"{host[r]}: [rank{r}]: {t:%Y-%m-%d %H:%M:%S},000 INFO step {step} | loss 1.5 | lr 1e-5"
            )
    for r in range(3):
        t = t0 + dt.timedelta(seconds=1010 + (skew if host[r] == "node-b2" else 0))
        out.append(
            f"{host[r]}: [rank{r}]: [E{t:%m%d %H:%M:%S}.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=400, OpType=ALLREDUCE, "
            "NumelIn=1000, NumelOut=1000, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
        )
    path.write_text("\n".join(out) + "\n")
    return path


def test_a_hosts_clock_offset_is_measured_from_shared_steps_and_corrected(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    from app.render.text import render_text

    a = _analyse(compiled, _two_hosts(tmp_path / "skew.log", skew=900))
    off = a.timeline["clock_offsets"]
    assert (
        list(off) == ["node-b2"]
        and off["node-b2"]["seconds"] == 900
        and off["node-b2"]["reference"] == "node-a1"
    )
    ranks = {r["rank"]: r for r in a.timeline["ranks"]}
    # on one clock, ranks 0 and 2 printed step 40 at the same moment, 15 min apart as read
    assert ranks[0]["last_time"] == ranks[2]["last_time"]
    assert a.timeline["verdict"]["ranks"] == [3]
    assert "clock of node-b2 runs 15 min ahead of node-a1" in render_text(a, width=140)


@pytest.mark.parametrize("slow", [(), (5, 6, 7)])
def test_no_offset_without_skew_nor_from_a_few_straggling_steps(
    compiled: CompiledLibrary, tmp_path: Path, slow: tuple[int, ...]
) -> None:
    a = _analyse(compiled, _two_hosts(tmp_path / "flat.log", skew=0, slow_steps=slow))
    assert a.timeline["clock_offsets"] == {}
    ranks = {r["rank"]: r for r in a.timeline["ranks"]}
    assert ranks[0]["last_time"] == ranks[2]["last_time"]


def test_a_rank_the_launcher_terminated_was_alive_not_dead(compiled: CompiledLibrary) -> None:
    # rank 1 printed nothing for 90 s while rank 0's watchdog timed out; torchrun's table shows
    # it ended by the launcher's SIGTERM (exitcode -15) after rank 0's abort: stuck, not dead
    a = _analyse(compiled, GPU / "stuck-rank-sigterm" / "console.log")
    assert a.root_cause is not None and a.root_cause.failure_class == "nccl.collective_timeout"
    verdicts = a.timeline["verdicts"]
    assert not any(v["kind"] == "vanished" or v["failure_class"] == "nccl.error" for v in verdicts)
    quiet = next(v for v in verdicts if "torchrun ended rank 1 with SIGTERM" in v["summary"])
    assert quiet["ranks"] == [1] and "not dead" in quiet["summary"] and "exitcode -15" in quiet["summary"]


def test_a_rank_missing_from_the_launchers_table_ended_on_its_own(compiled: CompiledLibrary) -> None:
    # os._exit(0): torchrun lists only failed workers, so rank 1 is absent: it did end by itself
    a = _analyse(compiled, GPU / "silent-rank-death" / "console.log")
    assert a.timeline["verdict"]["kind"] == "vanished" and a.timeline["verdict"]["ranks"] == [1]


def test_the_launchers_failure_table_is_read_per_rank() -> None:
    from app.engine.timeline.builder import launcher_exits

    lines = (GPU / "stuck-rank-sigterm" / "console.log").read_text().splitlines()
    exits = launcher_exits([SimpleNamespace(name="console.log", tail=list(enumerate(lines, 1)))])
    assert set(exits) == {0, 1}
    assert exits[0].first and exits[0].exitcode == -6 and not exits[0].terminated
    assert not exits[1].first and exits[1].exitcode == -15 and exits[1].terminated
    assert exits[1].describe().startswith("exitcode -15, Signal 15 (SIGTERM)")


def test_the_most_specific_line_of_the_cause_leads(compiled: CompiledLibrary) -> None:
    # torch's "device-side assert triggered" and the kernel's own assertion are one failure: the
    # report leads with the assertion (which index, which kernel), not the generic line after it
    a = _analyse(compiled, GPU / "device-assert" / "console.log")
    root = a.root_cause
    assert root is not None and root.failure_class == "cuda.device_side_assert"
    assert "Indexing.cu" in root.evidence[0].text and "Assertion" in root.evidence[0].text
    generic = next(f for f in a.findings if f.rule_id == "cuda-device-side-assert")
    assert generic.role != "root_cause" and root.confidence >= generic.confidence


def test_silence_alone_does_not_make_a_rank_dead(compiled: CompiledLibrary) -> None:
    # the per-rank files only (no launcher table): rank 1 went quiet while rank 0 timed out; the
    # same files come from a rank that exited (silent-rank-death) and one still stuck when it was
    # killed (stuck-rank-sigterm): the logged timeout leads, the silence is a statement about rank 1
    for case in ("silent-rank-death", "stuck-rank-sigterm"):
        files = sorted((GPU / case / "ranks").rglob("*.log"))
        a = _analyse(compiled, *files)
        assert a.root_cause is not None and a.root_cause.failure_class == "nccl.collective_timeout", case
        quiet = next(v for v in a.timeline["verdicts"] if v["kind"] == "vanished")
        assert quiet["ranks"] == [1] and quiet["failure_class"] is None
        assert "nothing in these files says whether its process ended or hung" in quiet["summary"]


def test_torch_1x_fingerprints_without_a_sequence_number_are_read(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    # torch < 2.0 (TORCH_DISTRIBUTED_DEBUG=DETAIL) prints no SequenceNumber; the line as posted in
    # Lightning-AI/pytorch-lightning#19680, cut after rank 0's fingerprint
    log = tmp_path / "rank1.log"
    log.write_text(
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[6], TensorDtypes=Double, "
        "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
        "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))), but "
        "Rank 0 is running collective: CollectiveFingerPrint(OpType=_ALLGATHER_BASE).\n"
    )
    a = _analyse(compiled, log)
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    v = a.timeline["verdict"]
    assert "rank 1: ALLGATHER [6] vs rank 0: _ALLGATHER_BASE" in v["summary"]
    assert "sequence" not in v["summary"]


def test_ranks_that_died_of_the_same_signal_failed_together(compiled: CompiledLibrary) -> None:
    # hiyouga/LlamaFactory#2206: every rank got SIGBUS in the same second; the excerpt starts
    # inside the table's "Failures:" part
    a = _analyse(compiled, Path("rules/host/bus-error-shm.match-torchrun-all.log"))
    summary = " ".join(v["summary"] for v in a.timeline["verdicts"])
    assert "ranks 6, 7 exited the same way (exitcode -7)" in summary and "failed together" in summary


FAILED_FIRST = Path("rules/dist/torchrun-rank-failed-first.match.log")


def test_a_rank_that_exited_with_an_error_before_the_others_timed_out_leads(
    compiled: CompiledLibrary,
) -> None:
    # torchrun's table: rank 4 exited 1 (an exception) at 11:37:36; rank 0's watchdog fired ten
    # minutes later. Rank 0 waited for a peer already gone: rank 4's error is the cause
    a = _analyse(compiled, FAILED_FIRST)
    root = a.root_cause
    assert root is not None and root.rule_id == "torchrun-rank-failed-first"
    assert root.ranks == [4] and "exitcode  : 1" in root.evidence[0].text
    assert "workergpu008" in root.remediation and "2024-08-20_11:37:36" in root.remediation
    timeout = next(f for f in a.findings if f.failure_class == "nccl.collective_timeout")
    assert timeout.role == "symptom"


def test_a_first_failure_that_timed_out_itself_is_not_the_peer_the_others_waited_for(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    # the same table with rank 0 as its first failure: rank 0's own watchdog fired, so its exit 1
    # is the timeout's (the exception torch raises), not an error of its own
    text = FAILED_FIRST.read_text().replace("rank      : 4 (local_rank: 0)", "rank      : 0 (local_rank: 0)")
    log = tmp_path / "own-timeout.log"
    log.write_text(text)
    a = _analyse(compiled, log)
    assert a.root_cause is not None and a.root_cause.rule_id != "torchrun-rank-failed-first"
    assert not any(v["failure_class"] == "python.unhandled_exception" for v in a.timeline["verdicts"])


def test_a_separator_is_never_quoted_as_a_ranks_last_line(compiled: CompiledLibrary, tmp_path: Path) -> None:
    """A row of asterisks after a rank's last step said nothing: the last line quoted is the step."""
    lines = []
    for step in range(1, 4):
        for rank in (0, 1):
            lines.append(
                f"[default{rank}]:2026-11-23 20:11:{50 + step},000 INFO [rank{rank}] trainer: "
                f"step {step} loss 0.9 step_time 0.1\n"
            )
    lines.append("[default1]:2026-11-23 20:11:54,500 INFO [rank1] trainer: " + "*" * 40 + "\n")
    lines.append("[default1]:" + "-" * 40 + "\n")
    lines.append("[default0]:2026-11-23 20:12:30,000 INFO [rank0] trainer: step 4 loss 0.9 step_time 0.1\n")
    log = tmp_path / "console.log"
    log.write_text("".join(lines))
    a = _analyse(compiled, log)
    ranks = {r["rank"]: r for r in a.timeline["ranks"]}
    quoted = ranks[1]["last_activity"]["text"]
    assert "step 3" in quoted, quoted


@pytest.mark.parametrize("case", ["ckpt-gather-deadlock", "silent-ckpt-barrier-deadlock"])
def test_every_evidence_line_quotes_the_line_it_names(compiled: CompiledLibrary, case: str) -> None:
    """A desync read from a traceback is quoted at its exception's line, not at the line its
    traceback began on (the report's label said one line and showed another's text)."""
    path = GPU / case / "console.log"
    lines = path.read_text(encoding="utf-8").splitlines()
    a = _analyse(compiled, path)
    checked = 0
    for f in a.findings:
        for e in f.evidence:
            assert e.text.strip() and e.text.strip() in lines[e.line - 1], (f.rule_id, e.line, e.text)
            checked += 1
    assert checked
