"""Root cause versus symptoms, on a small library written for the purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.ingest import collect_sources
from app.engine.library import load_library
from app.engine.scan import CompiledLibrary
from app.engine.triage import TriageOptions, triage
from tests.conftest import RULES, make_rules_dir


def _rule(
    rid: str, cls: str, severity: str, pattern: str, confidence: float = 0.8, explains: str = "[]"
) -> str:
    return f"""
id: {rid}
version: 1
status: stable
failure_class: {cls}
severity: {severity}
title: Test rule {rid}
confidence: {confidence}
explains: {explains}
match:
  any: ['{pattern}']
explanation: A rule written for the ranking tests.
remediation: Do the thing for {rid}.
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> CompiledLibrary:
    tmp = tmp_path_factory.mktemp("rank")
    rules = {
        "hardware/ecc.yaml": _rule(
            "ecc", "hardware.gpu_ecc_error", "critical", "uncorrectable ECC error encountered", 0.95
        ),
        "nccl/timeout.yaml": _rule(
            "timeout", "nccl.collective_timeout", "error", "Watchdog caught collective operation timeout", 0.6
        ),
        "ray/died.yaml": _rule("died", "ray.actor_died", "error", "The actor died unexpectedly", 0.6),
        "cuda/oom.yaml": _rule("oom", "cuda.out_of_memory", "error", "CUDA out of memory", 0.9),
        "config/lrdecay.yaml": _rule(
            "lrdecay", "config.lr_decay_steps_zero", "error", "assert self.lr_decay_steps > 0", 0.9
        ),
        "numerics/moe.yaml": _rule(
            "moe", "numerics.moe_router_instability", "warning", "moe_permute_fusion True", 0.5
        ),
        "misc/info.yaml": _rule("info", "unknown", "info", "NCCL version 2", 0.5),
        "job/job-exit-status-masked.yaml": (RULES / "job/job-exit-status-masked.yaml").read_text(),
        "python/python-unhandled-exception.yaml": (
            RULES / "python/python-unhandled-exception.yaml"
        ).read_text(),
    }
    return CompiledLibrary(load_library(make_rules_dir(tmp, rules)), engine="hyperscan")


def _triage(compiled: CompiledLibrary, tmp_path: Path, files: dict[str, str], **opts: object):  # type: ignore[no-untyped-def]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    sources, _ = collect_sources([str(tmp_path / n) for n in files])
    return triage(sources=sources, compiled=compiled, options=TriageOptions(**opts))  # type: ignore[arg-type]


def test_ecc_on_one_rank_outranks_nccl_timeouts_everywhere(compiled: CompiledLibrary, tmp_path: Path) -> None:
    files = {
        f"rank{r}.log": f"[rank{r}]: step 10\n[rank{r}]: [Rank {r}] Watchdog caught collective operation timeout\n"
        for r in range(8)
        if r != 3
    }
    files["rank3.log"] = (
        "[rank3]: step 10\n[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    )
    a = _triage(compiled, tmp_path, files)
    assert a.root_cause is not None and a.root_cause.rule_id == "ecc"
    assert a.root_cause.ranks == [3]
    timeout = next(f for f in a.findings if f.rule_id == "timeout")
    assert timeout.role == "symptom" and timeout.explained_by == "ecc"
    assert timeout.count == 7 and timeout.ranks == [0, 1, 2, 4, 5, 6, 7]
    assert [f.role for f in a.findings] == ["root_cause", "symptom"]
    assert a.root_cause.confidence > 0.95  # the expected cascade corroborates it


def test_hardware_wins_even_when_it_comes_later(compiled: CompiledLibrary, tmp_path: Path) -> None:
    a = _triage(
        compiled, tmp_path, {"j.log": "CUDA out of memory\n" * 3 + "uncorrectable ECC error encountered\n"}
    )
    assert a.root_cause is not None and a.root_cause.rule_id == "ecc"


def test_earliest_of_two_unrelated_errors_wins_and_confidence_drops(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(compiled, tmp_path, {"j.log": "assert self.lr_decay_steps > 0\nlater: CUDA out of memory\n"})
    assert a.root_cause is not None and a.root_cause.rule_id == "lrdecay"
    assert a.root_cause.confidence < 0.9
    assert [f.role for f in a.findings] == ["root_cause", "related"]


def test_error_outranks_warning_and_info_never_is_root(compiled: CompiledLibrary, tmp_path: Path) -> None:
    a = _triage(compiled, tmp_path, {"j.log": "moe_permute_fusion True\nThe actor died unexpectedly\n"})
    assert a.root_cause is not None and a.root_cause.rule_id == "died"
    b = _triage(compiled, tmp_path, {"k.log": "NCCL version 2.21.5+cuda12.4\n"})
    assert b.root_cause is None and b.findings[0].role == "related"
    assert any("dmesg" in s for s in b.next_steps)


def test_unexplained_symptom_is_root_but_asks_for_all_ranks(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(compiled, tmp_path, {"j.log": "[Rank 0] Watchdog caught collective operation timeout\n"})
    assert a.root_cause is not None and a.root_cause.failure_class == "nccl.collective_timeout"
    assert any("all ranks" in s for s in a.next_steps)


def test_nothing_matched_means_no_guess(compiled: CompiledLibrary, tmp_path: Path) -> None:
    a = _triage(compiled, tmp_path, {"j.log": "Traceback (most recent call last):\nKeyError: 'prompt'\n"})
    assert a.root_cause is None
    assert [(f.failure_class, f.severity, f.role) for f in a.findings] == [
        ("python.unhandled_exception", "info", "related")
    ]
    assert len(a.next_steps) >= 3


def test_exit_code_zero_with_fatal_error_adds_masked_status(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(compiled, tmp_path, {"j.log": "CUDA out of memory\n"}, exit_code=0)
    masked = [f for f in a.findings if f.failure_class == "job.exit_status_masked"]
    assert len(masked) == 1 and "PIPESTATUS" in masked[0].remediation
    b = _triage(compiled, tmp_path, {"k.log": "CUDA out of memory\n"}, exit_code=1)
    assert not [f for f in b.findings if f.failure_class == "job.exit_status_masked"]


TRACEBACK = (
    'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nValueError: bad shape\n'
)


def test_unknown_traceback_at_the_end_with_exit_zero_is_a_masked_status(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(
        compiled,
        tmp_path,
        {"j.log": "step 1\n" + TRACEBACK + "[job] training finished successfully\n"},
        exit_code=0,
    )
    assert a.root_cause is not None and a.root_cause.failure_class == "job.exit_status_masked"
    assert a.root_cause.evidence[0].text == "ValueError: bad shape"
    exc = next(f for f in a.findings if f.failure_class == "python.unhandled_exception")
    assert exc.role == "related" and exc.captures["exception"] == "ValueError"


def test_traceback_alone_is_never_a_root_cause(compiled: CompiledLibrary, tmp_path: Path) -> None:
    a = _triage(compiled, tmp_path, {"j.log": TRACEBACK})
    assert a.root_cause is None and a.findings[0].failure_class == "python.unhandled_exception"
    b = _triage(compiled, tmp_path, {"k.log": TRACEBACK}, exit_code=1)
    assert b.root_cause is None


def test_handled_traceback_long_before_a_clean_end_is_not_masking(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(compiled, tmp_path, {"j.log": TRACEBACK + "step ok\n" * 500}, exit_code=0)
    assert a.root_cause is None
    assert not [f for f in a.findings if f.failure_class == "job.exit_status_masked"]
