"""A tiny LLaMA-style language model as flash-attention users write it: rotary embeddings from
flash_attn.layers.rotary, RMSNorm from flash_attn.ops, GQA attention through flash_attn_func.

Run: python llama_flash_attn.py
"""
import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from flash_attn import flash_attn_func
from flash_attn.layers.rotary import apply_rotary_emb
from flash_attn.ops.rms_norm import RMSNorm

TEXT = "the quick brown fox jumps over the lazy dog. " * 40


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        out = flash_attn_func(q, k, v, dropout_p=0.0, causal=True)
        return self.wo(out.reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(dim, eps=1e-5), RMSNorm(dim, eps=1e-5)
        self.attention = Attention(dim, n_heads, n_kv_heads)
        self.w1, self.w3 = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self, vocab, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq=64):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, n_heads, n_kv_heads) for _ in range(n_layers))
        self.norm, self.output = RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
        head_dim = dim // n_heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_seq).float(), inv_freq)
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin)
        return self.output(self.norm(h))


def main():
    device = "cuda"
    torch.manual_seed(0)
    vocab = sorted(set(TEXT))
    ids = torch.tensor([vocab.index(c) for c in TEXT])
    model = Transformer(len(vocab)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    seq, batch, losses = 32, 8, []
    for step in range(60):
        starts = torch.randint(0, len(ids) - seq - 1, (batch,))
        x = torch.stack([ids[s:s + seq] for s in starts]).to(device, non_blocking=True)
        y = torch.stack([ids[s + 1:s + seq + 1] for s in starts]).to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, len(vocab)), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print(f"rank 0: loss {losses[0]:.4f} -> {sum(losses[-5:]) / 5:.4f}")
    print(f"rank 0: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    print("rank 0: done")


if __name__ == "__main__":
    main()
