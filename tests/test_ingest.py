"""Ingest: compression by magic bytes, decoding, normalisation, prefixes, limits."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
import zstandard

from app.engine.pipeline.ingest import (
    ByteBudget,
    Source,
    collect_sources,
    expand_in_memory,
    open_source,
    rank_from_name,
)
from app.errors import InputError, InputTooLargeError
from tests.conftest import Analyze

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
    "capacity of 79.25 GiB of which 1.21 GiB is free.\n"
)
NOISE = "".join(f"step:{i} - actor/pg_loss:0.01{i % 10} - throughput 1234.5\n" for i in range(2000))


def test_plain_gzip_and_zstd_give_the_same_finding(analyze: Analyze) -> None:
    text = (NOISE + OOM + NOISE).encode()
    plain = analyze(text, name="a.log")
    gz = analyze(gzip.compress(text), name="b.log")  # named .log: detection is by magic bytes
    zs = analyze(zstandard.ZstdCompressor().compress(text), name="c.txt")
    for a in (plain, gz, zs):
        assert a.root_cause is not None
        assert a.root_cause.rule_id == "cuda-out-of-memory"
        assert a.root_cause.first_line == 2001
        assert a.stats["bytes"] == len(text)


def test_stdin_stream_with_gzip_is_sniffed(compiled) -> None:  # type: ignore[no-untyped-def]
    from app.engine.pipeline.triage import triage

    payload = gzip.compress((NOISE + OOM).encode())
    sources, _ = collect_sources(["-"], stdin=io.BytesIO(payload))
    a = triage(sources=sources, compiled=compiled)
    assert a.root_cause is not None and a.root_cause.evidence[0].file == "<stdin>"


def test_invalid_utf8_is_replaced_not_fatal(analyze: Analyze) -> None:
    bad = b"\xff\xfe garbage \xc3\x28 here\n" + OOM.encode().replace(b"GiB of", b"GiB\xff of")
    a = analyze(bad)
    assert a.root_cause is not None
    assert "\ufffd" in a.root_cause.evidence[0].text


def test_ansi_colours_and_ray_prefix_are_understood(analyze: Analyze) -> None:
    line = "\x1b[36m(WorkerDict pid=81234, ip=10.0.3.17)\x1b[0m " + OOM
    a = analyze(line)
    f = a.root_cause
    assert f is not None
    assert "\x1b" not in f.evidence[0].text
    assert f.hosts == ["10.0.3.17"]


def test_carriage_return_progress_bars_keep_the_error(analyze: Analyze) -> None:
    bar = "".join(f"\rEpoch 1:  {p}%|####      | {p}/100 [00:01<00:02]" for p in range(0, 100, 7))
    a = analyze(bar + "\r" + OOM)
    assert a.root_cause is not None
    assert "Epoch" in a.root_cause.evidence[0].text and "OutOfMemoryError" in a.root_cause.evidence[0].text


def test_rank_prefix_and_rank_from_file_name(analyze: Analyze) -> None:
    a = analyze("[rank5]: " + OOM)
    assert a.root_cause is not None and a.root_cause.ranks == [5]
    b = analyze(OOM, name="worker_rank-7.log")
    assert b.root_cause is not None and b.root_cause.ranks == [7]
    assert rank_from_name("train_rank12.out") == 12
    assert rank_from_name("ranking.log") is None


def test_total_size_limit_is_a_clear_error(analyze: Analyze) -> None:
    with pytest.raises(InputTooLargeError, match="over the limit"):
        analyze(NOISE * 10, max_bytes=10_000)


def test_decompression_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.log"
    bomb.write_bytes(gzip.compress(b"\n" * (64 << 20)))
    assert bomb.stat().st_size < 200_000
    opened = open_source(Source(name="bomb", path=bomb), budget=ByteBudget(1 << 20))
    buf = memoryview(bytearray(1 << 18))
    with pytest.raises(InputTooLargeError):
        while opened.reader.readinto(buf):
            pass


def test_corrupt_gzip_is_an_input_error(analyze: Analyze) -> None:
    data = gzip.compress((NOISE * 3).encode())
    with pytest.raises(InputError, match="cannot read|corrupt"):
        analyze(data[: len(data) // 2] + b"\x00" * 64)


def test_line_longer_than_a_chunk_is_scanned_in_pieces(analyze: Analyze) -> None:
    long_line = "x" * (600 * 1024) + " " + OOM
    a = analyze(NOISE + long_line)
    assert a.root_cause is not None
    assert a.root_cause.first_line >= 2001
    assert any("longer than" in w for w in a.warnings)


def test_directories_are_walked_and_binaries_skipped(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    (d / "sub").mkdir(parents=True)
    (d / "rank0.log").write_text(NOISE)
    (d / "sub" / "rank1.log").write_text(OOM)
    (d / "core.bin").write_bytes(b"\x00\x01\x02" * 100)
    sources, warnings = collect_sources([str(d)])
    assert [s.rank_hint for s in sources] == [0, 1]
    assert any("binary" in w for w in warnings)


def test_missing_and_empty_inputs_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        collect_sources([str(tmp_path / "missing.log")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no files"):
        collect_sources([str(tmp_path / "empty")])


def _streamed(data: bytes) -> bytes:
    opened = open_source(Source(name="x.log", stream=io.BytesIO(data)), budget=ByteBudget(0))
    out = bytearray()
    buf = memoryview(bytearray(1 << 16))
    while n := opened.reader.readinto(buf):
        out += buf[:n]
    opened.close()
    return bytes(out)


def test_expand_in_memory_gives_the_bytes_a_stream_gives() -> None:
    text = b"".join(b"step %d loss 1.5\n" % i for i in range(5000))
    half = len(text) // 2
    two_members = gzip.compress(text[:half]) + gzip.compress(text[half:])
    two_frames = zstandard.ZstdCompressor().compress(text[:half]) + zstandard.ZstdCompressor().compress(
        text[half:]
    )
    for data in (text, gzip.compress(text), two_members, two_frames):
        assert expand_in_memory(data, limit=len(text)) == _streamed(data) == text
        assert expand_in_memory(data, limit=len(text) - 1) is None  # never past the limit
    assert expand_in_memory(gzip.compress(text)[:-30], limit=1 << 20) is None  # truncated
    with pytest.raises(InputError):  # what a scan worker then reports
        _streamed(gzip.compress(text)[:-30])
    # a zstd stream cut short is an error too, not the part that decoded (zstd's reader ends
    # quietly inside a frame; the frame walker notices)
    truncated = zstandard.ZstdCompressor().compress(text)[:-30]
    assert expand_in_memory(truncated, limit=1 << 20) is None
    with pytest.raises(InputError, match="truncated zstd"):
        _streamed(truncated)


# --- archives are refused by name (app.engine.pipeline.archive) ---------------------------------------------


def test_archive_formats_are_named_and_logs_are_not() -> None:
    import bz2
    import lzma

    from app.engine.pipeline.archive import archive_format
    from tests.hostile.corpus import SMALL, TAR_OF_LOGS, ZIP_OF_ZEROS, zip_of

    assert archive_format(ZIP_OF_ZEROS) == "zip"
    assert archive_format(zip_of({})) == "zip"
    assert archive_format(TAR_OF_LOGS[:512]) == "tar"
    assert archive_format(b"7z\xbc\xaf\x27\x1c\x00\x04") == "7z"
    assert archive_format(b"Rar!\x1a\x07\x00") == "rar"
    assert archive_format(lzma.compress(SMALL)) == "xz"
    assert archive_format(bz2.compress(SMALL)) == "bzip2"
    assert archive_format(bz2.compress(b"")) == "bzip2"
    # text that merely starts like one is a log: "BZh" + a digit, "PK" without the record bytes
    for text in (b"BZh9 starting job\n", b"PK\x03 line", b"PKG build ok\n", SMALL, b"", b"x" * 300):
        assert archive_format(text) is None, text[:20]
    assert archive_format(b"x" * 257 + b"ustar is a word\n") is None


def test_cli_refuses_an_archive_and_skips_one_in_a_directory(tmp_path: Path) -> None:
    from app.errors import UnsupportedMediaError
    from tests.hostile.corpus import TAR_OF_LOGS, ZIP_OF_ZEROS

    (tmp_path / "logs.zip").write_bytes(ZIP_OF_ZEROS)
    (tmp_path / "logs.tar.gz").write_bytes(gzip.compress(TAR_OF_LOGS))
    (tmp_path / "job.log.gz").write_bytes(gzip.compress(OOM.encode()))
    (tmp_path / "job.log.zst").write_bytes(zstandard.ZstdCompressor().compress(OOM.encode()))
    for name, fmt in (("logs.zip", "zip"), ("logs.tar.gz", "tar")):
        with pytest.raises(UnsupportedMediaError, match=f"a {fmt} archive, not a log"):
            collect_sources([str(tmp_path / name)])
    sources, warnings = collect_sources([str(tmp_path)])
    assert sorted(Path(s.name).name for s in sources) == ["job.log.gz", "job.log.zst"]
    assert sorted(w.split(": ", 1)[1] for w in warnings) == [
        "skipped, a tar archive (archives are not unpacked)",
        "skipped, a zip archive (archives are not unpacked)",
    ]
