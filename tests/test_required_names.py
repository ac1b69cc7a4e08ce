"""Derived facts whose required names the log lacks are skipped unevaluated
(app.engine.pipeline.expr.required_names): an expression missing one of them never gives a value,
and the analyses of the corpora keep every derived fact they had."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine.pipeline import triage as triage_mod
from app.engine.pipeline.expr import ExprError, Missing, Scope, evaluate, names_in, required_names
from app.engine.pipeline.ingest import Source
from app.engine.pipeline.library import Library
from app.engine.pipeline.scan import CompiledLibrary
from tests.conftest import ROOT


def test_required_names_of_each_shape() -> None:
    assert required_names("a * b + c") == {"a", "b", "c"}
    assert required_names("a if has('b') else c") == set()
    assert required_names("x if y > 1 else z") == {"y"}
    assert required_names("p and q") == {"p"}
    assert required_names("lo < v < hi") == {"lo", "v"}
    assert required_names("round(gib / 2, 1)") == {"gib"}
    assert required_names("has('k') and k > 2") == set()
    assert required_names("-n") == {"n"}
    assert required_names("[u, w]") == {"u", "w"}
    assert required_names("True or None") == set()


def test_the_library_keeps_each_derived_facts_required_names(library: Library) -> None:
    derived = [s for s in library.facts if s.value is not None]
    assert derived and all(s.required == required_names(s.value) for s in derived)
    assert sum(bool(s.required) for s in derived) > 100


def test_a_missing_required_name_never_gives_a_value(library: Library) -> None:
    exprs = [spec.value for spec in library.facts if spec.value is not None]
    assert len(exprs) > 100
    rnd = random.Random(7)
    skipped = 0
    for expr in exprs:
        names = sorted(names_in("{" + expr + "}"))
        for _ in range(6):
            facts = {
                n: rnd.choice([0, 1, 2, 7, 80.5, "GB", "GiB", "vllm", "3"])
                for n in names
                if rnd.random() < 0.7
            }
            if required_names(expr) <= facts.keys():
                continue
            skipped += 1
            with pytest.raises((Missing, ExprError, TypeError, ValueError, ZeroDivisionError)):
                value = evaluate(expr, Scope(facts=facts))
                if value is None:  # the expression's own "no value": counts as none
                    raise Missing("none")
    assert skipped > 200


@pytest.mark.slow
def test_the_corpora_keep_their_derived_facts(
    compiled: CompiledLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = sorted(p for d in ("tests/corpus", "rules") for p in (ROOT / d).rglob("*.log"))[::3]
    derived = {s.name for s in compiled.library.facts if s.value is not None}
    seen = 0

    def facts_of(path: Path) -> list[tuple[str, str]]:
        a = triage_mod.triage(sources=[Source(name=path.name, path=path)], compiled=compiled)
        return [(f.name, f.text) for f in a.facts if f.name in derived]

    for path in logs:
        fast = facts_of(path)
        with monkeypatch.context() as m:
            # every expression evaluated, as before it was skipped
            m.setattr(
                compiled.library, "facts", [replace(s, required=frozenset()) for s in compiled.library.facts]
            )
            slow = facts_of(path)
        assert fast == slow, path.name
        seen += bool(fast)
    assert seen > 50
