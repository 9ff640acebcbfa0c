"""flash_attn.modules.mha (2.7 API) on transfer's flash_attn functions: ``MHA`` and its attention modules.

``MHA`` has flash-attention's constructor and parameters (``Wqkv``; ``Wq`` / ``Wkv`` for cross-attention;
``out_proj``; ``rotary_emb``), so its state dicts load unchanged, and computes what flash-attention's
does: the projections, rotary embedding on q and k, attention (causal aligned as flash_attn's, MQA/GQA,
ALiBi, sliding windows, dropout while training), ``key_padding_mask`` (True keeps a key) or varlen
``cu_seqlens``/``max_seqlen``, ``return_residual``, and generation with ``inference_params``
(flash_attn.utils.generation.InferenceParams) as flash-attention does it: the new keys and values written
into ``key_value_memory_dict[layer_idx]`` at ``seqlen_offset`` (per sequence: ``lengths_per_sample``), rotary
positions counted from there, the queries attending to the cache (bottom-right causal); past the prompt
through ``flash_attn_with_kvcache`` (rotary applied there when its dimension is a multiple of 16, as
flash-attention's fast path). Not provided (NotImplementedError naming them): ``dwconv``, ``ParallelMHA``
(tensor parallelism).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from flash_attn.flash_attn_interface import (flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                                             flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
                                             flash_attn_with_kvcache)
from flash_attn.layers.rotary import RotaryEmbedding, apply_rotary_emb
from flash_attn.ops.fused_dense import FusedDense

__all__ = ["MHA", "SelfAttention", "CrossAttention", "FlashSelfAttention", "FlashCrossAttention",
           "get_alibi_slopes"]


def get_alibi_slopes(nheads):
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(nheads).is_integer():
        return power_of_2(nheads)
    closest = 2 ** math.floor(math.log2(nheads))
    return power_of_2(closest) + get_alibi_slopes(2 * closest)[0::2][: nheads - closest]


class FlashSelfAttention(nn.Module):
    """Attention over packed qkv (batch, seqlen, 3, h, d), or varlen (total, 3, h, d) with cu_seqlens."""

    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0, window_size=(-1, -1),
                 alibi_slopes=None, deterministic=False):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = nn.Dropout(attention_dropout)
        self.register_buffer("alibi_slopes", alibi_slopes, persistent=False)
        self.window_size = window_size
        self.deterministic = deterministic

    def forward(self, qkv, causal=None, cu_seqlens=None, max_seqlen=None):
        causal = self.causal if causal is None else causal
        p = self.drop.p if self.training else 0.0
        if cu_seqlens is not None:
            return flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, p, softmax_scale=self.softmax_scale,
                                                    causal=causal, alibi_slopes=self.alibi_slopes,
                                                    window_size=self.window_size)
        return flash_attn_qkvpacked_func(qkv, p, softmax_scale=self.softmax_scale, causal=causal,
                                         alibi_slopes=self.alibi_slopes, window_size=self.window_size)


class FlashCrossAttention(nn.Module):
    """Attention of q (batch, seqlen_q, h, d) over kv (batch, seqlen_k, 2, h_k, d) (varlen with cu_seqlens)."""

    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0, alibi_slopes=None,
                 window_size=(-1, -1), deterministic=False):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = nn.Dropout(attention_dropout)
        self.register_buffer("alibi_slopes", alibi_slopes, persistent=False)
        self.window_size = window_size
        self.deterministic = deterministic

    def forward(self, q, kv, causal=None, cu_seqlens=None, max_seqlen=None, cu_seqlens_k=None, max_seqlen_k=None):
        causal = self.causal if causal is None else causal
        p = self.drop.p if self.training else 0.0
        if cu_seqlens is not None:
            return flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens, cu_seqlens_k, max_seqlen, max_seqlen_k, p,
                                                   softmax_scale=self.softmax_scale, causal=causal,
                                                   alibi_slopes=self.alibi_slopes, window_size=self.window_size)
        return flash_attn_kvpacked_func(q, kv, p, softmax_scale=self.softmax_scale, causal=causal,
                                        alibi_slopes=self.alibi_slopes, window_size=self.window_size)


def _padded_attention(q, k, v, key_padding_mask, causal, softmax_scale, dropout_p, bottom_right=False):
    """flash-attention's SelfAttention/CrossAttention: padded keys masked out (-10000), causal from the top-left
    (SelfAttention: as many queries as keys) or, for CrossAttention, from the bottom-right: query i sees key j
    when j <= i + sk - sq, sk counting each sequence's kept keys (decoding over a KV cache)."""
    scale = softmax_scale or 1.0 / math.sqrt(q.shape[-1])
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (b, h, s, d)
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if key_padding_mask is not None:
        scores = scores.masked_fill(~key_padding_mask[:, None, None, :], -10000.0)
    if causal:
        sq, sk = scores.shape[-2:]
        if bottom_right:
            kept = sk if key_padding_mask is None else key_padding_mask.sum(-1).view(-1, 1, 1, 1)
            rows = torch.arange(sq, device=q.device).view(-1, 1)
            scores = scores.masked_fill(torch.arange(sk, device=q.device) > rows + kept - sq, -10000.0)
        else:
            scores = scores.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(1), -10000.0)
    attention = F.dropout(torch.softmax(scores, dim=-1, dtype=v.dtype), dropout_p)
    return torch.matmul(attention, v).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = nn.Dropout(attention_dropout)

    def forward(self, qkv, causal=None, key_padding_mask=None):
        causal = self.causal if causal is None else causal
        q, k, v = qkv.unbind(dim=2)
        return _padded_attention(q, k, v, key_padding_mask, causal, self.softmax_scale,
                                 self.drop.p if self.training else 0.0)


