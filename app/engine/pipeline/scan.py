"""The scan: one pass over each log in line-aligned chunks, verify only the reported lines.

Hot-path invariants (each one is measured in ``bench/``):
- a chunk is read with ``readinto`` into one reused 256 KiB buffer and handed to the matcher as
  a memoryview: no per-chunk copies, no per-line Python work on lines nobody matched;
- only lines the matcher reports are decoded, normalised and re-checked with ``regex`` (with a
  timeout, so a pathological line cannot hang the scan);
- per pattern the scan keeps counters, a bounded list of line numbers and a few samples, so
  memory stays flat whatever the log size or the number of hits.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import regex

from app.engine.pipeline.findings import HitRecord, RuleMatch
from app.engine.pipeline.ingest import ByteBudget, Readable, Source, open_source
from app.engine.pipeline.library import Library, Rule
from app.engine.pipeline.lines import LineContext, normalise, parse_context
from app.engine.pipeline.matcher import Matcher, PatternSpec, build_matcher
from app.engine.pipeline.metric_stream import METRIC_GATES, MetricStream
from app.engine.pipeline.metrics import MetricIssue, MetricPoint, metric_text
from app.engine.pipeline.unwrap import joined_lines

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

CHUNK = 256 * 1024
MAX_VERIFY_CHARS = 16_384
VERIFY_TIMEOUT = 0.2  # seconds per regex call
SAMPLES = 48  # full hit records kept per pattern and file
MAX_LINES = 200_000  # line numbers kept per pattern and file (window checks)
MAX_SET = 4096  # ranks/hosts kept per pattern and file
MAX_WARNINGS = 20

EntryRole = Literal["any", "all", "not", "probe", "metric", "fact", "fw_detect", "fw_version"]
MAX_PROBE_HITS = 512  # lines kept per probe and file (one or a few per rank and collective)


class Entry:
    """One pattern of the table. Its `regex` verifier is compiled on first use: most patterns
    never hit, and compiling them all up front would dominate start-up time."""

    __slots__ = ("_rx", "flags", "owner", "role", "single", "text")

    def __init__(self, role: EntryRole, owner: str, text: str, flags: int) -> None:
        self.role = role
        self.owner = owner  # rule id, fact name or framework name
        self.text = text
        self.flags = flags
        self.single = role in ("fact", "fw_detect", "fw_version")
        self._rx: regex.Pattern[str] | None = None

    @property
    def rx(self) -> regex.Pattern[str]:
        if self._rx is None:
            self._rx = regex.compile(self.text, self.flags)
        return self._rx


@dataclass(frozen=True)
class SignatureIds:
    """One signature of a rule as entry ids of the pattern table."""

    name: str
    confidence: float
    window: int
    any: list[int]
    all: list[int]
    not_: list[int]


class CompiledLibrary:
    """The library compiled once: a pattern table and a multi-pattern matcher over it."""

    def __init__(
        self,
        library: Library,
        *,
        engine: str = "auto",
        cache_dir: Path | None = None,
        extra_rules: Iterable[Rule] = (),
    ) -> None:
        self.library = library
        self.rules: list[Rule] = [*library.active, *extra_rules]
        entries: list[Entry] = []
        specs: list[PatternSpec] = []

        def add(
            role: EntryRole, owner: str, text: str, ignore_case: bool = False, single: bool = False
        ) -> None:
            flags = regex.IGNORECASE if ignore_case else 0
            entries.append(Entry(role, owner, text, flags))
            single = single or role in ("fact", "fw_detect", "fw_version")
            specs.append(PatternSpec(text, ignore_case, single=single))

        self.rule_entries: dict[str, dict[str, list[int]]] = {}  # the main signature's
        self.rule_signatures: dict[str, list[SignatureIds]] = {}
        for rule in self.rules:
            if rule.match is None:
                continue
            sigs: list[SignatureIds] = []
            for name, m, conf in [
                ("main", rule.match, rule.confidence),
                *((s.name, s, s.confidence) for s in rule.signatures),
            ]:
                ids: dict[str, list[int]] = {"any": [], "all": [], "not": []}
                for role, pats in (("any", m.any), ("all", m.all), ("not", m.not_)):
                    for text in pats:
                        ids[role].append(len(entries))
                        add(role, rule.id, text, m.ignore_case)  # type: ignore[arg-type]
                sigs.append(SignatureIds(name, conf, m.window, ids["any"], ids["all"], ids["not"]))
            self.rule_entries[rule.id] = {"any": sigs[0].any, "all": sigs[0].all, "not": sigs[0].not_}
            self.rule_signatures[rule.id] = sigs
        # timeline probes (app.engine.timeline.builder): scanned everywhere, like the rules
        from app.engine.timeline.builder import PROBES

        for name, text in PROBES.items():
            add("probe", name, text)
        # the metric gates (app.engine.pipeline.metric_stream): their hits go to the metric stream, not
        # to _verify; in the same pass, they cost the scan next to nothing
        first_gate = len(entries)
        for name, text, ignore_case, single in METRIC_GATES:
            add("metric", name, text, ignore_case, single)
        self.metric_ids = range(first_gate, len(entries))
        # facts and framework detectors: the context matcher's, then the sampled ones (marks on
        # every line of a job that has them, Ray's worker prefix: a third matcher, run on a file's
        # first SAMPLE_HEAD_BYTES and last METRIC_TAIL_BYTES only, scan_sampled)
        n_context = 0
        for sampled in (False, True):
            for fact in library.facts:
                for text in fact.sampled if sampled else fact.patterns:
                    add("fact", fact.name, text)
            for fw in library.frameworks:
                for text in fw.detect_sampled if sampled else fw.detect:
                    add("fw_detect", fw.name, text)
                for text in () if sampled else fw.version:
                    add("fw_version", fw.name, text)
            if not sampled:
                n_context = len(entries)
        self.entries = entries
        # Rules scan every byte. Facts and framework detectors form a second, "context" matcher
        # that scans only the head and tail of a plain file (see CONTEXT_BYTES): their patterns
        # (path fragments, argument dumps) hit on every chunk and would halve the throughput.
        n_rules = sum(1 for e in entries if e.role in ("any", "all", "not", "probe", "metric"))
        self.matcher: Matcher = build_matcher(specs[:n_rules], engine=engine, cache_dir=cache_dir)
        self.context_matcher: Matcher | None = (
            build_matcher(specs[n_rules:n_context], engine=engine, cache_dir=cache_dir, id_offset=n_rules)
            if n_context > n_rules
            else None
        )
        self.sample_matcher: Matcher | None = (
            build_matcher(specs[n_context:], engine=engine, cache_dir=cache_dir, id_offset=n_context)
            if len(specs) > n_context
            else None
        )
        self.sample_owners = frozenset(e.owner for e in entries[n_context:])

    @property
    def engine(self) -> str:
        matchers = (self.matcher, self.context_matcher, self.sample_matcher)
        names = {m.name for m in matchers if m is not None} - {"none"}
        return names.pop() if names else "none"


@dataclass
class PatternAcc:
    """What the scan keeps about one pattern in one file."""

    count: int = 0
    lines: list[int] = field(default_factory=list)
    samples: list[HitRecord] = field(default_factory=list)
    last: HitRecord | None = None
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    # lines Ray's log dedup folded into the hits ("[repeated 27x across cluster]" counts 27): other
    # processes printed them, and their ranks and hosts are not in the log
    folded: int = 0

    def add(self, rec: HitRecord, *, in_order: bool = True) -> None:
        """Keep a hit; `in_order=False` for one that may lie before hits already kept (the
        wrapped-row rescan): line numbers and samples stay sorted."""
        self.count += rec.ctx.repeats
        if rec.ctx.repeats > 1:
            self.folded += rec.ctx.repeats
        if len(self.lines) < MAX_LINES:
            if in_order:
                self.lines.append(rec.line)
            else:
                bisect.insort(self.lines, rec.line)
        if len(self.samples) < SAMPLES:
            self.samples.append(rec)
            if not in_order:
                self.samples.sort(key=lambda r: r.line)
        if in_order or self.last is None or self.last.line <= rec.line:
            self.last = rec
        if rec.ctx.rank is not None and len(self.ranks) < MAX_SET:
            self.ranks.add(rec.ctx.rank)
        if rec.ctx.where and len(self.hosts) < MAX_SET:
            self.hosts.add(rec.ctx.where)

    def merge(self, other: PatternAcc, *, line_offset: int) -> None:
        """Append a later segment of the same file."""
        self.count += other.count
        room = MAX_LINES - len(self.lines)
        self.lines.extend(n + line_offset for n in other.lines[:room])
        moved = set()
        for rec in other.samples[: SAMPLES - len(self.samples)]:
            rec.line += line_offset
            moved.add(id(rec))
            self.samples.append(rec)
        if other.last is not None:
            if id(other.last) not in moved:
                other.last.line += line_offset
            self.last = other.last
        self.ranks |= other.ranks
        self.hosts |= other.hosts
        self.folded += other.folded


@dataclass
class FileScan:
    name: str
    rank_hint: int | None = None
    accs: dict[int, PatternAcc] = field(default_factory=dict)
    facts: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (value, line)
    frameworks: dict[str, str | None] = field(default_factory=dict)  # name -> version
    lines: int = 0
    bytes: int = 0
    warnings: list[str] = field(default_factory=list)
    # training metrics (the file's last lines, and a sample of the rest: app.engine.pipeline.metric_stream)
    # and what looked wrong anywhere in it
    metrics: list[MetricPoint] = field(default_factory=list)
    metric_issues: list[tuple[MetricIssue, str]] = field(default_factory=list)  # (issue, line text)
    probes: dict[str, list[HitRecord]] = field(default_factory=dict)  # timeline probe lines
    tail: list[tuple[int, str]] = field(default_factory=list)  # the file's last lines (lineno, text)

    def warn(self, msg: str) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(msg)

    def merge(self, later: FileScan) -> None:
        for pid, acc in later.accs.items():
            if pid in self.accs:
                self.accs[pid].merge(acc, line_offset=self.lines)
            else:
                fresh = PatternAcc()
                fresh.merge(acc, line_offset=self.lines)
                self.accs[pid] = fresh
        for name, (value, line) in later.facts.items():
            self.facts.setdefault(name, (value, line + self.lines))
        for fw, ver in later.frameworks.items():
            if self.frameworks.get(fw) is None:
                self.frameworks[fw] = ver
        for name, recs in later.probes.items():
            mine = self.probes.setdefault(name, [])
            for rec in recs[: MAX_PROBE_HITS - len(mine)]:
                rec.line += self.lines
                mine.append(rec)
        if later.tail:
            self.tail = [(n + self.lines, text) for n, text in later.tail]
        for mp in later.metrics:
            mp.line += self.lines
        self.metrics = (self.metrics + later.metrics)[-METRIC_KEEP:]
        seen = {(i.kind, i.name) for i, _text in self.metric_issues}
        for issue, text in later.metric_issues:
            issue.line += self.lines
            if (issue.kind, issue.name) not in seen:  # each range checks alone: the first one counts
                seen.add((issue.kind, issue.name))
                self.metric_issues.append((issue, text))
        self.lines += later.lines
        self.bytes += later.bytes
        for w in later.warnings:
            self.warn(w)


class _Scanner:
    """Scans one stream; kept small so the hot loop's locals stay local."""

    def __init__(self, compiled: CompiledLibrary, result: FileScan) -> None:
        self.compiled = compiled
        self.result = result
        self.hits: list[tuple[int, int]] = []
        self.stream = MetricStream(gate_ids=compiled.metric_ids, rank_hint=result.rank_hint)

    def run(
        self,
        reader: Readable,
        *,
        limit: int | None = None,
        start: int = 0,
        context: tuple[int, int] | None = None,
    ) -> None:
        """Scan a stream whose first byte is at file offset `start`. `context` = (head_end,
        tail_start): the context matcher runs on chunks that overlap [0, head_end) or
        [tail_start, EOF); None runs it everywhere (streams of unknown size)."""
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        matcher = self.compiled.matcher
        ctx_matcher = self.compiled.context_matcher
        sample_matcher = self.compiled.sample_matcher
        hits = self.hits
        stream = self.stream
        offset = start
        head_end, tail_start = context if context is not None else (CONTEXT_BYTES, 1 << 62)
        tail: deque[tuple[bytes, int]] | None = deque() if context is None else None
        tail_bytes = 0
        # a stream's last lines, for the metric parser (a plain file's are re-read from disk)
        mtail: deque[tuple[bytes, int]] | None = deque() if context is None else None
        mtail_bytes = 0
        carry = 0
        line_base = 0
        remaining = limit
        count_lines: Callable[[int, int], int] | None = None
        while True:
            want = CHUNK - carry
            if remaining is not None:
                want = min(want, remaining)
            n = reader.readinto(view[carry : carry + want]) if want else 0
            n = n or 0
            if remaining is not None:
                remaining -= n
            filled = carry + n
            if filled == 0:
                break
            eof = n == 0
            partial = False
            if eof:
                cut = filled
                partial = buf[cut - 1] != 0x0A
            else:
                nl = buf.rfind(b"\n", 0, filled)
                if nl < 0:
                    if filled < CHUNK:
                        carry = filled  # short read (pipe): keep reading for a newline
                        continue
                    cut = filled  # one line longer than the buffer: split it
                    partial = True
                    self.result.warn(
                        f"{self.result.name}: line {line_base + 1} is longer than "
                        f"{CHUNK // 1024} KiB; it was scanned in pieces"
                    )
                else:
                    cut = nl + 1
            chunk = view[:cut]
            hits.clear()
            copy: bytes | None = None
            if offset < SAMPLE_HEAD_BYTES and sample_matcher is not None:
                sample_matcher.scan(chunk[: SAMPLE_HEAD_BYTES - offset], hits)
            if ctx_matcher is not None and (offset < head_end or offset + cut > tail_start):
                if cut >= BESIDE_BYTES:
                    # Hyperscan lets go of the GIL while it scans: the context patterns take
                    # the other core (a 1 MB hook alone: ~3 ms of ~50, bench/hook_scan_bench.py);
                    # their hits follow the rules', as when the two ran in turn. (Not waiting
                    # for each chunk's, on a copy, gained nothing on a 1 GiB log here: the two
                    # cores are one core's two threads; bench/README.md, "Sampled detectors".)
                    beside = _beside().submit(_scan_into, ctx_matcher, chunk)
                    matcher.scan(chunk, hits)
                    hits.extend(beside.result())
                else:
                    matcher.scan(chunk, hits)
                    ctx_matcher.scan(chunk, hits)
            else:
                matcher.scan(chunk, hits)
                if ctx_matcher is not None and tail is not None:
                    # size unknown (gzip, stdin): keep a copy of the last STREAM_TAIL_BYTES
                    copy = bytes(chunk)
                    tail.append((copy, line_base))
                    tail_bytes += cut
                    while tail_bytes - len(tail[0][0]) >= STREAM_TAIL_BYTES:
                        tail_bytes -= len(tail.popleft()[0])
            if mtail is not None:
                mtail.append((copy if copy is not None else bytes(chunk), line_base))
                mtail_bytes += cut
                while mtail_bytes - len(mtail[0][0]) >= METRIC_TAIL_BYTES:
                    mtail_bytes -= len(mtail.popleft()[0])
            if count_lines is None:
                count_lines = _line_counter(buf, big=filled == CHUNK)
            # _verify counts the newlines up to the last hit's line: count only the rest
            counted_to, counted = self._verify(buf, cut, line_base, count_lines) if hits else (0, 0)
            stream.feed(buf, cut, line_base, offset, hits, count_lines)
            offset += cut
            line_base += counted + count_lines(counted_to, cut) + (1 if partial else 0)
            rest = filled - cut
            if rest:
                buf[:rest] = buf[cut:filled]
            carry = rest
            self.result.bytes += cut
            if eof:
                break
        self.result.lines = line_base
        if mtail:
            blocks = [(base, data) for data, base in mtail]
            read_metrics(self.result, blocks, stream)
            scan_sampled(self.compiled, self.result, blocks)
            rescan_wrapped(self.compiled, self.result, blocks)
        elif context is None:
            finish_metrics(self.result, stream, [])
        if tail and ctx_matcher is not None:
            for data, base in tail:
                hits.clear()
                ctx_matcher.scan(memoryview(data), hits)
                if hits:
                    self._verify(data, len(data), base)

    def _verify(
        self,
        buf: bytearray | bytes,
        cut: int,
        line_base: int,
        count: Callable[[int, int], int] | None = None,
    ) -> tuple[int, int]:
        """Check the hit lines; return (pos, n): buf[:pos] holds n newlines (pos = a line start).
        `count(a, b)` counts the newlines of buf[a:b]: the scan passes its vectorised counter
        (half a chunk's bytes lie before an average hit; bytes.count reads them at ~2 GB/s)."""
        if count is None:
            data = buf
            count = lambda a, b: data.count(b"\n", a, b)  # noqa: E731
        hits = self.hits
        hits.sort(key=lambda h: h[1])
        entries = self.compiled.entries
        gates = self.compiled.metric_ids
        first_gate, end_gates = gates.start, gates.stop
        pos, lineno = 0, line_base
        line_start = -1
        line_hits: list[tuple[int, int]] = []
        for pid, end in hits:
            if first_gate <= pid < end_gates:
                continue  # the metric stream's
            entry = entries[pid]
            if entry.single and self._satisfied(entry):
                continue  # a detector already answered: skip before any line arithmetic
            ls = buf.rfind(b"\n", 0, end) + 1 if end > 0 else 0
            if ls >= cut:
                continue
            if ls != line_start:
                if line_hits:
                    self._check_line(buf, line_start, cut, lineno, line_hits)
                lineno += count(pos, ls)
                pos = ls
                line_start = ls
                line_hits = []
            line_hits.append((pid, end))
        if line_hits:
            self._check_line(buf, line_start, cut, lineno, line_hits)
        return pos, lineno - line_base

    def _satisfied(self, entry: Entry) -> bool:
        if entry.role == "fact":
            return entry.owner in self.result.facts
        if entry.role == "fw_detect":
            return entry.owner in self.result.frameworks
        return self.result.frameworks.get(entry.owner) is not None

    def _check_line(
        self, buf: bytearray | bytes, ls: int, cut: int, index: int, line_hits: list[tuple[int, int]]
    ) -> None:
        le = buf.find(b"\n", ls, cut)
        if le < 0:
            le = cut
        result = self.result
        lineno = index + 1
        long_line = le - ls > MAX_VERIFY_CHARS
        text = "" if long_line else normalise(bytes(buf[ls:le]), max_chars=MAX_VERIFY_CHARS)
        ctx: LineContext | None = None
        done: set[int] = set()
        for pid, end in line_hits:
            if pid in done:
                continue
            if long_line:
                # Verify a window ending just past this hit: the match ends at `end`, so it
                # lies inside; the head of the line still gives the prefix context.
                head = normalise(bytes(buf[ls : ls + 256]), max_chars=256)
                tail = normalise(
                    bytes(buf[max(ls, end - MAX_VERIFY_CHARS) : min(le, end + 256)]),
                    max_chars=MAX_VERIFY_CHARS + 512,
                )
                text = head + " … " + tail
            entry = self.compiled.entries[pid]
            try:
                # (string, pos, endpos, concurrent, partial, timeout): regex parses keyword
                # arguments slowly, ~1 µs a call, a few % of the scan of a small log
                m = entry.rx.search(text, None, None, None, False, VERIFY_TIMEOUT)
            except TimeoutError:
                result.warn(f"{result.name}:{lineno}: pattern of {entry.owner} timed out; line skipped")
                continue
            if m is None:
                if not long_line:
                    # the matcher may report a pattern at several offsets of a line; on the
                    # same text the search would fail again
                    done.add(pid)
                continue
            done.add(pid)
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            if entry.role == "probe":
                hits = result.probes.setdefault(entry.owner, [])
                if len(hits) < MAX_PROBE_HITS:
                    pctx = parse_context(text)
                    if pctx.rank is None:
                        pctx.rank = result.rank_hint
                    hits.append(HitRecord(lineno, text[:2000], groups, pctx))
                continue
            if entry.role == "fact":
                # a value group left out (an optional prefix that holds it) records nothing
                if "value" in groups:
                    result.facts.setdefault(entry.owner, (groups["value"], lineno))
                continue
            if entry.role == "fw_detect":
                result.frameworks.setdefault(entry.owner, None)
                continue
            if entry.role == "fw_version":
                if groups.get("version"):
                    result.frameworks[entry.owner] = groups["version"]
                continue
            if ctx is None:
                ctx = parse_context(text)
                if ctx.rank is None:
                    ctx.rank = result.rank_hint
            if ctx.rank is None and groups.get("rank", "").isdigit():
                ctx.rank = int(groups["rank"])  # the message names the rank ("[Rank 3] ...")
            if ctx.host is None and groups.get("host"):
                ctx.host = groups["host"]
            acc = result.accs.get(pid)
            if acc is None:
                acc = result.accs[pid] = PatternAcc()
            acc.add(HitRecord(lineno, text, groups, ctx))


