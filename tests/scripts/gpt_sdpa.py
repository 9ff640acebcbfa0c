"""A tiny GPT trained on 'cuda' the way nanoGPT's model.py computes attention: one fused qkv projection,
heads split with view/transpose, F.scaled_dot_product_attention(is_causal=True) (flash attention), weight
tying, AdamW, gradient clipping. float32, no torch.compile.

Usage: python gpt_sdpa.py [STEPS]
Prints one JSON line: {"losses": [...], "device": "<parameter device>", "attention": "<output device>"}.
"""
import json
import sys

import torch
import torch.nn as nn
from torch.nn import functional as F

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
n_embd, n_head, n_layer, block_size, vocab_size, batch_size = 32, 4, 2, 16, 64, 4
device = "cuda"


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.dropout = 0.0
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0, is_causal=True)
        self.last_device = str(y.device)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


torch.manual_seed(1337)
data = torch.randint(vocab_size, (batch_size, block_size + 1), generator=torch.Generator().manual_seed(0))
x, y = data[:, :-1].to(device), data[:, 1:].to(device)  # one batch, learned over the steps
model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
losses = []
for _ in range(steps):
    loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
torch.cuda.synchronize()
print(json.dumps({"losses": losses, "device": str(next(model.parameters()).device),
                  "attention": model.h[0].attn.last_device}))
