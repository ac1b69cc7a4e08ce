"""The scanner: chunk boundaries, both engines equal, parallel equals serial, windows, timeouts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.engine.models import Analysis
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CHUNK, CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from tests.conftest import RULES, make_rules_dir

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n}.00 GiB. GPU 0 has a total "
    "capacity of 79.25 GiB of which 1.21 GiB is free.\n"
)


def _summary(a: Analysis) -> list[tuple[object, ...]]:
    return [
        (
            f.rule_id,
            f.role,
            f.count,
            f.first_line,
            f.last_line,
            tuple(sorted(f.captures.items())),
            tuple(f.ranks),
        )
        for f in a.findings
    ]


def _run(compiled: CompiledLibrary, path: Path, **opts: object) -> Analysis:
    sources, _ = collect_sources([str(path)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(**opts))  # type: ignore[arg-type]


def test_hits_on_chunk_boundaries_have_exact_line_numbers(compiled: CompiledLibrary, tmp_path: Path) -> None:
    # Pad so that error lines straddle the 256 KiB chunk edges; compute the truth in Python.
    lines: list[str] = []
    size = 0
    expected: list[int] = []
    k = 0
    while size < 5 * CHUNK:
        edge = (size // CHUNK + 1) * CHUNK
        filler_len = edge - size - 40
        if filler_len > 1:
            lines.append("f" * (filler_len - 1) + "\n")
            size += filler_len
        k += 1
        line = OOM.format(n=k)
        lines.append(line)
        expected.append(len(lines))
        size += len(line)
    path = tmp_path / "edges.log"
    path.write_text("".join(lines))
    a = _run(compiled, path, jobs=1)
    f = a.root_cause
    assert f is not None
    assert f.count == len(expected)
    assert (f.first_line, f.last_line) == (expected[0], expected[-1])
    assert a.stats["lines"] == len(lines)


def test_line_numbers_when_hits_end_early_in_chunks_and_last_line_lacks_newline(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    # The scan counts newlines up to the last verified line and only the rest of the chunk after
    # it: hits early in a chunk, none in some chunks, and a final line without "\n".
    lines = [f"step {i} ok\n" for i in range(200_000)]
    expected = []
    for at in (0, 5, 20_000, 20_001, 150_000):
        lines[at] = OOM.format(n=at)
        expected.append(at + 1)
    lines.append(OOM.format(n=7).rstrip("\n"))
    expected.append(len(lines))
    path = tmp_path / "sparse.log"
    path.write_text("".join(lines))
    assert path.stat().st_size > 8 * CHUNK  # jobs=2 splits it
    for jobs in (1, 2):
        a = _run(compiled, path, jobs=jobs)
        f = a.root_cause
        assert f is not None
        assert f.count == len(expected)
        assert (f.first_line, f.last_line) == (expected[0], expected[-1])
        assert [e.line for e in f.evidence] == [*expected[:3], expected[-1]]
        assert a.stats["lines"] == len(lines)


@pytest.mark.slow  # both engines over the whole corpus
def test_hyperscan_and_regex_engines_give_identical_findings(
    compiled: CompiledLibrary, compiled_regex: CompiledLibrary, tmp_path: Path
) -> None:
    # Every fixture and baseline log of the library, each scanned by both engines.
    files = sorted(RULES.glob("*/*.log"))
    assert len(files) >= 4
    for f in files:
        fast, slow = _run(compiled, f, jobs=1), _run(compiled_regex, f, jobs=1)
        assert _summary(fast) == _summary(slow), f.name


def test_parallel_scan_equals_serial(compiled: CompiledLibrary, tmp_path: Path) -> None:
    block = "".join(f"(WorkerDict pid={i}, ip=10.0.0.{i % 8}) step {i} loss 0.1\n" for i in range(20_000))
    body = block + "[rank2]: " + OOM.format(n=1) + block + "[rank6]: " + OOM.format(n=2) + block
    path = tmp_path / "big.log"
    path.write_text(body * 3)
    assert path.stat().st_size > 16 * CHUNK
    serial, parallel = _run(compiled, path, jobs=1), _run(compiled, path, jobs=2)
    assert _summary(serial) == _summary(parallel)
    assert serial.stats["lines"] == parallel.stats["lines"] == body.count("\n") * 3
    assert serial.root_cause is not None and serial.root_cause.count == 6
    assert serial.root_cause.ranks == [2, 6]


WINDOW_RULE = """
id: pp-contiguous
version: 1
status: stable
failure_class: megatron.pp_noncontiguous_tensor
severity: error
title: Non-contiguous tensor in a pipeline broadcast
match:
  any: ['AssertionError$', 'AssertionError: (?P<msg>.+)']
  all: ['in _is_cuda_contiguous']
  not: ['handled by retry wrapper']
  window: 3
