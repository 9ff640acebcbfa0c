"""A tiny LLaMA-style decoder trained the way CUDA users write it (Meta's llama model.py, plain PyTorch):
RMSNorm computed in float32, rotary position embeddings (cos/sin tables, rotate-half), grouped-query
attention (keys/values repeated per query group, F.scaled_dot_product_attention), a SwiGLU MLP, untied
output head, bf16 autocast by default, AdamW, a GradScaler that is on for float16 only.

Usage: python llama_train.py [--dtype=bfloat16|float16|float32] [--max_iters=2]
Prints one JSON line: {"losses": [...], "device": "<parameter device>"}.
"""
import json
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
max_iters = 2
batch_size = 2
seq_len = 16
dim = 32
n_layers = 2
n_heads = 4
n_kv_heads = 2
vocab_size = 64
multiple_of = 16
norm_eps = 1e-5
learning_rate = 1e-3
dtype = "bfloat16"
device = "cuda"
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=")
    globals()[key] = type(globals()[key])(val)
# -----------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_rope(head_dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: (head_dim // 2)].float() / head_dim))
    t = torch.arange(end, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb(q, k, cos, sin):
    cos, sin = cos[None, :, None, :].to(q.dtype), sin[None, :, None, :].to(q.dtype)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, cos, sin)
        keys, values = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        output = F.scaled_dot_product_attention(xq, keys, values, is_causal=True)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        hidden = int(2 * (4 * dim) / 3)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.feed_forward = FeedForward()
        self.attention_norm = RMSNorm(dim, eps=norm_eps)
        self.ffn_norm = RMSNorm(dim, eps=norm_eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(TransformerBlock() for _ in range(n_layers))
        self.norm = RMSNorm(dim, eps=norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        cos, sin = precompute_rope(dim // n_heads, seq_len * 2)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens, targets):
        seqlen = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos[:seqlen], self.rope_sin[:seqlen]
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits = self.output(self.norm(h)).float()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


torch.manual_seed(0)
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if dtype == "float32" else torch.autocast(device_type="cuda", dtype=ptdtype)
data = torch.randint(vocab_size, (max_iters, batch_size, seq_len + 1), generator=torch.Generator().manual_seed(0))

model = Transformer().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.1)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))

losses = []
for it in range(max_iters):
    x = data[it, :, :-1].to(device, non_blocking=True)
    y = data[it, :, 1:].to(device, non_blocking=True)
    with ctx:
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())

print(json.dumps({"losses": losses, "device": str(next(model.parameters()).device)}))
