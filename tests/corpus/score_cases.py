"""Score device corpora (tests/corpus/gpu, tests/corpus/gloo: cases.yaml) case by case: the class,
and for hangs, desyncs and stragglers the rank(s) and phase the report names. `logtriage eval`
runs the same scoring (app.engine.ruledev.evaluation.evaluate_cases) with the rest of the corpus.

    python tests/corpus/score_cases.py tests/corpus/gpu tests/corpus/gloo

First-contact figures are kept in each corpus's first-contact.json (they were taken with an
earlier form of this script that counted a rank as named when the named set contained it; the
scoring now requires the named set to equal the expected one).
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.engine.ruledev.evaluation import Report, evaluate_cases
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary


def main(corpora: list[str]) -> int:
    compiled = CompiledLibrary(load_library(None))
    report = Report()
    for corpus in corpora:
        report.timeline += evaluate_cases(compiled, Path(corpus) / "cases.yaml")
    for corpus, sc in report.timeline_scores().items():
        print(
            f"{corpus}: class {sc['class_ok']}/{sc['runs']}; rank(s) named {sc['rank_ok']}/{sc['scored']}, "
            f"phase {sc['phase_ok']}/{sc['scored']}"
        )
        for c in (c for c in report.timeline if c.corpus == corpus):
            mark = "OK " if c.expected == c.predicted else "XX "
            tl = (
                f" rank={'ok' if c.rank_ok else 'NO'} phase={'ok' if c.phase_ok else 'NO'}" if c.scored else ""
            )
            print(f"  {mark} {c.case:30} {c.variant:9} exp={c.expected:26} got={c.predicted:26}{tl}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
