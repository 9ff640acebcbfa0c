"""A CUDA regression script that computes its loss in float64, as many do for a stable mean."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 8, device="cuda")
y = x.sum(1, keepdim=True)

for step in range(3):
    prediction = model(x)
    loss = ((prediction.double() - y.to(torch.float64)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
print("loss dtype", loss.dtype)
