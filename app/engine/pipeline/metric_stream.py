"""Training metrics over a whole log at scan speed, in bounded memory.

Parsing a metric line costs ~50 µs (app.engine.pipeline.metrics.parse_line): a log made of metric
lines would be read at ~3 MB/s, against hundreds of MB/s for the scan. So nothing here parses
every line. The scan's own Hyperscan pass carries a few *gate* patterns (METRIC_GATES) and
hands their hits to a MetricStream with each chunk; only the lines a gate reports are parsed:

- a non-finite number where a value goes (`loss: nan`, `grad_norm=inf`, `loss nan`), and a
  DeepSpeed skipped-step count that is not 0: every such line of the log is parsed, so a NaN
  mid-run is found however many healthy lines follow it (at most MAX_GATE_LINES a chunk: a run
  that is NaN on every line is reported from the first lines of each chunk);
- a Megatron iteration line without its loss (Megatron leaves a NaN loss out), checked against
  the two Megatron lines before it.

Spikes are relative (10x the median of the values before): the median comes from a sample, a
metric line every SAMPLE_COST x its length bytes (~0.04% of the log parsed), whose values also
make the points the timeline charts over the whole run; the spike itself is found by the
sample or by the *decade gates*: a 10x jump crosses a power of ten, and one single-match gate
per decade reports the first line of each chunk whose loss, grad norm or KL reaches it. A spike
is missed before the log's last lines only where it is shorter than the gap between two
samples and, in its chunk, healthy values already reached its decade before it. A decade
every chunk reaches is the run's ordinary level and its line is not parsed, nor one whose values
are all below 10x the smallest median followed: on the generated log the gates cost the scan
less than the run-to-run spread (bench/README.md "Issue 22").

The last EXACT_TAIL_BYTES of the log, and a log of up to WHOLE_LOG_BYTES whole, are parsed line
by line as before (app.engine.pipeline.scan gives them to `finish`): such a log, and the end of any log,
is read exactly as `check(parse_lines(...))` reads it. The state kept is bounded whatever the
log's size: a spike history of SPIKE_WINDOW values per metric name (at most MAX_NAMES names),
at most MAX_SAMPLES sampled points, the few points found within the last WHOLE_LOG_BYTES
(waiting to learn whether the end parse covers them), one issue per (kind, name) (at most
MAX_ISSUES non-finite ones) and TAIL_COPY bytes of the previous chunk.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from app.engine.pipeline.lines import parse_context
from app.engine.pipeline.metrics import Checker, MetricIssue, MetricPoint, metric_text, parse_line


def _not_followed_by(word: str) -> str:
    """A regex (no look-ahead: Hyperscan has none) for text that does not start with `word`."""
    alts = []
    for i, c in enumerate(word):
        cls = r"\s" + re.escape(c) if i == 0 else re.escape(c)
        alts.append(re.escape(word[:i]) + rf"(?:$|[^{cls}])")
    return "(?:" + "|".join(alts) + ")"


# every way parse_line can read a non-finite value: its number token after `:`, `=` or
# `tensor(`, or after a blank that follows a key (a space-separated table), ending at a word
# boundary. Megatron's "number of nan iterations: 0" and "loss: 0.5 (nan-safe)" are none.
# What a gate costs the scan is how often its literal occurs: a bare "nan"/"inf" hits
# Hyperscan on every `INFO`, so the blank before a table's value is a pattern of its own, and
# the upper-case `INF` (C's %F; Python, numpy and torch print `inf`) is no gate at all: all
# gates cost +0.17 ms/MB of Hyperscan on the generated log, +0.29 with `[:=] ?INF`. An `INF`
# is read where every line is (the log's last lines) and in the sampled lines.
_NONFINITE = r"(?:nan|NaN|NAN|[iI]nf(?:inity)?)"
_END = r"(?:$|[^A-Za-z0-9_])"
_NONFINITE_AFTER_SIGN = rf"[:=]\s*(?:tensor\()?[-+]?{_NONFINITE}{_END}"
_NONFINITE_IN_TABLE = (
    rf"[\w)\]'\"] +[-+]?{_NONFINITE}(?:$|[^A-Za-z0-9_ ]| +(?:$|{_not_followed_by('iterations:')}))"
)
# DeepSpeed's `skipped=1995`: a count of 0 can never be most of the steps
_SKIPPED = r"\bskipped(?:['\"]?\s*[:=]\s*|\s+)[1-9]"
# Megatron's iteration line without a loss: the one that comes after the batch size is left out
# (Megatron's training_log drops a NaN loss), or Megatron counted NaN iterations
_MEGATRON_NO_LOSS = r"batch size:\s*\d+\s*\|\s*(?:loss scale|grad norm)\s*:|nan iterations:\s*[1-9]"

# Spikes: no pattern knows a metric's median, but a 10x jump always crosses a power of ten that
# the values before it stayed under. One gate per decade (a loss, grad norm or KL of at least
# 10**k, k = 0..SPIKE_DECADES-1, written plainly or with an exponent), each reporting only its
# first line per chunk (Hyperscan's single-match): a chunk costs at most SPIKE_DECADES parsed
# lines, and a spike is found wherever it is the first value of its chunk to reach its decade
# (a run whose values already reach it in that chunk hides it until the sample or the end).
SPIKE_DECADES = 6
_SPIKY_KEY = r"(?:loss|norm|kl)['\"]?(?:\s*[:=]\s*(?:tensor\()?| +)[-+]?"


def _at_least_decade(k: int) -> str:
    exp = f"[{k}-9]|[1-9][0-9]" if k <= 9 else "[1-9][0-9]"
    return (
        rf"{_SPIKY_KEY}(?:[1-9][0-9]{{{k},}}(?:\.[0-9]*)?(?:$|[^0-9.eE])"
        rf"|[1-9](?:\.[0-9]*)?[eE]\+?0*(?:{exp}))"
    )


# a decade gate's line is parsed only when a value on it could be a spike: at least 10x the
# smallest median any followed metric has (a bytes regex, ~2 µs, against ~45 µs for parse_line)
_SPIKY_VALUE = re.compile(
    rb"(?:loss|norm|kl)['\"]?(?:\s*[:=]\s*(?:tensor\()?| +)([-+]?\d+\.?\d*(?:[eE][-+]?\d+)?)"
)


def _could_spike(raw: bytes, floor: float) -> bool:
    for m in _SPIKY_VALUE.finditer(raw):
        try:
            if abs(float(m.group(1))) >= floor:
                return True
        except ValueError:
            continue
    return False


# (name, pattern, ignore_case, single): the scan adds them to its matcher, in this order
METRIC_GATES: tuple[tuple[str, str, bool, bool], ...] = (
    ("nonfinite", _NONFINITE_AFTER_SIGN, False, False),
    ("nonfinite_table", _NONFINITE_IN_TABLE, False, False),
    ("skipped", _SKIPPED, False, False),
    ("megatron_no_loss", _MEGATRON_NO_LOSS, False, False),
    *((f"decade_{k}", _at_least_decade(k), False, True) for k in range(SPIKE_DECADES)),
)
_MEGATRON_GATE = 3
_FIRST_DECADE = 4  # METRIC_GATES index of decade_0
# where a sample is looked for: a line naming a loss, a grad norm or a reward, within
# HINT_WINDOW bytes (`bytes.find`s: a case-blind regex took ~75 µs a sample on the generated log)
_HINTS = (b"loss", b"Loss", b"grad_norm", b"grad norm", b"reward")
HINT_WINDOW = 64 << 10

# Sampling: the next sample is looked for SAMPLE_COST x the length of the last sampled line
# further on (parsing costs about the line's length; 2500x keeps it near 0.04% of the bytes
# scanned: ~1 sample per 500 KB of 200-byte metric lines, 574 lines of the generated 1 GiB log),
# and at least SAMPLE_MIN_GAP further
SAMPLE_COST = 2500
SAMPLE_MIN_GAP = 16 << 10
MAX_SAMPLES_PER_CHUNK = 8
SAMPLE_TRIES = 3  # lines the hint finds that are not metric lines, tried before giving up on a chunk
MAX_GATE_LINES = 16  # gate lines parsed per chunk
MAX_SAMPLES = 1000  # sampled points kept for the timeline (thinned evenly when full)
EXACT_TAIL_BYTES = 16 << 10  # the end of the log is parsed line by line (~100 metric lines)
# a log up to this size is parsed line by line whole, as before (a few ms for a hook's 200 KB of
# ordinary lines, which worth_parsing skips; ~70 ms for 256 KiB made of metric lines): the
# timeline's fail-slow verdict needs every step time to find its change point, which a sample
# would miss (tests/corpus: gloo and gpu fail-slow, 55-122 KB)
WHOLE_LOG_BYTES = 256 << 10
TAIL_COPY = 16 << 10  # of the previous chunk, for the Megatron lines before a gate line
MEGATRON_LOOKBACK = 16  # lines with "iteration" tried to find the two Megatron lines before one

# a line parse_line can read a training signal from names one of these (its keys are matched
# lowercased), or is a bare `step value` row
_WORTH_PARSING = re.compile(
    r"loss|norm|reward|score|kl|entropy|lr|learning|time|elapsed|throughput|tokens|samples|it/s"
    r"|perplexity|ppl|clip|advantage|value|skipped|nan"
)
_STEP_VALUE_ROW = re.compile(r"\s*\d+\s+\S+\s*$")


def worth_parsing(text: str) -> bool:
    """A cheap superset of the lines parse_line returns a point for (~2 µs against ~50)."""
    return _WORTH_PARSING.search(text.lower()) is not None or _STEP_VALUE_ROW.match(text) is not None


@dataclass
class _Pending:
    offset: int  # of the line's start in the stream
    point: MetricPoint
    text: str
    sample: bool  # a sampled line (its values join the spike history), else a gate line
    missing: list[str] = field(default_factory=list)  # Megatron losses left out of the line


class MetricStream:
    """Fed each chunk of one stream (its gate hits included), then `finish`ed with its last lines."""

    def __init__(self, *, gate_ids: range, rank_hint: int | None = None) -> None:
        self._lo, self._hi = gate_ids.start, gate_ids.stop
        self._rank_hint = rank_hint
        self.checker = Checker()
        self._texts: dict[int, str] = {}  # issue line -> its text (one per issue)
        self._pending: deque[_Pending] = deque()
        self._samples: list[MetricPoint] = []
        self._sample_step = 1  # keep one sampled point in this many
        self._n_samples = 0
        self._next_sample = 0
        self._prev_tail = b""
        self._count: Callable[[int, int], int] = lambda a, b: 0
        self._start: int | None = None
        self._end = 0
        self._decades_prev: set[int] = set()  # the decade gates the previous chunk fired
        self.gate_lines = 0  # lines parsed because a gate reported them (for benchmarks)
        self.sampled_lines = 0

    # --- per chunk ---------------------------------------------------------------------------

    def feed(
        self,
        buf: bytearray,
        cut: int,
        line_base: int,
        offset: int,
        hits: list[tuple[int, int]],
        count: Callable[[int, int], int] | None = None,
    ) -> None:
        """One line-aligned chunk buf[:cut] at stream offset `offset`, whose first line is line
        `line_base + 1`; `hits` are the matcher's (pattern id, end) for it, any order; `count`
        counts the newlines of buf[a:b] (the scan's, faster than bytes.count on a big chunk)."""
        self._count = count or (lambda a, b: buf.count(b"\n", a, b))
        lo, hi = self._lo, self._hi
        gates: dict[int, set[int]] = {}
        for pid, end in hits:
            if lo <= pid < hi:
                # the line holding the match's last byte (which may be the newline ending it)
                ls = buf.rfind(b"\n", 0, max(end - 1, 0)) + 1
                got = gates.get(ls)
                if got is None:
                    if len(gates) >= MAX_GATE_LINES:
                        continue
                    gates[ls] = got = set()
                got.add(pid - lo)
        # a decade every chunk reaches is the run's ordinary level: its single-match line is a
        # healthy one, so only a decade the previous chunk did not reach is worth a parse
        decades = {g for gs in gates.values() for g in gs if g >= _FIRST_DECADE}
        routine, self._decades_prev = self._decades_prev, decades
        if decades:
            for ls in [ls for ls, gs in gates.items() if min(gs) >= _FIRST_DECADE and gs <= routine]:
                del gates[ls]
        found: list[_Pending] = []
        if gates:
            self._parse_gate_lines(buf, cut, line_base, offset, gates, found)
        if self._next_sample < offset + cut:
            self._sample(buf, cut, line_base, offset, found)
        if found:
            found.sort(key=lambda f: (f.offset, f.sample))
            self._pending.extend(found)
        if self._start is None:
            self._start = offset
        self._end = offset + cut
        self._commit(self._end - WHOLE_LOG_BYTES)
        # one copy (a bytearray's slice is a copy of its own, which bytes() would copy again)
        self._prev_tail = bytes(memoryview(buf)[max(0, cut - TAIL_COPY) : cut])

    def _parse_gate_lines(
        self,
        buf: bytearray,
        cut: int,
        line_base: int,
        offset: int,
        gates: dict[int, set[int]],
        found: list[_Pending],
    ) -> None:
        pos, lineno = 0, line_base
        floor: float | None = -1.0  # not computed yet
        for ls in sorted(gates):
            le = buf.find(b"\n", ls, cut)
            raw = bytes(buf[ls : le if le >= 0 else cut])
            if min(gates[ls]) >= _FIRST_DECADE:
                # only a decade gate saw it: worth a parse only if it can be a spike
                if floor == -1.0:
                    floor = self.checker.spike_floor()
                if floor is None or not _could_spike(raw, floor):
                    continue
            lineno += self._count(pos, ls)
            pos = ls
            text = metric_text(raw)
            self.gate_lines += 1
            p = parse_line(text, lineno + 1)
            if p is None:
                continue
            pend = _Pending(offset + ls, p, text, sample=False)
            if _MEGATRON_GATE in gates[ls] and p.megatron:
                pend.missing = self._megatron_missing(p, buf, ls)
            found.append(pend)

    def _sample(self, buf: bytearray, cut: int, line_base: int, offset: int, found: list[_Pending]) -> None:
        """The sampled metric lines of this chunk: the first line naming a loss, a grad norm or
        a reward after each point a sample is due at."""
        pos, lineno = 0, line_base
        for _ in range(MAX_SAMPLES_PER_CHUNK):
            due = self._next_sample - offset
            if due >= cut:
                return
            start = max(due, 0)
            at = _find_hint(buf, start, cut)
            tries = 0
            while at >= 0 and tries < SAMPLE_TRIES:
                tries += 1
                le = buf.find(b"\n", at, cut)
                at = buf.rfind(b"\n", 0, at) + 1
                stop = le if le >= 0 else cut
                lineno += self._count(pos, at)
                pos = at
                text = metric_text(bytes(buf[at:stop]))
                self.sampled_lines += 1
                p = parse_line(text, lineno + 1)
                if p is not None:
                    found.append(_Pending(offset + at, p, text, sample=True))
                    self._next_sample = offset + stop + max(SAMPLE_MIN_GAP, SAMPLE_COST * (stop - at))
                    break
                at = _find_hint(buf, stop, cut)
            else:
                # none near: look again a window further on (in this chunk or the next)
                self._next_sample = offset + min(cut, start + HINT_WINDOW)

    def _megatron_missing(self, p: MetricPoint, buf: bytearray, ls: int) -> list[str]:
        """The losses both Megatron lines before this one had and this one lacks (Megatron's
        training_log leaves out a loss that is NaN; a line cut short before its `loss scale`
        and `grad norm` says nothing)."""
        if not any(k in p.values for k in ("loss scale", "grad norm")):
            return []
        before = self._prev_tail + bytes(buf[max(0, ls - TAIL_COPY) : ls])
        rows = before.split(b"\n")[1:]  # the first row may be cut
        prev: list[set[str]] = []
        tried = 0
        for raw in reversed(rows):
            if b"iteration" not in raw:
                continue
            tried += 1
            q = parse_line(metric_text(raw), 0)
            if q is not None and q.megatron:
                prev.append(_losses(q))
                if len(prev) == 2:
                    break
            if tried >= MEGATRON_LOOKBACK:
                break
        if len(prev) < 2:
            return []
        return sorted((prev[0] & prev[1]) - _losses(p))

    def _commit(self, before: int) -> None:
        """Check the waiting points that lie before stream offset `before`, in order."""
        pending = self._pending
        while pending and pending[0].offset < before:
            self._check(pending.popleft())

    def _rank(self, p: MetricPoint, text: str) -> MetricPoint:
        p.rank = parse_context(text).rank
        if p.rank is None:
            p.rank = self._rank_hint
        return p

    def _check(self, pend: _Pending) -> None:
        p = pend.point
        new = self.checker.feed(p, history=pend.sample, megatron=False)
        for name in pend.missing:
            issue = self.checker.missing_loss(p, name)
            if issue is not None:
                new.append(issue)
        for issue in new:
            self._texts[issue.line] = pend.text
        if pend.sample:
            self._keep_sample(p, pend.text)
        elif new:
            self._samples.append(self._rank(p, pend.text))  # an issue's line is a point of the chart too

    def _keep_sample(self, p: MetricPoint, text: str) -> None:
        self._n_samples += 1
        if self._n_samples % self._sample_step:
            return
        self._samples.append(self._rank(p, text))
        if len(self._samples) >= MAX_SAMPLES:
            # thin to every other point: the kept points stay evenly spread over the run
            self._samples = self._samples[::2]
            self._sample_step *= 2

    # --- the end -------------------------------------------------------------------------------

    @property
    def exact_bytes(self) -> int:
        """How much of the stream's end `finish` wants to be given, line by line."""
        fed = self._end - (self._start or 0)
        return WHOLE_LOG_BYTES if fed <= WHOLE_LOG_BYTES else EXACT_TAIL_BYTES

    def finish(
        self, tail: list[tuple[int, str]], *, keep: int = 5000
    ) -> tuple[list[MetricPoint], list[tuple[MetricIssue, str]]]:
        """The stream's points and issues (with their lines' text); `tail` is its last lines
        (line number, text), its last `exact_bytes`, parsed line by line in place of what
        the gates and the sampling found there."""
        first = tail[0][0] if tail else None
        if first is None:
            self._commit(1 << 62)
        else:
            while self._pending and self._pending[0].point.line < first:
                self._check(self._pending.popleft())
            self._pending.clear()
        points = sorted(self._samples, key=lambda p: p.line)
        for lineno, text in tail:
            if not worth_parsing(text):
                continue
            p = parse_line(text, lineno)
            if p is None:
                continue
            for issue in self.checker.feed(p):
                self._texts[issue.line] = text
            points.append(self._rank(p, text))
        if len(points) > keep:
            points = points[-keep:]
        issues = [(i, self._texts.get(i.line, "")) for i in self.checker.issues]
        return points, issues


def _find_hint(buf: bytearray, start: int, end: int) -> int:
    """Where the first hint of a metric line is in buf[start:end] (at most HINT_WINDOW on), or -1."""
    best = -1
    stop = min(end, start + HINT_WINDOW)
    for hint in _HINTS:
        i = buf.find(hint, start, stop)
        if i >= 0:
            best, stop = i, i  # the next hint is looked for before this one only
    return best


def _losses(p: MetricPoint) -> set[str]:
    return {k for k in p.values if "loss" in k and k not in ("loss scale", "grad norm")}
