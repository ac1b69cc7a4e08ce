"""The hostile-input corpus: requests an attacker or an unlucky hook sends, and what each must get.

Every case is one request against `POST /api/v1/analyses` (raw or multipart), the list API, an
analysis or its feedback, with the status and problem type it must answer. What is big (bombs,
the repetitive log, the over-limit log) is generated here, once per test session, into a cache
directory (`python tests/hostile/generate.py DIR` writes the same files by hand): the repository
holds the generator, not the gigabytes.

`tests/test_hostile.py` runs every case on SQLite and PostgreSQL and checks, besides the answer,
that the store did not change (no row in any table, no blob, no temporary file left).
`tests/test_hostile_cli.py` holds the cases of `logtriage analyze`.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import random
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import zstandard

API = "/api/v1/analyses"
TEXT = {"Content-Type": "text/plain"}

# the limits the hostile server runs with (small, so the over-limit cases stay cheap)
MAX_UPLOAD_BYTES = 16 << 20
MAX_BYTES = 64 << 20
MAX_TMP_BYTES = 24 << 20
BODY_TIMEOUT = 1.0

LOG_LINE = (
    "(WorkerDict pid=81234, ip=10.0.3.17) [2025-05-01 14:03:{s:02d}] step {i} loss {loss:.4f} "
    "grad_norm {g:.3f} lr 1e-5 throughput {t} tokens/s\n"
)
FAILURE = (
    "(WorkerDict pid=90412, ip=10.0.3.18) RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
)
OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib} GiB. GPU 0 has a total "
    "capacity of 79.25 GiB of which 1.21 GiB is free.\n"
)


def log_text(n_lines: int, *, seed: int = 0) -> bytes:
    """A training log of varied lines (gzip ~5-8x) ending in a failure."""
    rnd = random.Random(seed)
    lines = [
        LOG_LINE.format(s=i % 60, i=i, loss=rnd.random() * 3, g=rnd.random() * 10, t=rnd.randint(900, 1500))
        for i in range(n_lines)
    ]
    return ("".join(lines) + FAILURE).encode()


# --- generated files --------------------------------------------------------------------------


def _cached(cache: Path, name: str, make: Callable[[], bytes]) -> Path:
    path = cache / name
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_bytes(make())
        tmp.rename(path)
    return path


def gzip_bomb(cache: Path) -> Path:
    """~10 MB of gzip that expands to ~10 GiB of NULs: one 64 MiB member repeated (gzip
    concatenates members), so it is made in a fraction of a second."""

    def make() -> bytes:
        member = gzip.compress(b"\0" * (64 << 20), compresslevel=9, mtime=0)
        return member * ((10 << 20) // len(member))

    return _cached(cache, "bomb-10g.gz", make)


def gzip_newline_bomb(cache: Path) -> Path:
    """~1 MB of gzip expanding to ~1 GiB of empty lines (text: only the ratio refuses it)."""

    def make() -> bytes:
        member = gzip.compress(b"\n" * (64 << 20), compresslevel=9, mtime=0)
        return member * 16

    return _cached(cache, "bomb-lines.gz", make)


def zstd_bomb(cache: Path) -> Path:
    """zstd frames of 64 MiB of newlines each (a few KB apiece), 10 GiB in all."""

    def make() -> bytes:
        frame = zstandard.ZstdCompressor(level=19).compress(b"\n" * (64 << 20))
        return frame * 160

    return _cached(cache, "bomb-10g.zst", make)


def repetitive_log(cache: Path) -> Path:
    """The issue's "11 MB gzip of 3 GB of log lines": the same 4 lines over and over compress
    past any real log (ratio ~230; the issue's 272); made as one member repeated."""

    def make() -> bytes:
        block = log_text(4, seed=1)[: -len(FAILURE)]
        member = gzip.compress(block * ((64 << 20) // len(block)), compresslevel=6, mtime=0)
        return member * 48  # ~3 GiB of log in ~13 MB

    return _cached(cache, "repetitive-3g.gz", make)


def over_max_bytes_log(cache: Path) -> Path:
    """A real log of ~80 MiB (gzip ~8x: under the upload limit, within the ratio) that is over
    the decompressed limit (`MAX_BYTES`)."""

    def make() -> bytes:
        text = log_text(80 << 20 >> 7, seed=2)
        while len(text) < (MAX_BYTES + (16 << 20)):
            text += text[: 8 << 20]
        return gzip.compress(text, compresslevel=1, mtime=0)

    return _cached(cache, "over-max-bytes.gz", make)


def compressible_log(cache: Path) -> Path:
    """A legitimate, highly compressible log (a warning repeated between steps, ~40-80x):
    within the ratio, it must be analysed (the control of the bomb cases)."""

    def make() -> bytes:
        rnd = random.Random(3)
        parts = []
        for i in range(60_000):
            parts.append(
                "[rank0]: UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be "
                "passed explicitly\n" * 6
            )
            parts.append(f"step {i} loss {rnd.random():.4f}\n")
        return gzip.compress(("".join(parts) + FAILURE).encode(), compresslevel=6, mtime=0)

    return _cached(cache, "compressible.gz", make)


def text_then_binary(cache: Path) -> Path:
    """2 MiB of log, then 1 MiB of random bytes: the first 8 KB alone look fine."""
    return _cached(cache, "text-then-binary.log", lambda: log_text(16_000, seed=4) + os.urandom(1 << 20))


def generate_all(cache: Path) -> list[Path]:
    return [
        f(cache)
        for f in (
            gzip_bomb,
            gzip_newline_bomb,
            zstd_bomb,
            repetitive_log,
            over_max_bytes_log,
            compressible_log,
            text_then_binary,
        )
    ]


# --- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    status: int
    slug: str
    send: Callable[[httpx.Client, Path], httpx.Response]
    detail: str = ""  # a word the problem's detail must hold
    tags: tuple[str, ...] = field(default_factory=tuple)


def raw(body: bytes | Callable[[Path], Path], headers: dict[str, str] | None = None, **params: Any) -> Any:
    def send(c: httpx.Client, cache: Path) -> httpx.Response:
        data = body if isinstance(body, bytes) else body(cache).read_bytes()
        return c.post(API, content=data, headers={**TEXT, **(headers or {})}, params=params)

    return send


def form(
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None,
    data: dict[str, Any] | None = None,
    **params: Any,
) -> Any:
    def send(c: httpx.Client, cache: Path) -> httpx.Response:
        parts = files if files is not None else [("log", ("job.log", log_text(50), "text/plain"))]
        return c.post(API, files=parts, data=data or {}, params=params)

    return send


def multipart_body(body: bytes, boundary: str = "xyz") -> Any:
    def send(c: httpx.Client, cache: Path) -> httpx.Response:
        return c.post(
            API, content=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
        )

    return send


def get(path: str, **params: Any) -> Any:
    def send(c: httpx.Client, cache: Path) -> httpx.Response:
        return c.get(path, params=params)

    return send


def post_json(path: str, body: bytes) -> Any:
    def send(c: httpx.Client, cache: Path) -> httpx.Response:
        return c.post(path, content=body, headers={"Content-Type": "application/json"})

    return send


def truncated(data: bytes, cut: int) -> bytes:
    return data[:-cut]


SMALL = log_text(200)  # ~24 KB: a hook's log (held in memory, analysed inline)
MEDIUM = log_text(20_000)  # ~2.4 MB: spooled, analysed by a scan worker
GZ_SMALL, GZ_MEDIUM = gzip.compress(SMALL, mtime=0), gzip.compress(MEDIUM, mtime=0)
ZST_SMALL = zstandard.ZstdCompressor().compress(SMALL)
ZST_MEDIUM = zstandard.ZstdCompressor(write_checksum=True).compress(MEDIUM)
FAKE_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
NUL, LF, ESC = "\x00", "\n", "\x1b"

BOMBS = [
    Case("gzip bomb 10 MB -> 10 GiB", 413, "input-too-large", raw(gzip_bomb), "compression bomb", ("bomb",)),
    Case("gzip bomb of empty lines", 413, "input-too-large", raw(gzip_newline_bomb), "compression bomb"),
    Case("zstd bomb 10 GiB", 413, "input-too-large", raw(zstd_bomb), "compression bomb"),
    Case(
        "3 GiB of repeated log lines in 13 MB of gzip (ratio ~230)",
        413,
        "input-too-large",
        raw(repetitive_log),
        "compression bomb",
    ),
    Case("log over LOGTRIAGE_MAX_BYTES", 413, "input-too-large", raw(over_max_bytes_log), "limit"),
    Case(
        "gzip bomb as a multipart log part",
        413,
        "input-too-large",
        lambda c, cache: c.post(API, files=[("log", ("b.log.gz", gzip_bomb(cache).read_bytes(), "a/b"))]),
        "compression bomb",
    ),
    Case(
        "body over LOGTRIAGE_MAX_UPLOAD_BYTES (declared)",
        413,
        "payload-too-large",
        raw(b"x" * (MAX_UPLOAD_BYTES + 1)),
        "upload limit",
    ),
    Case(
        "body over LOGTRIAGE_MAX_UPLOAD_BYTES (chunked, no length)",
        413,
        "payload-too-large",
        lambda c, cache: c.post(API, content=iter([b"step 1 loss 2\n" * 65536] * 20), headers=TEXT),
        "upload limit",
    ),
]

UNREADABLE = [
    Case("truncated gzip (inline)", 400, "unreadable-input", raw(truncated(GZ_SMALL, 30))),
    Case("truncated gzip (spooled)", 400, "unreadable-input", raw(truncated(GZ_MEDIUM, 4096))),
    Case("truncated zstd (inline)", 400, "unreadable-input", raw(truncated(ZST_SMALL, 30)), "truncated zstd"),
    Case(
        "truncated zstd (spooled)",
        400,
        "unreadable-input",
        raw(truncated(ZST_MEDIUM, 4096)),
        "truncated zstd",
    ),
    Case("zstd cut inside its frame header", 400, "unreadable-input", raw(ZST_MEDIUM[:6]), "truncated zstd"),
    Case(
        "corrupt gzip (bytes flipped)",
        400,
        "unreadable-input",
        raw(GZ_MEDIUM[:1000] + bytes(b ^ 0x5A for b in GZ_MEDIUM[1000:2000]) + GZ_MEDIUM[2000:]),
    ),
    Case("zstd with garbage after its frame", 400, "unreadable-input", raw(ZST_MEDIUM + b"garbage!" * 100)),
    Case("empty body", 400, "unreadable-input", raw(b"")),
    Case("gzip of nothing", 400, "unreadable-input", raw(gzip.compress(b""))),
    Case("zstd of nothing", 400, "unreadable-input", raw(zstandard.ZstdCompressor().compress(b""))),
    Case(
        "Content-Encoding gzip on a plain body",
        400,
        "unreadable-input",
        raw(SMALL, {"Content-Encoding": "gzip"}),
    ),
    Case(
        "multipart without closing boundary",
        400,
        "unreadable-input",
        multipart_body(b'--xyz\r\nContent-Disposition: form-data; name="log"; filename="a"\r\n\r\nabc\r\n'),
    ),
    Case(
        "multipart part without a name",
        400,
        "unreadable-input",
        multipart_body(b"--xyz\r\nContent-Disposition: form-data\r\n\r\nabc\r\n--xyz--\r\n"),
    ),
    Case("multipart without boundary", 400, "unreadable-input", multipart_body(b"abc", boundary="")),
]

BINARY = [
    Case("random bytes", 415, "unsupported-media-type", raw(os.urandom(1 << 20)), "binary"),
    Case("random bytes (inline)", 415, "unsupported-media-type", raw(os.urandom(64 << 10)), "binary"),
    Case(
        "log, then binary after the first MiBs",
        415,
        "unsupported-media-type",
        raw(text_then_binary),
        "binary",
    ),
    Case(
        "gzip of a log followed by binary",
        415,
        "unsupported-media-type",
        lambda c, cache: c.post(
            API, content=gzip.compress(text_then_binary(cache).read_bytes(), mtime=0), headers=TEXT
        ),
        "binary",
    ),
    Case("gzip inside gzip (inline)", 415, "unsupported-media-type", raw(gzip.compress(GZ_SMALL)), "twice"),
    Case("gzip inside gzip (spooled)", 415, "unsupported-media-type", raw(gzip.compress(GZ_MEDIUM)), "twice"),
    Case("zstd inside gzip", 415, "unsupported-media-type", raw(gzip.compress(ZST_MEDIUM)), "twice"),
    Case(
        "UTF-16 log",
        415,
        "unsupported-media-type",
        raw(SMALL.decode().encode("utf-16-le")),
        "UTF-16",
    ),
    Case(
        "ELF-like header and code",
        415,
        "unsupported-media-type",
        raw(b"\x7fELF\x02\x01\x01" + os.urandom(8192)),
        "binary",
    ),
    Case("Content-Encoding br", 415, "unsupported-media-type", raw(SMALL, {"Content-Encoding": "br"})),
    Case(
        "Content-Type application/json",
        415,
        "unsupported-media-type",
        raw(b'{"log": "x"}', {"Content-Type": "application/json"}),
    ),
    Case(
        "Content-Encoding on a multipart body",
        415,
        "unsupported-media-type",
        lambda c, cache: c.post(
            API,
            content=b"--x--\r\n",
            headers={"Content-Type": "multipart/form-data; boundary=x", "Content-Encoding": "gzip"},
        ),
    ),
]


def zip_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def tar_of(members: dict[str, bytes], fmt: int = tarfile.GNU_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


ZIP_OF_ZEROS = zip_of({"zeros.log": b"\0" * (1 << 20)})  # ~1 KB: passes the text check
TAR_OF_LOGS = tar_of({"rank0.log": SMALL, "rank1.log": SMALL})
# archives and binary containers: 415 naming the format, whatever the Content-Type says
ARCHIVES = [
    Case("zip of zeros as text/plain", 415, "unsupported-media-type", raw(ZIP_OF_ZEROS), "a zip archive"),
    Case("zip of logs", 415, "unsupported-media-type", raw(zip_of({"a.log": MEDIUM})), "zip archive"),
    Case("empty zip (22 bytes)", 415, "unsupported-media-type", raw(zip_of({})), "zip archive"),
    Case("spanned zip marker", 415, "unsupported-media-type", raw(b"PK\x07\x08" + ZIP_OF_ZEROS), "zip"),
    Case("tar (GNU) of logs", 415, "unsupported-media-type", raw(TAR_OF_LOGS), "tar archive"),
    Case(
        "tar (POSIX) of logs",
        415,
        "unsupported-media-type",
        raw(tar_of({"a.log": SMALL}, tarfile.PAX_FORMAT)),
        "tar archive",
    ),
    Case("tar.gz (inline)", 415, "unsupported-media-type", raw(gzip.compress(TAR_OF_LOGS)), "tar archive"),
    Case(
        "tar.gz (spooled)",
        415,
        "unsupported-media-type",
        raw(gzip.compress(tar_of({"a.log": MEDIUM}), mtime=0)),
        "tar archive",
    ),
    Case(
        "tar.zst",
        415,
        "unsupported-media-type",
        raw(zstandard.ZstdCompressor().compress(TAR_OF_LOGS)),
        "tar archive",
    ),
    Case("zip inside gzip", 415, "unsupported-media-type", raw(gzip.compress(ZIP_OF_ZEROS)), "zip archive"),
    Case(
        "7z header",
        415,
        "unsupported-media-type",
        raw(b"7z\xbc\xaf\x27\x1c\x00\x04" + b"\0" * 4096),
        "7z archive",
    ),
    Case("rar5 header", 415, "unsupported-media-type", raw(b"Rar!\x1a\x07\x01\x00" + b"\0" * 64), "rar"),
    Case("xz of a log", 415, "unsupported-media-type", raw(lzma.compress(SMALL)), "xz archive"),
    Case("bzip2 of a log", 415, "unsupported-media-type", raw(bz2.compress(SMALL)), "bzip2 archive"),
    Case(
        "zip as a multipart log part",
        415,
        "unsupported-media-type",
        form(files=[("log", ("logs.log", ZIP_OF_ZEROS, "text/plain"))]),
        "logs.log: a zip archive",
    ),
    Case(
        "a log, then a tar.gz part",
        415,
        "unsupported-media-type",
        form(
            files=[
                ("log", ("job.log", SMALL, "text/plain")),
                ("log", ("more.tar.gz", gzip.compress(TAR_OF_LOGS), "application/gzip")),
            ]
        ),
        "more.tar.gz: a tar archive",
    ),
]


def _labels(obj: str) -> Any:
    return form(data={"labels": obj})


FIELDS = (
    [
        Case(f"job_id {name} (query)", 422, "validation-failed", raw(SMALL, job_id=f"job{ch}1"), "control")
        for name, ch in (("NUL", NUL), ("newline", LF), ("ESC", ESC), ("DEL", "\x7f"), ("C1", "\x85"))
    ]
    + [
        Case(f"host {name} (form)", 422, "validation-failed", form(data={"host": f"node{ch}1"}), "control")
        for name, ch in (("NUL", NUL), ("newline", LF), ("tab", "\t"), ("C1", "\x9b"))
    ]
    + [
        Case("job_id NUL (form)", 422, "validation-failed", form(data={"job_id": f"a{NUL}b"}), "control"),
        Case(
            "label value NUL (form)",
            422,
            "validation-failed",
            form(data={"label": f"team=r{NUL}l"}),
            "control",
        ),
        Case(
            "label value NUL (query)", 422, "validation-failed", raw(SMALL, label=f"team=r{NUL}l"), "control"
        ),
        Case("label key NUL (form)", 422, "validation-failed", form(data={"label": f"te{NUL}am=rl"})),
        Case(
            "label key with newline at its end", 422, "validation-failed", form(data={"label": "team\n=rl"})
        ),
        Case(
            "labels JSON with \\u0000", 422, "validation-failed", _labels('{"team": "r\\u0000l"}'), "control"
        ),
        Case(
            "labels JSON with a lone surrogate",
            422,
            "validation-failed",
            _labels('{"team": "\\ud800"}'),
            "control",
        ),
        Case(
            "labels JSON with a duplicate key",
            422,
            "validation-failed",
            _labels('{"a": "1", "a": "2"}'),
            "twice",
        ),
        Case("labels JSON with an object value", 422, "validation-failed", _labels('{"a": {"b": 1}}')),
        Case("labels JSON null value", 422, "validation-failed", _labels('{"a": null}')),
        Case("labels JSON not an object", 422, "validation-failed", _labels("[1, 2]")),
        Case(
            "labels JSON nested 100k deep", 422, "validation-failed", _labels("[" * 100_000 + "]" * 100_000)
        ),
        Case("labels not JSON", 422, "validation-failed", _labels("{team: rl")),
        Case(
            "label key twice (form)",
            422,
            "validation-failed",
            form(data={"label": ["team=rl", "team=sft"]}),
            "twice",
        ),
        Case(
            "label key in the JSON object and a pair",
            422,
            "validation-failed",
            form(data={"label": "team=rl", "labels": '{"team": "rl"}'}),
            "twice",
        ),
        Case("label key twice (query)", 422, "validation-failed", raw(SMALL, label=["a=1", "a=1"]), "twice"),
        Case(
            "job_id field twice (form)",
            422,
            "validation-failed",
            form(data={"job_id": ["a", "b"]}),
            "give it once",
        ),
        Case(
            "labels field twice (form)",
            422,
            "validation-failed",
            form(data={"labels": ['{"a":"1"}', '{"b":"2"}']}),
        ),
        Case("33 labels", 422, "validation-failed", form(data={"label": [f"k{i}=v" for i in range(33)]})),
        Case("label value over 256 chars", 422, "validation-failed", form(data={"label": "a=" + "x" * 257})),
        Case("label without =", 422, "validation-failed", raw(SMALL, label="team")),
        Case("exit_code NUL", 422, "validation-failed", form(data={"exit_code": f"1{NUL}"})),
        Case("exit_code 2**40", 422, "validation-failed", form(data={"exit_code": str(2**40)})),
        Case("exit_code 10**5000 (query)", 422, "validation-failed", raw(SMALL, exit_code="9" * 5000)),
        Case("framework unknown", 422, "validation-failed", raw(SMALL, framework="vllm\x00")),
        Case("source unknown", 422, "validation-failed", raw(SMALL, source="evil")),
        Case("job_id over 256 chars", 422, "validation-failed", raw(SMALL, job_id="j" * 300)),
        Case("filename NUL (query)", 422, "validation-failed", raw(SMALL, filename=f"a{NUL}.log")),
        Case(
            "form field not UTF-8",
            422,
            "validation-failed",
            form(
                data={"job_id": "x"},
                files=[
                    ("log", ("a.log", SMALL, "text/plain")),
                    ("host", (None, b"\xff\xfe", "text/plain")),  # type: ignore[list-item]
                ],
            ),
        ),
        Case(
            "unknown multipart part",
            422,
            "validation-failed",
            form(files=[("evil", ("a", b"x", "text/plain"))]),
        ),
        Case(
            "65 log parts",
            422,
            "validation-failed",
            form(files=[("log", (f"r{i}.log", b"x\n", "text/plain")) for i in range(65)]),
        ),
        Case(
            "config twice",
            422,
            "validation-failed",
            form(
                files=[
                    ("log", ("a.log", SMALL, "text/plain")),
                    ("config", ("a.yaml", b"a: 1\n", "text/plain")),
                    ("config", ("b.yaml", b"b: 1\n", "text/plain")),
                ]
            ),
        ),
        Case("form field over 64 KiB", 422, "validation-failed", form(data={"job_id": "x" * (65 << 10)})),
        Case(
            "unparsable config",
            422,
            "bad-config-file",
            form(
                files=[
                    ("log", ("a.log", SMALL, "text/plain")),
                    ("config", ("c.yaml", b"a: [1\n", "text/plain")),
                ]
            ),
        ),
        Case(
            "Idempotency-Key over 255 chars",
            422,
            "validation-failed",
            raw(SMALL, {"Idempotency-Key": "k" * 300}),
        ),
    ]
)

FILTERS = (
    [
        Case(f"list filter {name}=NUL", 422, "validation-failed", get(API, **{name: f"a{NUL}b"}), "control")
        for name in (
            "class",
            "kind",
            "framework",
            "job_id",
            "host",
            "status",
            "source",
            "rule_id",
            "fingerprint",
            "label",
            "since",
            "until",
            "cursor",
        )
    ]
    + [
        Case(f"since={value}", 422, "validation-failed", get(API, since=value))
        for value in (
            "99999999999d",
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-14:00",
            "1969-12-31",
            "garbage",
            "1e9999",
            "NaN",
            "-1d",
            "9" * 5000 + "d",
            "2025-13-45",
            "24hours",
            "",
        )
        if value
    ]
    + [
        Case(f"until={value}", 422, "validation-failed", get(API, until=value))
        for value in ("99999999999w", "0001-01-01", "10000-01-01", "2025-01-01T25:00:00")
    ]
    + [
        Case("limit=0", 422, "validation-failed", get(API, limit=0)),
        Case("limit=10**30", 422, "validation-failed", get(API, limit=10**30)),
        Case("cursor garbage", 422, "validation-failed", get(API, cursor="!!not-a-cursor!!")),
        Case("status bogus", 422, "validation-failed", get(API, status="bogus")),
        Case("label filter without =", 422, "validation-failed", get(API, label="team")),
        Case("label filter key twice", 422, "validation-failed", get(API, label=["a=1", "a=2"]), "twice"),
        Case("analysis id NUL", 404, "not-found", get(f"{API}/{FAKE_ID[:10]}%00x")),
        Case("analysis id 10k chars", 404, "not-found", get(f"{API}/{'A' * 10_000}")),
        Case("analysis log of an unknown id", 404, "not-found", get(f"{API}/{FAKE_ID}/log")),
        Case("log file=-1", 422, "validation-failed", get(f"{API}/{FAKE_ID}/log", file=-1)),
        Case("rule id NUL", 404, "not-found", get("/api/v1/rules/x%00y")),
        Case("stats since overflow", 422, "validation-failed", get("/api/v1/stats", since="99999999999d")),
    ]
)

FEEDBACK = [
    Case(
        f"feedback {name}",
        status,
        slug,
        post_json(f"{API}/{FAKE_ID}/feedback", body),
    )
    for name, body, status, slug in (
        ("comment NUL", b'{"verdict": "wrong", "comment": "a\\u0000b"}', 422, "validation-failed"),
        ("comment lone surrogate", b'{"verdict": "wrong", "comment": "\\udfff"}', 422, "validation-failed"),
        ("correct_class NUL", b'{"verdict": "wrong", "correct_class": "a\\u0000"}', 422, "validation-failed"),
        ("not JSON", b"{verdict", 422, "validation-failed"),
        ("not UTF-8", b'{"verdict": "\xff"}', 400, "unreadable-input"),
        ("unknown field", b'{"verdict": "wrong", "x": 1}', 422, "validation-failed"),
        ("on an unknown analysis", b'{"verdict": "wrong"}', 404, "not-found"),
    )
]

CASES: list[Case] = BOMBS + UNREADABLE + BINARY + ARCHIVES + FIELDS + FILTERS + FEEDBACK

_ECC = "(WorkerDict pid=1, ip={ip}) RuntimeError: CUDA error: uncorrectable ECC error encountered{tail}\n"
# log content a hostile or broken job prints: analysed (201), stored, served back, never a 5xx;
# (name, bytes, the root cause's class or None)
LOG_CONTENT: list[tuple[str, bytes, str | None]] = [
    (
        "NUL bytes in the error line",
        log_text(50) + _ECC.format(ip="10.0.0.1", tail=" \x00\x00x\x00").encode(),
        "hardware.gpu_ecc_error",
    ),
    (
        "NUL bytes in every line",
        log_text(50).replace(b"step", b"st\x00ep") + _ECC.format(ip="10.0.0.2", tail="").encode(),
        "hardware.gpu_ecc_error",
    ),
    (
        "a 400-digit host",
        log_text(50) + _ECC.format(ip="10." + "1" * 400, tail="").encode(),
        "hardware.gpu_ecc_error",
    ),
    (
        "a host holding NUL and escapes",
        log_text(50) + _ECC.format(ip="10.0.0.3\x00\x1b[31m\x07", tail="").encode(),
        "hardware.gpu_ecc_error",
    ),
    (
        "invalid UTF-8 and encoded surrogates",
        log_text(50) + b"RuntimeError: CUDA error: \xed\xa0\x80\xff uncorrectable ECC error encountered\n",
        "hardware.gpu_ecc_error",
    ),
    ("an OOM asking for 10^400 GiB", log_text(50) + OOM_LINE.format(gib="9" * 400).encode(), None),
    (
        "a 3 MiB line",
        log_text(50) + b"x" * (3 << 20) + b"\n" + _ECC.format(ip="10.0.0.4", tail="").encode(),
        "hardware.gpu_ecc_error",
    ),
    (
        "CR-only line ends",
        (log_text(50) + _ECC.format(ip="10.0.0.5", tail="").encode()).replace(b"\n", b"\r"),
        None,
    ),
    (
        "markup and markdown in the log",
        log_text(50)
        + _ECC.format(
            ip="10.0.0.6", tail=" <script>alert(1)</script> [x](https://evil.example) **b**"
        ).encode(),
        "hardware.gpu_ecc_error",
    ),
]

# file names a log may carry, in any script: (as sent, as stored and served back). Sent as the
# raw body's `filename=` (percent-encoded), or, with control characters, as the raw bytes of a
# multipart part's `filename="..."` (the query refuses control characters with a 422)
FILE_NAMES = [
    ("日本語のログ.log", "日本語のログ.log"),
    ("журнал.log", "журнал.log"),
    ("سجل-التدريب.log", "سجل-التدريب.log"),  # right-to-left
    ("יומן.log", "יומן.log"),
    ("🔥💥-rank0.log", "🔥💥-rank0.log"),
    ("👩‍💻-job.log", "👩‍💻-job.log"),  # a ZWJ sequence
    ("été.log", "été.log"),  # combining marks, kept as sent (NFD)
    ("a\x00b\x1b[31mc\x7f\x85.log", "ab[31mc.log"),  # control characters dropped
    ("evil\u202egol.exe", "evilgol.exe"),  # a bidi override dropped
    ("../../etc/passwd", "passwd"),
    ("C:\\Users\\x\\job.log", "job.log"),
    ('quote"semi;comma,%20.log', 'quote"semi;comma,%20.log'),
    ("x" * 500 + ".log", "x" * 200),
    ("ü" * 300, "ü" * 200),
    ("..", "job.log"),
]


def send_named(c: httpx.Client, name: str, body: bytes) -> httpx.Response:
    if len(name) > 200 or any(ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F for ch in name):
        head = f'--b0\r\nContent-Disposition: form-data; name="log"; filename="{name}"\r\n\r\n'
        data = head.encode() + body + b"\r\n--b0--\r\n"
        return c.post(API, content=data, headers={"Content-Type": "multipart/form-data; boundary=b0"})
    return c.post(API, content=body, headers=TEXT, params={"filename": name})


def stored_problem(r: httpx.Response) -> dict[str, Any]:
    """The response's problem document (it must be one)."""
    assert r.headers["content-type"].startswith("application/problem+json"), (r.status_code, r.text[:300])
    body: dict[str, Any] = json.loads(r.content)
    assert body["status"] == r.status_code and body["type"].startswith("/problems/")
    assert "Traceback" not in body["detail"]
    return body
