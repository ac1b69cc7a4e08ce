"""The per-frame 4-gram filters a blob carries (app.blobstore.grams): a search reads only the
frames they let through, and finds exactly what reading every frame finds."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.blobstore import BlobStore, PendingBlob, StagingWriter, grams, open_blob_store
from app.blobstore import search as S
from app.blobstore.window import FrameIndex
from app.settings import Settings
from tests.s3kit import MotoS3

FAR = 1e18  # a deadline that never passes


def make_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> BlobStore:
    if backend == "directory":
        return open_blob_store(Settings(data_dir=tmp_path / "data"))
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    bucket: str = request.getfixturevalue("s3_bucket")
    return open_blob_store(
        Settings(data_dir=tmp_path / "data", blob_url=f"s3://{bucket}/grams", s3_endpoint_url=moto.endpoint)
    )


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return open_blob_store(Settings(data_dir=tmp_path / "data"))


def put(store: BlobStore, data: bytes, *, frame_bytes: int, chunk: int, bits: int = 18) -> PendingBlob:
    with StagingWriter(store.tmp_dir, frame_bytes=frame_bytes, gram_bits=bits) as w:
        for i in range(0, len(data), chunk):
            w.write(data[i : i + chunk])
        pending = w.finish()
    store.commit(pending)
    return pending


def without_filters(index: Any) -> list[list[int]]:
    """The same index with the filters' offset left out: the search reads every frame."""
    out = [list(e) for e in index]
    out[-1] = out[-1][:4]
    return out


WORDS = ["alpha", "Beta", "gamma", "NCCL", "watchdog", "timeout", "error", "straße", "ſtrange", "x" * 300]


def a_log(rng: random.Random, n: int, *, trailing_newline: bool) -> bytes:
    lines = []
    for i in range(n):
        r = rng.random()
        if r < 0.003:
            lines.append("L" + "y" * rng.randint(3000, 9000) + " tail")  # crosses frames
        elif r < 0.006:
            lines.append(f"step {i} the RARE needle phrase here")
        else:
            lines.append(
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 10))) + f" {rng.randint(0, 10**6)}"
            )
    return ("\n".join(lines) + ("\n" if trailing_newline else "")).encode()


QUERIES = [
    ("the RARE needle phrase", False, True),
    ("the rare NEEDLE phrase", False, False),
    ("NCCL watchdog", False, True),
    ("nccl WATCHDOG timeout", False, False),
    ("straße alpha", False, True),
    ("Lyyyyyyyy", False, True),
    ("yyyy tail", False, True),
    ("not in this log at all", False, True),
    (r"RARE\s+needle\s+\w+ here", True, True),
    (r"(?i)alpha\s+beta gamma", True, True),
    (r"Beta \d+", True, True),  # no piece of 7 bytes: every frame is read
    (r"phrase here$|^L?y{3}x", True, True),
    (r"step \d+ the RARE|watchdog timeout error", True, True),
]


def truth(data: bytes, m: S.Matcher) -> list[int]:
    return [
        n
        for n, line in enumerate(data.split(b"\n"), 1)
        if m.fwd.search(line) and (n <= data.count(b"\n") or line)
    ]


@pytest.mark.parametrize(("seed", "trailing_newline"), [(0, True), (1, False), (2, True)])
def test_a_filtered_search_finds_what_reading_every_frame_finds(
    store: BlobStore, seed: int, trailing_newline: bool
) -> None:
    rng = random.Random(seed)
    data = a_log(rng, 4000, trailing_newline=trailing_newline)
    pending = put(store, data, frame_bytes=4096, chunk=rng.randint(1, 9000))
    index = [list(e) for e in pending.frames or ()]
    assert len(index[-1]) == 5, "a blob of more than one frame carries filters"
    plain = without_filters(index)
    total = data.count(b"\n") + (0 if trailing_newline else 1)
    narrowed = 0
    for q, is_regex, case in QUERIES:
        m = S.Matcher.compile(q, is_regex=is_regex, case=case)
        want = truth(data, m)
        # every hit, forward from the top and backward from the end, and the count
        got, line = [], 0
        while (f := S.find_next(store, pending.sha256, index, m, start_line=line + 1, deadline=FAR)).line:
            got.append(f.line)
            line = f.line
        assert got == want and f.done, q
        back, line = [], total + 1
        while (f := S.find_prev(store, pending.sha256, index, m, before_line=line, deadline=FAR)).line:
            back.append(f.line)
            line = f.line
        assert back == want[::-1] and f.done, q
        c = S.count_more(store, pending.sha256, index, m, S.Count(), deadline=FAR)
        assert (c.lines, c.done) == (len(want), True), q
        # and from arbitrary lines, the same answers as without filters
        for start in rng.sample(range(1, total + 1), 15):
            a = S.find_next(store, pending.sha256, index, m, start_line=start, deadline=FAR)
            b = S.find_next(store, pending.sha256, plain, m, start_line=start, deadline=FAR)
            assert (a.line, a.done) == (b.line, b.done), (q, start)
            a = S.find_prev(store, pending.sha256, index, m, before_line=start, deadline=FAR)
            b = S.find_prev(store, pending.sha256, plain, m, before_line=start, deadline=FAR)
            assert (a.line, a.done) == (b.line, b.done), (q, start)
        cand = S._candidates(store, pending.sha256, FrameIndex.parse(index), m)
        if cand is not None and cand.sum() < len(cand) // 4:
            narrowed += 1
    # the filters do their job: the rare phrases and the absent one skip most frames
    assert narrowed >= 4


