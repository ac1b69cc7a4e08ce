"""Launcher prefixes: each finding knows actor, pid, ip, rank and host."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline import lines
from app.engine.pipeline.lines import LineContext, normalise, parse_context


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


def _parse_context_unoptimised(text: str, *, max_prefixes: int = 4) -> LineContext:
    """parse_context without its shortcuts: every prefix pattern tried, every search run."""
    ctx = LineContext()
    unfenced = text.lstrip("`")
    rest = unfenced
    for _ in range(max_prefixes):
        for kind, pat in lines._PREFIXES:
            m = pat.match(rest)
            if not m:
                continue
            g = m.groupdict()
            if kind == "pdsh" and g["host"].lower().endswith(lines._NOT_HOSTS_SUFFIX):
                continue
            if g.get("rank") is not None and ctx.rank is None:
                ctx.rank = int(g["rank"])
            if g.get("pid"):
                ctx.pid = int(g["pid"])
            if g.get("ip"):
                ctx.ip = g["ip"]
            if g.get("actor"):
                ctx.actor = g["actor"]
            if g.get("host") and ctx.host is None:
                ctx.host = g["host"]
            rest = rest[m.end() :]
            break
        else:
            break
    if rest is unfenced:
        rest = text
    nm = lines._NCCL.search(rest)
    if nm:
        ctx.host = ctx.host or nm.group("host")
        ctx.pid = ctx.pid or int(nm.group("pid"))
    if ctx.rank is None:
        rm = lines._RANK_WORD.search(rest)
        if rm:
            ctx.rank = int(rm.group("rank") or rm.group("rank2"))
    rep = lines._REPEATED.search(rest)
    if rep:
        ctx.repeats = int(rep.group("n"))
    ctx.message = rest
    return ctx


TRICKY = [
    "",
    "[",
    "(",
    "\u0661\u0662: boom",  # Arabic-Indic digits are \d: an srun rank
    "\u0662\u0660\u0662\u0664-01-01 10:00:00 boom",
    "[2024-05-01 10:00:00,123] [rank3]: worker-7: boom",
    "2024-05-01T10:00:00.5 node-3:81234:81240 [3] NCCL WARN x",
    "worker-3: node-4: [1,2]<stdout>: 7: (pid=9) [default1]: x",
    "RuntimeError2: not a host",
    "ValueError3x: not a host either",
    "x NCCL ] NCCL rank=5 [repeated 2x across cluster]",
    "Rank 3 [Rank 4] rank:5 [repeated 12x across cluster]  ",
    "a.b-c:1:2 [0] NCCL INFO ok [rank 9]",
    "\u00e9node-1: ok",
    "(ActorTrain(actor_train-3) pid=77, ip=10.1.1.1, repeated 3x) boom",
]


def test_shortcuts_change_no_context() -> None:
    # The first-character dispatch and the literal pre-checks only skip work that cannot match.
    root = Path(__file__).resolve().parents[1]
    texts = list(TRICKY)
    for path in sorted({*root.glob("tests/corpus/*/*.log"), *root.glob("rules/*/*.log")}):
        texts.extend(normalise(raw, max_chars=16_384) for raw in path.read_bytes().split(b"\n"))
    assert len(texts) > 1000
    for text in texts:
        for variant in (text, text.lstrip(), text[:40]):
            assert parse_context(variant) == _parse_context_unoptimised(variant), variant


def test_a_backtick_before_the_prefix_of_a_pasted_log_is_skipped() -> None:
    # verl-project/verl#5414 pasted its log after an inline-code backtick
    ctx = parse_context(
        "`(WorkerDict pid=3934735) [rank7]:[E226 16:00:37.342220332 ProcessGroupNCCL.cpp:685] [Rank 1] x"
    )
    assert (ctx.rank, ctx.pid) == (7, 3934735)
    assert parse_context("```").message == "```"
