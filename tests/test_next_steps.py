"""The report's "Also check" steps follow from the log: a timeout asks for every rank's logs (Ray's
folders only for a job on Ray); a dead actor or a local NCCL error is not blamed on another rank."""

from __future__ import annotations

from pathlib import Path

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage


def _triage(compiled: CompiledLibrary, tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    log = tmp_path / "job.log"
    log.write_text(text)
    sources, _ = collect_sources([str(log)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


TIMEOUT = (
    "[rank0]:[E820 11:47:24.069865760 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n"
)


def test_a_timeout_asks_for_every_ranks_logs_and_rays_folders_only_on_ray(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(compiled, tmp_path, TIMEOUT)
    assert a.root_cause is not None and a.root_cause.failure_class == "nccl.collective_timeout"
    assert any("all ranks" in s for s in a.next_steps)
    assert not any("/tmp/ray" in s for s in a.next_steps)
    on_ray = _triage(compiled, tmp_path, "2024-08-20 11:30:01 INFO Started a local Ray instance.\n" + TIMEOUT)
    assert "ray" in on_ray.stats["frameworks_detected"]
    assert any("all ranks" in s and "/tmp/ray/session_latest/logs" in s for s in on_ray.next_steps)
    # verl's workers print under Ray's actor prefix "(WorkerDict pid=...)": Ray's own line
    verl = _triage(
        compiled, tmp_path, '(WorkerDict pid=7) File "/x/verl/trainer/main_ppo.py", line 3\n' + TIMEOUT
    )
    assert "verl" in verl.stats["frameworks_detected"]
    assert any("/tmp/ray/session_latest/logs" in s for s in verl.next_steps)


def test_a_dead_actor_is_not_blamed_on_another_rank(compiled: CompiledLibrary, tmp_path: Path) -> None:
    a = _triage(
        compiled,
        tmp_path,
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
        "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.\n",
    )
    assert a.root_cause is not None and a.root_cause.failure_class == "ray.actor_died"
    assert not any("another rank" in s or "all ranks" in s for s in a.next_steps)


def test_a_local_nccl_error_gets_no_peer_checklist(compiled: CompiledLibrary, tmp_path: Path) -> None:
    a = _triage(
        compiled,
        tmp_path,
        "SGES-DT279:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "SGES-DT279:1234:1234 [0] bootstrap.cc:45 NCCL WARN Bootstrap : no socket interface found\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
        "internal error, NCCL version 2.10.3\n",
    )
    assert a.root_cause is not None and a.root_cause.failure_class == "nccl.error"
    assert a.next_steps == []


def test_no_match_does_not_ask_for_nccl_info_lines_the_log_already_has(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    text = (
        "node1:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node1:100:100 [0] NCCL INFO cudaDriverVersion 12020\n"
        "something odd happened and the job stopped\n"
    )
    a = _triage(compiled, tmp_path, text)
    assert a.root_cause is None
    assert not any("NCCL_DEBUG=INFO" in s for s in a.next_steps)
    assert any("already has NCCL's INFO lines" in s for s in a.next_steps)
    bare = _triage(compiled, tmp_path, "something odd happened and the job stopped\n")
    assert any("NCCL_DEBUG=INFO" in s for s in bare.next_steps)
