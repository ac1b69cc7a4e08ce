"""The wrong items of the fourth regrade of the blind sets (advice9/advice10, reviewers ye..yg at
fcb42ea): a size in a file name read as a rank, a Hugging Face Trainer key for a job without it, a
DataLoader stop-gap where accelerate's self-test fails the same way."""

from __future__ import annotations

from app.engine.pipeline.ingest import rank_from_name
from tests.advicekit import CORPUS, facts, flat, root, rule_fixture, set_reader
from tests.conftest import Analyze

_nine = set_reader("advice9")
_ten = set_reader("advice10")


def test_a_size_after_rank_in_a_file_name_is_no_rank(analyze: Analyze) -> None:
    assert rank_from_name("w-llamafactory-3230-host-oom-one-rank-930g.log") is None
    assert rank_from_name("rank16GB.log") is None
    assert (rank_from_name("rank3.log"), rank_from_name("rank0of8.log"), rank_from_name("worker_12.err")) == (
        3,
        0,
        12,
    )
    a = _ten(analyze, "w-llamafactory-3230-host-oom-one-rank-930g.log")
    f = root(a, "host-oom-killer")
    assert 930 not in f.ranks


def test_the_trainer_timeout_key_only_where_the_log_shows_the_trainer(analyze: Analyze) -> None:
    name = "u-recbole-2069-ncclUniqueId-store-timeout.log"
    a = _nine(analyze, name)
    f = root(a, "dist-rendezvous-timeout")
    assert "hf_trainer_seen" not in facts(a)
    assert "Rank 5 waited for rank 0" in f.remediation and "ddp_timeout" not in f.remediation
    # the same failure under Hugging Face's Trainer names its setting
    frame = '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 1539, in train\n'
    b = analyze(frame.encode() + (CORPUS / "advice9" / name).read_bytes(), name=name)
    assert "`ddp_timeout` training argument" in root(b, "dist-rendezvous-timeout").remediation


def test_no_dataloader_stop_gap_where_accelerates_self_test_fails_too(analyze: Analyze) -> None:
    a = _nine(analyze, "t-llamafactory-752-docker-sigbus.log")
    f = root(a, "bus-error-shm")
    assert facts(a)["accelerate_self_test"] == "accelerate test"
    assert "num_workers" not in f.remediation and "--shm-size=16g" in f.remediation
    # a SIGBUS without the self-test keeps the stop-gap
    b = rule_fixture(analyze, "host", "bus-error-shm.match.log")
    assert "num_workers" in root(b, "bus-error-shm").remediation


def test_a_desync_says_how_long_the_ranks_already_waited(analyze: Analyze) -> None:
    a = _ten(analyze, "w-torch-77030-fsdp-reduce-vs-allgather-desync.log")
    text = root(a, "dist-collective-desync").remediation
    assert "the ranks already waited 1800000 ms (30 minutes)" in text
    assert "will never match." not in text  # the plain wording is for a log without the value


def test_fragmentation_says_how_little_the_live_tensors_hold(analyze: Analyze) -> None:
    a = set_reader("advice7")(analyze, "q-minerva-42-oom-reserved-unallocated.log")
    text = flat(root(a, "cuda-out-of-memory"))
    assert "PyTorch's live tensors hold only 23.0 GiB of the 63.3 GiB" in text
    assert "not the first fix" in text
