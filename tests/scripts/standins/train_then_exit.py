"""Train briefly on ``<vendor>:1`` and end right after a backward pass.

``train_then_exit.py VENDOR`` -- the worst case for the exit-time abort
described in tests/vendors/_sim_accel/_exit.py: the interpreter starts
finalizing while an autograd device thread may still hold the last
GraphTask. Must exit with rc 0 (run repeatedly by the tests).
"""

import importlib
import sys

import torch
import torch.nn as nn

vendor = sys.argv[1]
importlib.import_module(f"torch_{vendor}")
device = torch.device(vendor, 1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    loss = model(torch.randn(8, 16, device=device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
loss = model(torch.randn(8, 16, device=device)).pow(2).mean()
loss.backward()
