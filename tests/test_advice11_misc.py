"""Advice of the eleventh blind set (tests/corpus/advice11): each wrong item or missing decisive
step fixed, read from the set's log, with a rule fixture or a short log keeping the old advice
where it was right."""

from __future__ import annotations

from tests.advicekit import facts, root, rule_fixture, set_reader
from tests.conftest import Analyze

_set = set_reader("advice11")


# Megatron-LM#366: the undefined symbol is in Megatron's own JIT build folder, not a pip wheel


def test_a_jit_built_extension_is_rebuilt_by_deleting_its_folder(analyze: Analyze) -> None:
    a = _set(analyze, "y-megatron-366-fused-kernels-undefined-symbol.log")
    f = root(a, "python-extension-undefined-symbol")
    got = facts(a)
    assert got["jit_extension_dir"] == "megatron/fused_kernels/build"
    assert got["torch_version"] == "1.11.0+cu113"  # a `pip list` row
    text = f.remediation
    assert "rm -rf .../megatron/fused_kernels/build" in text and "torch installed now" in text
    assert "The installed torch is 1.11.0+cu113" in text
    # no wheel to reinstall and no package to `pip show`
    assert "cxx11abiTRUE" not in text and "pip show" not in text


def test_a_pip_installed_extension_keeps_the_reinstall_step(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "python", "python-extension-undefined-symbol.match.log")
    f = root(a, "python-extension-undefined-symbol")
    assert "jit_extension_dir" not in facts(a)
    assert "Reinstall the extension for exactly this torch" in f.remediation
    assert "pip show <package>" in f.remediation and "rm -rf" not in f.remediation


def test_deepspeeds_torch_extensions_cache_counts_as_a_jit_build(analyze: Analyze) -> None:
    log = (
        "ImportError: /root/.cache/torch_extensions/py310_cu118/fused_adam/fused_adam.so: "
        "undefined symbol: _ZN3c104cuda9SetDeviceEi\n"
    )
    a = analyze(log.encode())
    assert facts(a)["jit_extension_dir"] == "torch_extensions/py310_cu118/fused_adam"
    assert (
        "rm -rf .../torch_extensions/py310_cu118/fused_adam"
        in root(a, "python-extension-undefined-symbol").remediation
    )


# huggingface/blog#1270: rich wrapped the assertion; 64 != 4 * 8 * 1 on a job sized for 2 GPUs


def test_a_wrapped_batch_assertion_reads_its_numbers_and_names_the_launch(analyze: Analyze) -> None:
    a = _set(analyze, "y-hfblog-1270-deepspeed-batch-assert-world-size.log")
    f = root(a, "deepspeed-batch-size-mismatch")
    got = facts(a)
    assert (got["ds_assert_train_batch"], got["ds_assert_micro_batch"]) == (64, 4)
    assert (got["ds_assert_grad_acc"], got["ds_assert_world_size"], got["ds_implied_world_size"]) == (8, 1, 2)
    text = f.remediation
    assert "The micro batch 4 x accumulation 8 x world size 1 does not make the train batch 64." in text
    assert "`deepspeed --num_gpus 2 train.py ...`" in text
    # fitting the accumulation to one process is what the log rules out
    assert "change\n`gradient_accumulation_steps`" not in text and "so the product with the world" not in text


def test_a_batch_that_fits_no_larger_world_keeps_the_batch_step(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "config", "deepspeed-batch-size-mismatch.match.log")
    f = root(a, "deepspeed-batch-size-mismatch")
    assert "so the product with the world" in f.remediation.replace("\n", " ")
    assert "--num_gpus" not in f.remediation


# prime-rl#1098: "NCCL Error 3: internal error" printed just above the watchdog's report of a
# 600 s ALLREDUCE: the main thread's error as the communicator was aborted, not the cause

_INTERNAL = "RuntimeError: NCCL Error 3: internal error - please report this issue to the NCCL developers\n"
_WATCHDOG = (
    "[rank18]:[E1013 11:12:31.456700123 ProcessGroupNCCL.cpp:2068] [PG ID 0 PG GUID 0(default_pg) Rank 18] "
    "Process group watchdog thread terminated with exception: [Rank 18] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=420, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600071 milliseconds before timing out.\n"
)


def test_an_nccl_error_just_above_a_long_timeout_is_its_symptom(analyze: Analyze) -> None:
    a = _set(analyze, "x-primerl-1098-nccl-internal-error-lora.log")
    root(a, "nccl-watchdog-collective-timeout")
    internal = next(f for f in a.findings if f.rule_id == "nccl-internal-error")
    assert internal.role == "symptom"


def test_an_nccl_error_far_above_the_timeout_stays_the_cause(analyze: Analyze) -> None:
    near = analyze((_INTERNAL + "step 1\n" * 3 + _WATCHDOG).encode())
    root(near, "nccl-watchdog-collective-timeout")
    far = analyze((_INTERNAL + "step 1\n" * 40 + _WATCHDOG).encode())
    root(far, "nccl-internal-error")
    # a short wait is no teardown of a long one
    short = analyze((_INTERNAL + _WATCHDOG.replace("600071 milliseconds", "5012 milliseconds")).encode())
    root(short, "nccl-internal-error")


# ms-swift#7992: the heartbeat monitor's last line names a Megatron sub-group


def test_the_monitors_terminating_line_names_the_hung_group(analyze: Analyze) -> None:
    a = _set(analyze, "y-msswift-7992-megatron-teardown-watchdog-hang.log")
    f = root(a, "nccl-watchdog-heartbeat-timeout")
    assert (f.captures["hb_pg_id"], f.captures["hb_rank"]) == ("17", "2")
    text = f.remediation
    assert "process group 17 (`INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP`) on rank 2" in text
    assert "torch.distributed.destroy_process_group()" in text


def test_the_default_group_gets_no_sub_group_step(analyze: Analyze) -> None:
    line = (
        "[rank0]:[F205 18:19:06.383067836 ProcessGroupNCCL.cpp:1614] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
        "Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.\n"
    )
    f = root(analyze(line.encode()), "nccl-watchdog-heartbeat-timeout")
    assert f.captures["hb_pg_name"] == "default_pg" and "destroy_process_group" not in f.remediation


def test_a_stuck_watchdog_is_investigated_not_retried(analyze: Analyze) -> None:
    a = _set(analyze, "y-msswift-7992-megatron-teardown-watchdog-hang.log")
    root(a, "nccl-watchdog-heartbeat-timeout")
    assert a.action is not None and a.action.decision == "investigate"
    assert "hang at exit" in a.action.why[0] and "transient straggler" not in a.action.why[0]
