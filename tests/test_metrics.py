"""The metric parser on the layouts real loggers print, and its checks."""

from __future__ import annotations

import math

import pytest

from app.engine.pipeline.metrics import check, parse_line, parse_lines

GPU = "tests/corpus/gpu"


@pytest.mark.parametrize(
    ("line", "step", "expect"),
    [
        (  # Megatron's iteration line
            " iteration      310/    2000 | consumed samples: 2480 | elapsed time per iteration (ms): 1234.5 | "
            "learning rate: 1.000000E-05 | global batch size: 8 | lm loss: 2.112310E+00 | loss scale: 1.0 | "
            "grad norm: 123.456 | number of skipped iterations: 0 | number of nan iterations: 0 |",
            310,
            {"lm loss": 2.11231, "grad norm": 123.456, "learning rate": 1e-05, "loss scale": 1.0},
        ),
        (  # DeepSpeed-Chat's `|`-joined step line, printed by a Ray actor (its pid=/ip= are no metrics)
            "(WorkerDict pid=90412, ip=10.12.0.33) epoch: 0|step: 3184|ppo_ep: 1|act_loss: inf|cri_loss: 2.5",
            3184,
            {"act_loss": float("inf"), "cri_loss": 2.5},
        ),
        (  # HF Trainer / DeepSpeed dict
            "{'loss': 0.5231, 'grad_norm': 1.843, 'learning_rate': 4.9e-05, 'epoch': 0.02}",
            None,
            {"loss": 0.5231, "grad_norm": 1.843, "learning_rate": 4.9e-05},
        ),
        (  # slime dict with a step key and a nan
            "(MegatronTrainRayActor pid=1) {'train/loss': 0.41, 'train/grad_norm': nan, 'train/step': 12}",
            12,
            {"train/loss": 0.41, "train/grad_norm": math.nan},
        ),
        (  # verl's ` - ` list
            "(TaskRunner pid=21340) step:12 - actor/grad_norm:0.412 - actor/pg_loss:0.003 - critic/score/mean:0.2",
            12,
            {"actor/grad_norm": 0.412, "actor/pg_loss": 0.003, "critic/score/mean": 0.2},
        ),
        (  # tqdm postfix
            "train:   5%|▌         | 20/400 [00:01<00:21, 17.94it/s, loss=0.3126, lr=1e-05]",
            None,
            {"loss": 0.3126, "lr": 1e-05},
        ),
        (  # key: value
            "2026-11-23 10:00:00 INFO step: 40, loss: inf, reward: 0.25",
            40,
            {"loss": math.inf, "reward": 0.25},
        ),
        (  # space-separated table (a real GPU run of this project's corpus)
            "[default0]:2026-11-23 20:11:58,779 INFO [rank0] trainer: step 1 loss 0.9842 grad_norm 1.4024 "
            "step_time 1.047 reward_mean 0.5195 lr 5.00e-02",
            1,
            {"loss": 0.9842, "grad_norm": 1.4024, "step_time": 1.047, "reward_mean": 0.5195, "lr": 0.05},
        ),
        ("wandb:   train/loss 0.12345", None, {"train/loss": 0.12345}),
        (  # NVIDIA DLLogger: a space before each colon
            "DLL 2020-06-04 01:09:11.569757 - Training Epoch: 0 Training Iteration: 2933  average_loss : nan  "
            "step_loss : 1.0703125  learning_rate : 0.003161792362931437",
            2933,
            {"average_loss": math.nan, "step_loss": 1.0703125, "learning_rate": 0.003161792362931437},
        ),
        ("76980 nan", 76980, {"value": math.nan}),  # a bare step/value table
    ],
)
def test_layouts(line: str, step: int | None, expect: dict[str, float]) -> None:
    p = parse_line(line, 7)
    assert p is not None and p.line == 7 and p.step == step
    for k, v in expect.items():
        assert k in p.values, (k, p.values)
        assert (math.isnan(v) and math.isnan(p.values[k])) or p.values[k] == pytest.approx(v)


@pytest.mark.parametrize(
    "line",
    [
        # a config dump names signals but measures nothing
        "config: {'backend': 'nccl', 'lr': 0.003, 'max_grad_norm': 1.0, 'warmup_steps': 5}",
        "  log_max_grad_norm ............................... 1000.0",
        "Namespace(lr=0.001, clip_grad=1.0)",  # settings in an argparse dump: clip_ is a setting
        "NCCL version 2.21.5+cuda12.4",
        "Epoch 3 finished",
    ],
)
def test_lines_that_report_no_training_signal(line: str) -> None:
    p = parse_line(line, 1)
    assert p is None or not any(k.startswith(("max_", "clip")) for k in p.values), p


