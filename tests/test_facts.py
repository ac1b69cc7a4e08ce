"""The facts an analysis reads (issue 22, scope 1): each typed, with the line it came from or the
expression it was computed by, in the JSON, the reports and the web page; redacted like evidence."""

from __future__ import annotations

from pathlib import Path

from app.engine.models import Analysis
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from app.render.markdown import render_markdown
from app.render.text import render_text
from tests.conftest import make_rules_dir

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 6.25 GiB is free. Including non-PyTorch memory, this process has 31.80 GiB memory in use. "
    "Of the allocated memory 30.10 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but "
    "unallocated."
)


def _analyse(compiled: CompiledLibrary, log: Path) -> Analysis:
    sources, _ = collect_sources([str(log)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))


def test_each_fact_has_its_type_value_and_line(compiled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text("[rank0] step 1 loss 2.1\n" * 3 + OOM + "\n")
    a = _analyse(compiled, log)
    facts = {f.name: f for f in a.facts}
    asked = facts["oom_requested"]
    assert (asked.type, asked.value, asked.text, asked.file, asked.line) == (
        "size",
        20 * 2**30,
        "20.00 GiB",
        str(log),
        4,
    )
    # total - free - this process, computed after the scan: no line of its own
    other = facts["oom_other_processes"]
    assert other.line is None and other.expression and "oom_total" in other.expression
    assert other.value == facts["oom_total"].value - facts["oom_free"].value - facts["oom_this_process"].value
    assert other.text.endswith("GiB")
    # the JSON contract carries them
    dumped = a.model_dump(mode="json")["facts"]
    asked_json = next(d for d in dumped if d["name"] == "oom_requested")
    assert {"name": "oom_requested", "line": 4, "file": str(log)}.items() <= asked_json.items()


def test_reports_list_the_facts_with_where_they_came_from(compiled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text(OOM + "\n")
    a = _analyse(compiled, log)
    md = render_markdown(a)
    section = md.split("## Facts read from the log", 1)[1]
    assert f"| `oom_free` | 6.25 GiB | {log}:1 |" in section
    assert "computed: `" in section
    text = render_text(a)
    assert "FACTS READ FROM THE LOG" in text and "oom_free = 6.25 GiB" in text


def test_a_log_without_facts_has_no_facts_section(compiled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    a = _analyse(compiled, log)
    assert a.facts == [] and "Facts read from the log" not in render_markdown(a)


def test_a_fact_is_redacted_like_an_evidence_line(tmp_path: Path) -> None:
    root = make_rules_dir(tmp_path, {})
    facts = root / "facts.yaml"
    facts.write_text(
        facts.read_text() + "  launch_env:\n    type: str\n    patterns: ['launch env (?P<value>\\S+)']\n"
    )
    compiled = CompiledLibrary(load_library(root), engine="regex")
    token = "ghp_" + "Kq9Zt3Wm8Ln2" * 3
    log = tmp_path / "train.log"
    log.write_text(f"launch env GITHUB_TOKEN={token}\nstep 1 loss 2.0\n")
    a = _analyse(compiled, log)
    (fact,) = [f for f in a.facts if f.name == "launch_env"]
    assert token not in fact.text and token not in str(fact.value) and fact.line == 1
    # redacted where it is read, so no step, patch or stats value built from it carries it
    assert token not in str(a.stats["facts"])
    assert any("redacted secrets" in w for w in a.warnings)
