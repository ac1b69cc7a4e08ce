"""Training metrics from log lines, in the layouts loggers actually print; and checks on them.

Layouts understood (one parser, tried in this order on a line):
- Megatron's `|`-separated iteration lines: `iteration  100/ 1000 | lm loss: 7.0E+00 | grad norm: 2.3 |`
- dicts (Python repr or JSON): `{'loss': 0.52, 'grad_norm': 1.3, 'epoch': 0.1}`
- verl-style ` - `-separated `key:value`: `step:12 - actor/pg_loss:0.01 - actor/grad_norm:nan`
- `key=value` lists, also a tqdm postfix: `[00:10<00:00, 4.9it/s, loss=0.52, lr=1e-05]`
- `key: value` pairs: `step: 10, loss: 0.52, grad_norm: inf`
- space-separated `key value` tables: `step 10 loss 0.5231 grad_norm 1.20 lr 1e-5`
- W&B's run summary: `wandb:   train/loss 0.12345`
- NVIDIA DLLogger's spaced colons: `Training Iteration: 2933  average_loss : nan  step_loss : 1.07`
- a bare two-column table a training loop prints (`76980 2.6496`): step and an unnamed value

A metric is a name with a number (or nan/inf). The parser only looks at lines that name one of
the metrics it knows to be training signals (loss, grad norm, reward, kl, entropy, lr, step
time, throughput, ...); everything else is left alone. Parsing a line costs ~50 µs, so over a
whole log only the lines the scan's gate patterns report, and a sample, are parsed
(app.engine.pipeline.metric_stream); its last lines are parsed one by one.
"""

from __future__ import annotations

import functools
import math
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|NaN|NAN|inf|Inf|INF|infinity|Infinity)"
_KEY = r"[A-Za-z_][\w./-]*(?: [A-Za-z_][\w/-]*){0,5}"
# names that are training signals: substrings of the normalised metric name
SIGNALS = (
    "loss",
    "grad_norm",
    "gradnorm",
    "grad norm",
    "reward",
    "score",
    "kl",
    "entropy",
    "lr",
    "learning_rate",
    "learning rate",
    "step_time",
    "_time",
    "time_per",
    "elapsed",
    "throughput",
    "tokens_per",
    "samples_per",
    "it/s",
    "perplexity",
    "ppl",
    "clip",
    "advantage",
    "value",
    "skipped",
    "nan iterations",
)
STEP_KEYS = (
    "step",
    "iteration",
    "iter",
    "global_step",
    "epoch_step",
    "train/global_step",
    "trainer/global_step",
)

_MEGATRON = re.compile(r"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|")
_PIPE_PAIR = re.compile(rf"\|\s*(?P<k>[A-Za-z][\w ()/.-]*?)\s*:\s*(?P<v>{_NUM})\s*(?=\|)")
_DICT = re.compile(r"\{[^{}]*\}")
_DICT_PAIR = re.compile(rf"['\"](?P<k>[^'\"]+)['\"]\s*:\s*(?:tensor\()?(?P<v>{_NUM})")
_DASH_PAIR = re.compile(rf"(?:^|\s-\s)(?P<k>[A-Za-z_][\w./-]*):\s*(?P<v>{_NUM})(?=\s+-\s|\s*$)")
_EQ_PAIR = re.compile(rf"(?<![\w./-])(?P<k>[A-Za-z_][\w./-]*)\s*=\s*(?P<v>{_NUM})(?![\w.])")
_COLON_PAIR = re.compile(rf"(?<![\w./-])(?P<k>{_KEY}) ?:\s+(?P<v>{_NUM})(?![\w.:])")
_SPACE_PAIR = re.compile(rf"(?<![\w./-])(?P<k>[A-Za-z_][\w./-]*)\s+(?P<v>{_NUM})(?![\w.:])")
_CONFIG_VALUE = re.compile(r"['\"]\s*:\s*(?:['\"]|True\b|False\b|None\b|\[)")
_STEP_VALUE = re.compile(rf"^\s*(?P<step>\d+)\s+(?P<v>{_NUM})\s*$")
_WANDB = re.compile(rf"^wandb:\s+(?P<k>[\w./-]+)\s+(?P<v>{_NUM})\s*$")
_STEP_WORD = re.compile(r"(?<![\w./-])(?:step|iteration|iter)[\s:=]+(?P<step>\d+)\b", re.IGNORECASE)


