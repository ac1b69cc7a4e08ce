"""The hostile-input corpus for `logtriage analyze`: each case is a clear one-line error with its
exit code (no traceback, no report on stdout) and leaves nothing behind in the working directory.

The CLI reads the user's own files: a compression bomb is bounded by `--max-bytes` (the service
also checks the expansion ratio, tests/test_hostile.py).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from tests.hostile import corpus
from tests.servicekit import ROOT

# slow: one `logtriage analyze` process per hostile input (bombs, archives, binaries)
pytestmark = pytest.mark.slow

MEDIUM = corpus.MEDIUM
GZ = gzip.compress(MEDIUM, mtime=0)
ZST = zstandard.ZstdCompressor(write_checksum=True).compress(MEDIUM)

# name -> (what to write as the input, extra arguments, exit code, words of the error)
Maker = Callable[[Path, Path], list[str]]


def _file(name: str, data: bytes) -> Maker:
    def make(work: Path, cache: Path) -> list[str]:
        (work / name).write_bytes(data)
        return [name]

    return make


def _bomb(work: Path, cache: Path) -> list[str]:
    return [str(corpus.gzip_bomb(cache)), "--max-bytes", "64M"]


def _zstd_bomb(work: Path, cache: Path) -> list[str]:
    return [str(corpus.zstd_bomb(cache)), "--max-bytes", "64M"]


def _empty_dir(work: Path, cache: Path) -> list[str]:
    (work / "logs").mkdir()
    return ["logs"]


CASES: dict[str, tuple[Maker, int, str]] = {
    "truncated gzip": (_file("job.log.gz", GZ[:-4096]), 1, "cannot read"),
    "truncated zstd": (_file("job.log.zst", ZST[:-4096]), 1, "truncated zstd"),
    "zstd cut in its header": (_file("job.log.zst", ZST[:6]), 1, "truncated zstd"),
    "corrupt gzip": (
        _file("job.log.gz", GZ[:1000] + bytes(b ^ 0x5A for b in GZ[1000:2000]) + GZ[2000:]),
        1,
        "corrupt",
    ),
    "zstd with trailing garbage": (_file("job.log.zst", ZST + b"garbage!" * 64), 1, "corrupt zstd"),
    "gzip bomb over --max-bytes": (_bomb, 1, "exceeds the limit"),
    "zstd bomb over --max-bytes": (_zstd_bomb, 1, "exceeds the limit"),
    "random bytes": (_file("core.bin", os.urandom(1 << 16)), 1, "binary content"),
    "UTF-16 log": (_file("win.log", MEDIUM[:20000].decode().encode("utf-16-le")), 1, "UTF-16"),
    "zip of zeros": (_file("logs.zip", corpus.ZIP_OF_ZEROS), 1, "logs.zip: a zip archive"),
    "zip renamed .log": (_file("job.log", corpus.ZIP_OF_ZEROS), 1, "zip archive, not a log"),
    "tar.gz": (_file("logs.tar.gz", gzip.compress(corpus.TAR_OF_LOGS)), 1, "a tar archive"),
    "tar.zst": (_file("logs.tar.zst", zstandard.ZstdCompressor().compress(corpus.TAR_OF_LOGS)), 1, "tar"),
    "7z": (_file("logs.7z", b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(64)), 1, "7z archive"),
    "missing file": (lambda work, cache: ["nope.log"], 1, "no such file"),
    "empty directory": (_empty_dir, 1, "holds no files"),
}


@pytest.fixture(scope="session")
def hostile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-corpus-cli")


@pytest.mark.parametrize("name", list(CASES))
def test_cli_refuses_hostile_input_clearly(name: str, tmp_path: Path, hostile_cache: Path) -> None:
    make, code, words = CASES[name]
    work = tmp_path / "work"
    work.mkdir()
    args = make(work, hostile_cache)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env["XDG_CACHE_HOME"] = str(hostile_cache / "xdg")  # the compiled rules, built once
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "analyze", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=300,
    )
    assert res.returncode == code, (res.returncode, res.stderr[-2000:])
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logtriage: error:"), res.stderr[-2000:]
    assert words.lower() in lines[0].lower(), lines[0]
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before
