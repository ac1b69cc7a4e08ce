"""Accuracy on the labelled corpus may not fall below the level reached.

`real/`: logs produced here by running the real software (torch 2.13 CPU/gloo, torchrun, Ray).
`public/`: a held-out set of publicly posted log excerpts, collected without looking at the rules;
85.2% at first contact (tests/corpus/public/first-contact.json), and not tuned on since.
"""

from __future__ import annotations

from app.engine.evaluation import evaluate_corpus
from app.engine.scan import CompiledLibrary
from tests.conftest import ROOT

FLOORS = {"real": 1.0, "public": 0.85}


def test_corpus_accuracy_floors(compiled: CompiledLibrary) -> None:
    report = evaluate_corpus(compiled, ROOT / "tests" / "corpus")
    by_split = report.by_split()
    assert set(FLOORS) <= set(by_split)
    errors = [
        f"{c.file}: expected {c.expected}, got {c.predicted}"
        for c in report.cases
        if c.expected != c.predicted
    ]
    for split, floor in FLOORS.items():
        assert by_split[split] >= floor, f"{split} accuracy {by_split[split]:.3f} < {floor}\n" + "\n".join(
            errors
        )


def test_a_confident_prediction_is_rarely_wrong(compiled: CompiledLibrary) -> None:
    # Never guess: when logtriage names a class (not `unknown`), it should be right.
    report = evaluate_corpus(compiled, ROOT / "tests" / "corpus")
    named = [c for c in report.cases if c.predicted != "unknown"]
    wrong = [c for c in named if c.predicted != c.expected]
    assert len(named) >= 50
    assert len(wrong) / len(named) <= 0.03, [c.file for c in wrong]
