"""Reproduces checkpoint saving on a full filesystem (ENOSPC).

Trains a few steps, then saves a ~8 MB checkpoint with torch.save and writes
a metrics JSON file into CKPT_DIR. Run it with CKPT_DIR on a 1 MiB tmpfs
(see disk_full.sh) so the save fails with "No space left on device".
"""
import json
import os
import sys

import torch
import torch.nn as nn

ckpt_dir = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "torch"
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 6):
    loss = model(torch.randn(8, 1024)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss: {loss.item():.5f}", flush=True)

os.makedirs(ckpt_dir, exist_ok=True)
print(f"saving checkpoint to {ckpt_dir}", flush=True)
if mode == "torch":
    torch.save({"model": model.state_dict(), "step": 5}, os.path.join(ckpt_dir, "model_step5.pt"))
else:
    with open(os.path.join(ckpt_dir, "rollouts_step5.jsonl"), "w") as f:
        for i in range(20000):
            f.write(json.dumps({"idx": i, "prompt": "What is 17 * 23?", "response": "391", "reward": 1.0}) + "\n")
print("checkpoint saved", flush=True)
