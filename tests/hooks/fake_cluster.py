"""A stand-in for a scheduler's launch command (srun, a Ray job) in the retry hook's tests: it
places the job on the first node not in --exclude and runs it there, printing what a real job of
that kind prints. The only fake is the cluster; the hook, the CLI and the service are real.

  --fault ecc          the bad node (--bad) has a GPU with an uncorrectable ECC error
  --fault oom          every node runs out of GPU memory (the job's own sizes)
  --fault timeout-once the first run hangs in an all-reduce until NCCL's watchdog fires; later
                       runs pass (a straggler of the moment); --state keeps the count
  --fault timeout      every run times out
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ECC = "(WorkerDict pid=90412, ip={node}) RuntimeError: CUDA error: uncorrectable ECC error encountered"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity "
    "of 79.25 GiB of which 1.21 GiB is free."
)
TIMEOUT = (
    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
    "Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", required=True, help="comma-separated")
    ap.add_argument("--exclude", default="")
    ap.add_argument("--bad", default="")
    ap.add_argument("--fault", choices=("ecc", "oom", "timeout-once", "timeout"), required=True)
    ap.add_argument("--state", type=Path, required=True)
    args = ap.parse_args()
    left_out = {h for h in args.exclude.split(",") if h}
    free = [n for n in args.nodes.split(",") if n not in left_out]
    if not free:
        print("fake-cluster: no node left to run on", file=sys.stderr)
        return 1
    node = free[0]
    runs = int(args.state.read_text()) + 1 if args.state.exists() else 1
    args.state.write_text(str(runs))
    for step in range(1, 6):
        print(f"[{node}] run {runs} step {step} loss {2.0 / step:.3f} lr 1e-5", flush=True)
    if args.fault == "ecc" and node == args.bad:
        print(ECC.format(node=node))
        return 1
    if args.fault == "oom":
        print(OOM)
        return 1
    if args.fault == "timeout" or (args.fault == "timeout-once" and runs == 1):
        print(TIMEOUT)
        return 1
    print(f"[{node}] run {runs}: training finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