def _line_counter(buf: bytearray, *, big: bool) -> Callable[[int, int], int]:
    """Newlines in buf[a:b]. `bytes.count` runs at ~2 GB/s, a quarter of the scan budget on a
    large log; numpy's vectorised compare runs at ~15 GB/s. Small inputs skip numpy's import."""
    if big:
        try:
            import numpy as np
        except ImportError:
            pass
        else:
            arr = np.frombuffer(buf, dtype=np.uint8)
            return lambda a, b: int(np.count_nonzero(arr[a:b] == 10))
    return lambda a, b: buf.count(b"\n", a, b)


class _RangeReader:
    """Reads [start, end) of a file through a raw fd (no Python-level buffering)."""

    def __init__(self, path: Path, start: int, end: int) -> None:
        self._fh = path.open("rb", buffering=0)
        self._fh.seek(start)
        self._left = end - start

    def readinto(self, b: memoryview) -> int:
        if self._left <= 0:
            return 0
        n = self._fh.readinto(b[: min(len(b), self._left)]) or 0
        self._left -= n
        return n

    def close(self) -> None:
        self._fh.close()


CONTEXT_BYTES = 32 << 20  # head and tail of a plain file searched for facts and frameworks
# a file's head searched for the sampled detectors (its tail: the last METRIC_TAIL_BYTES)
SAMPLE_HEAD_BYTES = 256 << 10
# Streams of unknown size keep a copy of their last bytes for that search: held in memory, so
# smaller (final tracebacks, not argument dumps, are what sits at the end).
STREAM_TAIL_BYTES = 4 << 20


