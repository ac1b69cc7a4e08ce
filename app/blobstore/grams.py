"""Which frames of a stored log can hold a search's text: a 4-gram filter per zstd frame.

A search for a phrase far into a multi-GB log used to read every byte between (7-9 s for 2 GB
here). The blob now carries, after its data frames, one bit array per frame in a zstd
*skippable* frame (decompressors step over it; the content and its SHA-256 are unchanged):
bit ``hash(g)`` is set for every 4-byte gram ``g`` that starts at an offset divisible by
``STRIDE`` and ends in that frame. A search then reads only the frames whose bits hold every gram
of one of its required literals, and skips the rest without decompressing them.

Why these choices:

- Grams at every fourth offset only: one numpy view of the bytes as little-endian ``uint32``
  (~3 ms per 4 MiB frame here, +5-6% on an upload's CPU; every offset cost ~11 ms). A query
  does not know where its text falls modulo 4, so it tries the four alignments: a literal of
  7 bytes or more has at least one aligned gram in each. Shorter literals are not filtered.
- Bytes are folded with ``| 0x20`` (ASCII case, and a few punctuation pairs that then share
  bits): one filter serves case-sensitive and case-insensitive searches, since the search
  matches the stored bytes, where IGNORECASE folds ASCII letters only. A false positive only
  costs a frame read.
- ``2 ** GRAM_BITS`` bits (32 KiB) per 4 MiB frame: 0.8% of the log's size, about 6% of what it
  stores compressed; about a fifth of the bits are set on a log full of hex ids, so a 15-byte
  phrase lets ~1 frame in 100 through falsely.
- A gram belongs to the frame it ends in, and a line to the frame it starts in: a match in a
  line that starts in frame ``f`` has its grams in ``f`` up to the frame holding the line's
  newline. A frame is read when the union of its bits and those of the frames up to (and with)
  the next frame that holds a newline has every gram.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

GRAM_BITS = 18
STRIDE = 4
GRAM = 4
MAGIC = b"LTG1"
HEADER = struct.Struct("<4sBBI")  # magic, bits, stride, frames
SKIPPABLE_MAGIC = 0x184D2A5E  # one of zstd's sixteen skippable-frame magics
SKIPPABLE_MAX = 1 << 30  # payload bytes per skippable frame (its size field is 32 bits)
FOLD = 0x20202020
MULT = 2654435761  # Knuth's multiplicative hash
CACHE_BYTES = 96 << 20  # filters kept in memory per process (a 2 GB log's is 16 MiB)


class GramBuilder:
    """Builds the filters while the blob's content streams through ``feed``/``end_frame``, one
    packed bit array per frame written to ``sink`` (memory stays at one frame's bits)."""

    def __init__(self, sink: IO[bytes], *, bits: int = GRAM_BITS, stride: int = STRIDE) -> None:
        import numpy as np

        if stride not in (1, 2, 4):
            raise ValueError("stride must be 1, 2 or 4")
        self._np = np
        self._sink = sink
        self.bits = bits
        self.stride = stride
        self._shift = np.uint32(32 - bits)
        self._set = np.zeros(1 << bits, np.bool_)
        self._tail = b""  # the last < 4 bytes: grams that start there end in the next piece
        self._seen = 0  # content bytes fed
        self.frames = 0

    def feed(self, piece: bytes | memoryview) -> None:
        n = len(piece)
        if not n:
            return
        np = self._np
        buf = self._tail + bytes(piece) if self._tail else piece
        base = self._seen - len(self._tail)  # content offset of buf[0]
        # the first gram not yet seen starts at or after seen - 3, on a multiple of the stride
        first = max(base, self._seen - (GRAM - 1))
        first += -first % self.stride
        self._seen += n
        i0 = first - base
        for k in range(0, 4, self.stride):  # a uint32 view steps 4 bytes: one view per phase
            at = i0 + k
            count = (len(buf) - at) // 4 if len(buf) - at >= GRAM else 0
            if count <= 0:
                continue
            v = np.frombuffer(buf, "<u4", count, at) | np.uint32(FOLD)
            v *= np.uint32(MULT)
            v >>= self._shift
            self._set[v] = True
        # the bytes after the last whole gram of each phase are kept for the next piece
        self._tail = bytes(buf[-(GRAM - 1) :]) if len(buf) >= GRAM - 1 else bytes(buf)

    def end_frame(self) -> None:
        self._sink.write(self._np.packbits(self._set, bitorder="little").tobytes())
        self._set[:] = False
        self.frames += 1

    def header(self) -> bytes:
        return HEADER.pack(MAGIC, self.bits, self.stride, self.frames)


def skippable_frames(payload_len: int) -> Iterable[tuple[bytes, int]]:
    """(zstd skippable-frame header, payload bytes it holds) for a payload of this length."""
    left = payload_len
    while left > 0:
        n = min(left, SKIPPABLE_MAX)
        yield struct.pack("<II", SKIPPABLE_MAGIC, n), n
        left -= n


def unwrap(raw: bytes) -> bytes:
    """The payload of consecutive skippable frames (as written after the data frames)."""
    out = []
    pos = 0
    while pos < len(raw):
        if len(raw) - pos < 8:
            raise ValueError("truncated skippable frame header")
        magic, n = struct.unpack_from("<II", raw, pos)
        if magic != SKIPPABLE_MAGIC or pos + 8 + n > len(raw):
            raise ValueError("not the filters' skippable frame")
        out.append(raw[pos + 8 : pos + 8 + n])
        pos += 8 + n
    return b"".join(out)


@dataclass(frozen=True)
class Literal:
    """Text every match contains (one of a query's alternatives)."""

    text: bytes
    fold_case: bool  # the query ignores case (the filters fold case anyway: kept for readers)


_INLINE_OK = frozenset("imsauL-")  # inline flags that keep literal text literal ("i": any case)
_QUANT = "?*+{"


def required_literals(pattern: str) -> tuple[list[list[str]], bool] | None:
    """Text every match of a regex holds: per top-level alternative, the runs of plain
    characters it has outside groups, classes and optional parts (a match holds them all), and
    whether an inline ``(?i)`` makes them any case; None when some alternative has none, or the
    pattern uses syntax that makes its text not literal (verbose ``(?x)``, full case folding...).

    Conservative by design: a piece returned must be in every match; a piece missed only costs
    the search its filter."""
    branches: list[list[str]] = [[]]
    run: list[str] = []
    fold = False

    def close() -> None:
        if run:
            branches[-1].append("".join(run))
            run.clear()

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            nxt = pattern[i + 1]
            i += 2
            if nxt.isascii() and nxt.isalnum():  # a class, an anchor, a code or a reference
                close()
                i = _skip_quantifier(pattern, _skip_escape_argument(pattern, i, nxt))
                continue
            c = nxt
            i -= 1  # `c` is now the escaped character, at i
        elif c == "[":
            close()
            i = _skip_class(pattern, i)
            if i < 0:
                return None
            i = _skip_quantifier(pattern, i)
            continue
        elif c == "(":
            close()
            if pattern.startswith("(?", i):
                flags = _inline_flags(pattern, i)
                if flags is None:
                    return None
                fold = fold or "i" in flags
            i = _skip_group(pattern, i)
            if i < 0:
                return None
            i = _skip_quantifier(pattern, i)
            continue
        elif c == "|":
            close()
            branches.append([])
            i += 1
            continue
        elif c in ".^$":
            close()
            i = _skip_quantifier(pattern, i + 1)
            continue
        elif c in "?*+{)":  # a quantifier with nothing to repeat, or an unbalanced group
            return None
        # a plain character (or an escaped one): optional when a quantifier may drop it
        q = pattern[i + 1] if i + 1 < n else ""
        if q in ("?", "*", "{"):
            close()
            i = _skip_quantifier(pattern, i + 1)
            continue
        run.append(c)
        i += 1
        if q == "+":
            close()
            i = _skip_quantifier(pattern, i)
    close()
    if not all(branches):
        return None
    return branches, fold


_HEX_ARGS = {"x": 2, "u": 4, "U": 8}


def _skip_escape_argument(p: str, i: int, letter: str) -> int:
    """Past the argument of the escape ``\\letter`` whose argument starts at p[i] (\\x41,
    \\u00e9, \\N{...}, \\p{..}, \\g<name>, \\12, \\0o7): none of it is text."""
    if i < len(p) and p[i] in "{<" and letter in "xNpPgo":
        k = p.find("}" if p[i] == "{" else ">", i)
        return len(p) if k < 0 else k + 1
    if letter in _HEX_ARGS:
        return min(len(p), i + _HEX_ARGS[letter])
    if letter in "pP":  # \pL: one letter
        return min(len(p), i + 1)
    if letter.isdigit():  # a back reference or an octal code: all its digits
        while i < len(p) and p[i].isdigit():
            i += 1
    return i


def _skip_class(p: str, i: int) -> int:
    """The index after the character class starting at p[i] == "[" (-1: unterminated). A ``[``
    inside opens a nested set (the regex module's version 1): counted, so the class ends at the
    ``]`` that closes the outermost one (in version 0 that is past the class: only less text)."""
    depth, j = 0, i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            depth += 1
            j += 1
            if j < len(p) and p[j] == "^":
                j += 1
            if j < len(p) and p[j] == "]":  # a "]" first in a set is a character
                j += 1
            continue
        if c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return -1


def _skip_group(p: str, i: int) -> int:
    """The index after the group starting at p[i] == "(" (-1: unbalanced)."""
    depth, j = 0, i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _skip_class(p, j)
            if j < 0:
                return -1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return -1


def _skip_quantifier(p: str, i: int) -> int:
    """Past any quantifier at p[i] (``?``, ``*``, ``+``, ``{...}``, with a lazy or possessive
    mark), so that the text after it starts a new run."""
    while i < len(p) and p[i] in _QUANT:
        if p[i] == "{":
            k = p.find("}", i)
            i = len(p) if k < 0 else k + 1
        else:
            i += 1
    return i


def _inline_flags(p: str, i: int) -> str | None:
    """The flags of an inline group ``(?flags)`` / ``(?flags:...)`` at p[i]; "" for other
    ``(?`` groups (lookarounds, names, comments), None for flags that change what text means."""
    j = i + 2
    if p.startswith("V", j):  # (?V1): full case folding ("ß" matches "ss")
        return None
    k = j
    while k < len(p) and (p[k].isalpha() or p[k] == "-"):
        k += 1
    if k == j or k >= len(p) or p[k] not in ":)":
        return ""
    flags = p[j:k]
    return flags if set(flags) <= _INLINE_OK else None


class GramFilter:
    """The filters of one blob: ``candidates`` says which frames a search must read."""

    def __init__(self, bits_per_frame: Any, *, bits: int, stride: int) -> None:
        self.table = bits_per_frame  # uint8 array, frames x (2**bits / 8)
        self.bits = bits
        self.stride = stride
        self.frames = int(bits_per_frame.shape[0])

    @classmethod
    def parse(cls, payload: bytes) -> GramFilter:
        import numpy as np

        if len(payload) < HEADER.size:
            raise ValueError("short filter header")
        magic, bits, stride, frames = HEADER.unpack_from(payload)
        if magic != MAGIC or not 8 <= bits <= 24 or stride not in (1, 2, 4):
            raise ValueError("unknown filter format")
        row = (1 << bits) // 8
        if len(payload) != HEADER.size + frames * row:
            raise ValueError("filter size does not match its header")
        table = np.frombuffer(payload, np.uint8, frames * row, HEADER.size).reshape(frames, row)
        return cls(table, bits=bits, stride=stride)

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def _hypotheses(self, lit: Literal) -> list[list[int]] | None:
        """For each offset of the literal's start modulo the stride, the hashes of the grams it
        then has at aligned offsets; None when some alignment has no usable gram (no filter)."""
        text = lit.text
        out: list[list[int]] = []
        for a in range(self.stride):
            hs: list[int] = []
            for i in range((self.stride - a) % self.stride, len(text) - GRAM + 1, self.stride):
                v = (int.from_bytes(text[i : i + GRAM], "little") | FOLD) * MULT & 0xFFFFFFFF
                hs.append(v >> (32 - self.bits))
            if not hs:
                return None
            out.append(hs)
        return out

    def candidates(self, query: Sequence[Sequence[Literal]], newlines: Sequence[int]) -> Any:
        """A bool array, one per frame: whether lines starting in it can hold a match of
        ``query``, alternatives each made of pieces a match holds all of (``newlines``: newlines
        before each frame, then the total). None when the query cannot be narrowed: some
        alternative has no piece long enough (every frame is read)."""
        import numpy as np

        if not query:
            return None
        n = self.frames
        has_nl = np.array([newlines[f + 1] > newlines[f] for f in range(n)], np.bool_)
        out = np.zeros(n, np.bool_)
        for pieces in query:
            each = [h for h in (self._hypotheses(lit) for lit in pieces) if h is not None]
            if not each:
                return None
            alt = np.ones(n, np.bool_)
            for hyps in each:  # every piece, at one of its alignments
                piece = np.zeros(n, np.bool_)
                for hs in hyps:
                    h = np.array(hs, np.int64)
                    present = ((self.table[:, h >> 3] >> (h & 7).astype(np.uint8)) & 1).astype(np.bool_)
                    piece |= _spread(present, has_nl).all(axis=1)
                alt &= piece
            out |= alt
        return out


def _spread(present: np.ndarray, has_nl: np.ndarray) -> np.ndarray:
    """Row f becomes the union of rows f..g, g the first frame after f that holds a newline
    (the last frame when none does): where a line starting in f can end."""
    import numpy as np

    n = present.shape[0]
    if n < 2:
        return present
    if bool(has_nl[1:].all()):
        out = present.copy()
        out[:-1] |= present[1:]
        return out
    out = present.copy()
    reach = present[n - 1].copy()  # the union of rows f+1..g for the f being filled
    for f in range(n - 2, -1, -1):
        nxt = present[f + 1]
        reach = nxt | reach if not has_nl[f + 1] else nxt.copy()
        out[f] = present[f] | reach
    return np.asarray(out)


class _Cache:
    """Filters by blob, least recently used dropped first (a blob's content never changes)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[str, GramFilter | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[bool, GramFilter | None]:
        with self._lock:
            if key not in self._items:
                return False, None
            self._items.move_to_end(key)
            return True, self._items[key]

    def put(self, key: str, value: GramFilter | None) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            total = sum(v.nbytes for v in self._items.values() if v is not None)
            while total > self.limit and len(self._items) > 1:
                _k, old = self._items.popitem(last=False)
                total -= old.nbytes if old is not None else 0


_cache = _Cache(CACHE_BYTES)


def load(store: Any, sha256: str, at: int | None, end: int | None) -> GramFilter | None:
    """The blob's filters (stored bytes [at, end)), or None when it has none or they cannot be
    read as such (the search then reads every frame, as before filters existed)."""
    if at is None or end is None or end <= at:
        return None
    key = f"{getattr(store, 'location', id(store))}:{sha256}:{at}:{end}"
    hit, value = _cache.get(key)
    if hit:
        return value
    try:
        value = GramFilter.parse(unwrap(store.read_stored(sha256, at, end - at)))
    except (ValueError, OSError):
        value = None
    _cache.put(key, value)
    return value


__all__ = [
    "GRAM_BITS",
    "STRIDE",
    "GramBuilder",
    "GramFilter",
    "Literal",
    "load",
    "required_literals",
    "skippable_frames",
    "unwrap",
]
