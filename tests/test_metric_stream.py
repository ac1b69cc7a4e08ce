"""Metrics over the whole log (app.engine.pipeline.metric_stream): what lies before its last lines is found
through the scan's gate patterns and a sample, in state that does not grow with the log."""

from __future__ import annotations

import gzip
import io
import math
from pathlib import Path

import pytest
import regex

from app.engine.pipeline import metric_stream
from app.engine.pipeline.ingest import ByteBudget, Source
from app.engine.pipeline.metric_stream import METRIC_GATES, WHOLE_LOG_BYTES, MetricStream
from app.engine.pipeline.metrics import SPIKE_WINDOW, Checker, MetricPoint, check, parse_line
from app.engine.pipeline.scan import FileScan, _Scanner, scan_source


def _healthy(i: int) -> str:
    return f"step {i} loss {2.0 + (i % 7) / 100:.4f} grad_norm {0.5 + (i % 5) / 10:.3f} lr 1e-05"


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _issues(scan: FileScan) -> list[tuple[str, str, int]]:
    return [(i.kind, i.name, i.line) for i, _text in scan.metric_issues]


def _scan(compiled, path: Path) -> FileScan:  # type: ignore[no-untyped-def]
    return scan_source(compiled, Source(name=path.name, path=path), budget=ByteBudget(0))


def test_a_nan_mid_log_followed_by_50k_healthy_lines_is_found(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    lines = [_healthy(i) for i in range(20_000)]
    lines.append("step 20000 loss nan grad_norm 0.5 lr 1e-05")
    lines += [_healthy(i) for i in range(20_001, 70_001)]
    log = _write(tmp_path / "train.log", lines)
    assert log.stat().st_size > 8 * WHOLE_LOG_BYTES  # far before the lines parsed one by one
    scan = _scan(compiled, log)
    assert _issues(scan) == [("not_finite", "loss", 20_001)]
    (issue, text), *_ = scan.metric_issues
    assert issue.step == 20_000 and text == lines[20_000]
    assert any(p.line == 20_001 for p in scan.metrics)  # the chart shows the point


@pytest.mark.parametrize("how", ["parallel", "gzip"])
def test_the_nan_mid_log_is_found_by_the_parallel_scan_and_in_a_stream(compiled, tmp_path, how) -> None:  # type: ignore[no-untyped-def]
    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.triage import TriageOptions, triage

    lines = [_healthy(i) for i in range(30_000)]
    lines.append("step 30000 loss 2.0 grad_norm inf lr 1e-05")
    lines += [_healthy(i) for i in range(30_001, 80_001)]
    log = _write(tmp_path / "train.log", lines)
    if how == "gzip":
        gz = tmp_path / "train.log.gz"
        gz.write_bytes(gzip.compress(log.read_bytes(), compresslevel=1))
        log = gz
    sources, _ = collect_sources([str(log)])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=2 if how == "parallel" else 1))
    f = next(f for f in a.findings if f.rule_id == "metric-not-finite")
    assert f.evidence[0].line == 30_001 and f.captures == {
        "metric": "grad_norm",
        "value": "inf",
        "step": "30000",
        "baseline": "0.8",  # the last finite grad norm before it
    }