def context_zone(size: int) -> tuple[int, int]:
    return CONTEXT_BYTES, max(CONTEXT_BYTES, size - CONTEXT_BYTES)


def scan_source(compiled: CompiledLibrary, src: Source, *, budget: ByteBudget) -> FileScan:
    result = FileScan(name=src.name, rank_hint=src.rank_hint)
    opened = open_source(src, budget=budget)
    context = None
    if opened.compression is None and src.path is not None:
        context = context_zone(os.stat(src.path).st_size)
    scanner = _Scanner(compiled, result)
    try:
        scanner.run(opened.reader, context=context)
    finally:
        opened.close()
    if context is not None and src.path is not None:
        read_file_tail_metrics(result, src.path, start=0, compiled=compiled, stream=scanner.stream)
    return result


METRIC_TAIL_BYTES = 1 << 20  # the end of each file is read again (wrapped rows, the timeline)
TAIL_KEEP_LINES = 2000  # of it, the last lines kept for the timeline (each rank's last sign of life)
METRIC_KEEP = 5000  # metric points kept per file


BESIDE_BYTES = 64 << 10  # a smaller chunk is scanned for context in line: a thread's hand-off costs more


def _scan_into(matcher: Matcher, chunk: memoryview) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    matcher.scan(chunk, out)
    return out


