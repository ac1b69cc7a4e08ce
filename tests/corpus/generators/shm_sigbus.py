"""Reproduces a worker dying of SIGBUS because /dev/shm is too small.

Each rank maps a 32 MB shared-memory staging buffer (multiprocessing.shared_memory,
i.e. shm_open + ftruncate + mmap, the way NCCL's SHM transport and many
data pipelines do) and fills it. With a tiny /dev/shm the kernel cannot back the
pages and the process receives SIGBUS. Launched by shm_sigbus.sh under torchrun
inside a mount namespace with an 8 MiB /dev/shm.
"""
import os

import torch
import torch.distributed as dist
from multiprocessing import shared_memory

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1024)
dist.all_reduce(t)
print(f"[rank{rank}] process group up, allocating shared staging buffer", flush=True)
shm = shared_memory.SharedMemory(name=f"staging_{os.getpid()}", create=True, size=32 << 20)
try:
    buf = torch.frombuffer(shm.buf, dtype=torch.uint8)
    buf.fill_(rank + 1)
    print(f"[rank{rank}] staging buffer ready", flush=True)
    dist.all_reduce(t)
finally:
    shm.close()
    shm.unlink()
dist.destroy_process_group()
