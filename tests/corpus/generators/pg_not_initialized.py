"""Reproduces using torch.distributed before init_process_group.

A checkpoint-conversion style script asks for dist.get_rank() to decide who
writes, but never initialised the default process group (the way Megatron
conversion tools fail when run with plain `python` instead of torchrun):

    python pg_not_initialized.py
"""
import torch
import torch.distributed as dist


def save_shard(state, path):
    if dist.get_rank() == 0:
        torch.save(state, path)


print("converting checkpoint: 2 tensors", flush=True)
save_shard({"w": torch.zeros(4)}, "/tmp/converted.pt")