_BESIDE: tuple[int, ThreadPoolExecutor] | None = None


def _beside() -> ThreadPoolExecutor:
    """This process's thread for the context scan (a forked scan worker makes its own)."""
    global _BESIDE
    if _BESIDE is None or _BESIDE[0] != os.getpid():
        # imported here: ~2.5 ms with logging, and a short log's CLI run never needs the thread
        from concurrent.futures import ThreadPoolExecutor

        _BESIDE = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="context-scan"))
    return _BESIDE[1]


def read_file_tail_metrics(
    result: FileScan, path: Path, *, start: int, compiled: CompiledLibrary, stream: MetricStream
) -> None:
    """Finish the metrics of a plain file with its last METRIC_TAIL_BYTES (`start`: the offset
    the result's line numbers count from) and scan the lines a terminal wrapped there again."""
    with path.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        begin = max(start, size - METRIC_TAIL_BYTES)
        fh.seek(begin)
        data = fh.read()
    if begin > start:
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else b""  # from the first whole line
    n = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    blocks = [(result.lines - n, data)]
    read_metrics(result, blocks, stream)
    scan_sampled(compiled, result, blocks)  # before: a wrapped row's answer names its first row
    rescan_wrapped(compiled, result, blocks)


def scan_sampled(compiled: CompiledLibrary, result: FileScan, blocks: list[tuple[int, bytes]]) -> None:
    """The sampled detectors and facts (`detect_sampled`, `patterns_sampled`) over the tail's
    line-aligned blocks of (lines before it, bytes), unless the head already answered them all."""
    matcher = compiled.sample_matcher
    if matcher is None:
        return
    answered = result.facts.keys() | result.frameworks.keys()
    if compiled.sample_owners <= answered:
        return
    scanner = _Scanner(compiled, result)
    for base, data in blocks:
        scanner.hits.clear()
        matcher.scan(memoryview(data), scanner.hits)
        if scanner.hits:
            scanner._verify(data, len(data), base)


