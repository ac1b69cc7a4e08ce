"""The trigger-kind registry (app/engine/pipeline/triggers.py): every kind is documented in
docs/rules.md and fires in a test; every rule field is documented there too."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.pipeline import triggers
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import Library, Rule
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from app.engine.timeline.model import Line, Timeline, Verdict
from tests.conftest import ROOT
from tests.servicekit import OOM

DOC = (ROOT / "docs" / "rules.md").read_text()


def _table(heading: str) -> dict[str, list[str]]:
    """The rows of the first table under `## heading`: first cell's `name` -> the other cells."""
    section = DOC.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([\w.]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_every_rule_field_is_documented() -> None:
    fields = {info.alias or name for name, info in Rule.model_fields.items()}
    documented = set(_table("Fields"))
    assert fields - documented == set(), "document these rule fields in docs/rules.md, ## Fields"
    assert documented - fields == set(), "docs/rules.md documents fields the rule model lacks"


def test_every_trigger_kind_is_documented_with_its_captures() -> None:
    rows = _table("Triggers")
    assert set(rows) == set(triggers.KINDS), "docs/rules.md ## Triggers: one row per kind"
    for name, kind in triggers.KINDS.items():
        stage, captures = rows[name][0], rows[name][1]
        assert stage == f"`{kind.stage}`", name
        assert set(re.findall(r"`(\w+)`", captures)) == set(kind.captures), name


def _log(tmp_path: Path, text: str) -> list:  # type: ignore[type-arg]
    path = tmp_path / "train.log"
    path.write_text(text)
    return collect_sources([str(path)])[0]


def _run(compiled: CompiledLibrary, tmp_path: Path, text: str, exit_code: int | None = None) -> set[str]:
    a = triage(
        sources=_log(tmp_path, text), compiled=compiled, options=TriageOptions(jobs=1, exit_code=exit_code)
    )
    return {f.rule_id for f in a.findings}


def _ds(step: int, skipped: int) -> str:
    return f"[Rank 0] step={step}, skipped={skipped}, lr=[0.0001], mom=[(0.9, 0.999)]"


def _metric_not_finite(compiled: CompiledLibrary, tmp_path: Path) -> set[str]:
    lines = [f"[rank0]: step {i} policy_loss {0.5 - i / 100:.3f} kl 0.0{i % 9} reward 0.3" for i in range(30)]
    lines += ["[rank0]: step 30 policy_loss nan kl nan reward 0.3"] * 2
    return _run(compiled, tmp_path, "\n".join(lines) + "\n")


def _metric_spike(compiled: CompiledLibrary, tmp_path: Path) -> set[str]:
    norms = [0.24, 0.27, 1.36, 1.28, 17.2, 7.1, 21.8]
    lines = [f"{{'loss': 0.5, 'grad_norm': {g}, 'epoch': 0.1{i}}}" for i, g in enumerate(norms)]
    return _run(compiled, tmp_path, "\n".join(lines) + "\n")


def _metric_steps_skipped(compiled: CompiledLibrary, tmp_path: Path) -> set[str]:
    lines = [
        f"{{'loss': {v}, 'learning_rate': 0.001, 'epoch': 0.0{i}}}" for i, v in enumerate([6.26, 0.0, 0.0])
    ]
    lines += [_ds(1000, 40), _ds(2000, 1995), "{'loss': 0.0, 'epoch': 0.08}"]
    return _run(compiled, tmp_path, "\n".join(lines) + "\n")


def _exit_status_masked(compiled: CompiledLibrary, tmp_path: Path) -> set[str]:
    return _run(compiled, tmp_path, OOM.format(gib="2.00"), exit_code=0)


def _verdict(kind: str) -> Callable[[CompiledLibrary, Path], set[str]]:
    """The timeline kinds: a verdict of the rule's trigger and class, as the timeline builds it."""

    def run(compiled: CompiledLibrary, tmp_path: Path) -> set[str]:
        rules = [r for r in compiled.library.active if r.trigger == kind]
        tl = Timeline(
            verdicts=[
                Verdict(
                    kind="x",
                    summary="rank 3 differs",
                    ranks=[3],
                    failure_class=r.failure_class,
                    seq=7,
                    evidence=[Line("r3.log", 9, "[rank3] all_reduce", None)],
                    trigger=kind,
                )
                for r in rules
            ]
        )
        found = triggers.fire(rules, "timeline", triggers.TriggerInput(scans=[], timeline=tl))
        assert all(m.captures == {"ranks": "3", "seq": "7", "summary": "rank 3 differs"} for m in found)
        return {m.rule.id for m in found}

    return run


EXERCISES: dict[str, Callable[[CompiledLibrary, Path], set[str]]] = {
    "exit_status_masked": _exit_status_masked,
    "metric_not_finite": _metric_not_finite,
    "metric_spike": _metric_spike,
    "metric_steps_skipped": _metric_steps_skipped,
    "collective_desync": _verdict("collective_desync"),
    "rank_exited": _verdict("rank_exited"),
    "rank_failed_first": _verdict("rank_failed_first"),
}


def test_every_trigger_kind_has_an_exercise() -> None:
    assert set(EXERCISES) == set(triggers.KINDS), "add an exercise below for each new trigger kind"


@pytest.mark.parametrize("kind", sorted(triggers.KINDS))
def test_each_trigger_kind_fires_its_rules(
    kind: str, compiled: CompiledLibrary, library: Library, tmp_path: Path
) -> None:
    ids = {
        lr.rule.id for lr in library.rules if lr.rule.trigger == kind and lr.rule.status.value != "deprecated"
    }
    assert ids, f"no active rule uses trigger {kind}"
    assert ids & EXERCISES[kind](compiled, tmp_path)
