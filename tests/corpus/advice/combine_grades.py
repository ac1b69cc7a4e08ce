"""The seventh to ninth advice sets' figure from each log's latest blind grade.

A later round regrades only the reports that changed; each log keeps its latest grade. Run from
the repository root: `python tests/corpus/advice/combine_grades.py`.
"""

from __future__ import annotations

import collections
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
# per set, its rounds oldest first: a later round's grade of a log replaces the earlier one
ROUNDS = {
    "advice7": ["round-5", "round-6"],
    "advice8": ["round-5"],
    "advice9": ["round-4", "round-5"],
}


def _yes(v: object) -> bool:
    return v is True or v == "yes"


def main() -> None:
    c: collections.Counter[str] = collections.Counter()
    unused: list[tuple[str, str]] = []
    for name, rounds in ROUNDS.items():
        grades: dict[str, dict] = {}
        for r in rounds:
            for e in yaml.safe_load((ROOT / "tests/corpus" / name / r / "review.yaml").read_text()):
                grades[e["file"]] = e
        for f, e in grades.items():
            c["logs"] += 1
            c["no wrong"] += not _yes(e["wrong"])
            c["decisive present"] += e["decisive"] == "present"
            c["values " + str(e["values"])] += 1
            inlog = [v for v in e.get("value_checks") or [] if _yes(v["in_log"])]
            c["values in the log"] += len(inlog)
            c["values in the log used"] += sum(_yes(v["used"]) for v in inlog)
            c["logs stating values"] += bool(inlog)
            c["logs using all they state"] += bool(inlog) and all(_yes(v["used"]) for v in inlog)
            unused += [(f, v["value"]) for v in inlog if not _yes(v["used"])]
    for k, v in c.items():
        print(f"{k}: {v}")
    print("unused values written in the log:", unused or "none")


if __name__ == "__main__":
    main()