def rescan_wrapped(compiled: CompiledLibrary, result: FileScan, blocks: list[tuple[int, bytes]]) -> None:
    """Scan the rows a terminal wrapped in the tail as the lines they were (app/engine/pipeline/unwrap.py).
    A pattern's hit on a joined line counts only where no row of it matched on its own, so a
    sentence found whole is never counted twice."""
    groups = joined_lines(blocks)
    if not groups:
        return
    buf = bytearray(b"\n".join(g.text for g in groups) + b"\n")
    sub = FileScan(name=result.name, rank_hint=result.rank_hint)
    # answered detectors stay answered (their single-shot patterns are skipped)
    sub.facts = dict(result.facts)
    sub.frameworks = dict(result.frameworks)
    scanner = _Scanner(compiled, sub)
    compiled.matcher.scan(memoryview(buf), scanner.hits)
    for extra in (compiled.context_matcher, compiled.sample_matcher):
        if extra is not None:
            extra.scan(memoryview(buf), scanner.hits)
    if not scanner.hits:
        return
    scanner._verify(buf, len(buf), 0)
    for name, fact in sub.facts.items():
        if name not in result.facts:
            result.facts[name] = (fact[0], groups[fact[1] - 1].first)
    for fw, version in sub.frameworks.items():
        if result.frameworks.get(fw) is None:
            result.frameworks[fw] = version
    for pid, got in sub.accs.items():
        acc = result.accs.get(pid)
        recs = {id(r): r for r in [*got.samples, *([got.last] if got.last else [])]}
        for rec in sorted(recs.values(), key=lambda r: r.line):
            g = groups[rec.line - 1]
            if acc is None:
                acc = result.accs[pid] = PatternAcc()
            elif (i := bisect.bisect_left(acc.lines, g.first)) < len(acc.lines) and acc.lines[i] <= g.last:
                continue  # a row of this line matched on its own
            rec.line = g.first
            acc.add(rec, in_order=False)