class CrossAttention(nn.Module):
    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = nn.Dropout(attention_dropout)

    def forward(self, q, kv, causal=None, key_padding_mask=None):
        causal = self.causal if causal is None else causal
        k, v = kv.unbind(dim=2)
        return _padded_attention(q, k, v, key_padding_mask, causal, self.softmax_scale,
                                 self.drop.p if self.training else 0.0, bottom_right=True)


class LinearResidual(nn.Linear):
    def forward(self, input):
        return super().forward(input), input


def _update_kv_cache(kv, inference_params, layer_idx):
    """kv (batch, seqlen, 2, nheads_kv, head_dim) written into the layer's cache (made on first use:
    [max_batch_size, max_seqlen, 2, nheads_kv, head_dim]) at batch_size_offset / seqlen_offset; returns the
    cache of those sequences up to the new end."""
    num_heads, head_dim = kv.shape[-2:]
    if layer_idx not in inference_params.key_value_memory_dict:
        inference_params.key_value_memory_dict[layer_idx] = torch.empty(
            inference_params.max_batch_size, inference_params.max_seqlen, 2, num_heads, head_dim, dtype=kv.dtype,
            device=kv.device)
    kv_cache = inference_params.key_value_memory_dict[layer_idx]
    batch_start, sequence_start = inference_params.batch_size_offset, inference_params.seqlen_offset
    batch_end, sequence_end = batch_start + kv.shape[0], sequence_start + kv.shape[1]
    assert batch_end <= kv_cache.shape[0]
    assert sequence_end <= kv_cache.shape[1]
    kv_cache[batch_start:batch_end, sequence_start:sequence_end, ...] = kv
    return kv_cache[batch_start:batch_end, :sequence_end, ...]


