"""Sampled detectors and facts (`detect_sampled`, `patterns_sampled`): marks a job stamps on every
line (Ray's worker prefix) are searched for in a file's first SAMPLE_HEAD_BYTES and last
METRIC_TAIL_BYTES only, by either engine, whole or in parallel ranges, plain or compressed."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from app.engine.pipeline import scan as scan_module
from app.engine.pipeline.ingest import ByteBudget, collect_sources
from app.engine.pipeline.library import RuleError, load_library
from app.engine.pipeline.scan import (
    CompiledLibrary,
    FileScan,
    scan_range,
    scan_source,
    split_points,
)
from tests.conftest import RULES, make_rules_dir

PREFIXED = "(WorkerDict pid=312563, ip=172.19.230.131) step 3 done\n"
FILLER = "2025-05-01 10:00:00,000 INFO trainer.py:88 -- waiting for the next batch of rollouts\n"


def _filler(nbytes: int) -> str:
    return FILLER * (nbytes // len(FILLER) + 1)


def _scan(compiled: CompiledLibrary, path: Path) -> FileScan:
    sources, _ = collect_sources([str(path)])
    return scan_source(compiled, sources[0], budget=ByteBudget(0))


def _scan_parts(compiled: CompiledLibrary, path: Path, parts: int) -> FileScan:
    sources, _ = collect_sources([str(path)])
    scans = [scan_range(compiled, sources[0], a, b) for a, b in split_points(path, parts)]
    whole = scans[0]
    for later in scans[1:]:
        whole.merge(later)
    return whole


def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


# zones of a few KiB: the regex engine (every pattern on every line) takes minutes a MiB
HEAD, TAIL = 4 << 10, 16 << 10


@pytest.fixture(autouse=True)
def small_zones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_module, "SAMPLE_HEAD_BYTES", HEAD)
    monkeypatch.setattr(scan_module, "METRIC_TAIL_BYTES", TAIL)


@pytest.fixture(params=["hyperscan", "regex"])
def engine_compiled(request: pytest.FixtureRequest, compiled: CompiledLibrary) -> CompiledLibrary:
    if request.param == "hyperscan":
        return compiled
    return request.getfixturevalue("compiled_regex")  # type: ignore[no-any-return]


def test_the_prefix_moved_out_of_the_streamed_patterns(compiled: CompiledLibrary) -> None:
    # the point of the tier: no pattern on Ray's worker prefix is searched in every chunk
    sampled = {e.text for e in compiled.entries if e.owner == "ray_prefix_ip"}
    assert sampled and compiled.sample_matcher is not None
    assert {"ray", "verl", "ray_prefix_ip"} <= compiled.sample_owners
    lib = compiled.library
    ray = next(f for f in lib.frameworks if f.name == "ray")
    assert not any("pid=" in p for p in ray.detect) and any("pid=" in p for p in ray.detect_sampled)


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_prefix_in_the_head_or_tail_is_found_with_its_line(
    engine_compiled: CompiledLibrary, tmp_path: Path, where: str
) -> None:
    body = _filler(3 * TAIL)
    text = PREFIXED + body if where == "head" else body + PREFIXED + FILLER * 3
    path = tmp_path / "job.log"
    path.write_text(text)
    scan = _scan(engine_compiled, path)
    assert "ray" in scan.frameworks and "verl" in scan.frameworks
    assert scan.facts["ray_prefix_ip"] == ("172.19.230.131", _line_of(text, PREFIXED))
    # cut in ranges (`--jobs`), the head belongs to the first and the tail to the last
    parts = _scan_parts(engine_compiled, path, 3)
    assert parts.facts["ray_prefix_ip"] == scan.facts["ray_prefix_ip"]
    assert {"ray", "verl"} <= parts.frameworks.keys()


def test_the_first_sighting_wins_and_the_middle_is_not_searched(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    head_line = "(TaskRunner pid=7, ip=10.0.0.1) start\n"
    text = (
        head_line
        + _filler(HEAD * 2)
        + "(TaskRunner pid=8, ip=10.0.0.2) middle\n"
        + _filler(2 * TAIL)
        + "(TaskRunner pid=9, ip=10.0.0.3) end\n"
    )
    path = tmp_path / "job.log"
    path.write_text(text)
    assert _scan(compiled, path).facts["ray_prefix_ip"] == ("10.0.0.1", 1)
    middle_only = tmp_path / "middle.log"
    middle_only.write_text(_filler(HEAD * 2) + "(TaskRunner pid=8, ip=10.0.0.2) middle\n" + _filler(2 * TAIL))
    scan = _scan(compiled, middle_only)
    # the policy, stated: a mark only in the middle of a file is not searched for
    assert "ray_prefix_ip" not in scan.facts and "ray" not in scan.frameworks
    # while a streamed detector in the same place is found (the context zone covers it)
    streamed = tmp_path / "streamed.log"
    streamed.write_text(
        _filler(HEAD * 2)
        + '  File "/usr/lib/python3/site-packages/ray/_private/worker.py", line 2, in get\n'
        + _filler(2 * TAIL)
    )
    assert "ray" in _scan(compiled, streamed).frameworks


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_compressed_stream_is_sampled_alike(compiled: CompiledLibrary, tmp_path: Path, where: str) -> None:
    body = _filler(3 * TAIL)
    text = PREFIXED + body if where == "head" else body + PREFIXED + FILLER
    plain = tmp_path / "job.log"
    plain.write_text(text)
    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    a, b = _scan(compiled, plain), _scan(compiled, packed)
    assert (
        b.facts["ray_prefix_ip"] == a.facts["ray_prefix_ip"] == ("172.19.230.131", _line_of(text, PREFIXED))
    )
    assert {"ray", "verl"} <= b.frameworks.keys()


def test_sampled_patterns_load_check_and_refuse_unknown_keys(tmp_path: Path) -> None:
    oom = (RULES / "cuda/cuda-out-of-memory.yaml").read_text()
    root = make_rules_dir(tmp_path, {"cuda/cuda-out-of-memory.yaml": oom})
    facts = (RULES / "facts.yaml").read_text()

    def with_fact(spec: str) -> None:
        (root / "facts.yaml").write_text(facts + "  job_ip:\n    type: str\n" + spec)

    with_fact("    patterns_sampled:\n      - ' pid=\\d+, ip=(?P<value>[\\d.]+)\\) '\n")
    fact = next(f for f in load_library(root).facts if f.name == "job_ip")
    assert fact.sampled and not fact.patterns
    with_fact("    pattern_sampled: ['x(?P<value>y)']\n")
    with pytest.raises(RuleError, match="unknown keys"):
        load_library(root)
    with_fact("    patterns_sampled: ['ip=(\\d+)']\n")
    with pytest.raises(RuleError, match="must capture `value`"):
        load_library(root)


def test_a_fact_whose_optional_prefix_holds_the_value_records_nothing_without_it(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    # nccl_ib_error_host's host prefix is optional for the matcher's sake: without it the line
    # names no host, and no empty value is recorded in its place
    bare = tmp_path / "bare.log"
    bare.write_text("NCCL WARN NET/IB : Got completion from peer 10.0.0.2<54321> with error 12\n")
    assert "nccl_ib_error_host" not in _scan(compiled, bare).facts
    full = tmp_path / "full.log"
    full.write_text(
        "x\nh100-28:238:1313 [0] transport/net_ib.cc:2451 NCCL WARN NET/IB : Got completion from peer 10.0.0.2\n"
    )
    assert _scan(compiled, full).facts["nccl_ib_error_host"] == ("h100-28", 2)


def test_docs_name_every_derived_fact_and_the_sampled_keys() -> None:
    from app.engine.pipeline.library import DERIVED_FACTS

    doc = (Path(__file__).resolve().parents[1] / "docs" / "rules.md").read_text()
    missing = [name for name in DERIVED_FACTS if f"`{name}`" not in doc]
    assert missing == [], f"docs/rules.md: document these derived facts: {missing}"
    for key in ("patterns_sampled", "detect_sampled"):
        assert f"`{key}`" in doc


def test_lint_names_a_streamed_pattern_that_matches_most_lines_of_a_healthy_log(tmp_path: Path) -> None:
    import shutil

    from app.engine.ruledev.ruletest import every_line_marks, lint

    oom = (RULES / "cuda/cuda-out-of-memory.yaml").read_text()
    root = make_rules_dir(tmp_path, {"cuda/cuda-out-of-memory.yaml": oom})
    shutil.copytree(RULES / "_baseline", root / "_baseline")
    facts = (RULES / "facts.yaml").read_text()
    # the Ray actor on each line of the baseline's healthy Ray run ("(Learner pid=1108) ...")
    actor = "  job_actor:\n    type: str\n    {key}:\n      - '\\((?P<value>\\w+) pid=\\d+\\) '\n"
    (root / "facts.yaml").write_text(facts + actor.format(key="patterns"))
    issues, _ = lint(load_library(root))
    flagged = [i for i in issues if i.rule_id == "facts.yaml:job_actor"]
    assert len(flagged) == 1 and flagged[0].level == "warning"
    assert "ray-actors-healthy.log" in flagged[0].message and "`patterns_sampled`" in flagged[0].message
    (root / "facts.yaml").write_text(facts + actor.format(key="patterns_sampled"))
    assert not [i for i in every_line_marks(load_library(root)) if i.rule_id == "facts.yaml:job_actor"]
    # and the project's own library has none
    assert every_line_marks(load_library(RULES)) == []


def test_megatron_iteration_facts_are_read_from_the_head_or_else_the_tail(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    def it(n: int, lr: str, scale: str) -> str:
        return (
            f" [2026-11-20 10:00:{n % 60:02d}] iteration {n:8d}/  500000 | consumed samples: {n * 256:12d} |"
            f" elapsed time per iteration (ms): 911.6 | learning rate: {lr} | global batch size:   256 |"
            f" lm loss: 2.888611E+00 | loss scale: {scale} | grad norm: 0.860 |\n"
        )

    early = tmp_path / "early.log"
    early.write_text(
        it(1, "1.000000E-07", "65536.0") + _filler(3 * TAIL) + it(900, "3.000000E-04", "65536.0")
    )
    scan = _scan(compiled, early)
    assert scan.facts["megatron_lr"] == ("1.000000E-07", 1)
    assert scan.facts["fp16_training"] == ("loss scale", 1)
    late = tmp_path / "late.log"
    text = _filler(3 * TAIL) + it(900, "3.000000E-04", "1.0") + FILLER
    late.write_text(text)
    scan = _scan(compiled, late)
    assert scan.facts["megatron_lr"] == ("3.000000E-04", _line_of(text, "iteration      900"))
    assert "fp16_training" not in scan.facts  # a scale of 1.0 is bf16's