explanation: A tensor sent between pipeline stages was not contiguous.
remediation: Make the tensor contiguous before the broadcast.
"""


def test_window_all_and_not(tmp_path: Path) -> None:
    lib = load_library(make_rules_dir(tmp_path, {"megatron/pp-contiguous.yaml": WINDOW_RULE}))
    compiled = CompiledLibrary(lib, engine="hyperscan")
    log = tmp_path / "w.log"
    log.write_text(
        "AssertionError\n"  # 1: no _is_cuda_contiguous nearby -> not an anchor
        + "x\n" * 10
        + '  File "communication.py", line 55, in _is_cuda_contiguous\n'  # 12
        + "    assert tensor.is_contiguous()\n"  # 13
        + "AssertionError\n"  # 14: valid
        + "y\n" * 10
        + '  File "c.py", line 55, in _is_cuda_contiguous\n'  # 25
        + "AssertionError\n"  # 26: suppressed by the `not` line below
        + "handled by retry wrapper\n"
    )
    a = _run(compiled, log)
    assert a.root_cause is not None
    assert (a.root_cause.count, a.root_cause.first_line, a.root_cause.last_line) == (1, 14, 14)


def test_pathological_pattern_times_out_with_a_warning(tmp_path: Path) -> None:
    rule = """
    id: slow-rule
    version: 1
    status: experimental
    failure_class: unknown
    severity: error
    title: A catastrophically backtracking pattern
    match:
      any: ['(a|aa)+c']
    explanation: Only here to prove a bad pattern cannot hang a scan.
    remediation: Rewrite the pattern.
    """
    lib = load_library(make_rules_dir(tmp_path, {"misc/slow-rule.yaml": rule}))
    compiled = CompiledLibrary(lib, engine="regex")
    log = tmp_path / "p.log"
    log.write_text("a" * 80 + "\nnormal line\n")
    a = _run(compiled, log)
    assert a.root_cause is None
    assert any("timed out" in w for w in a.warnings)


@pytest.mark.slow  # compiles the library from scratch
@pytest.mark.parametrize("engine", ["hyperscan", "regex"])
def test_compiled_cache_is_reused(tmp_path: Path, engine: str) -> None:
    lib = load_library(RULES)
    CompiledLibrary(lib, engine=engine, cache_dir=tmp_path)
    files = sorted(tmp_path.glob("hs-*.db"))
    # one database for the rules, one for the context patterns (facts, framework detectors), one
    # for the sampled ones (marks on every line: Ray's worker prefix)
    assert len(files) == (3 if engine == "hyperscan" else 0)
    if files:
        before = [f.stat().st_mtime_ns for f in files]
        again = CompiledLibrary(lib, engine=engine, cache_dir=tmp_path)
        assert [f.stat().st_mtime_ns for f in files] == before
        assert again.engine == "hyperscan"


def test_context_patterns_scan_head_and_tail_only(compiled: CompiledLibrary, tmp_path: Path) -> None:
    # Facts and framework banners are searched in the first and last CONTEXT_BYTES of a plain
    # file; rules everywhere. Both engines follow the same policy (see the equality test).
    from app.engine.pipeline.scan import CONTEXT_BYTES

    filler = ("x" * 99 + "\n") * ((CONTEXT_BYTES + (2 << 20)) // 100)
    head = "  max_tokens_per_gpu .............................. 9216\n"
    middle = "  tensor_model_parallel_size ...................... 4\n"
    path = tmp_path / "ctx.log"
    path.write_text(head + filler + middle + filler + OOM.format(n=1))
    a = _run(compiled, path, jobs=1)
    assert a.stats["facts"].get("max_tokens_per_gpu") == 9216
    assert "tensor_model_parallel_size" not in a.stats["facts"]
    assert a.root_cause is not None and a.root_cause.rule_id == "cuda-out-of-memory"
    assert _summary(a) == _summary(_run(compiled, path, jobs=2))


def test_cache_survives_a_library_that_shifts_pattern_ids(tmp_path: Path) -> None:
    # The context database's pattern ids start after the rules' patterns; adding a rule shifts
    # them, so a cached database compiled for the old offset must not be reused.
    oom = (RULES / "cuda/cuda-out-of-memory.yaml").read_text()
    extra = WINDOW_RULE.replace("id: pp-contiguous", "id: pp-contiguous")
    log = tmp_path / "f.log"
    log.write_text("  max_tokens_per_gpu .............................. 9216\n" + OOM.format(n=1))
    cache = tmp_path / "cache"
    for name, rules in (
        ("a", {"cuda/cuda-out-of-memory.yaml": oom}),
        ("b", {"cuda/cuda-out-of-memory.yaml": oom, "megatron/pp-contiguous.yaml": extra}),
    ):
        (tmp_path / name).mkdir()
        root = make_rules_dir(tmp_path / name, rules)
        shutil.copy(RULES / "facts.yaml", root / "facts.yaml")
        compiled = CompiledLibrary(load_library(root), engine="hyperscan", cache_dir=cache)
        facts = _run(compiled, log).stats["facts"]
        # a shifted id would read another pattern's capture under this name (or none at all)
        assert facts["max_tokens_per_gpu"] == 9216, name
        assert facts["oom_requested"] == 1 << 30 and facts["oom_total"] > facts["oom_free"] > 0, name


@pytest.mark.slow  # compiles the library from scratch
def test_corrupt_cache_file_is_rebuilt(tmp_path: Path) -> None:
    lib = load_library(RULES)
    CompiledLibrary(lib, engine="hyperscan", cache_dir=tmp_path)
    for cache in tmp_path.glob("hs-*.db"):
        cache.write_bytes(b"garbage")
    c = CompiledLibrary(lib, engine="hyperscan", cache_dir=tmp_path)
    log = tmp_path / "x.log"
    log.write_text(OOM.format(n=3))
    assert _run(c, log).root_cause is not None


SIGNED_RULE = """
    id: ray-oom-table
    version: 1
    status: stable
    failure_class: ray.node_out_of_memory
    severity: error
    title: Ray killed a worker for memory
    confidence: 0.9
    match:
      any: ['Memory on the node \\(IP: (?P<ip>[\\d.]+)[^)]*\\) where the task .* was running was (?P<used>[\\d.]+)GB']
    signatures:
      - name: tail
        confidence: 0.7
        any: ['Refer to the documentation on how to address the out of memory issue']
      - name: wrapped
        confidence: 0.6
        any: ['RayTaskError\\(OutOfMemoryError\\)']
    explanation: The node ran out of host memory and Ray's memory monitor killed a worker.
    remediation: Lower the host memory the workers use.