def test_non_finite_and_spikes_are_found_once_each() -> None:
    lines = [(i + 1, f"step {i} loss {0.9 - i * 0.01:.3f} grad_norm 1.{i} lr 1e-5") for i in range(20)]
    lines.append((21, "step 20 loss 13.5 grad_norm 2.1 lr 1e-5"))  # loss x15 its median
    lines.append((22, "step 21 loss nan grad_norm nan lr 1e-5"))
    lines.append((23, "step 22 loss nan grad_norm nan lr 1e-5"))
    s = check(parse_lines(lines))
    kinds = [(i.kind, i.name, i.line) for i in s.issues]
    assert kinds == [("spike", "loss", 21), ("not_finite", "loss", 22), ("not_finite", "grad_norm", 22)]
    assert s.last_step == 22
    # the median of the 20 losses before it (0.90 down to 0.71) is 0.81; 13.5 / 0.81 = 16.7
    assert s.issues[0].baseline == pytest.approx(0.81) and "17x its median of 0.81" in s.issues[0].detail


def test_a_growing_learning_rate_or_step_count_is_no_spike() -> None:
    lines = [(i + 1, f"step {i * 1000} loss 0.5 lr {1e-7 * 10 ** min(i, 6):g}") for i in range(20)]
    assert check(parse_lines(lines)).issues == []


def test_a_rising_fp16_loss_scale_is_no_spike() -> None:
    lines = [(i + 1, f"step {i} loss 0.5 loss_scale: {2.0 ** min(i, 16):g}") for i in range(30)]
    assert check(parse_lines(lines)).issues == []


def _megatron(step: int, loss: str | None, tail: str = "| loss scale: 1.0 | grad norm: 0.75 |") -> str:
    lm = f" lm loss: {loss} |" if loss is not None else ""
    return f" iteration {step:8d}/    8000 | learning rate: 6.680E-06 | global batch size:    64 |{lm} {tail}"


def test_a_loss_megatron_leaves_out_of_its_line_is_not_finite() -> None:
    # Megatron's training_log prints a loss only when it is > 0: a NaN loss vanishes from the line
    lines = [
        (1, _megatron(3383, "7.334521E-01")),
        (2, _megatron(3384, "7.072597E-01")),
        (3, _megatron(3385, None)),
    ]
    (issue,) = check(parse_lines(lines)).issues
    assert (issue.kind, issue.name, issue.line, issue.step) == ("not_finite", "lm loss", 3, 3385)
    assert math.isnan(issue.value) and "missing from Megatron's iteration line" in issue.detail


@pytest.mark.parametrize(
    "last",
    [
        _megatron(3385, None, tail=""),  # cut before the keys that follow the losses: nothing to say
        _megatron(3385, "7.1E-01"),  # the loss is there
    ],
)
def test_a_megatron_line_cut_short_or_complete_is_no_missing_loss(last: str) -> None:
    lines = [(1, _megatron(3383, "7.334521E-01")), (2, _megatron(3384, "7.072597E-01")), (3, last)]
    assert check(parse_lines(lines)).issues == []


def test_one_earlier_line_is_not_enough_to_call_a_loss_missing() -> None:
    lines = [(1, _megatron(3384, "7.072597E-01")), (2, _megatron(3385, None))]
    assert check(parse_lines(lines)).issues == []


def test_real_gpu_nan_run_is_parsed_from_its_log() -> None:
    from pathlib import Path

    text = Path(GPU, "nan-loss", "console.log").read_text(errors="replace").splitlines()
    s = check(parse_lines(enumerate(text, 1)))
    assert s.points and s.last_step is not None
    names = {i.name for i in s.issues if i.kind == "not_finite"}
    assert "loss" in names


def _analyse(compiled, path, **opts):  # type: ignore[no-untyped-def]
    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.triage import TriageOptions, triage

    sources, _ = collect_sources([str(path)])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(**opts))


