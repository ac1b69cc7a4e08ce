"""Launcher prefixes: each finding knows actor, pid, ip, rank and host."""

from __future__ import annotations

import pytest

from app.engine.lines import normalise, parse_context


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "(WorkerDict pid=81234, ip=10.0.3.17) boom",
            {"actor": "WorkerDict", "pid": 81234, "ip": "10.0.3.17"},
        ),
        (
            "(ActorTrain(actor_train-3) pid=77, ip=10.1.1.1) boom",
            {"actor": "ActorTrain(actor_train-3)", "pid": 77},
        ),
        ("(pid=4242) boom", {"pid": 4242, "actor": None}),
        ("(raylet, ip=10.0.0.9) boom", {"actor": "raylet", "ip": "10.0.0.9"}),
        ("[rank3]: Traceback", {"rank": 3}),
        ("[default5]:boom", {"rank": 5}),
        ("[1,6]<stderr>: boom", {"rank": 6}),
        ("12: boom", {"rank": 12}),
        ("worker-3: [rank2]: boom", {"host": "worker-3", "rank": 2}),
        ("node-3:81234:81240 [3] NCCL INFO NET/IB", {"host": "node-3", "pid": 81234}),
        ("[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog", {"rank": 1}),
        ("[E ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught", {"rank": 4}),
        ("RuntimeError: CUDA error", {"host": None, "rank": None}),
        ("torch.OutOfMemoryError: CUDA", {"host": None}),
    ],
)
def test_prefixes(line: str, expect: dict[str, object]) -> None:
    ctx = parse_context(line)
    for key, value in expect.items():
        assert getattr(ctx, key) == value, key


def test_ray_dedup_suffix_counts_repeats() -> None:
    assert parse_context("(WorkerDict pid=1) boom [repeated 7x across cluster]").repeats == 7


def test_normalise_strips_ansi_and_truncates() -> None:
    assert normalise(b"\x1b[31mred\x1b[0m text", max_chars=100) == "red text"
    out = normalise(b"a" * 50, max_chars=10)
    assert out.startswith("a" * 10) and out.endswith("[truncated]")
