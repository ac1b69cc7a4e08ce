"""Reproduces a training loss going NaN in a tiny CPU training loop.

    python nan_loss.py loop      - the learning rate is far too high; the loss
                                   overflows to inf and then prints `loss: nan`
                                   while the loop keeps going.
    python nan_loss.py anomaly   - same model under torch.autograd.set_detect_anomaly,
                                   and masked (padded) vocab entries whose probability is
                                   exactly 0: torch.where hides log(0) in the forward
                                   pass, but backward stops with "Function
                                   'LogBackward0' returned nan values in its 0th output."
"""
import sys

import torch
import torch.nn as nn

mode = sys.argv[1] if len(sys.argv) > 1 else "loop"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
x = torch.randn(256, 16) * 10
y = x.sum(dim=1, keepdim=True) ** 2

if mode == "loop":
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(1, 41):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        opt.step()
        print(f"step {step:3d} | loss: {loss.item():.4f} | grad_norm: {gnorm.item():.4f} | lr: 0.5", flush=True)
else:
    torch.autograd.set_detect_anomaly(True)
    head = nn.Linear(1, 8)
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-3)
    target = torch.randint(0, 6, (256,))
    for step in range(1, 41):
        logits = head(model(x))
        if step >= 5:
            # from step 5 on the batch comes with the last two vocab slots padded
            pad = torch.zeros(8, dtype=torch.bool)
            pad[6:] = True
            logits = logits.masked_fill(pad, float("-inf"))
        else:
            pad = torch.zeros(8, dtype=torch.bool)
        probs = torch.softmax(logits, dim=-1)
        logp = torch.where(pad, torch.zeros_like(probs), torch.log(probs))
        loss = nn.functional.nll_loss(logp, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step:3d} | loss: {loss.item():.4f}", flush=True)