def test_a_nan_in_a_space_separated_table_is_a_numerics_finding(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    lines = [f"[rank0]: step {i} policy_loss {0.5 - i / 100:.3f} kl 0.0{i % 9} reward 0.3" for i in range(30)]
    lines += [
        "[rank0]: step 30 policy_loss nan kl nan reward 0.3",
        "[rank0]: step 31 policy_loss nan kl nan reward 0.3",
    ]
    log.write_text("\n".join(lines) + "\n")
    a = _analyse(compiled, log)
    assert a.root_cause is not None and a.root_cause.rule_id == "metric-not-finite"
    assert a.root_cause.captures == {
        "metric": "policy_loss",
        "value": "nan",
        "step": "30",
        "baseline": "0.21",
    }
    assert a.root_cause.evidence[0].line == 31 and a.root_cause.ranks == [0]
    assert "`policy_loss` was `nan` first at step 30" in a.root_cause.remediation


def test_the_metric_trigger_adds_nothing_when_a_text_rule_saw_it(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {i} loss: {0.5:.2f}\n" for i in range(10)) + "step 10 loss: nan\n")
    a = _analyse(compiled, log)
    assert [f.failure_class for f in a.findings].count("numerics.nan_or_inf") == 1
    assert a.root_cause is not None and a.root_cause.rule_id == "nan-or-inf-in-loss-or-grad"


def test_metric_lines_agree_between_serial_parallel_and_gzip(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import gzip

    from app.engine.pipeline.scan import CHUNK

    log = tmp_path / "big.log"
    filler = "".join(
        f"step {i} loss {1.0 / (i + 1):.5f} grad_norm 0.{i % 97:02d}\n" for i in range(40 * CHUNK // 40)
    )
    tail = "step 999999 loss inf grad_norm inf\n"
    log.write_text(filler + tail)
    want = filler.count("\n") + 1
    serial = _analyse(compiled, log, jobs=1)
    parallel = _analyse(compiled, log, jobs=2)
    gz = tmp_path / "big.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    stream = _analyse(compiled, gz, jobs=1)
    for a in (serial, parallel, stream):
        f = next(f for f in a.findings if f.rule_id == "metric-not-finite")
        assert f.evidence[0].line == want and f.captures["step"] == "999999"


def test_an_impossible_value_points_upstream_not_at_its_face_value(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # real wording (a 2-GPU run where a mismatched gather returned garbage sizes)
    log = tmp_path / "r0.log"
    log.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/tmp/train.py", line 32, in save\n'
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n"
    )
    a = _analyse(compiled, log)
    assert a.root_cause is None  # not an ordinary OOM: no memory advice
    (p,) = a.possible_causes
    assert p.failure_class == "cuda.out_of_memory" and p.confidence < 0.35
    assert "corrupted value upstream" in p.confirm and "every rank" in p.confirm
    assert any("more than 1 EB" in w for w in a.warnings)
    ordinary = tmp_path / "r1.log"
    ordinary.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB\n"
    )
    b = _analyse(compiled, ordinary)
    assert b.root_cause is not None and b.root_cause.failure_class == "cuda.out_of_memory"


def _ds(step: int, skipped: int) -> str:
    return (
        "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] "
        f"step={step}, skipped={skipped}, lr=[0.001, 0.001], mom=[0.0, 0.0]"
    )


@pytest.mark.parametrize(
    ("step", "skipped", "fires"),
    [
        (2000, 1995, True),  # nearly every step overflowed
        (1000, 500, True),
        (2000, 12, False),  # the loss-scale search at the start of a healthy run
        (60, 55, False),  # too early to tell: fp16 skips many of its first steps
        (100, 180, False),  # more skipped than taken: some other counter
    ],
)
def test_a_run_that_skips_most_optimizer_steps(step: int, skipped: int, fires: bool) -> None:
    s = check(parse_lines([(1, _ds(50, 10)), (2, _ds(step, skipped))]))
    got = [(i.kind, i.line, i.value, i.step) for i in s.issues if i.kind == "skipped"]
    assert got == ([("skipped", 2, float(skipped), step)] if fires else [])


def test_skipped_steps_lead_as_non_finite_gradients(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    lines = [
        f"{{'loss': {v}, 'learning_rate': 0.001, 'epoch': 0.0{i}}}" for i, v in enumerate([6.26, 0.0, 0.0])
    ]
    log.write_text("\n".join([*lines, _ds(1000, 40), _ds(2000, 1995), "{'loss': 0.0, 'epoch': 0.08}"]) + "\n")
    a = _analyse(compiled, log)
    assert a.root_cause is not None and a.root_cause.rule_id == "fp16-steps-skipped"
    assert a.root_cause.failure_class == "numerics.nan_or_inf"
    assert a.root_cause.captures == {"metric": "skipped", "value": "1995", "step": "2000", "baseline": "2000"}
    assert "1995 of the first 2000 optimizer steps were skipped" in a.root_cause.remediation


def test_a_grad_norm_blowing_up_after_a_few_points_is_a_spike() -> None:
    # a sparse excerpt: four logged points of a healthy norm, then twenty times it
    norms = [0.24, 0.27, 1.36, 1.28, 17.2, 7.1, 21.8]
    lines = [(i + 1, f"{{'loss': 0.5, 'grad_norm': {g}, 'epoch': 0.1{i}}}") for i, g in enumerate(norms)]
    s = check(parse_lines(lines))
    assert [(i.kind, i.name, i.line) for i in s.issues] == [("spike", "grad_norm", 5)]


def _megatron_line(it: int, scale: float, loss: str = "") -> str:
    return (
        f" iteration {it:8d}/ 2753818 | consumed samples: {8 * it:12d} | learning rate: 1.000E-07 |"
        f"{loss} loss scale: {scale:.1f} | number of skipped iterations:   1 | number of nan iterations:   0 |"
    )


def test_megatron_lines_that_skip_every_update_at_one_loss_scale_are_reported() -> None:
    def issues(lines: list[str]) -> list[tuple[str, str, float | None]]:
        points = [p for i, ln in enumerate(lines) if (p := parse_line(ln, i + 1)) is not None]
        return [(i.kind, i.name, i.baseline) for i in check(points).issues if i.kind == "skipped"]

    # a fixed loss scale: nothing applied, the scale never moves
    assert issues([_megatron_line(i, 16384.0) for i in range(1, 5)]) == [
        ("skipped", "number of skipped iterations", 16384.0)
    ]
    # a dynamic scale backing off at the start of fp16 training: normal
    assert issues([_megatron_line(i, 2.0 ** (32 - i)) for i in range(1, 8)]) == []
    # updates applied (a loss is printed): not stuck
    assert issues([_megatron_line(i, 16384.0, " lm loss: 2.1E+00 |") for i in range(1, 5)]) == []
