"""The action every analysis carries (issue 24): decisions from rules/verdicts.yaml, hosts from
the log, outcomes that decide where the class cannot."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.engine.models import Action
from app.engine.pipeline.library import DECISIONS, Library, RuleError, load_library
from app.engine.pipeline.verdict import MIN_OUTCOMES, real_host, with_history
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
ECC = (ROOT / "examples" / "ecc-cascade" / "rank2.log").read_text()
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.06 GiB is free. Of the allocated memory 74.21 GiB is allocated "
    "by PyTorch, and 2.61 GiB is reserved by PyTorch but unallocated.\n"
)


def test_every_class_has_a_decision_and_every_override_names_a_rule(library: Library) -> None:
    assert set(library.verdicts) == set(library.classes)
    assert {v.decision for v in library.verdicts.values()} <= set(DECISIONS)
    assert set(library.rule_verdicts) <= {lr.rule.id for lr in library.rules}
    # the hardware kind is retried elsewhere, except where a rule knows its fault is the job's
    for cid, fc in library.classes.items():
        if fc.kind == "hardware":
            assert library.verdicts[cid].decision == "retry_excluding", cid
        if fc.kind == "config":
            assert library.verdicts[cid].decision not in ("retry", "retry_excluding"), cid


def _copy_rules(tmp_path: Path) -> Path:
    dst = tmp_path / "rules"
    shutil.copytree(RULES, dst)
    return dst


def test_a_class_without_a_verdict_is_refused(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    text = (rules / "verdicts.yaml").read_text()
    start = text.index("  host.disk_full:")
    end = text.index("  host.shm_exhausted:")
    (rules / "verdicts.yaml").write_text(text[:start] + text[end:])
    with pytest.raises(RuleError, match=r"without a verdict: \['host.disk_full'\]"):
        load_library(rules)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("decision: stop", "decision: reboot", "needs `decision`"),
        ("  nccl-duplicate-gpu:", "  no-such-rule:", "no such rule"),
        ("    ambiguous: true\n", "    ambiguous: true\n    retries: 3\n", "unknown retries"),
    ],
)
def test_a_malformed_verdict_is_refused(tmp_path: Path, old: str, new: str, message: str) -> None:
    rules = _copy_rules(tmp_path)
    text = (rules / "verdicts.yaml").read_text()
    assert old in text
    (rules / "verdicts.yaml").write_text(text.replace(old, new, 1))
    with pytest.raises(RuleError, match=message):
        load_library(rules)


def test_a_gpu_fault_is_retried_without_the_host_the_log_names(analyze: Analyze) -> None:
    a = analyze(ECC)
    assert a.root_cause is not None and a.root_cause.failure_class == "hardware.gpu_ecc_error"
    assert a.action is not None
    assert a.action.decision == "retry_excluding"
    assert a.action.exclude_hosts == ["10.12.0.33"]
    assert any("10.12.0.33" in w for w in a.action.why)
    assert a.action.basis == "class" and a.action.history is None


def test_a_gpu_fault_without_a_host_says_whose_node_to_leave_out(analyze: Analyze) -> None:
    a = analyze("RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    assert a.action is not None and a.action.decision == "retry_excluding"
    assert a.action.exclude_hosts == []
    assert any("names no host" in w for w in a.action.why)


def test_an_application_xid_is_fixed_not_retried_elsewhere(analyze: Analyze) -> None:
    a = analyze((RULES / "hardware" / "gpu-xid-application-fault.match.log").read_text())
    assert a.root_cause is not None and a.root_cause.rule_id == "gpu-xid-application-fault"
    assert a.action is not None
    assert (a.action.decision, a.action.basis) == ("fix_and_rerun", "rule")


def test_an_oom_is_never_retried(analyze: Analyze) -> None:
    a = analyze("step 10 loss 1.2\n" + OOM)
    assert a.root_cause is not None and a.root_cause.failure_class == "cuda.out_of_memory"
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    assert a.action.exclude_hosts == []


def test_nothing_matched_is_investigate(analyze: Analyze) -> None:
    a = analyze("hello\nworld\n")
    assert a.root_cause is None
    assert a.action is not None and a.action.decision == "investigate"


def test_a_timeout_alone_is_retried_once_and_says_so(analyze: Analyze) -> None:
    log = (
        "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1042, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.\n"
    )
    a = analyze(log)
    assert a.root_cause is not None and a.root_cause.failure_class == "nccl.collective_timeout"
    assert a.action is not None
    assert (a.action.decision, a.action.ambiguous) == ("retry", True)
    # one log cannot tell: the words hedge ("retry once"), they never call the fault transient
    from app.render.action import headline

    assert headline(a.action).startswith("Retry once as it is") and "transient" not in headline(a.action)


@pytest.mark.parametrize(
    ("host", "real"),
    [
        ("10.0.0.3", True),
        ("node-17", True),
        ("127.0.0.1", False),
        ("localhost", False),
        ("::1", False),
        ("", False),
    ],
)
def test_real_host(host: str, real: bool) -> None:
    assert real_host(host) is real


def _timeout_action() -> Action:
    return Action(decision="retry", why=["x"], ambiguous=True)


def test_history_turns_an_ambiguous_retry_into_a_fix_when_reruns_fail() -> None:
    out = with_history(_timeout_action(), {"fingerprint": (4, 1, 0, 0)})
    assert (out.decision, out.basis) == ("fix_and_rerun", "history")
    assert out.history is not None and (out.history.scope, out.history.retries, out.history.succeeded) == (
        "fingerprint",
        4,
        1,
    )
    assert "4 reruns without a change: 1 succeeded" in out.why[-1]


def test_history_confirms_a_retry_when_reruns_pass() -> None:
    out = with_history(_timeout_action(), {"rule": (5, 4, 0, 0)})
    assert (out.decision, out.basis) == ("retry", "history")
    assert out.history is not None and out.history.scope == "rule"


def test_history_uses_the_narrowest_scope_with_enough_outcomes() -> None:
    few = MIN_OUTCOMES - 1
    out = with_history(
        _timeout_action(), {"fingerprint": (few, 0, 0, 0), "rule": (3, 0, 0, 0), "class": (50, 45, 0, 0)}
    )
    assert out.history is not None and out.history.scope == "rule"
    assert out.decision == "fix_and_rerun"


def test_too_few_outcomes_change_nothing() -> None:
    action = _timeout_action()
    assert with_history(action, {"class": (MIN_OUTCOMES - 1, 0, 0, 0)}) == action


def test_history_never_turns_a_fix_into_a_retry() -> None:
    # an OOM whose reruns passed (someone fixed the job without saying so) stays a fix: only the
    # ambiguous classes are decided by outcomes
    action = Action(decision="fix_and_rerun", why=["sizes"])
    out = with_history(action, {"class": (10, 10, 0, 0)})
    assert out.decision == "fix_and_rerun" and out.basis == "class"
    assert out.history is not None and out.history.succeeded == 10


@pytest.mark.slow  # a sweep of the whole labelled corpus
def test_the_corpus_never_advises_a_retry_on_a_failure_that_repeats(compiled) -> None:  # type: ignore[no-untyped-def]
    from app.engine.ruledev.evaluation import evaluate_corpus

    v = evaluate_corpus(compiled, ROOT / "tests" / "corpus").verdicts()
    assert v["repeating"] >= 200
    assert v["retry_advised_on_repeating_cases"] == []
    assert v["hardware"] >= 20
    assert v["hardware_misses"] == []


def test_a_dead_actor_whose_process_crashed_is_investigated_not_retried(analyze: Analyze) -> None:
    log = (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "        class_name: create_colocated_worker_cls.<locals>.WorkerDict\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
        "detail: Worker unexpectedly exits with a connection error code 2. End of file.\n"
    )
    a = analyze(log)
    assert a.root_cause is not None and a.root_cause.failure_class == "ray.actor_died"
    assert a.action is not None and (a.action.decision, a.action.basis) == ("investigate", "facts")
    assert "worker exit type SYSTEM_ERROR" in a.action.why[0]
    user = analyze(log.replace("SYSTEM_ERROR", "USER_ERROR"))
    assert user.action is not None and (user.action.decision, user.action.basis) == ("fix_and_rerun", "facts")


def test_nccl_on_a_virtual_interface_is_fixed_not_retried(analyze: Analyze) -> None:
    log = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
        "Last error:\n"
        "socketStartConnect: Connect to fe80::a849:bbff:fe73:19bd%veth8299cd8<54785> failed : Software caused connection abort\n"
    )
    a = analyze(log)
    assert a.root_cause is not None and a.root_cause.failure_class == "nccl.error"
    assert a.action is not None and (a.action.decision, a.action.basis) == ("fix_and_rerun", "facts")
    assert "veth8299cd8" in a.action.why[0] and "NCCL_SOCKET_IFNAME" in a.action.why[0]
    # a connect that failed to an ordinary address: nccl-socket-connect-failed leads (advice7's
    # SGLang#5594, judged "not retry once" by its reviewers): the route or firewall to that peer,
    # fixed before a rerun, and no virtual-interface wording
    plain = analyze(log.replace("fe80::a849:bbff:fe73:19bd%veth8299cd8", "10.0.0.7"))
    assert plain.root_cause is not None and plain.root_cause.rule_id == "nccl-socket-connect-failed"
    assert plain.action is not None and plain.action.decision == "fix_and_rerun"
    assert "veth" not in plain.action.why[0]


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ("  - classes: [no.such_class]\n    when: 'has(\"nccl_virtual_interface\")'\n", "no such class"),
        ("  - classes: [nccl.error]\n    when: 'made_up_fact == 1'\n", "names no fact"),
        ("  - classes: [nccl.error]\n    when: 'has(\"made_up_fact\")'\n", "names no fact"),
        ("  - classes: [nccl.error]\n", "needs `classes` and `when`"),
    ],
)
def test_a_malformed_condition_is_refused(tmp_path: Path, condition: str, message: str) -> None:
    rules = _copy_rules(tmp_path)
    text = (rules / "verdicts.yaml").read_text()
    body = "    decision: retry\n    why: x\n"
    (rules / "verdicts.yaml").write_text(text.replace("conditions:\n", "conditions:\n" + condition + body, 1))
    with pytest.raises(RuleError, match=message):
        load_library(rules)
