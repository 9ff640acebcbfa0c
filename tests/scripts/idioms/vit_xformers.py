"""A small Vision Transformer whose attention is xformers.ops.memory_efficient_attention
(the pattern of DINOv2 / timm-style blocks with xformers), trained on synthetic images.

Run: python vit_xformers.py
"""
import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from xformers.ops import memory_efficient_attention, unbind


class MemEffAttention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads)
        q, k, v = unbind(qkv, 2)
        x = memory_efficient_attention(q, k, v, attn_bias=None)
        return self.proj(x.reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = MemEffAttention(dim, num_heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image=16, patch=4, dim=48, depth=2, heads=4, classes=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def make_batch(n, generator):
    """Class = the bright quadrant of a noisy 16x16 image."""
    labels = torch.randint(0, 4, (n,), generator=generator)
    images = torch.randn(n, 1, 16, 16, generator=generator) * 0.3
    for i, label in enumerate(labels.tolist()):
        r, c = divmod(label, 2)
        images[i, 0, r * 8:(r + 1) * 8, c * 8:(c + 1) * 8] += 2.0
    return images, labels


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = ViT().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for step in range(100):
        images, labels = make_batch(32, g)
        loss = F.cross_entropy(model(images.cuda()), labels.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        images, labels = make_batch(128, g)
        accuracy = (model(images.cuda()).argmax(-1).cpu() == labels).float().mean().item()
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print(f"rank 0: loss {losses[0]:.4f} -> {sum(losses[-5:]) / 5:.4f}")
    print(f"rank 0: accuracy {accuracy:.3f}")
    print(f"rank 0: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    print("rank 0: done")


if __name__ == "__main__":
    main()
