"""A run that succeeds but prints only (real) warnings: a negative case.

Triggers genuine library warnings (DataLoader asking for more workers than the
machine suggests, torch.cuda.amp.GradScaler deprecated and disabled because
there is no CUDA, the LR scheduler stepped before the optimizer, a deprecated
torch API), trains two epochs, round-trips a checkpoint, and exits 0.
"""
import os
import tempfile
import warnings

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

warnings.simplefilter("default")
torch.manual_seed(0)
ds = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
loader = DataLoader(ds, batch_size=64, num_workers=4, shuffle=True)
model = nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4)
scaler = torch.cuda.amp.GradScaler()
sched.step()
for epoch in range(2):
    for step, (x, y) in enumerate(loader, 1):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"epoch {epoch} step {step} loss: {loss.item():.4f} lr: {sched.get_last_lr()[0]:.4f}", flush=True)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "ckpt.pt")
    torch.save({"model": model.state_dict(), "epoch": 2}, path)
    state = torch.load(path, weights_only=False)
    model.load_state_dict(state["model"])
x = torch.randn(4, 16)
_ = torch.chain_matmul(x, x.t(), x) if hasattr(torch, "chain_matmul") else None
print("finished: 2 epochs, checkpoint round-trip ok", flush=True)