class MHA(nn.Module):
    """Multi-head self-attention and cross-attention (flash-attention's module)."""

    def __init__(self, embed_dim, num_heads, num_heads_kv=None, cross_attn=False, qkv_proj_bias=True,
                 out_proj_bias=True, dropout=0.0, softmax_scale=None, causal=False, layer_idx=None, dwconv=False,
                 rotary_emb_dim=0, rotary_emb_base=10000.0, rotary_emb_scale_base=None,
                 rotary_emb_interleaved=False, use_alibi=False, window_size=(-1, -1), fused_bias_fc=False,
                 use_flash_attn=False, return_residual=False, checkpointing=False, device=None, dtype=None) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        if dwconv:
            raise NotImplementedError("flash_attn MHA(dwconv=True) is not provided by transfer")
        self.embed_dim = embed_dim
        self.cross_attn = cross_attn
        self.causal = causal
        self.layer_idx = layer_idx
        self.dwconv = dwconv
        self.rotary_emb_dim = rotary_emb_dim
        self.use_flash_attn = use_flash_attn
        self.return_residual = return_residual
        self.checkpointing = checkpointing
        if use_alibi:
            assert use_flash_attn, "ALiBi code path requires flash_attn"
            alibi_slopes = torch.tensor(get_alibi_slopes(num_heads), device=device)
        else:
            alibi_slopes = None
        if window_size != (-1, -1):
            assert use_flash_attn, "Local (sliding window) attention code path requires flash_attn"
        self.num_heads = num_heads
        self.num_heads_kv = num_heads_kv if num_heads_kv is not None else num_heads
        assert self.num_heads % self.num_heads_kv == 0, "num_heads must be divisible by num_heads_kv"
        assert self.embed_dim % num_heads == 0, "embed_dim must be divisible by num_heads"
        self.head_dim = self.embed_dim // num_heads
        qkv_dim = self.head_dim * (self.num_heads + 2 * self.num_heads_kv)
        kv_dim = 2 * self.head_dim * self.num_heads_kv
        if self.rotary_emb_dim > 0:
            assert not cross_attn, "MHA with rotary embedding does not support cross-attention yet"
            self.rotary_emb = RotaryEmbedding(self.rotary_emb_dim, base=rotary_emb_base,
                                              scale_base=rotary_emb_scale_base, interleaved=rotary_emb_interleaved,
                                              device=device)
        linear_cls = nn.Linear if not fused_bias_fc else FusedDense
        linear_resid_cls = LinearResidual if not fused_bias_fc else (
            lambda *a, **k: FusedDense(*a, return_residual=True, **k))
        wqkv_cls = linear_cls if not self.return_residual else linear_resid_cls
        if use_flash_attn:
            self.inner_attn = FlashSelfAttention(causal=causal, softmax_scale=softmax_scale, attention_dropout=dropout,
                                                 alibi_slopes=alibi_slopes, window_size=window_size)
            self.inner_cross_attn = FlashCrossAttention(causal=causal, softmax_scale=softmax_scale,
                                                        attention_dropout=dropout, alibi_slopes=alibi_slopes,
                                                        window_size=window_size)
        else:
            self.inner_attn = SelfAttention(causal=causal, softmax_scale=softmax_scale, attention_dropout=dropout)
            self.inner_cross_attn = CrossAttention(causal=causal, softmax_scale=softmax_scale,
                                                   attention_dropout=dropout)
        if not self.cross_attn:
            self.Wqkv = wqkv_cls(embed_dim, qkv_dim, bias=qkv_proj_bias, **factory_kwargs)
        else:
            self.Wq = linear_cls(embed_dim, embed_dim, bias=qkv_proj_bias, **factory_kwargs)
            self.Wkv = wqkv_cls(embed_dim, kv_dim, bias=qkv_proj_bias, **factory_kwargs)
        self.out_proj = linear_cls(embed_dim, embed_dim, bias=out_proj_bias, **factory_kwargs)

    def _rotary_q_kv(self, q, kv, max_seqlen):
        rotary = self.rotary_emb
        rotary._update_cos_sin_cache(max_seqlen or q.shape[1], device=q.device, dtype=q.dtype)
        cos_k = rotary._cos_cached if rotary.scale is None else rotary._cos_k_cached
        sin_k = rotary._sin_cached if rotary.scale is None else rotary._sin_k_cached
        q = apply_rotary_emb(q, rotary._cos_cached, rotary._sin_cached, interleaved=rotary.interleaved)
        k = apply_rotary_emb(kv[:, :, 0], cos_k, sin_k, interleaved=rotary.interleaved)
        return q, torch.stack((k, kv[:, :, 1]), dim=2)

    def _update_kv_cache(self, kv, inference_params):
        assert self.layer_idx is not None, "Generation requires layer_idx in the constructor"
        return _update_kv_cache(kv, inference_params, self.layer_idx)

    def _kvcache_attention(self, q, kv, inference_params, rotary=False):
        """Past the prompt: the cache holds seqlen_offset (or lengths_per_sample) tokens; flash_attn_with_kvcache
        appends kv there and attends (with rotary=True it also rotates q and the new keys at those positions)."""
        cos = sin = None
        if rotary:
            assert self.rotary_emb.scale is None, "This code path does not support xPos"
            self.rotary_emb._update_cos_sin_cache(inference_params.max_seqlen, device=q.device, dtype=q.dtype)
            cos, sin = self.rotary_emb._cos_cached, self.rotary_emb._sin_cached
        kv_cache = inference_params.key_value_memory_dict[self.layer_idx][: q.shape[0]]
        cache_seqlens = (inference_params.lengths_per_sample[: q.shape[0]]
                         if inference_params.lengths_per_sample is not None else inference_params.seqlen_offset)
        return flash_attn_with_kvcache(q, kv_cache[:, :, 0], kv_cache[:, :, 1], kv[:, :, 0], kv[:, :, 1],
                                       rotary_cos=cos, rotary_sin=sin, cache_seqlens=cache_seqlens,
                                       softmax_scale=self.inner_cross_attn.softmax_scale,
                                       causal=self.inner_cross_attn.causal,
                                       rotary_interleaved=self.rotary_emb.interleaved if rotary else False,
                                       alibi_slopes=getattr(self.inner_cross_attn, "alibi_slopes", None))

    def _generate(self, q, kv, inference_params):
        """flash-attention's generation paths for q (batch, seqlen, h, d) and kv (batch, seqlen, 2, h_kv, d)."""
        fast_rotary = self.rotary_emb_dim > 0 and self.rotary_emb_dim % 16 == 0
        if inference_params.seqlen_offset > 0 and self.use_flash_attn and fast_rotary:
            return self._kvcache_attention(q, kv, inference_params, rotary=True)
        if self.rotary_emb_dim > 0:
            offset = (inference_params.lengths_per_sample if inference_params.lengths_per_sample is not None
                      else inference_params.seqlen_offset)
            q, kv = self.rotary_emb(q, kv, seqlen_offset=offset, max_seqlen=inference_params.max_seqlen)
        if inference_params.seqlen_offset == 0 or not self.use_flash_attn:
            return self.inner_cross_attn(q, self._update_kv_cache(kv, inference_params))
        return self._kvcache_attention(q, kv, inference_params)

    def forward(self, x, x_kv=None, key_padding_mask=None, cu_seqlens=None, max_seqlen=None, mixer_subset=None,
                inference_params=None, **kwargs):
        if inference_params is not None:
            assert key_padding_mask is None and cu_seqlens is None and max_seqlen is None
        if cu_seqlens is not None:
            assert max_seqlen is not None and key_padding_mask is None and self.use_flash_attn
        if key_padding_mask is not None:
            assert cu_seqlens is None and not self.use_flash_attn
        varlen = {"cu_seqlens": cu_seqlens, "max_seqlen": max_seqlen} if self.use_flash_attn else (
            {"key_padding_mask": key_padding_mask})
        attend = (lambda fn, *args: torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, **varlen)
                  if self.checkpointing else fn(*args, **varlen))
        rotary_max = max_seqlen if cu_seqlens is None else None
        if not self.cross_attn and self.num_heads_kv == self.num_heads:
            qkv = self.Wqkv(x)
            if self.return_residual:
                qkv, x = qkv
            qkv = qkv.unflatten(-1, (3, self.num_heads, self.head_dim))
            if inference_params is not None:
                context = self._generate(qkv[:, :, 0].contiguous(), qkv[:, :, 1:].contiguous(), inference_params)
            else:
                if self.rotary_emb_dim > 0:
                    qkv = self.rotary_emb(qkv, seqlen_offset=0, max_seqlen=rotary_max)
                context = attend(self.inner_attn, qkv)
        else:
            if self.cross_attn:
                q = self.Wq(x if mixer_subset is None else x[:, mixer_subset])
                kv = self.Wkv(x_kv if x_kv is not None else x)
                if self.return_residual:
                    kv, x_kv = kv
            else:
                qkv = self.Wqkv(x)
                if self.return_residual:
                    qkv, x = qkv
                q, kv = qkv[..., : self.num_heads * self.head_dim], qkv[..., self.num_heads * self.head_dim:]
            q = q.unflatten(-1, (self.num_heads, self.head_dim))
            kv = kv.unflatten(-1, (2, self.num_heads_kv, self.head_dim))
            if inference_params is not None:
                context = self._generate(q.contiguous(), kv.contiguous(), inference_params)
            else:
                if self.rotary_emb_dim > 0:  # q and kv share Wqkv's output: rotated out of place, same values
                    q, kv = self._rotary_q_kv(q, kv, rotary_max)
                if self.use_flash_attn and cu_seqlens is not None:
                    context = attend(lambda q, kv, **kw: self.inner_cross_attn(q, kv, cu_seqlens_k=cu_seqlens,
                                                                               max_seqlen_k=max_seqlen, **kw), q, kv)
                else:
                    context = attend(self.inner_cross_attn, q, kv)
        out = self.out_proj(context.flatten(-2))
        return out if not self.return_residual else (out, x)