def read_metrics(result: FileScan, blocks: list[tuple[int, bytes]], stream: MetricStream) -> None:
    """The timeline's last lines, and the metrics of the stream that ends with these line-aligned
    blocks of (lines before it, bytes): its last `stream.exact_bytes` are parsed line by line."""
    result.tail = _tail_texts(blocks, lines=TAIL_KEEP_LINES, cut=400)
    window = [(n, metric_text(raw)) for n, raw in _last_rows(blocks, nbytes=stream.exact_bytes)]
    finish_metrics(result, stream, window)


def finish_metrics(result: FileScan, stream: MetricStream, window: list[tuple[int, str]]) -> None:
    result.metrics, result.metric_issues = stream.finish(window, keep=METRIC_KEEP)


def _last_rows(
    blocks: list[tuple[int, bytes]], *, lines: int | None = None, nbytes: int | None = None
) -> list[tuple[int, bytes]]:
    """The non-empty lines (line number, bytes) among the blocks' last `lines` lines, or among
    those that start in their last `nbytes` bytes."""
    out: list[tuple[int, bytes]] = []
    left = nbytes
    for base, data in reversed(blocks):
        s = 0
        if left is not None:
            if left <= 0:
                break
            if len(data) > left:
                nl = data.find(b"\n", len(data) - left - 1)  # the first line start in the last `left`
                s = nl + 1 if nl >= 0 else len(data)
            left -= len(data)
        first = base + (data.count(b"\n", 0, s) if s else 0)
        rows = data[s:].split(b"\n")
        k = 0
        if lines is not None:
            # only the rows it keeps become tuples: a 1 MiB tail holds ~5,000 metric lines
            k, got, need = len(rows), 0, lines - len(out)
            while k > 0 and got < need:
                k -= 1
                if rows[k]:
                    got += 1
        out = [(first + i + 1, rows[i]) for i in range(k, len(rows)) if rows[i]] + out
        if lines is not None and len(out) >= lines:
            return out[-lines:]
    return out


