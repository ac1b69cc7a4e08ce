#!/usr/bin/env python3
"""A stand-in for Slurm's `scontrol` in the epilog's tests: one job whose state is a JSON file
($FAKE_SLURM_STATE): `show job ID` prints it the way scontrol does (Key=Value words), `update
JobId=ID ExcNodeList=...` changes it, `requeue ID` counts a restart. Every call is logged."""

import json
import os
import sys
from pathlib import Path

state_path = Path(os.environ["FAKE_SLURM_STATE"])
state = json.loads(state_path.read_text())
args = sys.argv[1:]
state.setdefault("calls", []).append(args)
if args[:2] == ["show", "job"]:
    keys = ("JobId", "BatchHost", "ExitCode", "StdOut", "StdErr", "Restarts", "ExcNodeList", "Partition")
    print(" ".join(f"{k}={state[k]}" for k in keys))
elif args[:1] == ["update"]:
    for word in args[1:]:
        k, _, v = word.partition("=")
        if k != "JobId":
            state[k] = v
elif args[:1] == ["requeue"]:
    state["Restarts"] = int(state["Restarts"]) + 1
    state["requeued"] = state.get("requeued", 0) + 1
else:
    sys.exit(f"fake scontrol: unknown {args}")
# replaced whole, never rewritten in place: the test polls this file while the epilog runs, and a
# read between the truncation and the write found it empty
tmp = state_path.with_name(f"{state_path.name}.{os.getpid()}.tmp")
tmp.write_text(json.dumps(state))
os.replace(tmp, state_path)