@dataclass
class MetricPoint:
    line: int  # 1-based line number in its file
    step: int | None
    values: dict[str, float]
    rank: int | None = None
    megatron: bool = False  # Megatron's iteration line, whose omissions mean something


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def metric_text(raw: bytes) -> str:
    """A log line as its last progress-bar redraw shows it (tqdm rewrites a line with \\r)."""
    text = raw.decode("utf-8", errors="replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return text


_SPACES = re.compile(r"\s+")


# metric names repeat on every line of a run: both are cached so a line costs its regex searches
@functools.lru_cache(maxsize=4096)
def normalise_name(key: str) -> str:
    return _SPACES.sub(" ", key.strip().lower())


# settings that name a signal (`max_grad_norm: 1.0`, `warmup_lr`), not a measurement of it
_SETTING_PREFIXES = ("max_", "min_", "init", "warmup", "target_", "clip_", "log_", "num_", "decay", "base_")


@functools.lru_cache(maxsize=4096)
def is_signal(name: str) -> bool:
    n = name.replace("-", "_")
    if n.rsplit("/", 1)[-1].startswith(_SETTING_PREFIXES):
        return False
    if n in ("lr",) or n.endswith(("/lr", "_lr")):
        return True
    return any(s in n for s in SIGNALS if s != "lr")


def to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _megatron_pairs(line: str) -> list[tuple[str, str]] | None:
    # the stdlib engine tries `\biteration` at every character (~10 us a line); a match starts
    # at an occurrence of the word, so the search starts at the first one (or is not made)
    at = line.find("iteration")
    if at < 0:
        return None
    m = _MEGATRON.search(line, at)
    if m is None:
        return None
    return [
        ("iteration", m.group("step")),
        *((p.group("k"), p.group("v")) for p in _PIPE_PAIR.finditer(line + "|")),
    ]


def _pairs(line: str) -> list[tuple[str, str]]:
    d = _DICT.search(line)
    if d and ":" in d.group(0):
        if _CONFIG_VALUE.search(d.group(0)):
            return []  # a dict with text values is a config or argument dump, not metrics
        found = [(p.group("k"), p.group("v")) for p in _DICT_PAIR.finditer(d.group(0))]
        if found:
            return found
    sv = _STEP_VALUE.match(line)
    if sv:
        return [("step", sv.group("step")), ("value", sv.group("v"))]
    w = _WANDB.match(line.strip())
    if w:
        return [(w.group("k"), w.group("v"))]
    if " - " in line:
        found = [(p.group("k"), p.group("v")) for p in _DASH_PAIR.finditer(line)]
        if len(found) >= 2:
            return found
    found = [(p.group("k"), p.group("v")) for p in _EQ_PAIR.finditer(line)]
    if found:
        return found
    found = [(p.group("k"), p.group("v")) for p in _COLON_PAIR.finditer(line)]
    if found:
        return found
    return [(p.group("k"), p.group("v")) for p in _SPACE_PAIR.finditer(line)]


_NUMERIC_CHAR = re.compile(r"[\dnNiI]")  # a digit, or the first letter of nan / inf
# Ray's prefix on an actor's output: its `pid=`/`ip=` would be read as the line's key=value pairs
_RAY_PREFIX = re.compile(r"\(\w+ pid=\d+(?:, ip=[\w.:-]+)?\)\s*(?:\[repeated \d+x across cluster\]\s*)?")


def parse_line(line: str, lineno: int) -> MetricPoint | None:
    """The metrics one line reports, or None when it reports no training signal."""
    if len(line) > 8192 or not _NUMERIC_CHAR.search(line):
        return None
    if line.startswith("("):
        m = _RAY_PREFIX.match(line)
        if m:
            line = line[m.end() :]
    values: dict[str, float] = {}
    step: int | None = None
    megatron = _megatron_pairs(line)
    for key, raw in megatron if megatron is not None else _pairs(line):
        name = normalise_name(key)
        v = to_float(raw)
        if v is None:
            continue
        if name in STEP_KEYS or name.endswith(("global_step", "/step")):
            if v == v and not math.isinf(v) and v >= 0:
                step = int(v)
            continue
        if is_signal(name):
            values[name] = v
    if not values:
        return None
    if step is None:
        sm = _STEP_WORD.search(line)
        if sm:
            step = int(sm.group("step"))
    return MetricPoint(lineno, step, values, megatron=megatron is not None)


def parse_lines(lines: Iterable[tuple[int, str]], *, keep: int = 5000) -> list[MetricPoint]:
    """Metric points of (lineno, text) lines, at most the last `keep`."""
    out: list[MetricPoint] = []
    for lineno, text in lines:
        p = parse_line(text, lineno)
        if p is not None:
            out.append(p)
            if len(out) > 2 * keep:
                del out[:keep]
    return out[-keep:]


# --- checks ---------------------------------------------------------------------------------


@dataclass
class MetricIssue:
    kind: str  # not_finite | spike | skipped
    name: str
    line: int
    step: int | None
    value: float
    baseline: float | None = None  # the typical value before (spikes); the last finite one (not_finite)
    detail: str = ""


@dataclass
class MetricSummary:
    points: list[MetricPoint]
    issues: list[MetricIssue] = field(default_factory=list)

    @property
    def last_step(self) -> int | None:
        steps = [p.step for p in self.points if p.step is not None]
        return max(steps) if steps else None

    def series(self, name: str) -> list[tuple[int | None, float, int]]:
        return [(p.step, p.values[name], p.line) for p in self.points if name in p.values]


SPIKE_FACTOR = 10.0  # a value this many times the median of the values before it
# posted excerpts keep a handful of logged points ("..." between them); four give a median, and
# the 10x factor keeps early-training noise out (no spike on the corpus negatives nor the baseline runs)
SPIKE_MIN_HISTORY = 4
# names whose size matters: a loss or a gradient norm blowing up; a learning rate, a step count
# or an fp16 loss scale growing is normal
_SPIKE_NAMES = ("loss", "grad_norm", "gradnorm", "grad norm", "kl")


@functools.lru_cache(maxsize=4096)
def _spiky(name: str) -> bool:
    return any(s in name.replace("-", "_") for s in _SPIKE_NAMES) and "scale" not in name


SPIKE_WINDOW = 50  # the median is taken over this many values before
MAX_NAMES = 512  # metric names followed for spikes and Megatron's losses (bounded state)
MAX_ISSUES = 1000  # non-finite names reported (a log can name any number of metrics)


class Checker:
    """The checks, one point at a time, in bounded memory (SPIKE_WINDOW values per name): fed
    a whole log's points (app.engine.pipeline.metric_stream) or a list of them (`check`)."""

    def __init__(self) -> None:
        self.issues: list[MetricIssue] = []
        self.history: dict[str, deque[float]] = {}  # the last values' magnitudes, of spiky names
        self.reported: set[tuple[str, str]] = set()
        self.streak: dict[str, int] = {}  # Megatron losses: in how many iteration lines in a row
        self._floor: float | None = None
        self._floor_stale = True
        # Megatron: iteration lines in a row that applied no update at the same loss scale
        self.stuck: tuple[int, float | None] = (0, None)

    def feed(self, p: MetricPoint, *, history: bool = True, megatron: bool = True) -> list[MetricIssue]:
        """The new issues of point `p`. `history=False`: its values are checked but do not join
        the spike median (a line picked *because* a value is large would bias it upwards);
        `megatron=False`: it does not count in the runs of Megatron lines (not the next one)."""
        before = len(self.issues)
        reported = self.reported
        if p.megatron and megatron:
            _megatron_dropped_loss(p, self.streak, reported, self)
            _megatron_all_skipped(p, self)
        for name, v in p.values.items():
            if math.isnan(v) or math.isinf(v):
                if ("not_finite", name) not in reported and len(self.issues) < MAX_ISSUES:
                    reported.add(("not_finite", name))
                    # the last finite magnitude before it (losses, grad norms): a value that had
                    # already grown large says divergence, a normal one a sudden break
                    last = self.history.get(name)
                    prev = last[-1] if last else None
                    self.issues.append(MetricIssue("not_finite", name, p.line, p.step, v, baseline=prev))
                continue
            if not _spiky(name):
                continue
            past = self.history.get(name)
            if past is None:
                if len(self.history) >= MAX_NAMES:
                    continue
                past = self.history[name] = deque(maxlen=SPIKE_WINDOW)
            # the median is at least the smallest: most values need no sort
            if (
                len(past) >= SPIKE_MIN_HISTORY
                and abs(v) >= SPIKE_FACTOR * min(past)
                and ("spike", name) not in reported
            ):
                recent = sorted(past)  # magnitudes
                median = recent[len(recent) // 2]
                if median > 0 and abs(v) >= SPIKE_FACTOR * median:
                    reported.add(("spike", name))
                    self.issues.append(
                        MetricIssue(
                            "spike",
                            name,
                            p.line,
                            p.step,
                            v,
                            baseline=median,
                            detail=f"{name} {v:g} at step {p.step}: "
                            f"{abs(v) / median:.0f}x its median of {median:g}",
                        )
                    )
            if history:
                past.append(abs(v))
                self._floor_stale = True
        _skipped_most(p, reported, self)
        return self.issues[before:]

    def spike_floor(self) -> float | None:
        """The smallest value that can be a spike of any followed metric: SPIKE_FACTOR x the
        smallest median of a history long enough to judge; None while none is. Kept until the
        history changes (it changes with each sampled line, not with each chunk)."""
        if self._floor_stale:
            medians = [
                sorted(past)[len(past) // 2]
                for past in self.history.values()
                if len(past) >= SPIKE_MIN_HISTORY
            ]
            positive = [m for m in medians if m > 0]
            self._floor = SPIKE_FACTOR * min(positive) if positive else None
            self._floor_stale = False
        return self._floor

    def missing_loss(self, p: MetricPoint, name: str) -> MetricIssue | None:
        """Report Megatron's loss `name` left out of iteration line `p` (found by a caller that
        saw the lines before it), unless already reported."""
        if ("not_finite", name) in self.reported or len(self.issues) >= MAX_ISSUES:
            return None
        self.reported.add(("not_finite", name))
        issue = _missing_issue(p, name)
        self.issues.append(issue)
        return issue


def check(points: list[MetricPoint]) -> MetricSummary:
    """Non-finite values of any signal; spikes of losses, grad norms and KL."""
    checker = Checker()
    for p in points:
        checker.feed(p)
    return MetricSummary(points, checker.issues)


# DeepSpeed's fp16 optimizer logs a running count of the steps it skipped because the gradients
# overflowed ("step=2000, skipped=1995"); after the first few hundred steps of loss-scale search
# a run that still skips most of them is not training at all: its gradients are inf/NaN every step
SKIP_MIN_STEPS = 100
SKIP_FRACTION = 0.5


def _skipped_most(p: MetricPoint, reported: set[tuple[str, str]], checker: Checker) -> None:
    skipped = p.values.get("skipped")
    if skipped is None or p.step is None or p.step < SKIP_MIN_STEPS or ("skipped", "skipped") in reported:
        return
    if skipped > p.step or skipped < SKIP_FRACTION * p.step:
        return  # more skipped than taken is another counter, not DeepSpeed's
    reported.add(("skipped", "skipped"))
    checker.issues.append(
        MetricIssue(
            "skipped",
            "skipped",
            p.line,
            p.step,
            skipped,
            baseline=float(p.step),
            detail=f"{skipped:g} of {p.step} optimizer steps skipped (gradient overflow)",
        )
    )


# Megatron's training_log writes a loss only `if avg > 0.0`: a NaN loss is left out of the line,
# not printed as nan. Its losses come before "loss scale" and "grad norm", so a line that has
# those but lacks a loss every recent line had is a loss that stopped being a number.
_MEGATRON_AFTER_LOSSES = ("loss scale", "grad norm")
_MEGATRON_STREAK = 2


def _megatron_dropped_loss(
    p: MetricPoint, streak: dict[str, int], reported: set[tuple[str, str]], checker: Checker
) -> None:
    losses = {k for k in p.values if "loss" in k and k not in _MEGATRON_AFTER_LOSSES}
    if any(k in p.values for k in _MEGATRON_AFTER_LOSSES):
        for name, n in streak.items():
            if name not in losses and n >= _MEGATRON_STREAK and ("not_finite", name) not in reported:
                reported.add(("not_finite", name))
                checker.issues.append(_missing_issue(p, name))
    for name in list(streak):
        if name not in losses:
            streak[name] = 0
    for name in losses:
        if name in streak or len(streak) < MAX_NAMES:
            streak[name] = streak.get(name, 0) + 1


def _missing_issue(p: MetricPoint, name: str) -> MetricIssue:
    return MetricIssue(
        "not_finite",
        name,
        p.line,
        p.step,
        math.nan,
        detail=f"{name} is missing from Megatron's iteration line at step {p.step}: "
        "Megatron leaves out a loss that is NaN",
    )


# Megatron's iteration line counts the interval's skipped iterations and prints a loss only for
# the iterations it applied: a line with skipped iterations and no loss applied no update. A
# dynamic loss scale halves while it skips (every `hysteresis` skips); lines in a row that apply
# nothing at an unchanged scale are a fixed --loss-scale (or one stuck at its minimum) that
# overflows every step: the run never trains.
MEGATRON_STUCK_LINES = 3
_MEGATRON_SKIPPED = "number of skipped iterations"


def _megatron_all_skipped(p: MetricPoint, checker: Checker) -> None:
    skipped = p.values.get(_MEGATRON_SKIPPED)
    scale = p.values.get("loss scale")
    applied = any("loss" in k and k != "loss scale" for k in p.values)
    n, last = checker.stuck
    if not skipped or scale is None or applied:
        checker.stuck = (0, None)
        return
    n = n + 1 if last == scale else 1
    checker.stuck = (n, scale)
    if n < MEGATRON_STUCK_LINES or ("skipped", _MEGATRON_SKIPPED) in checker.reported:
        return
    checker.reported.add(("skipped", _MEGATRON_SKIPPED))
    checker.issues.append(
        MetricIssue(
            "skipped",
            _MEGATRON_SKIPPED,
            p.line,
            p.step,
            float(n),
            baseline=scale,
            detail=f"{n} iteration lines in a row skipped every update at loss scale {scale:g}",
        )
    )
