"""The literal gate in front of the timeline's wide alternations must never change a verdict.

`Gated.search` skips the regex when none of its literals is in the line; that is only sound if every
match of the pattern contains a literal (or sits on a blank/indented line). This checks it the hard
way: every line of every real log the project holds, plus variants that move the words around.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.engine.timeline import model as timeline_model
from app.engine.timeline.gate import Gated, gated

ROOT = Path(__file__).resolve().parent.parent


def _corpus_lines() -> list[str]:
    files = [
        *sorted((ROOT / "tests" / "corpus").rglob("*.log")),
        *sorted((ROOT / "rules").rglob("*.log")),
        *sorted((ROOT / "examples").rglob("*.log")),
    ]
    seen: set[str] = set()
    for path in files:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            seen.add(line)
    return sorted(seen)


def _variants(line: str) -> list[str]:
    stripped = line.strip()
    return [
        line,
        line.upper(),
        line.lower(),
        line.swapcase(),
        stripped,
        "  " + stripped,
        "\t" + stripped,
        "[rank3]: " + stripped,
        "\x1b[31m" + stripped + "\x1b[0m",
        stripped[len(stripped) // 2 :],
        stripped[: len(stripped) // 2],
    ]


LINES = _corpus_lines()
GATES = {"failure": timeline_model._FAILURE, "noise": timeline_model._NOISE}


def test_the_corpus_is_big_enough_to_mean_something() -> None:
    assert len(LINES) > 5000


@pytest.mark.slow  # every line of the corpus
@pytest.mark.parametrize("name", sorted(GATES))
def test_gate_agrees_with_the_plain_regex_on_every_corpus_line(name: str) -> None:
    gate = GATES[name]
    plain = re.compile(gate.pattern.pattern, re.I)
    hits = 0
    disagreements = []
    for line in LINES:
        for text in _variants(line):
            want = plain.search(text) is not None
            got = gate.search(text) is not None
            hits += want
            if want != got:
                disagreements.append(text)
    assert not disagreements[:20]
    # The gate must have been exercised on both sides, not trivially agreeing on "no match".
    assert hits > 100


def test_a_gate_with_a_missing_literal_is_caught_by_this_check() -> None:
    # "exception" dropped from the literals: lines that say only "Exception" now slip through.
    broken = Gated(re.compile(r"Error|Exception", re.I), ("error",))
    plain = re.compile(r"Error|Exception", re.I)
    missed = [t for t in LINES if plain.search(t) and not broken.search(t)]
    assert missed


def test_leading_space_lets_anchored_alternatives_through() -> None:
    gate = gated(r'^\s+File "', ("traceback",), leading_space=True)
    assert gate.search('  File "train.py", line 3, in <module>')
    assert not gate.search('File "train.py"')
    assert gated(r'^\s+File "', ("traceback",)).search('  File "x"') is None


def test_literals_must_be_lowercase() -> None:
    with pytest.raises(ValueError):
        gated("Error", ("Error",))


def test_the_rank_gate_never_hides_a_rank_parse_context_finds() -> None:
    """`may_name_rank` lets the timeline skip lines that cannot name a rank: sound only if every
    line (and variant) parse_context gives a rank to passes it."""
    from app.engine.pipeline.lines import may_name_rank, parse_context

    lines = _corpus_lines()
    extra = [
        "[1,3]<stderr>: boom",
        "[default3]: boom",
        "[rank12]: boom",
        "12: boom",
        "(pid=1) 3: boom",
        "node-3: [rank2]: x",
        "worker-1: rank 4 failed",
        "[Rank 5] Watchdog",
        "rank=6 ok",
    ]
    ranked = 0
    for line in lines + extra + [v for x in extra for v in _variants(x)]:
        if parse_context(line).rank is not None:
            ranked += 1
            assert may_name_rank(line), line
    assert ranked > 100  # the corpus exercises it


def test_the_srun_gate_finds_what_its_plain_form_finds() -> None:
    """The srun part of `may_name_rank` is `\\d:\\s` written to start at a colon (speed): it must
    find a match in exactly the strings the plain pattern does, Unicode digits and spaces too."""
    import random
    import re

    from app.engine.pipeline.lines import _SRUN_RANK

    plain = re.compile(r"\d:\s")
    rng = random.Random(0)
    alphabet = "09\u0663\u096a: \t\u00a0\u2003\x1c\x85a\n"  # ASCII, Arabic-Indic, Devanagari digits
    for _ in range(50_000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        assert (_SRUN_RANK.search(s) is None) == (plain.search(s) is None), repr(s)
