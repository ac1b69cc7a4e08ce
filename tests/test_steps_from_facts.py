"""Steps chosen by what the log states about a death (tests/corpus/advice3: public logs): a dead
Ray actor's steps follow from Ray's exit type, detail and context lines, never a fixed checklist."""

from __future__ import annotations

from pathlib import Path

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage

ADVICE3 = Path("tests/corpus/advice3")


def _remediation(compiled: CompiledLibrary, name: str) -> str:
    sources, _ = collect_sources([str(ADVICE3 / name)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None
    return a.root_cause.remediation


def test_an_actor_killed_at_its_pods_memory_limit_is_sent_to_the_pod(compiled: CompiledLibrary) -> None:
    text = _remediation(compiled, "g-agentr1-33-taskrunner-k8s-memory.log")
    assert "kubectl describe pod" in text and "resources.limits.memory" in text
    # Ray's detail names the pod's limit: the node-level OOM-killer step is not the lead
    assert "vanished without a Python error" not in text


def test_a_vanished_actor_is_named_with_its_pid_and_node(compiled: CompiledLibrary) -> None:
    text = _remediation(compiled, "g-oneshotrlvr-14-workerdict-died.log")
    assert "pid 1504364 on 172.24.67.40" in text and "worker-*-1504364.err" in text
    assert "kubectl" not in text and "says nothing of why" not in text
    assert "another rank" not in text
