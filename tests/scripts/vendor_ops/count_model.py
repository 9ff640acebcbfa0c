"""A CUDA count-regression script: a negative-binomial likelihood, written with torch.lgamma as such
losses are (scVI-style models), and a Kronecker-structured layer."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = torch.device("cuda")
net = nn.Linear(6, 4).to(device)
log_theta = nn.Parameter(torch.zeros(4, device=device))
optimizer = torch.optim.Adam(list(net.parameters()) + [log_theta], lr=0.01)
x = torch.randn(32, 6, device=device)
counts = torch.poisson(torch.full((32, 4), 3.0, device=device))
mixing = torch.kron(torch.eye(2, device=device), torch.ones(2, 2, device=device)) / 2

for step in range(3):
    mu = F.softplus(net(x) @ mixing)
    theta = log_theta.exp()
    log_prob = (torch.lgamma(counts + theta) - torch.lgamma(theta) - torch.lgamma(counts + 1)
                + theta * (torch.log(theta) - torch.log(theta + mu))
                + counts * (torch.log(mu) - torch.log(theta + mu)))
    loss = -log_prob.mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} nll {loss.item():.6f}")
