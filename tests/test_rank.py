"""Root cause versus symptoms, on a small library written for the purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
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


FRAMEWORK_ASSERT = """Traceback (most recent call last):
  File "/workspace/megatron/megatron/training/training.py", line 1555, in training_log
    assert decoupled_learning_rate is not None
AssertionError
"""


def test_a_framework_assertion_alone_leads_at_low_confidence(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(compiled, tmp_path, {"j.log": FRAMEWORK_ASSERT})
    assert a.root_cause is not None and a.root_cause.failure_class == "python.unhandled_exception"
    assert 0.35 <= a.root_cause.confidence < 0.5
    # the same assertion in the user's own script is an ordinary bug: nothing is named
    b = _triage(
        compiled, tmp_path, {"k.log": FRAMEWORK_ASSERT.replace("/workspace/megatron/megatron", "/home/me")}
    )
    assert b.root_cause is None


def test_a_framework_assertion_never_outranks_a_known_error(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(
        compiled,
        tmp_path,
        {"j.log": "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n" + FRAMEWORK_ASSERT},
    )
    assert a.root_cause is not None and a.root_cause.failure_class == "cuda.out_of_memory"


def test_handled_traceback_long_before_a_clean_end_is_not_masking(
    compiled: CompiledLibrary, tmp_path: Path
) -> None:
    a = _triage(compiled, tmp_path, {"j.log": TRACEBACK + "step ok\n" * 500}, exit_code=0)
    assert a.root_cause is None
    assert not [f for f in a.findings if f.failure_class == "job.exit_status_masked"]


def _lib(tmp_path: Path, rules: dict[str, str]) -> CompiledLibrary:
    return CompiledLibrary(load_library(make_rules_dir(tmp_path, rules)), engine="regex")


ABORT = _rule("abort", "nccl.error", "error", "NCCL communicator was aborted", 0.8) + (
    "consequence_of: [nccl.collective_timeout]\n"
)
TIMEOUT = _rule(
    "timeout", "nccl.collective_timeout", "error", "Watchdog caught collective operation timeout", 0.7
)


def test_an_abort_after_the_timeout_is_its_consequence(tmp_path: Path) -> None:
    # class relations say nccl.error explains nccl.collective_timeout; the rule and the order say
    # the abort came from the timeout
    lib = _lib(tmp_path, {"nccl/abort.yaml": ABORT, "nccl/timeout.yaml": TIMEOUT})
    log = "step 3\n[Rank 1] Watchdog caught collective operation timeout\nNCCL communicator was aborted on rank 1\n"
    a = _triage(lib, tmp_path, {"j.log": log})
    assert a.root_cause is not None and a.root_cause.rule_id == "timeout"
    abort = next(f for f in a.findings if f.rule_id == "abort")
    assert abort.role == "symptom" and abort.explained_by == "timeout"
    # the abort first (a real NCCL error that left the others waiting): the relation holds again
    b = _triage(
        lib,
        tmp_path,
        {"k.log": "NCCL communicator was aborted\nWatchdog caught collective operation timeout\n"},
    )
    assert b.root_cause is not None and b.root_cause.rule_id == "abort"


def test_mutual_relations_are_decided_by_the_order_of_the_log(tmp_path: Path) -> None:
    a_rule = _rule("a", "ray.actor_died", "error", "The actor died unexpectedly", 0.8, "[nccl.error]")
    b_rule = _rule("b", "nccl.error", "error", "NCCL error: remote process exited", 0.8, "[ray.actor_died]")
    lib = _lib(tmp_path, {"ray/a.yaml": a_rule, "nccl/b.yaml": b_rule})
    first_b = _triage(
        lib, tmp_path, {"j.log": "NCCL error: remote process exited\nThe actor died unexpectedly\n"}
    )
    assert first_b.root_cause is not None and first_b.root_cause.rule_id == "b"
    first_a = _triage(
        lib, tmp_path, {"k.log": "The actor died unexpectedly\nNCCL error: remote process exited\n"}
    )
    assert first_a.root_cause is not None and first_a.root_cause.rule_id == "a"


def test_a_lone_info_finding_leads_at_low_confidence(tmp_path: Path) -> None:
    info = _rule("ckpt-random", "config.checkpoint_not_loaded", "info", "starting from random weights", 0.8)
    lib = _lib(
        tmp_path,
        {
            "config/ckpt-random.yaml": info,
            "cuda/oom.yaml": _rule("oom", "cuda.out_of_memory", "error", "CUDA out of memory", 0.9),
        },
    )
    a = _triage(lib, tmp_path, {"j.log": "WARNING: starting from random weights\n"})
    assert a.root_cause is not None and a.root_cause.rule_id == "ckpt-random"
    assert a.root_cause.confidence == round(0.8 * 0.6, 2)
    b = _triage(lib, tmp_path, {"k.log": "WARNING: starting from random weights\nCUDA out of memory\n"})
    assert b.root_cause is not None and b.root_cause.rule_id == "oom"  # not alone: info never leads


def test_below_the_threshold_the_candidates_are_possible_causes(tmp_path: Path) -> None:
    weak = _rule("weak-kill", "host.oom_killed", "error", "exitcode *: -9", 0.3) + (
        "confirm: \"`dmesg -T | grep -i 'killed process'` on the node names the process\"\n"
    )
    lib = _lib(tmp_path, {"host/weak-kill.yaml": weak})
    a = _triage(lib, tmp_path, {"j.log": "step 9\n  exitcode  : -9 (pid: 42)\n"})
    assert a.root_cause is None
    assert [(p.failure_class, p.rule_id, p.confidence) for p in a.possible_causes] == [
        ("host.oom_killed", "weak-kill", 0.3)
    ]
    p = a.possible_causes[0]
    assert "killed process" in p.confirm and p.evidence[0].line == 2
    assert any("dmesg" in s for s in a.next_steps)


def test_next_steps_follow_from_what_the_log_shows(compiled: CompiledLibrary, tmp_path: Path) -> None:
    a = _triage(compiled, tmp_path, {"j.log": TRACEBACK})
    assert a.root_cause is None
    joined = " ".join(a.next_steps)
    assert "`ValueError`" in joined and "Read its traceback" in joined and "bad shape" in joined
    assert "dmesg" not in joined  # a plain exception gets no hardware checklist
    b = _triage(compiled, tmp_path, {"k.log": "nothing to see here\n"})
    assert any("dmesg" in s for s in b.next_steps)  # nothing at all: the generic evidence list


def test_remediation_placeholders_come_from_facts_or_their_line_is_left_out(tmp_path: Path) -> None:
    # an optional capture the log may not hold
    pattern = r"No available memory for the cache blocks(?: \((?P<needed_gib>\d+) GiB\))?"
    rule = _rule("kv", "vllm.kv_cache_insufficient", "error", pattern, 0.9)
    rule = rule.replace(
        "remediation: Do the thing for kv.",
        "remediation: |\n  Raise it.\n  - now {gpu_memory_utilization}, try more\n  - the model needs {needed_gib} GiB\n",
    )
    lib = _lib(tmp_path, {"vllm/kv.yaml": rule})
    log = "gpu_memory_utilization=0.85\nValueError: No available memory for the cache blocks.\n"
    a = _triage(lib, tmp_path, {"j.log": log})
    assert a.root_cause is not None
    assert a.root_cause.remediation == "Raise it.\n- now 0.85, try more"  # from the fact; no hole


def test_a_capture_holding_markdown_is_shown_as_written_never_as_a_link(tmp_path: Path) -> None:
    from app.render.html import markdown_block
    from app.render.text import render_text

    rule = _rule("host", "hardware.gpu_xid_error", "error", r"GPU fault on host (?P<who>\S+)", 0.9).replace(
        "remediation: Do the thing for host.",
        "remediation: |\n  - Drain {who} and **reset** it; see [the runbook](https://runbook.example/xid).",
    )
    assert "Do the thing" not in rule
    lib = _lib(tmp_path, {"hw/host.yaml": rule})
    a = _triage(lib, tmp_path, {"j.log": "GPU fault on host [click](https://evil.example/x)**boom**\n"})
    assert a.root_cause is not None
    html = str(markdown_block(a.root_cause.remediation))
    assert 'href="https://evil.example' not in html and "<strong>boom" not in html
    assert "[click](https://evil.example/x)**boom**" in html  # the value, as the log wrote it
    assert (
        '<a href="https://runbook.example/xid" rel="noopener">the runbook</a>' in html
    )  # the rule's own link
    assert "<strong>reset</strong>" in html
    assert "[click](https://evil.example/x)**boom**" in render_text(a, width=200)
