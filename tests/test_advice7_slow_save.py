"""advice7's SkyRL#266: an HF export that took 601.62 s, just past torch's 10-minute NCCL default,
and the job failed right after it. Named from the timer line, with the storage and the timeout as
the fix and no retry-as-is verdict."""

from __future__ import annotations

from tests.advicekit import root, set_reader
from tests.conftest import Analyze

_set = set_reader("advice7")

_LINE = (
    "(skyrl_entrypoint pid=77) 2025-09-08 22:36:45.019 | INFO     | skyrl_train.trainer:train:359 - "
    "Finished: '{phase}', time cost: {secs}s\n"
)
_FAIL = 'Traceback (most recent call last):\n  File "main_base.py", line 288, in main\nRuntimeError: boom\n'


def test_the_save_past_ten_minutes_is_the_root_with_its_numbers(analyze: Analyze) -> None:
    a = _set(analyze, "p-skyrl-266-hf-save-601s-timeout.log")
    f = root(a, "checkpoint-save-past-timeout")
    assert f.captures["save_seconds"] == "601.62" and f.captures["save_phase"] == "save_hf_model"
    text = f.remediation
    assert "`save_hf_model` took 601.62 s: just past 600 s (10 minutes)" in text
    # the 30-minute default is not this save's reading (a 30-minute timeout may still be advised)
    assert "just past 1800 s (30 minutes)" not in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"


def test_thirty_minutes_reads_as_the_older_default(analyze: Analyze) -> None:
    a = analyze((_LINE.format(phase="save_checkpoints", secs="1804.10") + _FAIL).encode())
    text = root(a, "checkpoint-save-past-timeout").remediation
    assert "just past 1800 s (30 minutes)" in text and "10 minutes" not in text


def test_a_save_of_another_length_or_one_the_job_survived_is_not_this(analyze: Analyze) -> None:
    for body in (
        _LINE.format(phase="save_hf_model", secs="412.50") + _FAIL,
        _LINE.format(phase="save_hf_model", secs="601.62") + "step 74 loss 0.21\n" * 3,
    ):
        a = analyze(body.encode())
        assert all(f.rule_id != "checkpoint-save-past-timeout" for f in a.findings)
