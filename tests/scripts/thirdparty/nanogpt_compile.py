"""A tiny GPT trained the way nanoGPT's train.py trains it on a CUDA machine: TF32 on, the model moved to
'cuda', torch.compile(model) when --compile=True (nanoGPT's default), autocast context, fused AdamW where
the signature has it, a GradScaler that is off for float32.

Usage: python nanogpt_compile.py [--compile=True|False] [--mode=default|reduce-overhead|max-autotune]
                                 [--fullgraph=False|True] [--max_iters=4]
Prints one JSON line: {"losses": [...], "device": "<parameter device>"}.
"""
import inspect
import json
import math
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# config, overridable from the command line as nanoGPT's configurator does (--key=value)
compile = True
mode = "default"
fullgraph = False
max_iters = 4
batch_size = 4
block_size = 16
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 64
learning_rate = 1e-3
dtype = "float32"
device = "cuda"
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=")
    current = globals()[key]
    globals()[key] = (val == "True") if isinstance(current, bool) else type(current)(val)
# -----------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
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
        self.wte.weight = self.lm_head.weight  # weight tying
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


torch.manual_seed(1337)
torch.backends.cuda.matmul.allow_tf32 = True  # allow tf32 on matmul
torch.backends.cudnn.allow_tf32 = True  # allow tf32 on cudnn
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

data = torch.randint(vocab_size, (max_iters, batch_size, block_size + 1), generator=torch.Generator().manual_seed(0))


def get_batch(it):
    x, y = data[it, :, :-1], data[it, :, 1:]
    if device_type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


model = GPT()
model.to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
extra_args = dict(fused=True) if fused_available and device_type == "cuda" else dict()
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), **extra_args)
if compile:
    print("compiling the model... (takes a ~minute)", file=sys.stderr)
    model = torch.compile(model, mode=None if mode == "default" else mode, fullgraph=fullgraph)

losses = []
for it in range(max_iters):
    X, Y = get_batch(it)
    with ctx:
        logits, loss = model(X, Y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())

print(json.dumps({"losses": losses, "device": str(next(model.parameters()).device)}))
