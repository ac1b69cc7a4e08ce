"""Fixes after the tenth blind set's first contact (tests/corpus/advice10)."""

from __future__ import annotations

from tests.advicekit import facts
from tests.conftest import ROOT, Analyze

SET = ROOT / "tests" / "corpus" / "advice10"

WARNING = "master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified.\n"


def test_torchruns_own_warning_names_no_rendezvous_host(analyze: Analyze) -> None:
    path = SET / "w-cllama2-274-torchrun-random-run-id.log"
    a = analyze(path.read_bytes(), name=path.name)
    assert "rdzv_endpoint_host" not in facts(a)  # was "is", from the warning's "rdzv_endpoint is"
    assert "rdzv_endpoint_host" not in facts(analyze(WARNING))
    # the launcher's own forms still give it: a flag, and torchrun's start-up table
    flag = facts(analyze("+ torchrun --nnodes 2 --rdzv-endpoint node-0:29400 train.py\n"))
    assert (flag.get("rdzv_endpoint_host"), flag.get("rdzv_endpoint_port")) == ("node-0", 29400)
    table = facts(analyze("  rdzv_endpoint    : 10.28.1.16:29500\n"))
    assert (table.get("rdzv_endpoint_host"), table.get("rdzv_endpoint_port")) == ("10.28.1.16", 29500)
