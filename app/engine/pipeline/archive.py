"""Archives and binary containers are refused by name, not read as a log.

logtriage reads text logs, gzip or zstd compressed or not; it does not unpack archives. A zip or
a tar would otherwise be scanned as bytes (a zip of zeros even passes the text check) and stored
as a "log" with no finding. `archive_format` names the container from a stream's first bytes
(`ARCHIVE_HEAD` of them, the decompressed ones for a .tar.gz); the CLI, the upload intake and the
scan workers (after gzip/zstd decompression) all refuse with `archive_error`'s message.
"""

from __future__ import annotations

from app.errors import UnsupportedMediaError

ARCHIVE_HEAD = 512  # a tar header's magic sits at offset 257

# (offset, magic, format); bzip2 is checked apart (its magic is three letters)
_MAGIC: tuple[tuple[int, bytes, str], ...] = (
    (0, b"PK\x03\x04", "zip"),
    (0, b"PK\x05\x06", "zip"),  # an empty zip: the end-of-directory record alone
    (0, b"PK\x07\x08", "zip"),  # a spanned zip
    (0, b"7z\xbc\xaf\x27\x1c", "7z"),
    (0, b"Rar!\x1a\x07", "rar"),
    (0, b"\xfd7zXZ\x00", "xz"),
    (0, b"\x04\x22\x4d\x18", "lz4"),
    (0, b"!<arch>\n", "ar (.deb)"),
    (257, b"ustar\x00", "tar"),  # POSIX
    (257, b"ustar  \x00", "tar"),  # GNU
)
# "BZh" + block size 1-9 + the first block's magic (pi) or, for an empty stream, the end (sqrt pi)
_BZIP2_BLOCKS = (b"1AY&SY", b"\x17rE8P\x90")


def archive_format(head: bytes) -> str | None:
    """The archive or binary container `head` (a stream's first bytes) starts, else None."""
    for offset, magic, name in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return name
    if head[:3] == b"BZh" and head[3:4] in b"123456789" and head[4:10] in _BZIP2_BLOCKS:
        return "bzip2"
    return None


def archive_error(name: str, fmt: str) -> UnsupportedMediaError:
    return UnsupportedMediaError(
        f"{name}: a {fmt} archive, not a log; logtriage does not unpack archives: send the log files "
        "themselves (each may be gzip or zstd compressed)"
    )


def check_not_archive(head: bytes, name: str) -> None:
    """Raise the 415 `UnsupportedMediaError` when `head` starts an archive."""
    fmt = archive_format(head)
    if fmt is not None:
        raise archive_error(name, fmt)
