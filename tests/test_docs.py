"""Docs that cannot drift: generated references must equal what the code generates now."""

from __future__ import annotations

from app.engine.pipeline.library import Library
from app.engine.ruledev.catalog import render_catalog
from tests.conftest import ROOT


def test_rule_catalog_is_current(library: Library) -> None:
    committed = (ROOT / "docs" / "rule-catalog.md").read_text()
    assert committed == render_catalog(library), "run: logtriage rules catalog > docs/rule-catalog.md"


def test_readme_opens_with_the_two_setup_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    fence = lines.index("```bash")
    assert lines[fence + 1].startswith("bash scripts/run.sh")
    assert lines[fence + 2].startswith("bash scripts/test.sh")
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_run_command_installs_only_what_serving_needs() -> None:
    """README: the run command installs the package alone (no dev extras, no system packages),
    the same install as the Dockerfile's; the dev tools come with the test command."""
    import re

    run = (ROOT / "scripts" / "run.sh").read_text()
    assert "scripts/setup.sh --serve" in run
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    serve_branch = setup.split('if [ "$MODE" = serve ]; then', 1)[1].split("\nfi\n", 1)[0]
    installs = re.findall(r"pip install .*", serve_branch)
    assert installs and all(i.rstrip().endswith("-e .") for i in installs), installs
    assert "apt-get" not in serve_branch and "[dev]" not in serve_branch
    assert re.search(r"pip install [^\n]*-e \.$", (ROOT / "Dockerfile").read_text(), re.M)
    # the dev tools are installed by the full set-up the test command runs
    assert "-e '.[dev]'" in setup.split('if [ "$MODE" = serve ]; then', 1)[1].split("\nfi\n", 1)[1]


def _contract_block() -> dict[str, set[str]]:
    """README's JSON contract: each `Name = { ... }` with the field names it lists (quoted words
    after `{`, `,` or a line start; values such as `"yaml"|"hydra"` follow a `:` or `|`)."""
    import re

    text = (ROOT / "README.md").read_text()
    block = text.split("## JSON contract", 1)[1].split("```", 2)[1]
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"^(\w+) = \{", block, re.M):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(block[i], 0)
            i += 1
        body = block[m.end() : i - 1]
        while re.search(r"\{[^{}]*\}", body):
            body = re.sub(r"\{[^{}]*\}", "", body)  # nested objects are described apart
        out[m.group(1)] = set(re.findall(r'(?:^|[{,])\s*"(\w+)"(?!\s*\|)', body, re.M))
    return out


def test_readme_json_contract_names_the_fields_the_code_emits(compiled) -> None:  # type: ignore[no-untyped-def]
    from app.engine.models import (
        Action,
        Analysis,
        Fact,
        Finding,
        OutcomeHistory,
        Patch,
        PossibleCause,
        SignalLine,
    )
    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.triage import TriageOptions, triage

    block = _contract_block()
    assert set(block["Analysis"]) == set(Analysis.model_fields)
    assert set(block["Finding"]) == set(Finding.model_fields)
    assert set(block["Patch"]) == set(Patch.model_fields)
    assert set(block["PossibleCause"]) == set(PossibleCause.model_fields)
    assert set(block["Fact"]) == set(Fact.model_fields)
    assert set(block["Action"]) == set(Action.model_fields)
    assert set(block["OutcomeHistory"]) == set(OutcomeHistory.model_fields)
    assert set(block["Signal"]) == set(SignalLine.model_fields)
    # the timeline's dicts, from a real run that fills every part of it
    d = ROOT / "tests" / "corpus" / "gpu" / "skipped-collective"
    sources, _ = collect_sources([str(d / "console.log")])
    tl = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1)).timeline
    assert tl is not None
    assert set(block["Timeline"]) == set(tl)
    assert set(block["Verdict"]) == set(tl["verdict"])
    assert set(block["RankState"]) == set(tl["ranks"][0])
    assert set(block["Collective"]) == set(tl["collectives"][0])
