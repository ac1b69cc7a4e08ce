"""Reproduces a peer rank dying in the middle of gloo all_reduce traffic.

Rank 1 exits abruptly (os._exit, no cleanup, as after a segfault or a native
abort) while rank 0 is in an all_reduce; rank 0 sees the TCP connection close
("Connection closed by peer" / "Connection reset by peer"). Run under torchrun:

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29521 gloo_peer_crash.py
"""
import datetime
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
t = torch.randn(4 * 1024 * 1024)  # 16 MB so the ring transfer takes a while
for step in range(50):
    if rank == 1 and step == 3:
        print(f"[rank{rank}] step {step}: crashing hard", flush=True)
        os._exit(134)
    dist.all_reduce(t)
    t /= 2
    print(f"[rank{rank}] step {step}: all_reduce ok", flush=True)
dist.destroy_process_group()
