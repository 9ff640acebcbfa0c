import torch
import torch.nn as nn
from apex.optimizers import FusedAdam
from flash_attn import flash_attn_func
import bitsandbytes as bnb
import fused_lamb_CUDA  # the project's own compiled extension (DeepLearningExamples BERT)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).unbind(2)
        return flash_attn_func(q, k, v, causal=True).reshape(b, s, -1)


def build(model):
    return FusedAdam(model.parameters(), lr=1e-3), bnb.optim.AdamW8bit(model.parameters())