"""
HEAD = (
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 10.0.0.7, ID: ab12) where the task (actor ID: 1) was running was 120.5GB / 128GB\n"
)
TAIL = "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/oom\n"


@pytest.fixture
def signed(tmp_path: Path) -> CompiledLibrary:
    root = make_rules_dir(tmp_path, {"ray/ray-oom-table.yaml": SIGNED_RULE})
    return CompiledLibrary(load_library(root), engine="regex")


def test_a_piece_of_the_message_matches_through_its_signature(
    signed: CompiledLibrary, tmp_path: Path
) -> None:
    tail_only = tmp_path / "tail.log"
    tail_only.write_text("step 7 loss 0.3\n" + TAIL)
    f = _run(signed, tail_only).findings[0]
    assert (f.rule_id, f.signatures, f.confidence, f.count) == ("ray-oom-table", ["tail"], 0.7, 1)
    assert f.captures == {}  # the tail captures nothing: the patches say what is missing
    wrapped = tmp_path / "wrapped.log"
    wrapped.write_text("ray.exceptions.RayTaskError(OutOfMemoryError): ray::train() (pid=1)\n")
    f = _run(signed, wrapped).findings[0]
    assert (f.signatures, f.confidence) == (["wrapped"], 0.6)


def test_whole_message_counts_once_with_the_main_captures(signed: CompiledLibrary, tmp_path: Path) -> None:
    both = tmp_path / "both.log"
    both.write_text("step 1\n" + HEAD + TAIL + "step 2\n" + HEAD + TAIL)
    f = _run(signed, both).findings[0]
    assert f.signatures == ["main", "tail"]
    assert f.confidence == 0.9  # the best signature's
    assert f.count == 2  # two occurrences, each seen by two signatures: not four
    assert f.captures == {"ip": "10.0.0.7", "used": "120.5"}
    assert [e.line for e in f.evidence] == [3, 4, 7, 8]


def test_signatures_are_checked_by_lint_and_schema(tmp_path: Path) -> None:
    from app.engine.ruledev.ruletest import lint
    from app.errors import RuleError

    root = make_rules_dir(tmp_path, {"ray/ray-oom-table.yaml": SIGNED_RULE})
    issues, _ = lint(load_library(root))
    unpinned = sorted(i.message for i in issues if "signature" in i.message)
    assert len(unpinned) == 2 and "'tail' has no fixture" in unpinned[0]
    dup = SIGNED_RULE.replace("name: wrapped", "name: tail")
    (tmp_path / "dup").mkdir()
    with pytest.raises(RuleError, match="signature names are unique"):
        load_library(make_rules_dir(tmp_path / "dup", {"ray/ray-oom-table.yaml": dup}))
