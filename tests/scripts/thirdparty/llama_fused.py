"""A small LLaMA-style decoder trained with apex's FusedRMSNorm and FusedAdam (the Megatron/NeMo pattern).

Usage: python llama_fused.py [--steps 60]
"""
import argparse
import hashlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from apex.normalization import FusedRMSNorm
from apex.optimizers import FusedAdam


class Config:
    vocab = 64
    dim = 64
    n_layers = 2
    n_heads = 4
    seq = 32
    hidden = 128


def rotary(x, base=10000.0):
    b, h, t, d = x.shape
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    freqs = torch.outer(torch.arange(t, device=x.device).float(), inv)
    cos, sin = freqs.cos()[None, None], freqs.sin()[None, None]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = FusedRMSNorm(cfg.dim, eps=1e-6)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.mlp_norm = FusedRMSNorm(cfg.dim, eps=1e-6)
        self.gate = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.up = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.down = nn.Linear(cfg.hidden, cfg.dim, bias=False)
        self.n_heads = cfg.n_heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        q, k = rotary(q), rotary(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = FusedRMSNorm(cfg.dim, eps=1e-6)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layers) if p.shape[0] == cfg.dim else 0.02)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    torch.manual_seed(0)
    cfg = Config()
    model = Llama(cfg).to(device)
    optimizer = FusedAdam(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    # a repeating pattern the model can learn: token t+1 = (token t + 1) mod vocab
    start = torch.randint(0, cfg.vocab, (16, 1), generator=torch.Generator().manual_seed(1))
    data = (start + torch.arange(cfg.seq + 1)) % cfg.vocab
    x, y = data[:, :-1].to(device), data[:, 1:].to(device)
    losses = []
    for step in range(args.steps):
        with torch.autocast(device_type="cuda", dtype=dtype):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, cfg.vocab), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    accuracy = (logits.argmax(-1) == y).float().mean().item()
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().float().cpu().flatten().tolist()).encode())
    print(f"rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.3f}, autocast {dtype}")
    print(f"rank 0: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    print("rank 0: done")


if __name__ == "__main__":
    main()
