"""Reproduces a DataLoader worker process dying under a training loop.

    python dataloader_worker_death.py kill   - a worker is SIGKILLed mid-epoch
        (what the host OOM killer does to the biggest worker; here the parent
        sends the signal itself): "DataLoader worker (pid X) is killed by
        signal: Killed."
    python dataloader_worker_death.py shm    - workers return large batches
        through shared memory; run with a tiny /dev/shm (dataloader_shm.sh) and
        the worker hits SIGBUS: "Unexpected bus error encountered in worker".
"""
import os
import signal
import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset

mode = sys.argv[1] if len(sys.argv) > 1 else "kill"


class ImageDataset(Dataset):
    def __init__(self, n, shape):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if mode == "kill":
            import time
            time.sleep(0.05)
        return torch.randn(*self.shape), i % 10


shape = (3, 64, 64) if mode == "kill" else (3, 512, 512)
loader = DataLoader(ImageDataset(4096, shape), batch_size=32, num_workers=2)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

if mode == "kill":
    def kill_a_worker():
        pids = [w.pid for w in loader_iter._workers]
        os.kill(pids[-1], signal.SIGKILL)

loader_iter = iter(loader)
for step, (x, y) in enumerate(loader_iter, 1):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"epoch 0 step {step} loss: {loss.item():.4f}", flush=True)
    if mode == "kill" and step == 12:
        threading.Timer(0.5, kill_a_worker).start()
