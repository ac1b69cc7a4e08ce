"""A tiny, healthy 2-rank DDP training script on the gloo backend (CPU).

Used directly for the healthy baseline (loss lines plus a tqdm progress bar on
rank 0) and as the innocent workload for launcher-level failures (port in use,
SIGKILL, SIGHUP), where the failure comes from outside the script. Launch:

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29531 train_tiny.py --steps 200
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--sleep", type=float, default=0.0, help="seconds per step, to make the run last")
p.add_argument("--log-every", type=int, default=20)
p.add_argument("--dump-env", action="store_true", help="print a Megatron-style arguments/env dump first")
args = p.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
if rank == 0:
    print(f"world_size={world} backend={dist.get_backend()} torch={torch.__version__}", flush=True)
    if args.dump_env:
        print("------------------------ arguments ------------------------", flush=True)
        for k, v in sorted(vars(args).items()):
            print(f"  {k} {'.' * (40 - len(k))} {v}")
        print("-------------------- end of arguments ---------------------")
        print("distributed environment:")
        for k in sorted(os.environ):
            if k.startswith(("NCCL_", "TORCH_", "MASTER_", "GLOO_", "OMP_", "CUDA_")) or k in (
                    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
                print(f"  {k}={os.environ[k]}")
        print(flush=True)

model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
w_true = torch.randn(32, 1, generator=torch.Generator().manual_seed(42))

bar = tqdm(range(1, args.steps + 1), desc="train", disable=rank != 0, mininterval=0.05)
for step in bar:
    x = torch.randn(64, 32, generator=g)
    y = x @ w_true + 0.01 * torch.randn(64, 1, generator=g)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if args.sleep:
        time.sleep(args.sleep)
    if rank == 0:
        bar.set_postfix(loss=f"{loss.item():.4f}")
        if step % args.log_every == 0:
            tqdm.write(f"step {step}/{args.steps} loss: {loss.item():.6f} lr: 0.05")
if rank == 0:
    print("training finished", flush=True)
dist.barrier()
dist.destroy_process_group()