def test_a_loss_spike_mid_log_is_found(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a spike found in the sample must last longer than the gap between two samples
    # (SAMPLE_COST x a line's length: ~150 KB, 2500 of these lines)
    lines = [_healthy(i) for i in range(20_000)]
    lines += [f"step {i} loss 25.0{i % 10} grad_norm 0.5 lr 1e-05" for i in range(20_000, 26_000)]
    lines += [_healthy(i) for i in range(26_000, 56_000)]
    scan = _scan(compiled, _write(tmp_path / "train.log", lines))
    ((kind, name, line),) = _issues(scan)
    assert (kind, name) == ("spike", "loss") and 20_001 <= line <= 26_000
    issue = scan.metric_issues[0][0]
    assert issue.baseline is not None and 2.0 <= issue.baseline <= 2.07 and issue.value >= 25


def test_megatron_dropping_its_loss_mid_log_is_found(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    def line(step: int, loss: bool) -> str:
        lm = " lm loss: 2.345678E+00 |" if loss else ""
        return (
            f" iteration {step:8d}/  100000 | consumed samples: {step * 64:10d} | learning rate: 3.0E-04 |"
            f" global batch size:    64 |{lm} loss scale: 65536.0 | grad norm: 0.812 |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |"
        )

    lines = [line(i, True) for i in range(1, 6001)] + [line(6001, False)]
    lines += [line(i, True) for i in range(6002, 12_001)]
    scan = _scan(compiled, _write(tmp_path / "megatron.log", lines))
    assert _issues(scan) == [("not_finite", "lm loss", 6001)]
    assert "missing from Megatron's iteration line" in scan.metric_issues[0][0].detail


def test_deepspeed_skipping_most_steps_mid_log_is_found(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    def ds(step: int, skipped: int) -> str:
        return (
            "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] "
            f"step={step}, skipped={skipped}, lr=[0.001, 0.001], mom=[0.0, 0.0]"
        )

    lines = [ds(i, 0) for i in range(0, 5000)] + [ds(5000, 4990)] + [ds(i, 0) for i in range(5001, 10_000)]
    scan = _scan(compiled, _write(tmp_path / "ds.log", lines))
    assert _issues(scan) == [("skipped", "skipped", 5001)]


NONFINITE_LINES = [
    " iteration      310/    2000 | lm loss: nan | loss scale: 1.0 | grad norm: 2.0 |",
    "{'loss': nan, 'grad_norm': 1.843, 'learning_rate': 4.9e-05, 'epoch': 0.02}",
    "(MegatronTrainRayActor pid=1) {'train/loss': 0.41, 'train/grad_norm': tensor(inf), 'train/step': 12}",
    "(TaskRunner pid=21340) step:12 - actor/grad_norm:nan - actor/pg_loss:0.003",
    "train:   5%|▌         | 20/400 [00:01<00:21, 17.94it/s, loss=NaN, lr=1e-05]",
    "2026-11-23 10:00:00 INFO step: 40, loss: inf, reward: 0.25",
    "2026-11-23 10:00:00 INFO step: 40, loss: -Infinity, reward: 0.25",
    "[default0]: trainer: step 1 loss nan grad_norm 1.4024 step_time 1.047",
    "[default0]: trainer: step 1 loss 0.98 grad_norm inf",
    "wandb:   train/loss NAN",
    "DLL 2020-06-04 01:09:11.569757 - Training Iteration: 2933  average_loss : nan  step_loss : 1.07",
    "76980 nan",
]


@pytest.mark.parametrize("line", NONFINITE_LINES)
def test_every_non_finite_value_the_parser_reads_is_reported_by_a_gate(line: str) -> None:
    p = parse_line(line, 1)
    assert p is not None and any(math.isnan(v) or math.isinf(v) for v in p.values.values())
    assert any(regex.search(text, line) for _name, text, _ci, _single in METRIC_GATES)


@pytest.mark.parametrize(
    "line",
    [
        " iteration   10/ 100 | lm loss: 2.1E+00 | loss scale: 1.0 | grad norm: 0.8 | number of nan iterations:   0 |",
        "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] step=100, skipped=0, lr=[0.001]",
        "2026-11-23 10:00:00 INFO info: inference of the nanogpt model",
        "2026-11-23 10:00:00 INFO step: 40, loss: INF",  # no gate (see _NONFINITE): the end only
    ],
)
def test_healthy_lines_pass_the_gates(line: str) -> None:
    # the decade gates (single-match: one line per chunk) are meant to see healthy lines
    assert not any(regex.search(text, line) for _name, text, _ci, single in METRIC_GATES if not single)


@pytest.mark.parametrize(
    ("value", "decade"),
    [
        ("0.93", None),
        ("1.5", 0),
        ("9.99", 0),
        ("12.3", 1),
        ("150", 2),
        ("2.1E+00", 0),
        ("2.1E+03", 3),
        ("1.5e-03", None),
        ("-250.0", 2),
        ("tensor(31.5", 1),
        ("1e+12", 5),
    ],
)
def test_a_decade_gate_reports_a_value_of_its_decade_and_above(value: str, decade: int | None) -> None:
    decades = [
        int(n.rsplit("_", 1)[1])
        for n, text, _ci, single in METRIC_GATES
        if single and regex.search(text, f"step: 9, loss: {value}, lr: 1e-05")
    ]
    assert decades == (
        [] if decade is None else list(range(min(decade, metric_stream.SPIKE_DECADES - 1) + 1))
    )


@pytest.mark.parametrize(
    ("healthy", "spike"),
    [
        (lambda i: _healthy(i), "step {i} loss 31.2 grad_norm 0.7 lr 1e-05"),
        (
            lambda i: f"{{'loss': {40 + i % 9}.5, 'grad_norm': 1.1, 'epoch': 0.5}}",
            "{{'loss': 912.0, 'grad_norm': 1.1}}",
        ),
        (
            lambda i: (
                f" iteration {i:8d}/  100000 | lm loss: {2 + (i % 5) / 10:.6E} | loss scale: 65536.0 | grad norm: 0.812 |"
            ),
            " iteration {i:8d}/  100000 | lm loss: 2.345678E+00 | loss scale: 65536.0 | grad norm: 9.1E+01 |",
        ),
    ],
    ids=["table", "dict-tens", "megatron-exp"],
)
def test_a_spike_on_one_line_mid_log_is_found(compiled, tmp_path, healthy, spike) -> None:  # type: ignore[no-untyped-def]
    # one line only: far shorter than the gap between two samples, so the decade gates find it
    lines = [healthy(i) for i in range(30_000)] + [spike.format(i=30_000)]
    lines += [healthy(i) for i in range(30_001, 70_001)]
    log = _write(tmp_path / "train.log", lines)
    assert log.stat().st_size > 8 * WHOLE_LOG_BYTES
    scan = _scan(compiled, log)
    assert [(k, line) for k, _name, line in _issues(scan)] == [("spike", 30_001)]


def test_healthy_values_near_a_decade_make_no_spike(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # every line's loss sits on both sides of 10: the decade gates fire each chunk, nothing is 10x
    lines = [
        f"step {i} loss {8 + (i % 5)}.25 grad_norm {0.9 + (i % 3) / 10:.2f} lr 1e-05" for i in range(70_000)
    ]
    scan = _scan(compiled, _write(tmp_path / "train.log", lines))
    assert _issues(scan) == []


def _retained(stream: MetricStream) -> dict[str, int]:
    """What a stream keeps, as counts: none of them may grow with the log."""
    c = stream.checker
    return {
        "samples": len(stream._samples),
        "pending": len(stream._pending),
        "names": len(c.history),
        "history": max((len(h) for h in c.history.values()), default=0),
        "issues": len(c.issues),
        "texts": len(stream._texts),
        "prev_tail": len(stream._prev_tail),
    }


def test_the_stream_state_does_not_grow_with_the_log(compiled, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(metric_stream, "MAX_SAMPLES", 16)
    monkeypatch.setattr(metric_stream, "SAMPLE_MIN_GAP", 1024)
    monkeypatch.setattr(metric_stream, "SAMPLE_COST", 10)

    def run(n: int) -> dict[str, int]:
        data = "".join(_healthy(i) + "\n" for i in range(n)).encode()
        scanner = _Scanner(compiled, FileScan(name="s"))
        scanner.run(io.BytesIO(data))  # a stream: its end is parsed from the scan's own copy
        assert scanner.stream.sampled_lines > 16
        return _retained(scanner.stream)

    small, big = run(20_000), run(80_000)
    assert big["samples"] < 16 and small["samples"] < 16  # thinned, not grown
    assert big["history"] == small["history"] == SPIKE_WINDOW
    for key in ("pending", "names", "issues", "texts", "prev_tail"):
        assert big[key] <= small[key] or big[key] <= 64, (key, small, big)


def test_the_checker_bounds_its_names_and_issues() -> None:
    from app.engine.pipeline.metrics import MAX_ISSUES, MAX_NAMES

    c = Checker()
    for i in range(5000):
        c.feed(MetricPoint(i + 1, i, {f"loss_{i}": 1.0, "loss": 1.0, f"kl_{i}": math.nan}))
    assert len(c.history) == MAX_NAMES and len(c.history["loss"]) == SPIKE_WINDOW
    assert len(c.issues) == MAX_ISSUES and len(c.reported) == MAX_ISSUES


def test_a_small_log_is_checked_exactly_as_the_line_parser_checks_it(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    lines = [_healthy(i) for i in range(200)] + ["step 200 loss 31.0 grad_norm nan lr 1e-05"]
    scan = _scan(compiled, _write(tmp_path / "small.log", lines))
    from app.engine.pipeline.metrics import parse_lines

    want = check(parse_lines(list(enumerate(lines, 1)))).issues
    assert [(i.kind, i.name, i.line, i.baseline) for i, _ in scan.metric_issues] == [
        (i.kind, i.name, i.line, i.baseline) for i in want
    ]
    assert len(scan.metrics) == len(lines)