def _tail_texts(blocks: list[tuple[int, bytes]], *, lines: int, cut: int) -> list[tuple[int, str]]:
    """`_texts(_last_rows(blocks, lines=lines), cut=cut)`, the timeline's last lines, for less:
    a block with no escape and no carriage return (most logs) is decoded whole and split once,
    instead of split into rows, joined again and decoded (the 2,000 rows of a 1 MB hook's tail of
    metric lines: 3.7 -> 2.1 ms here)."""
    out: list[tuple[int, str]] = []
    for base, data in reversed(blocks):
        need = lines - len(out)
        if need <= 0:
            break
        if b"\x1b" in data or b"\r" in data:
            got = _texts(_last_rows([(base, data)], lines=need), cut=cut)
        else:
            rows = data.decode("utf-8", errors="replace").split("\n")
            k, n = len(rows), 0
            while k > 0 and n < need:
                k -= 1
                if rows[k]:
                    n += 1
            got = [(base + i + 1, rows[i][:cut]) for i in range(k, len(rows)) if rows[i]]
        out = got + out  # each block gives at most the rows still needed
    return out


def _texts(rows: list[tuple[int, bytes]], *, cut: int) -> list[tuple[int, str]]:
    """`metric_text` of each row, cut to `cut` characters. Rows with no escape and no carriage
    return (most logs) are decoded in one call: a newline is never part of a UTF-8 sequence, so
    each row decodes as it would alone, and 2,000 calls cost ~1 ms of a hook."""
    if not rows:
        return []
    joined = b"\n".join(raw for _n, raw in rows)
    if b"\x1b" in joined or b"\r" in joined:
        return [(n, metric_text(raw)[:cut]) for n, raw in rows]
    texts = joined.decode("utf-8", errors="replace").split("\n")
    return [(n, text[:cut]) for (n, _raw), text in zip(rows, texts, strict=True)]