@pytest.mark.slow  # a moto server
def test_filters_are_read_from_an_s3_store_too(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = make_store("s3", tmp_path, request)
    data = a_log(random.Random(4), 3000, trailing_newline=True)
    pending = put(store, data, frame_bytes=8192, chunk=50_000)
    ix = FrameIndex.parse(pending.frames)
    assert ix.grams_at is not None and ix.stored_size is not None
    raw = store.read_stored(pending.sha256, ix.grams_at, ix.stored_size - ix.grams_at)
    assert grams.GramFilter.parse(grams.unwrap(raw)).frames == len(ix.offsets)
    m = S.Matcher.compile("the RARE needle phrase", is_regex=False, case=True)
    cand = S._candidates(store, pending.sha256, ix, m)
    assert cand is not None and cand.sum() < len(cand) // 3
    want = truth(data, m)
    got, line = [], 0
    while (
        f := S.find_next(store, pending.sha256, pending.frames, m, start_line=line + 1, deadline=FAR)
    ).line:
        got.append(f.line)
        line = f.line
    assert got == want and len(want) >= 5
    c = S.count_more(store, pending.sha256, pending.frames, m, S.Count(), deadline=FAR)
    assert (c.lines, c.done) == (len(want), True)


def test_a_rare_phrase_reads_only_the_frames_that_hold_it(tmp_path: Path) -> None:
    store = open_blob_store(Settings(data_dir=tmp_path / "data"))
    rng = random.Random(5)
    data = a_log(rng, 6000, trailing_newline=True)
    pending = put(store, data, frame_bytes=8192, chunk=65536)
    ix = FrameIndex.parse(pending.frames)
    m = S.Matcher.compile("the RARE needle phrase", is_regex=False, case=True)
    cand = S._candidates(store, pending.sha256, ix, m)
    assert cand is not None
    starts = [data.rfind(b"\n", 0, mt.start()) + 1 for mt in re.finditer(rb"the RARE needle phrase", data)]
    holding = {ix.frame_before(s + 1) for s in starts}  # the frame each hit's line starts in
    assert len(holding) >= 5 and all(cand[f] for f in holding)
    assert cand.sum() <= 2 * len(holding) + 3, "a false positive now and then, not most frames"


def test_the_builder_sets_exactly_the_bits_of_the_aligned_grams(tmp_path: Path) -> None:
    """Against a reference in plain Python: every 4-byte gram at an offset divisible by 4, case
    folded, in the frame where it ends; whatever the sizes of the writes."""
    rng = random.Random(9)
    data = bytes(rng.choice(b"abcXYZ \n\xc3\xa9") for _ in range(30_000))
    bits, frame = 12, 5000
    for chunk in (1, 3, 4, 777, 30_000):
        with StagingWriter(tmp_path, frame_bytes=frame, gram_bits=bits) as w:
            for i in range(0, len(data), chunk):
                w.write(data[i : i + chunk])
            pending = w.finish()
        raw = Path(pending.tmp_path).read_bytes()
        end = pending.frames[-1] if pending.frames else ()
        filt = grams.GramFilter.parse(grams.unwrap(raw[end[4] :]))
        want = np.zeros((filt.frames, 1 << bits), np.bool_)
        for p in range(0, len(data) - 3, 4):
            v = (int.from_bytes(data[p : p + 4], "little") | 0x20202020) * 2654435761 & 0xFFFFFFFF
            want[(p + 3) // frame, v >> (32 - bits)] = True
        got = np.unpackbits(filt.table, axis=1, bitorder="little").astype(np.bool_)
        assert (got == want).all(), chunk
        Path(pending.tmp_path).unlink()


def test_damaged_or_missing_filters_only_cost_speed(tmp_path: Path) -> None:
    store = open_blob_store(Settings(data_dir=tmp_path / "data"))
    data = a_log(random.Random(3), 3000, trailing_newline=True)
    pending = put(store, data, frame_bytes=4096, chunk=4096)
    m = S.Matcher.compile("the RARE needle phrase", is_regex=False, case=True)
    want = truth(data, m)
    path = Path(store.location) / pending.sha256[:2] / pending.sha256[2:4] / f"{pending.sha256}.zst"
    raw = bytearray(path.read_bytes())
    at = pending.frames[-1][4] if pending.frames else 0
    raw[at + 8 : at + 12] = b"XXXX"  # the filters' magic
    path.write_bytes(bytes(raw))
    index = [list(e) for e in pending.frames or ()]
    index[-1][1] += 1  # and a stored size that does not match: still read, filters ignored
    for ix in (index, [list(e) for e in pending.frames or ()]):
        got, line = [], 0
        while (f := S.find_next(store, pending.sha256, ix, m, start_line=line + 1, deadline=FAR)).line:
            got.append(f.line)
            line = f.line
        assert got == want


def test_a_one_frame_blob_has_no_filters() -> None:
    assert FrameIndex.parse([[0, 0, 0], [10, 7, 2, 2]]).grams_at is None
    ix = FrameIndex.parse([[0, 0, 0], [10, 7, 2], [15, 12, 3, 4, 11]])
    assert ix.grams_at == 11 and ix.framed
    assert not FrameIndex.parse([[0, 0, 0], [10, 7, 2], [15, 12, 3, 4, 13]]).framed  # past the end


# --- the text a regex's matches must hold --------------------------------------------------


ATOMS = [
    "abc",
    "defg",
    "hijkl",
    "x",
    "\\.",
    "\\d",
    "\\w+",
    "[a-c]",
    "(ab|cd)",
    "(?:xyz)?",
    ".",
    "\\s",
    "\\x41",
    "\\b",
    "q{2}",
    "r*",
    "s+",
    "t?",
    "(?i:Mn)",
    "\\N{LATIN SMALL LETTER A}",
    "\\1",
]


def random_regex(rng: random.Random) -> str:
    branches = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        branches.append("".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 6))))
    return "|".join(branches)


