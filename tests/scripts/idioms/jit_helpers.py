"""A small transformer-style classifier whose hot helpers are TorchScript functions.

Run: python jit_helpers.py
"""
import hashlib
import math

import torch
import torch.nn as nn


@torch.jit.script
def bias_gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))


@torch.jit.script
def positions(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(x.size(1), device=x.device).unsqueeze(0).expand(x.size(0), -1)


@torch.jit.script
def causal_mask(n: int) -> torch.Tensor:
    return torch.triu(torch.full((n, n), float("-inf"), device="cuda"), diagonal=1)


class Classifier(nn.Module):
    def __init__(self, vocab=16, dim=32, seq=8, classes=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.fc = nn.Linear(dim, dim, bias=False)
        self.fc_bias = nn.Parameter(torch.zeros(dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = self.tok(x) + self.pos(positions(x))
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.size(-1)) + causal_mask(x.size(1))
        h = h + torch.softmax(scores, dim=-1) @ v
        h = bias_gelu(self.fc_bias, self.fc(h))
        return self.head(h[:, -1])


def main():
    torch.manual_seed(0)
    model = Classifier().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randint(0, 16, (256, 8)).cuda()
    y = (x[:, 0] >= 8).long()  # the label depends on the first token: attention must carry it

    losses = []
    for _ in range(60):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    accuracy = (model(x).argmax(1) == y).float().mean().item()

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print(f"rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.3f}")
    print(f"rank 0: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    print("rank 0: done")


if __name__ == "__main__":
    main()