def split_points(path: Path, parts: int) -> list[tuple[int, int]]:
    """Cut a file into ``parts`` byte ranges that start at line starts."""
    size = os.stat(path).st_size
    if parts <= 1 or size < 8 * CHUNK:
        return [(0, size)]
    bounds = [0]
    with path.open("rb") as fh:
        for i in range(1, parts):
            fh.seek(size * i // parts)
            fh.readline()  # move to the next line start
            bounds.append(min(fh.tell(), size))
    bounds.append(size)
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def scan_range(compiled: CompiledLibrary, src: Source, start: int, end: int) -> FileScan:
    assert src.path is not None
    result = FileScan(name=src.name, rank_hint=src.rank_hint)
    reader = _RangeReader(src.path, start, end)
    scanner = _Scanner(compiled, result)
    try:
        size = os.stat(src.path).st_size
        context = context_zone(size)
        scanner.run(reader, limit=end - start, start=start, context=context)
    finally:
        reader.close()
    if end >= size:
        read_file_tail_metrics(result, src.path, start=start, compiled=compiled, stream=scanner.stream)
    else:
        finish_metrics(result, scanner.stream, [])
    return result


# --- rule evaluation -------------------------------------------------------------------


def _near(lines: list[int], target: int, window: int) -> bool:
    i = bisect.bisect_left(lines, target - window)
    return i < len(lines) and lines[i] <= target + window


def _valid(line: int, all_accs: list[PatternAcc | None], not_accs: list[PatternAcc], window: int) -> bool:
    return all(_near(a.lines, line, window) for a in all_accs if a) and not any(
        _near(a.lines, line, window) for a in not_accs
    )


def evaluate(compiled: CompiledLibrary, scans: list[FileScan], *, max_evidence: int = 4) -> list[RuleMatch]:
    out: list[RuleMatch] = []
    hit: set[int] = set()
    for scan in scans:
        hit.update(scan.accs)
    for rule in compiled.rules:
        sigs = compiled.rule_signatures.get(rule.id)
        if not sigs or rule.match is None:
            continue
        found = []
        for sig in sigs:
            if hit.isdisjoint(sig.any):
                continue  # no anchor matched in any file (most rules on most logs): nothing to fold
            rm = _evaluate_signature(rule, sig, scans)
            if rm is not None:
                found.append(rm)
        if found:
            out.append(_merge_signatures(found, max_evidence, scans))
    return out


def _evaluate_signature(rule: Rule, sig: SignatureIds, scans: list[FileScan]) -> RuleMatch | None:
    rm = RuleMatch(rule=rule, confidence=sig.confidence, signatures=[sig.name])
    window = sig.window
    for fi, scan in enumerate(scans):
        anchors = [scan.accs[p] for p in sig.any if p in scan.accs]
        if not anchors:
            continue
        all_accs = [scan.accs.get(p) for p in sig.all]
        if any(a is None for a in all_accs):
            continue
        not_accs = [scan.accs[p] for p in sig.not_ if p in scan.accs]

        checks = bool(sig.all or not_accs)
        recs: list[HitRecord] = []
        file_count = 0
        for acc in anchors:
            if checks:
                good = [ln for ln in acc.lines if _valid(ln, all_accs, not_accs, window)]
                file_count += len(good)
                recs.extend(r for r in acc.samples if _valid(r.line, all_accs, not_accs, window))
                if acc.last and _valid(acc.last.line, all_accs, not_accs, window):
                    recs.append(acc.last)
            else:
                file_count += acc.count
                recs.extend(acc.samples)
                if acc.last:
                    recs.append(acc.last)
                rm.ranks |= acc.ranks
                rm.hosts |= acc.hosts
                rm.folded += acc.folded
        if file_count == 0 or not recs:
            continue
        recs = sorted({id(r): r for r in recs}.values(), key=lambda r: r.line)
        if checks:
            for r in recs:
                if r.ctx.rank is not None:
                    rm.ranks.add(r.ctx.rank)
                if r.ctx.where:
                    rm.hosts.add(r.ctx.where)
                if r.ctx.repeats > 1:
                    rm.folded += r.ctx.repeats
        rm.count += file_count
        rm.files.append(scan.name)
        if (fi, recs[0].line) < rm.first:
            rm.first = (fi, recs[0].line)
            caps = dict(recs[0].groups)
            for a in all_accs:  # captures of the `all` lines nearest the anchor
                near = [s for s in a.samples if abs(s.line - recs[0].line) <= window] if a else []
                if near:
                    caps = {**near[0].groups, **caps}
            rm.captures = caps
        if (fi, recs[-1].line) > rm.last:
            rm.last = (fi, recs[-1].line)
        for r in recs:
            rm.evidence.append((scan.name, r))
    return rm if rm.count else None


def _merge_signatures(found: list[RuleMatch], max_evidence: int, scans: list[FileScan]) -> RuleMatch:
    """One finding per rule, whichever pieces of the failure the log holds.

    The main signature, when it matched, gives the captures (it is the richest); the
    confidence is the best signature's. Occurrences are counted once: two signatures usually
    see the same occurrence (a message's head and its tail), so the count is the largest any
    signature saw, not their sum."""
    if len(found) == 1:
        rm = found[0]
        rm.evidence = _pick_evidence(rm.evidence, max_evidence)
        return rm
    best = max(found, key=lambda r: r.confidence)
    main = next((r for r in found if r.signatures == ["main"]), None)
    out = RuleMatch(rule=best.rule, confidence=best.confidence)
    out.signatures = [name for r in found for name in r.signatures]
    out.count = max(r.count for r in found)
    out.folded = max(r.folded for r in found)
    out.first = min(r.first for r in found)
    out.last = max(r.last for r in found)
    out.captures = dict((main or best).captures)
    order = {s.name: i for i, s in enumerate(scans)}
    for r in found:
        out.ranks |= r.ranks
        out.hosts |= r.hosts
    out.files = sorted({f for r in found for f in r.files}, key=lambda f: order.get(f, 0))
    seen: dict[tuple[str, int], tuple[str, HitRecord]] = {}
    for r in found:
        for name, rec in r.evidence:
            seen.setdefault((name, rec.line), (name, rec))
    evidence = sorted(seen.values(), key=lambda e: (order.get(e[0], 0), e[1].line))
    out.evidence = _pick_evidence(evidence, max_evidence)
    return out


def _pick_evidence(ev: list[tuple[str, HitRecord]], k: int) -> list[tuple[str, HitRecord]]:
    """The first occurrences and the last one: where it started and that it persisted."""
    if len(ev) <= k:
        return ev
    return [*ev[: k - 1], ev[-1]]