def test_the_pieces_taken_from_a_regex_are_in_every_match() -> None:
    """Random patterns against random text: wherever a pattern matches, every piece of some
    alternative is in the matched line (folded when the pattern ignores case)."""
    import regex

    rng = random.Random(1)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCMN .01xyzqrst"
    lines = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(400)]
    lines += ["abcdefghijkl", "abc.defg1 hijkl", "qqrrsst xyz", "MnMN abc", "Aabcdefg", "cdabcdefg"]
    checked = 0
    for _ in range(600):
        pattern = random_regex(rng)
        try:
            compiled = regex.compile(pattern, regex.VERSION0)
        except regex.error:
            continue
        found = grams.required_literals(pattern)
        if found is None:
            continue
        alts, fold = found
        for line in lines:
            m = compiled.search(line)
            if m is None:
                continue
            hay = line.lower() if fold else line
            ok = any(all((p.lower() if fold else p) in hay for p in alt) for alt in alts)
            assert ok, (pattern, alts, line)
            checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    ("pattern", "want"),
    [
        ("CUDA out of memory\\. Tried", ([["CUDA out of memory. Tried"]], False)),
        ("(?i)error|fail(ed)?", ([["error"], ["fail"]], True)),
        ("no such \\d+ text", ([["no such ", " text"]], False)),
        ("\\x41BCDEFG xyzw", ([["BCDEFG xyzw"]], False)),
        ("(?x) a b", None),  # verbose: spaces are not text
        ("(?V1)strasse", None),  # full case folding
        ("x|\\d+", None),  # an alternative with no text
        ("a{2,3}bcde", ([["bcde"]], False)),  # an optional count drops the character before it
        ("ab+cd", ([["ab", "cd"]], False)),
    ],
)
def test_required_literals_of_known_patterns(pattern: str, want: Any) -> None:
    assert grams.required_literals(pattern) == want


def test_a_hostile_pattern_cannot_stall_the_literal_scan() -> None:
    """The scan is linear: a long nest of groups and classes is read in one pass."""
    assert grams.required_literals("(" * 5000 + "a" + ")" * 5000 + "[" * 3000 + "]" * 3000) is None
    assert grams.required_literals("abcdefg" + "[" * 3000 + "]" * 3000 + "hijklmn") is None
    assert grams.required_literals("abcdefg[[a-z]--[aeiou]]hijklmn") == ([["abcdefg", "hijklmn"]], False)
