"""The twelfth blind set's distributed and Ray items (tests/corpus/advice12, first contact at
a4274dd): a worker that exited with a code after a SIGTERM (slime#1740), a 0.9-GPU actor pending
inside a placement group while the GPUs are free (ray#42683), a ZeRO-3 all-gather hang
(DeepSpeed#5008), two nodes launched with disagreeing rendezvous settings (LLaMA-Factory#7326) and
two verl Ray items (verl#2596, verl#2987)."""

from __future__ import annotations

from tests.advicekit import facts, root, set_reader
from tests.conftest import Analyze

read = set_reader("advice12")


def _text(f) -> str:  # type: ignore[no-untyped-def]
    return " ".join(f.remediation.split())


def _decision(a) -> str:  # type: ignore[no-untyped-def]
    assert a.action is not None
    return a.action.decision


# --- slime#1740: "Worker exits with an exit code 1" ... "The process receives a SIGTERM" ---------


def test_k8s_memory_worker_exit_code_is_read_not_denied(analyze: Analyze) -> None:
    a = read(analyze, "z-slime-1740-worker-sigterm-k8s-memory.log")
    f = root(a, "ray-actor-died")
    got = facts(a)
    assert got["ray_worker_exit_code"] == "1"
    assert got["ray_worker_sigterm"] == "SIGTERM"
    text = _text(f)
    assert "no exit code" not in text
    assert "received a SIGTERM and exited with exit code 1" in text
    assert "kubectl describe pod <pod>" in text
    assert "resources.limits.memory" in text


def test_k8s_memory_worker_without_exit_code_keeps_old_reading(analyze: Analyze) -> None:
    # advice3's agentr1#33: "Worker exits with an exit code None": killed from outside
    from tests.advicekit import set_reader as _sr

    a = _sr("advice3")(analyze, "g-agentr1-33-taskrunner-k8s-memory.log")
    f = root(a, "ray-actor-died")
    assert facts(a)["ray_worker_exit_code"] == "None"
    text = _text(f)
    assert "it ended with no exit code: killed from outside" in text
    assert "exited with exit code" not in text
