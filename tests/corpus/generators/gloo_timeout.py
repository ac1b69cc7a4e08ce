"""Reproduces a torch.distributed collective timeout on the gloo backend.

Rank 1 sleeps longer than the process-group timeout before joining an
all_reduce, so rank 0's all_reduce times out. Run it under torchrun:

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29511 gloo_timeout.py

or directly (`python gloo_timeout.py --spawn`) to launch the two ranks with
torch.multiprocessing.spawn instead of torchrun.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=5))
    t = torch.ones(1024)
    for step in range(3):
        if rank == 1 and step == 2:
            print(f"[rank{rank}] step {step}: simulating a straggler, sleeping 30s", flush=True)
            time.sleep(30)
        dist.all_reduce(t)
        print(f"[rank{rank}] step {step}: all_reduce ok, t[0]={t[0].item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "--spawn" in sys.argv:
        import torch.multiprocessing as mp
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29512")
        mp.spawn(worker, args=(2,), nprocs=2, join=True)
    else:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
