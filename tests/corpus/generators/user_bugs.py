"""Ordinary user bugs (negative cases: nothing wrong with the infrastructure).

    python user_bugs.py typeerror      - a model's forward() called with one
                                         argument too many (under torchrun,
                                         every rank fails the same way)
    python user_bugs.py filenotfound   - the dataset path in the config is wrong
    python user_bugs.py shape          - matmul shape mismatch in user code
"""
import json
import os
import sys

import torch
import torch.nn as nn

mode = sys.argv[1]


class PolicyHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 8)

    def forward(self, hidden):
        return self.proj(hidden)


if mode == "typeerror":
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    head = PolicyHead()
    hidden = torch.randn(4, 32)
    attention_mask = torch.ones(4, dtype=torch.bool)
    print(f"[rank{rank}] starting rollout scoring", flush=True)
    logits = head(hidden, attention_mask)
    dist.destroy_process_group()
elif mode == "filenotfound":
    cfg = {"train_file": "/data/gsm8k/train.jsonl", "max_prompt_len": 512, "batch_size": 64}
    print("config:", json.dumps(cfg), flush=True)
    with open(cfg["train_file"]) as f:
        rows = [json.loads(line) for line in f]
elif mode == "shape":
    print("epoch 0", flush=True)
    head = PolicyHead()
    features = torch.randn(16, 64)
    for step in range(1, 4):
        out = head(features)
        print(f"step {step} loss {out.pow(2).mean().item():.4f}", flush=True)
