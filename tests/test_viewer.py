"""The stored-log viewer: seekable (multi-frame) blobs and their index, windows of lines by line
number and byte offset checked against the whole file split in Python, and the page on live
servers (SQLite and PostgreSQL): opening at an evidence line, permalinks, paging, finding
navigation, inert markup, access and errors."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import zstandard

from app.blobstore import BlobStore, PendingBlob, StagingWriter, open_blob_store
from app.blobstore.window import FrameIndex, Window, read_window
from app.settings import Settings
from tests.s3kit import MotoS3
from tests.servicekit import ECC, NCCL_TIMEOUT, LiveServer, live_server, make_settings, training_log

# --- the reference: the whole file split in Python ---------------------------------------------


@dataclass(frozen=True)
class Ref:
    data: bytes
    offsets: list[int]  # of each line, 0-based list for line numbers 1..n
    raw: list[bytes]  # each line with its ending

    @classmethod
    def of(cls, data: bytes) -> Ref:
        # at \n only, as the viewer and the engine count lines (not splitlines: \r, \x0b, ...)
        raw = [p + b"\n" for p in data.split(b"\n")]
        raw[-1] = raw[-1][:-1]
        if raw[-1] == b"":
            raw.pop()
        offsets, pos = [], 0
        for r in raw:
            offsets.append(pos)
            pos += len(r)
        return cls(data, offsets, raw)

    @property
    def count(self) -> int:
        return len(self.raw)

    def text(self, n: int) -> str:
        body = self.raw[n - 1]
        if body.endswith(b"\n"):
            body = body[:-1]
            if body.endswith(b"\r"):
                body = body[:-1]
        return body.decode("utf-8", errors="replace")

    def line_at(self, offset: int) -> int | None:
        """The first line starting at or after offset."""
        for i, o in enumerate(self.offsets):
            if o >= offset:
                return i + 1
        return None


def check_lines(ref: Ref, w: Window, *, max_line_bytes: int = 1 << 30) -> None:
    assert w.lines, "an empty window of a non-empty log"
    numbers = [ln.number for ln in w.lines]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    for ln in w.lines:
        assert ln.offset == ref.offsets[ln.number - 1], ln
        assert ln.length == len(ref.raw[ln.number - 1]), ln
        full = ref.text(ln.number)
        if ln.cut == 0:
            assert ln.text == full, ln
        else:
            assert full.startswith(ln.text.rstrip("\ufffd")) and len(ln.text.encode()) <= max_line_bytes
    assert w.start == w.lines[0].offset
    assert w.end == w.lines[-1].offset + w.lines[-1].length
    assert w.next_offset == (None if w.lines[-1].number == ref.count else w.end)
    assert (w.prev_offset is None) == (w.lines[0].number == 1)
    if w.prev_offset is not None:
        assert w.prev_offset in ref.offsets and w.prev_offset < w.start


# --- stores with small frames -------------------------------------------------------------------


def put(store: BlobStore, data: bytes, *, frame_bytes: int = 1000, chunk: int = 777) -> PendingBlob:
    with StagingWriter(store.tmp_dir, frame_bytes=frame_bytes) as w:
        for i in range(0, len(data), chunk):
            w.write(data[i : i + chunk])
        pending = w.finish()
    store.commit(pending)
    return pending


def put_one_frame(store: BlobStore, data: bytes) -> str:
    """A blob as stored before frames: one zstd frame, no index."""
    with StagingWriter(store.tmp_dir, frame_bytes=1 << 62) as w:
        w.write(data)
        pending = w.finish()
    assert pending.frames is not None and len(pending.frames) == 2  # one frame and the end
    store.commit(pending)
    return pending.sha256


def make_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> BlobStore:
    if backend == "directory":
        return open_blob_store(Settings(data_dir=tmp_path / "data"))
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    bucket: str = request.getfixturevalue("s3_bucket")
    return open_blob_store(
        Settings(data_dir=tmp_path / "data", blob_url=f"s3://{bucket}/viewer", s3_endpoint_url=moto.endpoint)
    )


# slow: the S3 case runs against a moto server
@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    return make_store(request.param, tmp_path, request)


@pytest.fixture
def dir_store(tmp_path: Path) -> BlobStore:
    return open_blob_store(Settings(data_dir=tmp_path / "data"))


def log_text(rng: random.Random, n: int, *, crlf: bool = False, trailing_newline: bool = True) -> bytes:
    """Lines of varied length: empty ones, long ones crossing frames, multi-byte UTF-8."""
    out = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.1:
            body = ""
        elif kind < 0.13:
            body = f"long {i} " + "x" * rng.randint(900, 3000)
        elif kind < 0.2:
            body = f"ü€𝄞 {i} " * rng.randint(1, 20)
        else:
            body = f"line {i} step {rng.randint(0, 10**6)} loss {rng.random():.4f}"
        out.append(body + ("\r\n" if crlf else "\n"))
    data = "".join(out).encode()
    return data if trailing_newline else data.rstrip(b"\r\n")


# --- the frame index ------------------------------------------------------------------------------


def frames_of(raw: bytes) -> list[bytes]:
    """Each data frame of a compressed blob, decompressed on its own (the search filters'
    skippable frames at the end left out)."""
    out = []
    pos = 0
    while pos < len(raw):
        if int.from_bytes(raw[pos : pos + 4], "little") & 0xFFFFFFF0 == 0x184D2A50:
            break
        dobj = zstandard.ZstdDecompressor().decompressobj()
        out.append(dobj.decompress(raw[pos:]))
        used = len(raw) - pos - len(dobj.unused_data)
        pos += used
    return out


def check_index(frames: list[list[int]] | tuple[tuple[int, ...], ...], raw: bytes, content: bytes) -> None:
    """The index names every frame of the stored blob: each decompresses on its own, from its
    compressed offset, to the content at its uncompressed offset; newline counts agree."""
    *starts, end = frames
    assert list(end[:4]) == [len(content), len(raw), content.count(b"\n"), Ref.of(content).count]
    data_end = len(raw)
    if len(starts) > 1:  # more than one frame: the search filters follow the data frames
        from app.blobstore import grams

        assert len(end) == 5
        data_end = end[4]
        filt = grams.GramFilter.parse(grams.unwrap(raw[data_end:]))
        assert filt.frames == len(starts)
    else:
        assert len(end) == 4
    bounds = [(u, c) for u, c, _ in starts] + [(end[0], data_end)]
    for (u, c, nl), (u2, c2) in zip(starts, bounds[1:], strict=True):
        one = zstandard.ZstdDecompressor().decompressobj()
        got = one.decompress(raw[c:c2])
        assert one.eof and one.unused_data == b"", "a frame ends where the next begins"
        assert got == content[u:u2]
        assert nl == content.count(b"\n", 0, u)
    assert b"".join(frames_of(raw)) == content
    assert len(frames_of(raw)) == len(starts)


@pytest.mark.parametrize("chunk", [1, 333, 1000, 5000])
def test_staging_writer_frames_every_n_bytes_and_indexes_them(dir_store: BlobStore, chunk: int) -> None:
    content = log_text(random.Random(chunk), 400)
    pending = put(dir_store, content, frame_bytes=1000, chunk=chunk)
    assert pending.frames is not None
    raw = Path(
        dir_store.location, pending.sha256[:2], pending.sha256[2:4], pending.sha256 + ".zst"
    ).read_bytes()
    check_index(pending.frames, raw, content)
    # frames are exactly frame_bytes of content, whatever the writes were
    starts = [f[0] for f in pending.frames[:-1]]
    assert starts == list(range(0, len(content), 1000))
    # same content hash and content as one frame; the old reader reads across frames
    with dir_store.open(pending.sha256) as fh:
        assert fh.read() == content
    import hashlib

    assert pending.sha256 == hashlib.sha256(content).hexdigest() and pending.size == len(content)


def test_frame_index_counts_newlines_of_big_writes(dir_store: BlobStore) -> None:
    """Writes past NUMPY_COUNT_MIN count their newlines another way (numpy): the index is the
    same, also for the pieces a frame boundary cuts out of the middle of a write."""
    from app.blobstore.base import NUMPY_COUNT_MIN

    content = log_text(random.Random(11), 12_000)
    chunk = 3 * NUMPY_COUNT_MIN + 17
    assert len(content) > 4 * chunk
    # a frame boundary inside every write, leaving pieces on both sides over the numpy threshold
    pending = put(dir_store, content, frame_bytes=2 * NUMPY_COUNT_MIN + 5, chunk=chunk)
    assert pending.frames is not None
    raw = Path(
        dir_store.location, pending.sha256[:2], pending.sha256[2:4], pending.sha256 + ".zst"
    ).read_bytes()
    check_index(pending.frames, raw, content)


def test_frame_index_of_edge_cases(dir_store: BlobStore) -> None:
    for content in [b"x", b"\n", b"abc", b"a\nb", b"a" * 1000, b"a" * 999 + b"\n", b"\n" * 2500]:
        pending = put(dir_store, content, frame_bytes=1000)
        raw = Path(
            dir_store.location, pending.sha256[:2], pending.sha256[2:4], pending.sha256 + ".zst"
        ).read_bytes()
        assert pending.frames is not None
        check_index(pending.frames, raw, content)


def test_frame_index_parse_rejects_what_does_not_fit() -> None:
    assert not FrameIndex.parse(None).framed
    good = [[0, 0, 0], [10, 7, 2], [15, 12, 3, 4]]
    ix = FrameIndex.parse(good)
    assert ix.framed and ix.total_lines == 4 and ix.offsets == [0, 10]
    for bad in (
        [[0, 0, 0]],  # no end
        [[1, 0, 0], [15, 12, 3, 4]],  # does not start at 0
        [[0, 0, 0], [10, 7, 2], [5, 9, 3], [15, 12, 3, 4]],  # not increasing
        [[0, 0, 0], [15, 12, 3, 9]],  # lines far from newlines
        [["a"]],
        "nonsense",
    ):
        assert not FrameIndex.parse(bad).framed, bad  # type: ignore[arg-type]


# --- windows against the reference -----------------------------------------------------------------


def windows_everywhere(
    store: BlobStore, sha: str, index: Sequence[Sequence[int]] | None, ref: Ref, rng: random.Random
) -> None:
    n = ref.count
    lines = {1, 2, n - 1, n, n // 2} | {rng.randint(1, n) for _ in range(25)}
    for max_lines, max_bytes in [(7, 1 << 20), (50, 2500), (1, 100)]:
        for line in sorted(x for x in lines if 1 <= x <= n):
            w = read_window(store, sha, index, line=line, max_lines=max_lines, max_bytes=max_bytes)
            check_lines(ref, w)
            assert w.target == line and w.first_line <= line <= w.last_line
            assert w.total_lines in (None, n)
            assert len(w.lines) <= max_lines
        offsets = {0, 1, len(ref.data) - 1} | {rng.randint(0, len(ref.data) - 1) for _ in range(25)}
        for off in sorted(offsets):
            w = read_window(store, sha, index, offset=off, max_lines=max_lines, max_bytes=max_bytes)
            check_lines(ref, w)
            expect = ref.line_at(off)
            if expect is None:  # inside the last line: the last page
                assert w.last_line == n
            else:
                assert w.first_line == expect
    # paging forward from the start visits every line once; backward from the end returns
    for max_lines, max_bytes in [(13, 1 << 20), (40, 3000)]:
        seen: list[int] = []
        w = read_window(store, sha, index, offset=0, max_lines=max_lines, max_bytes=max_bytes)
        while True:
            check_lines(ref, w)
            seen += [ln.number for ln in w.lines]
            if w.next_offset is None:
                break
            w = read_window(store, sha, index, offset=w.next_offset, max_lines=max_lines, max_bytes=max_bytes)
        assert seen == list(range(1, n + 1))
        w = read_window(store, sha, index, offset=len(ref.data) + 5, max_lines=max_lines, max_bytes=max_bytes)
        assert w.last_line == n and w.next_offset is None
        steps = 0
        while w.prev_offset is not None:
            prev = read_window(
                store, sha, index, offset=w.prev_offset, max_lines=max_lines, max_bytes=max_bytes
            )
            assert prev.first_line < w.first_line <= prev.last_line + 1
            w, steps = prev, steps + 1
        assert w.first_line == 1 and steps >= n // max_lines - 1
    # out of range
    past = read_window(store, sha, index, line=n + 1000, max_lines=10)
    check_lines(ref, past)
    assert past.last_line == n and past.target == n and len(past.lines) == min(10, n)
    assert past.total_lines == n
    zero = read_window(store, sha, index, line=0, max_lines=10)
    assert zero.first_line == 1 and zero.target == 1
    first = read_window(store, sha, index, max_lines=10)
    assert first.first_line == 1 and first.target is None


SHAPES = ["plain", "crlf", "no-trailing-newline", "crlf-no-trailing-newline", "one-line", "empty-lines"]


@pytest.mark.parametrize(
    ("backend", "shape"),
    [("directory", s) for s in SHAPES]
    + [pytest.param("s3", s, marks=pytest.mark.slow) for s in ("plain", "crlf-no-trailing-newline")],
)
def test_windows_agree_with_the_whole_file_split_in_python(
    backend: str, shape: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_store(backend, tmp_path, request)
    rng = random.Random(shape)
    if shape == "one-line":
        data = b"just one line without a newline"
    elif shape == "empty-lines":
        data = b"\n" * 3000 + b"last\n" + b"\n" * 10
    else:
        data = log_text(rng, 900, crlf=shape.startswith("crlf"), trailing_newline="no-trailing" not in shape)
    ref = Ref.of(data)
    pending = put(store, data, frame_bytes=1500)
    assert (pending.frames is not None and len(pending.frames) > 2) or len(data) < 1500
    windows_everywhere(store, pending.sha256, pending.frames, ref, rng)


def test_a_legacy_one_frame_blob_reads_the_same_without_an_index(dir_store: BlobStore) -> None:
    rng = random.Random(7)
    data = log_text(rng, 600, trailing_newline=False)
    sha = put_one_frame(dir_store, data)
    windows_everywhere(dir_store, sha, None, Ref.of(data), rng)


def test_an_index_that_does_not_fit_the_stored_bytes_falls_back_to_the_start(dir_store: BlobStore) -> None:
    data = log_text(random.Random(3), 800)
    sha = put_one_frame(dir_store, data)
    other = put(dir_store, data + b"x", frame_bytes=1000)  # a framing of other bytes
    assert other.frames is not None
    bogus = [list(f) for f in other.frames]
    bogus[-1] = [len(data), 0, data.count(b"\n"), Ref.of(data).count]
    w = read_window(dir_store, sha, bogus, line=700, max_lines=20)
    check_lines(Ref.of(data), w)
    assert 700 in [ln.number for ln in w.lines]


def test_long_lines_are_cut_for_display_with_what_was_left_out(dir_store: BlobStore) -> None:
    long = "é" * 5000  # 10,000 bytes
    data = f"a\n{long}\r\nb\n".encode()
    pending = put(dir_store, data, frame_bytes=1000)
    w = read_window(dir_store, pending.sha256, pending.frames, line=2, max_line_bytes=101)
    cut = w.lines[1]
    assert cut.number == 2 and cut.text == "é" * 50  # not half a character
    assert cut.cut == 10_000 - 100 and cut.length == 10_002
    assert [ln.text for ln in w.lines] == ["a", "é" * 50, "b"]


def test_a_page_covers_at_most_max_bytes_but_always_the_asked_line(dir_store: BlobStore) -> None:
    data = b"".join(b"%05d " % i + b"y" * 994 + b"\n" for i in range(100))  # 1001-byte lines
    pending = put(dir_store, data, frame_bytes=4096)
    w = read_window(dir_store, pending.sha256, pending.frames, line=50, max_lines=500, max_bytes=10_000)
    # the lines above get their share of the bytes (half the page, as of half its lines)
    assert [ln.number for ln in w.lines] == list(range(46, 55))
    assert w.end - w.start <= 10_000
    tiny = read_window(dir_store, pending.sha256, pending.frames, line=50, max_bytes=10)
    assert [ln.number for ln in tiny.lines] == [50]
    assert tiny.prev_offset == 48 * 1001 and tiny.next_offset == 50 * 1001


def test_a_missing_blob_is_file_not_found(store: BlobStore) -> None:
    with pytest.raises(FileNotFoundError):
        read_window(store, "ab" * 32, None, line=1)
    with pytest.raises(FileNotFoundError):
        read_window(store, "cd" * 32, [[0, 0, 0], [10, 5, 1], [20, 9, 2, 2]], line=2)


def test_memory_stays_bounded_on_a_big_log(dir_store: BlobStore) -> None:
    """A page at the end of a 64 MiB log reads one frame's worth, not the log."""
    import tracemalloc

    line = b"2025-05-01 10:00:00 step 1 loss 0.1234 " + b"z" * 60 + b"\n"
    with dir_store.writer() as w:
        for _ in range(64):
            w.write(line * ((1 << 20) // len(line)))
        pending = w.finish()
    dir_store.commit(pending)
    assert pending.frames is not None
    tracemalloc.start()
    try:
        win = read_window(dir_store, pending.sha256, pending.frames, line=pending.frames[-1][3])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert win.last_line == pending.frames[-1][3]
    assert peak < 8 << 20, peak


# --- the page, on live servers (SQLite and PostgreSQL) ---------------------------------------------

API = "/api/v1/analyses"
XSS = '<script>alert(1)</script> <img src=x onerror=alert(1)> <a href="javascript:alert(1)">x</a>'


def html_of(c: httpx.Client, path: str) -> httpx.Response:
    return c.get(path, headers={"Accept": "text/html"})


def filler(n: int, tag: str, first: int = 0) -> str:
    return "".join(
        f"[{tag}] step {i} loss {1.0 / (i + 1):.4f} lr 1e-5 throughput 1234 tokens/s\n"
        for i in range(first, first + n)
    )


@pytest.fixture(scope="module")
def deep(server: LiveServer) -> dict[str, Any]:
    """An ECC error at line 1,201 and NCCL timeouts at 2,402-2,404 of a 3,604-line log."""
    log = (
        filler(1200, "a")
        + ECC.format(ip="10.1.2.3")
        + filler(1200, "b", 1200)
        + NCCL_TIMEOUT * 3
        + filler(1199, "c", 2400)
        + XSS
        + "\n"
    )
    with server.client() as c:
        r = c.post(API, content=log.encode(), headers={"Content-Type": "text/plain"})
        assert r.status_code == 201, r.text
        res: dict[str, Any] = r.json()
    res["log"] = log
    return res


def rows(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr id="L(\d+)" data-line="\1"', html)]


def links(html: str, rel: str) -> str | None:
    m = re.search(rf'href="([^"]+)" rel="{rel}"', html)
    return m.group(1).replace("&amp;", "&") if m else None


@pytest.mark.slow  # a live server
def test_the_viewer_opens_at_the_evidence_line_with_permalinks(
    client: httpx.Client, deep: dict[str, Any]
) -> None:
    aid = deep["id"]
    root = deep["root_cause"]
    assert root["failure_class"] == "hardware.gpu_ecc_error"
    line = root["evidence"][0]["line"]
    assert line == 1201
    report = html_of(client, f"/analyses/{aid}").text
    assert f'href="/analyses/{aid}/files/0?line={line}#L{line}"' in report  # the report links here
    r = html_of(client, f"/analyses/{aid}/files/0?line={line}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    shown = rows(html)
    assert line in shown and len(shown) == 500 and shown == list(range(shown[0], shown[0] + 500))
    assert shown[0] < line - 100 and shown[-1] > line + 100  # around it
    assert f'data-first-line="{shown[0]}" data-last-line="{shown[-1]}"' in html
    assert f'<a class="ln-link" href="#L{line}">{line}</a>' in html  # every number is its permalink
    row = re.search(rf'<tr id="L{line}" data-line="{line}" class="hit[a-z ]*" title="([^"]*)">', html)
    assert row and root["title"] in row.group(1)
    assert "uncorrectable ECC error" in html
    assert f'{API}/{aid}/log?file=0"' in html and f'href="/analyses/{aid}"' in html  # download, report
    assert "3,604 lines" in html and f"{len(deep['log'].encode()):,} bytes" in html
    assert ' style="' not in html and "<script>" not in html.replace("<script src=", "")


@pytest.mark.slow  # a live server
def test_the_pager_moves_by_byte_offset_and_back(client: httpx.Client, deep: dict[str, Any]) -> None:
    aid = deep["id"]
    log: str = deep["log"]
    lines = log.splitlines(keepends=True)
    first = html_of(client, f"/analyses/{aid}/files/0").text
    assert rows(first) == list(range(1, 501)) and links(first, "prev") is None
    seen = rows(first)
    html = first
    while (nxt := links(html, "next")) is not None:
        offset = int(nxt.rsplit("offset=", 1)[1])
        assert offset == len("".join(lines[: seen[-1]]).encode())  # the next line's first byte
        html = html_of(client, nxt).text
        seen += rows(html)
    assert seen == list(range(1, len(lines) + 1))  # every line once, in order
    assert "Last page" not in html
    # back from the last page to the first
    back = 0
    while (prev := links(html, "prev")) is not None:
        before = rows(html)
        html = html_of(client, prev).text
        assert rows(html)[-1] == before[0] - 1
        back += 1
    assert rows(html)[0] == 1 and back == 7
    # an offset inside a line starts at the next line; the last page link; go to line
    mid = html_of(client, f"/analyses/{aid}/files/0?offset={len(lines[0].encode()) + 3}").text
    assert rows(mid)[0] == 3
    last = html_of(client, f"/analyses/{aid}/files/0?offset={len(log.encode())}").text
    assert rows(last)[-1] == len(lines) and len(rows(last)) == 500
    go = client.get(
        f"/analyses/{aid}/files/0?goto=3000", headers={"Accept": "text/html"}, follow_redirects=False
    )
    assert go.status_code == 303 and go.headers["location"] == f"/analyses/{aid}/files/0?line=3000#L3000"


@pytest.mark.slow  # a live server
def test_finding_navigation_jumps_between_findings_across_pages(
    client: httpx.Client, deep: dict[str, Any]
) -> None:
    aid = deep["id"]
    here = f"/analyses/{aid}/files/0"
    nccl = [e["line"] for f in deep["findings"] if f["role"] == "symptom" for e in f["evidence"]]
    assert nccl and min(nccl) == 2402
    assert sorted(e["line"] for f in deep["findings"] for e in f["evidence"]) == [1201, *nccl]
    start = html_of(client, here).text  # the first page: the first finding is below it
    assert f'href="{here}?line=1201#L1201"' in start and "Next finding" in start
    at_root = html_of(client, f"{here}?line=1201").text
    nxt = re.search(r'href="([^"]+)" title="line (\d+)">Next finding', at_root)
    assert nxt and int(nxt.group(2)) == min(nccl)
    assert "Previous finding" not in at_root
    at_nccl = html_of(client, nxt.group(1).split("#")[0]).text
    assert re.search(r'title="line 1201">↑ Previous finding', at_nccl)
    marked = [int(n) for n in re.findall(r'<tr id="L(\d+)" data-line="\d+" class="hit\b', at_nccl)]
    assert set(nccl) <= set(marked)
    # the finding list in the header names every finding line
    for n in [1201, *nccl]:
        assert f'href="{here}?line={n}#L{n}">line {n}</a>' in at_nccl


@pytest.mark.slow  # a live server
def test_markup_in_a_log_line_is_inert_text(client: httpx.Client, deep: dict[str, Any]) -> None:
    html = html_of(client, f"/analyses/{deep['id']}/files/0?offset={len(deep['log'].encode())}").text
    assert "<script>alert(1)</script>" not in html and "<img src=x" not in html
    assert 'href="javascript:' not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;a href=&#34;javascript:alert(1)&#34;&gt;x&lt;/a&gt;" in html


@pytest.mark.slow  # a live server
def test_bad_input_is_a_page_or_clamped_never_a_500(client: httpx.Client, deep: dict[str, Any]) -> None:
    aid = deep["id"]
    here = f"/analyses/{aid}/files"
    for path, status, text in [
        (f"{here}/0?line=0", 422, "numbered from 1"),
        (f"{here}/0?line=abc", 422, "whole number"),
        (f"{here}/0?offset=-5", 422, "whole number"),
        (f"{here}/1", 404, "there is no file 1"),
        (f"{here}/x", 404, "no log file"),
        ("/analyses/01ARZ3NDEKTSV4RRFFQ69G5FAV/files/0", 404, "no analysis"),
        ("/analyses/not-an-id/files/0", 404, "no analysis"),
    ]:
        r = html_of(client, path)
        assert r.status_code == status, (path, r.status_code)
        assert r.headers["content-type"].startswith("text/html") and text in r.text, path
    for path in [f"{here}/0?line=99999999", f"{here}/0?line={'9' * 30}", f"{here}/0?offset={'9' * 30}"]:
        r = html_of(client, path)
        assert r.status_code == 200 and rows(r.text)[-1] == 3604, path


def go(c: httpx.Client, path: str) -> httpx.Response:
    """A search link: the 303 to the hit (or the page saying there is none)."""
    return c.get(path, headers={"Accept": "text/html"}, follow_redirects=False)


@pytest.mark.slow  # a live server
def test_search_lands_on_each_hit_with_a_plain_get_and_counts_them(
    client: httpx.Client, deep: dict[str, Any]
) -> None:
    aid = deep["id"]
    here = f"/analyses/{aid}/files/0"
    r = go(client, f"{here}?q=WorkNCCL&dir=next&from=0")
    assert r.status_code == 303 and r.headers["location"] == f"{here}?q=WorkNCCL&line=2402#L2402"
    page = html_of(client, r.headers["location"]).text
    assert re.search(r'<tr id="L2402" data-line="2402" class="hit match[a-z ]*"', page)
    assert "<mark>WorkNCCL</mark>" in page and page.count("<mark>") == 3  # the three on this page
    assert re.search(r"<strong>3</strong> lines match", page)
    assert 'value="WorkNCCL"' in page  # the form keeps the query
    seen, line = [], 0
    while (r := go(client, f"{here}?q=WorkNCCL&dir=next&from={line}")).status_code == 303:
        line = int(r.headers["location"].rsplit("#L", 1)[1])
        seen.append(line)
    assert seen == [2402, 2403, 2404]
    assert r.status_code == 200 and "No match of “WorkNCCL” after line 2,404 to the end" in r.text
    back = go(client, f"{here}?q=WorkNCCL&dir=prev&from=2404")
    assert back.headers["location"].endswith("line=2403#L2403")
    # the form of a page without a target line (starting at line 2403) sends the line above it:
    # Find previous searches that line too
    page = html_of(client, f"{here}?offset={len(''.join(deep['log'].splitlines(True)[:2402]).encode())}").text
    assert rows(page)[0] == 2403 and 'name="from" value="2402"' in page and 'name="top" value="1"' in page
    assert go(client, f"{here}?q=WorkNCCL&from=2402&top=1&dir=prev").headers["location"].endswith("#L2402")
    assert go(client, f"{here}?q=WorkNCCL&from=2402&dir=prev").status_code == 200  # none above 2402
    assert "not supported" in html_of(client, f"{here}?q=%28%3Fr%29x&re=1").text
    # the case toggle and a regex; the links keep them
    assert go(client, f"{here}?q=worknccl&dir=next&from=0").status_code == 303
    assert go(client, f"{here}?q=worknccl&case=1&dir=next&from=0").status_code == 200
    rx = go(client, f"{here}?q=pid%3D9041%5Cd&re=1&dir=next&from=0")
    assert rx.headers["location"] == f"{here}?q=pid%3D9041%5Cd&re=1&line=1201#L1201"
    page = html_of(client, rx.headers["location"]).text
    assert "<mark>pid=90412</mark>" in page
    assert f'href="{here}?q=pid%3D9041%5Cd&amp;re=1&amp;dir=next&amp;from=1201"' in page


@pytest.mark.slow  # a live server
def test_a_bad_regex_is_a_clear_message_on_the_page_never_a_500(
    client: httpx.Client, deep: dict[str, Any]
) -> None:
    here = f"/analyses/{deep['id']}/files/0"
    for q in ["(unclosed", "a**", "x*"]:
        for extra in ["", "&dir=next&from=0"]:
            r = html_of(client, f"{here}?q={q}&re=1{extra}")
            assert r.status_code == 422, (q, r.status_code)
            assert 'role="alert"' in r.text and "cannot be used" in r.text and rows(r.text)
    r = html_of(client, f"{here}?q=%28x&re=1&dir=next&from=2000")  # the page stays where it was
    assert r.status_code == 422 and 2000 in rows(r.text)
    r = html_of(client, f"{here}?q=&dir=next&from=2000")
    assert r.status_code == 200 and 2000 in rows(r.text)
    r = html_of(client, f"{here}?q=x&dir=sideways")
    assert r.status_code == 422 and "next or prev" in r.text


@pytest.mark.slow  # a live server
def test_next_error_walks_the_lines_that_read_as_errors(client: httpx.Client, deep: dict[str, Any]) -> None:
    here = f"/analyses/{deep['id']}/files/0"
    seen, line = [], 0
    while (r := go(client, f"{here}?err=next&from={line}")).status_code == 303:
        line = int(r.headers["location"].rsplit("#L", 1)[1])
        seen.append(line)
    assert seen == [1201, 2402, 2403, 2404]  # the RuntimeError, glog's E lines
    assert "No line that reads as an error after line 2,404" in r.text
    r = go(client, f"{here}?err=prev&from=2402")
    assert r.headers["location"] == f"{here}?line=1201#L1201"
    page = html_of(client, f"{here}?line=1201").text
    assert re.search(r'<tr id="L1201" data-line="1201" class="hit err"', page)


@pytest.mark.slow  # a live server
def test_display_choices_fold_and_permalink_params_survive_the_links(
    client: httpx.Client, deep: dict[str, Any]
) -> None:
    here = f"/analyses/{deep['id']}/files/0"
    page = html_of(client, f"{here}?line=1201").text
    # 1,200 filler lines alike but for their numbers: folded after the first, the ECC line not
    folds = re.findall(r'<details class="fold"><summary>([\d,]+) more lines like the one above', page)
    assert folds and sum(int(n.replace(",", "")) for n in folds) >= 490
    assert 'data-wrap="auto"' in page and 'data-ts="on"' in page
    plain = html_of(client, f"{here}?line=1201&fold=0&wrap=1").text
    assert '<details class="fold">' not in plain and 'data-wrap="on"' in plain
    assert rows(plain) == rows(page)  # folding hides nothing from the page's rows
    # the pager, the finding links and the go-to form keep the choices
    assert f'href="{here}?wrap=1&amp;fold=0&amp;offset=' in plain
    assert '<input type="hidden" name="fold" value="0">' in plain
    go_to = go(client, f"{here}?goto=3000&fold=0")
    assert go_to.headers["location"] == f"{here}?fold=0&line=3000#L3000"


@pytest.mark.slow  # a live server
def test_a_search_out_of_budget_says_how_far_it_got_and_goes_on_to_the_hit(
    client: httpx.Client, deep: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.blobstore import search
    from app.service import logview

    monkeypatch.setattr(logview, "SEARCH_BUDGET", 0.0)  # one piece of the log per request
    monkeypatch.setattr(search, "READ", 8192)
    here = f"/analyses/{deep['id']}/files/0"
    path, reached, hops = f"{here}?q=alert%281%29&dir=next&from=0", 0, 0
    while (r := go(client, path)).status_code == 200:
        m = re.search(r'href="([^"]+)" data-search-on>Search on from line ([\d,]+)', r.text)
        assert m, r.text[r.text.find("viewer-status") :][:1500]
        now = int(m.group(2).replace(",", ""))
        assert now > reached  # every request gets on
        assert f"between line {reached:,} and line {now:,} of 3,604 yet" in r.text.replace("&#34;", '"')
        path, reached, hops = m.group(1).replace("&amp;", "&"), now, hops + 1
    assert r.status_code == 303 and r.headers["location"].endswith("line=3604#L3604") and hops > 10


@pytest.mark.slow  # a live server
def test_a_pattern_too_slow_for_the_log_stops_with_a_message(client: httpx.Client) -> None:
    r = client.post(API, content=("a" * 3000 + "!\n").encode() * 200, headers={"Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    page = go(client, f"/analyses/{r.json()['id']}/files/0?q=%28a%2B%29%2B%24&re=1&dir=next&from=0")
    assert page.status_code == 200 and "the pattern is too slow on this log" in page.text
    assert "data-search-on" not in page.text


@pytest.mark.slow  # a live server
def test_the_rest_api_finds_the_next_hit_and_refuses_a_bad_pattern_as_a_problem(
    client: httpx.Client, deep: dict[str, Any]
) -> None:
    aid = deep["id"]
    url = f"{API}/{aid}/log/search"
    r = client.get(url, params={"q": "worknccl", "from": 2402})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["line"] == 2403 and body["page"].endswith(f"/analyses/{aid}/files/0?line=2403#L2403")
    assert client.get(url, params={"q": "WorkNCCL", "from": 2403, "dir": "prev"}).json()["line"] == 2402
    assert client.get(url, params={"q": "worknccl", "case": "true"}).json() == {
        "line": None,
        "reached": 3604,
        "done": True,
        "page": None,
    }
    assert [client.get(url, params={"from": n}).json()["line"] for n in (0, 1201, 2404)] == [1201, 2402, None]
    bad = client.get(url, params={"q": "(x", "regex": "true"})
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
    assert "cannot be used" in bad.json()["detail"]
    assert client.get(url, params={"file": 3}).status_code == 404


@pytest.mark.slow  # a live server
def test_the_stored_index_matches_the_blobs_real_frames(server: LiveServer) -> None:
    """A log over a few frames: `blobs.line_index` names each frame of the stored file, each
    frame decompresses on its own from its offset, and the viewer's end page is right."""
    from app.blobstore.base import FRAME_BYTES
    from app.db import repo
    from app.db.repo.completion import blob_line_index

    body = filler(FRAME_BYTES * 9 // 4 // 60, "big") + ECC.format(ip="10.7.7.7")  # ~2.3 frames
    with server.client() as c:
        r = c.post(API, content=body.encode(), headers={"Content-Type": "text/plain"})
        assert r.status_code == 201, r.text
        res = r.json()
        ctx = server.ctx
        with ctx.db.read() as s:
            row = repo.get_analysis(s, analysis_id=res["id"], full=True)
            sha = row.files[0].blob_sha256
            index = blob_line_index(s, sha256=sha)
        assert index is not None and len(index) >= 4  # 3 frames and the end
        with ctx.store.open(sha) as fh:
            content = fh.read()
        raw = ctx.store.path_of(sha).read_bytes()
        check_index(index, raw, content)
        n = content.count(b"\n")
        html = html_of(c, f"/analyses/{res['id']}/files/0?line={n}").text
        assert rows(html)[-1] == n and "10.7.7.7" in html


@pytest.mark.slow  # a live server
def test_an_ingest_token_cannot_view_others_logs_and_a_missing_blob_is_clear(
    tmp_path: Path, fresh_db_url: str
) -> None:
    from app.db import repo
    from app.db.session import Database

    settings = make_settings(tmp_path, fresh_db_url, auth_cache_seconds=0)
    with live_server(settings) as srv:
        db = Database(settings.effective_database_url)
        try:
            with db.write() as s:
                _r, alice = repo.create_token(s, name="alice", scopes=["ingest"])
                _r, bob = repo.create_token(s, name="bob", scopes=["ingest"])
                _r, reader = repo.create_token(s, name="reader", scopes=["read"])
        finally:
            db.dispose()

        def as_(token: str) -> httpx.Client:
            return srv.client(headers={"Authorization": f"Bearer {token}", "Accept": "text/html"})

        with as_(alice) as a, as_(bob) as b, as_(reader) as rd:
            up = a.post(
                API,
                content=training_log(ECC.format(ip="10.0.0.1")).encode(),
                headers={"Content-Type": "text/plain"},
            )
            assert up.status_code == 201
            aid = up.json()["id"]
            path = f"/analyses/{aid}/files/0?line=21"
            assert a.get(path).status_code == 200  # its own upload
            denied = b.get(path)
            # the log's own text, not "ECC": the page's random CSRF token can contain those letters
            assert denied.status_code == 403 and "read" in denied.text
            assert "uncorrectable ECC error" not in denied.text and "10.0.0.1" not in denied.text
            assert rd.get(path).status_code == 200
            assert srv.client().get(path, follow_redirects=False).status_code in (303, 401)
            # the blob gone from the store: a clear page, not a 500
            with srv.ctx.db.read() as s:
                sha = repo.get_analysis(s, analysis_id=aid, full=True).files[0].blob_sha256
            srv.ctx.store.delete(sha)
            gone = rd.get(path)
            assert gone.status_code == 404 and "missing from the blob store" in gone.text


@pytest.fixture
def fresh_db_url(db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of its own (tokens end open mode for everyone sharing it)."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'own.db'}"
    url: str = request.getfixturevalue("pg_schemas").new()
    return url


# --- search, error lines and the shown line (no server) ---------------------------------------------

FAR = 1e18  # a deadline that never passes: the answer must not depend on the clock


def ref_hits(ref: Ref, pred: Any) -> list[int]:
    return [n for n in range(1, ref.count + 1) if pred(ref.raw[n - 1].rstrip(b"\n"))]


def search_log(rng: random.Random, n: int) -> bytes:
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.02:
            out.append(f"step {i} NEEDLE found, Needle again")
        elif r < 0.04:
            out.append(f"step {i} needle in lower case")
        elif r < 0.05:
            out.append(f"long {i} " + "y" * rng.randint(800, 2500) + " NEEDLE at the end")
        elif r < 0.06:
            out.append(f"Traceback (most recent call last): {i}")
        else:
            out.append(f"step {i} loss {rng.random():.4f} " + "z" * rng.randint(0, 60))
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize(
    ("pattern", "is_regex", "case", "pred"),
    [
        ("NEEDLE", False, True, lambda b: b"NEEDLE" in b),
        ("needle", False, False, lambda b: b"needle" in b.lower()),
        (r"N\w+E\b", True, True, lambda b: re.search(rb"N\w+E\b", b) is not None),
        (r"^step \d+ needle", True, True, lambda b: re.match(rb"step \d+ needle", b) is not None),
        (r"again$", True, False, lambda b: b.lower().endswith(b"again")),
        # \s would cross a newline in the blob's bytes: a hit is a match inside one line
        (r"again\s+step", True, True, lambda b: False),
    ],
)
def test_search_finds_every_hit_forward_and_backward_across_frames(
    dir_store: BlobStore, pattern: str, is_regex: bool, case: bool, pred: Any
) -> None:
    from app.blobstore.search import Count as HitCount
    from app.blobstore.search import Matcher, count_more, find_next, find_prev

    data = search_log(random.Random(7), 1500)
    ref = Ref.of(data)
    want = ref_hits(ref, pred)
    m = Matcher.compile(pattern, is_regex=is_regex, case=case)
    pending = put(dir_store, data, frame_bytes=4000)
    assert pending.frames is not None and len(pending.frames) > 20
    for index in (pending.frames, None):  # with its index, and read from the start without one
        got, line = [], 0
        while (f := find_next(dir_store, pending.sha256, index, m, start_line=line + 1, deadline=FAR)).line:
            got.append(f.line)
            line = f.line
        assert got == want and f.done
        back, line = [], ref.count + 1
        while (f := find_prev(dir_store, pending.sha256, index, m, before_line=line, deadline=FAR)).line:
            back.append(f.line)
            line = f.line
        assert back == want[::-1] and f.done
        c = count_more(dir_store, pending.sha256, index, m, HitCount(), deadline=FAR)
        assert (c.lines, c.done) == (len(want), True)


def test_a_search_out_of_time_says_how_far_it_got_and_goes_on_from_there(
    dir_store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from app.blobstore import search
    from app.blobstore.search import Count as HitCount
    from app.blobstore.search import Matcher, count_more, find_next, find_prev

    monkeypatch.setattr(search, "READ", 4096)
    data = filler(3000, "a").encode() + b"the one NEEDLE\n" + filler(3000, "b").encode()
    pending = put(dir_store, data, frame_bytes=4000)
    sha, ix = pending.sha256, pending.frames
    for m in (
        Matcher.compile("NEEDLE", is_regex=False, case=True),
        Matcher.compile("needle", is_regex=True, case=False),
    ):
        # a deadline already past: each call still reads one piece (one frame back), and says
        # where it got; going on from there reaches the hit
        past = time.monotonic() - 1
        at, steps = 0, 0
        while (f := find_next(dir_store, sha, ix, m, start_line=at + 1, deadline=past)).line is None:
            assert not f.done and f.reached > at
            at, steps = f.reached, steps + 1
        assert f.line == 3001 and steps > 10
        at, steps = 6001, 0
        while (b := find_prev(dir_store, sha, ix, m, before_line=at, deadline=past)).line is None:
            assert not b.done and b.reached < at
            at, steps = b.reached, steps + 1
        assert b.line == 3001 and steps > 10
        c, steps = HitCount(), 0
        while not (c := count_more(dir_store, sha, ix, m, c, deadline=past)).done:
            steps += 1
        assert c.lines == 1 and steps > 10


def test_next_error_finds_the_same_lines_with_and_without_hyperscan(dir_store: BlobStore) -> None:
    import dataclasses

    from app.blobstore.search import find_next, find_prev
    from app.service.logview import ERRORS, error_matcher

    data = search_log(random.Random(3), 1500)
    data += b"x [E0502 11:10:00.100000 ProcessGroupNCCL.cpp:616] watchdog\nan Error_rate 0\nValueError: x\n"
    ref = Ref.of(data)
    want = ref_hits(ref, lambda b: re.search(ERRORS.encode(), b) is not None)
    assert len(want) > 5 and ref.count - 2 in want and ref.count in want and ref.count - 1 not in want
    pending = put(dir_store, data, frame_bytes=4000)
    fast = error_matcher()
    for m in (fast, dataclasses.replace(fast, hs=None)):
        got, line = [], 0
        while (
            f := find_next(dir_store, pending.sha256, pending.frames, m, start_line=line + 1, deadline=FAR)
        ).line:
            got.append(f.line)
            line = f.line
        assert got == want
        back, line = [], ref.count + 1
        while (
            f := find_prev(dir_store, pending.sha256, pending.frames, m, before_line=line, deadline=FAR)
        ).line:
            back.append(f.line)
            line = f.line
        assert back == want[::-1]


def test_a_hostile_pattern_is_stopped_by_the_deadline(dir_store: BlobStore) -> None:
    import time

    from app.blobstore.search import Matcher, find_next

    data = ("a" * 3000 + "!\n").encode() * 50
    pending = put(dir_store, data, frame_bytes=40_000)
    m = Matcher.compile(r"(a+)+$", is_regex=True, case=True)
    t = time.monotonic()
    f = find_next(dir_store, pending.sha256, pending.frames, m, start_line=1, deadline=t + 0.3)
    assert f.line is None and not f.done and time.monotonic() - t < 2


def test_queries_the_search_cannot_use_say_why() -> None:
    from app.errors import ValidationFailedError
    from app.service.logview import Query, compile_query

    for q, why in [("(unclosed", "cannot be used"), ("x*", "every line"), ("a" * 1001, "1,000")]:
        with pytest.raises(ValidationFailedError, match=re.escape(why)):
            compile_query(Query(q, regex=True))
    assert compile_query(Query("x*", case=True)).literals == (b"x*",)  # plain text is never a pattern
    assert compile_query(Query("x*")).spans("a x* b xx") == [(2, 4)]
    assert compile_query(Query("Loss", case=False)).spans("step loss LOSS") == [(5, 9), (10, 14)]
    assert compile_query(Query("Loss", case=True)).spans("step loss LOSS") == []


def test_ansi_colours_become_classes_and_no_escape_code_is_left() -> None:
    from app.service.logview import ansi_parts, mark_parts

    line = "\x1b[1;31mERROR\x1b[0m step \x1b[38;5;2mok\x1b[39m \x1b[92mbright\x1b[m\x1b[2K done\r"
    parts = ansi_parts(line)
    assert [(p.text, p.cls) for p in parts] == [
        ("ERROR", "a-b a-fg1"),
        (" step ", ""),
        ("ok", "a-fg2"),
        (" ", ""),
        ("bright", "a-fg10"),
        (" done\u240d", ""),
    ]
    assert not any("\x1b" in p.text for p in parts)
    marked = mark_parts(parts, [(3, 8), (11, 12)])  # "OR st", "o": across a colour change
    assert [(p.text, p.mark) for p in marked if p.mark] == [("OR", True), (" st", True), ("o", True)]
    assert "".join(p.text for p in marked) == "".join(p.text for p in parts)


def _vl(n: int, text: str, **kw: Any) -> Any:
    from app.service.logview import Part, ViewLine

    return ViewLine(n, 0, text, 0, parts=[Part(text)], **kw)


def test_runs_of_lines_alike_but_for_numbers_fold_after_their_first() -> None:
    from app.service.logview import fold_lines

    texts = ["start"] + [f"step {i} loss 0.{i}" for i in range(6)] + ["x", "y", "y", "y"] + ["z"]
    lines = [_vl(i + 1, t) for i, t in enumerate(texts)]
    blocks = fold_lines(lines, keep=set())
    assert [([ln.number for ln in b.lines], b.folded) for b in blocks] == [
        ([1, 2], False),
        ([3, 4, 5, 6, 7], True),
        ([8, 9, 10, 11, 12], False),  # three alike is not a run worth folding
    ]
    # the line a link points at, or one the search matches, is never folded
    kept = fold_lines(lines, keep={5})
    assert [([ln.number for ln in b.lines], b.folded) for b in kept] == [([*range(1, 13)], False)]
    marked = [_vl(i + 1, t, marked=i == 4) for i, t in enumerate(texts)]
    assert [b.folded for b in fold_lines(marked, keep=set())] == [False]


def test_a_leading_timestamp_is_split_off_and_error_lines_are_told() -> None:
    from app.blobstore.window import Line
    from app.service.logview import view_line

    for text, ts in [
        ("2024-05-01T12:00:03.123Z step 1", "2024-05-01T12:00:03.123Z "),
        ("[2024-05-01 12:00:03,123] INFO x", "[2024-05-01 12:00:03,123] "),
        ("May  1 12:00:03 host kernel: NVRM", "May  1 12:00:03 "),
        ("step 12:00:03 later", ""),
    ]:
        v = view_line(Line(1, 0, len(text), text, 0), {}, None)
        assert "".join(p.text for p in v.ts) == ts
        assert "".join(p.text for p in v.ts + v.parts) == text
    for text, err in [
        ("Traceback (most recent call last):", True),
        ("torch.OutOfMemoryError: CUDA out of memory", True),
        ("[E ProcessGroupNCCL.cpp] ERROR: watchdog", True),
        ("step 5 error_rate 0.01 errors 0", False),
    ]:
        assert view_line(Line(1, 0, len(text), text, 0), {}, None).error is err, text
