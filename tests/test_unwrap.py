"""Rows a terminal wrapped are joined back (app/engine/pipeline/unwrap.py) and scanned again, once."""

from __future__ import annotations

from pathlib import Path

from app.engine.models import Analysis
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from app.engine.pipeline.unwrap import joined_lines, wrap_width
from app.engine.ruledev.mutate import wrapped

KV = (
    "(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len "
    "(100000), (4.26 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(4.25 GiB). Based on the available memory, the estimated maximum model length is 99840."
)
ECC = "(WorkerDict pid=9, ip=10.0.0.3) RuntimeError: CUDA error: uncorrectable ECC error encountered, compile with TORCH_USE_CUDA_DSA to enable device-side assertions."


def _blocks(text: str) -> list[tuple[int, bytes]]:
    return [(0, text.encode())]


def _run(compiled: CompiledLibrary, path: Path) -> Analysis:
    sources, _ = collect_sources([str(path)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


def test_rows_cut_at_one_width_are_joined_with_their_line_numbers() -> None:
    text = "INFO starting\n" + wrapped(KV, 80) + "INFO done\n"
    groups = joined_lines(_blocks(text))
    assert len(groups) == 1
    g = groups[0]
    assert (g.first, g.last) == (2, 2 + len(KV) // 80)
    assert g.text.decode() == KV


def test_an_unwrapped_log_is_left_alone() -> None:
    # one longest line is any log's longest line, not a terminal's width
    assert joined_lines(_blocks("short\n" + KV + "\nnext line\n")) == []
    assert wrap_width([10, 20, 90]) is None
    assert wrap_width([70, 90, 90, 30]) == 90
    # rows narrower than a terminal are ordinary short lines
    assert wrap_width([40, 40, 40]) is None


def test_repeated_full_width_lines_of_one_logger_are_not_joined() -> None:
    line = "[2026-11-23 10:00:01] INFO trainer.py:88 step done, throughput 1234.5 tokens/s, mfu 0.41"
    text = "\n".join([line] * 4 + ["[2026-11-23 10:00:09] INFO trainer.py:90 saving"]) + "\n"
    assert joined_lines(_blocks(text)) == []


def test_a_wrapped_message_is_found_at_its_first_row(compiled: CompiledLibrary, tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO 06-28 06:11:45 loading weights\n" + wrapped(KV, 64))
    a = _run(compiled, log)
    assert a.root_cause is not None
    assert a.root_cause.rule_id == "vllm-kv-cache-insufficient"
    assert a.root_cause.first_line == 2
    assert a.root_cause.captures.get("kv_available") == "4.25 GiB"


def test_a_sentence_whole_in_one_row_is_not_counted_twice(compiled: CompiledLibrary, tmp_path: Path) -> None:
    # the ECC sentence fits in the first 100-column row; the joined line holds it again
    log = tmp_path / "rank2.log"
    log.write_text(wrapped(ECC, 100) + wrapped(ECC, 100))
    a = _run(compiled, log)
    ecc = [f for f in a.findings if f.rule_id == "cuda-uncorrectable-ecc"]
    assert len(ecc) == 1
    assert ecc[0].count == 2
    assert (ecc[0].first_line, ecc[0].last_line) == (1, 3)
