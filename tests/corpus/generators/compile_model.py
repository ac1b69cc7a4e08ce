"""Small MLP inference compiled with torch.compile(mode="max-autotune") on CPU.

Used by inductor_cache_corrupt.sh. Argument: batch size.
"""
import sys

import torch
import torch._inductor.config as inductor_config

inductor_config.freezing = True  # lets the CPU GEMM templates be autotuned
batch = int(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)).eval()
compiled = torch.compile(model, mode="max-autotune")
print(f"compiling reward head for batch={batch}", flush=True)
with torch.no_grad():
    scores = compiled(torch.randn(batch, 256))
print(f"scores: mean={scores.mean().item():.4f}", flush=True)
