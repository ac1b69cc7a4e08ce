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
