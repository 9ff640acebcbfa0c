"""flash_attn.flash_attn_interface (2.7 API) on torch: see transfer/dropins/_attention.py.

Same signatures, shapes and semantics as flash_attn 2.7.4's interface. Differences,
each deliberate:

* float32 and float64 inputs are accepted (the CUDA kernels take fp16/bf16 only);
* ``deterministic`` is accepted; the backward is autograd's (deterministic where torch's is);
* ``return_attn_probs``' third value holds the kernel's un-normalized probabilities (per key block, divided by
  the running maximum, see ``_kernel_probs``), negative where dropout dropped, [B, H, sq, sk] (flash_attn pads
  it to multiples of 128); for varlen [batch, H, max_seqlen_q, max_seqlen_k], each sequence's block at its
  top-left, as flash_attn;
* varlen runs one SDPA call over a block-diagonal mask built on the device (no host sync)
  up to ``_attention.VARLEN_MASK_LIMIT`` mask entries, then one call per sequence;
* ``flash_attn_with_kvcache`` (inference) loops over the batch on the host; paged KV
  (``block_table``) raises NotImplementedError.
"""

from __future__ import annotations

import math
import os
from typing import Optional, Union

import torch

from transfer.dropins import _attention as _impl

#: upstream: FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE selects its Triton kernels for AMD GPUs; nothing here uses either
USE_TRITON_ROCM = os.getenv("FLASH_ATTENTION_TRITON_AMD_ENABLE", "FALSE") == "TRUE"


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """The CUDA kernel's key block size for (device capability, head_dim): upstream's table, which its tests
    use to decode the dropout mask returned with the attention probabilities."""
    major, minor = torch.cuda.get_device_capability(device)
    return _block_n(head_dim, is_dropout, is_causal, is_sm8x=major == 8 and minor > 0)  # sm86/sm89, not sm80


def _kernel_probs(probs, head_dim, is_dropout, causal):
    """``return_attn_probs``' values as the kernel leaves them: not normalized. The kernel walks the key blocks
    (``_get_block_size_n``'s size, an sm80's) from the last to the first, so in block j a value is
    exp(s - m_j), m_j the row's largest score in blocks j and after: the probability divided by the largest
    probability of those blocks. The sign keeps the dropout pattern; a row seeing nothing stays 0. flash-
    attention's tests undo this with their ``normalize_flash_attn_S``."""
    if probs is None or head_dim > 256:
        return probs
    size = _block_n(head_dim, is_dropout, causal)
    wide = torch.float64 if probs.dtype == torch.float64 else torch.float32
    work = probs.abs().to(wide)
    widths = [min(size, work.shape[-1] - start) for start in range(0, work.shape[-1], size)]
    maxes = torch.stack([b.amax(dim=-1) for b in work.split(size, dim=-1)], dim=-1)
    running = torch.cummax(maxes.flip(-1), dim=-1).values.flip(-1)
    per_key = torch.repeat_interleave(running, torch.tensor(widths, device=running.device), dim=-1)
    scaled = torch.where(per_key > 0, probs.to(wide) / per_key.clamp_min(torch.finfo(wide).tiny), 0.0)
    return scaled.to(probs.dtype)


def _block_n(head_dim, is_dropout, causal, is_sm8x=False):
    """The kernel's key block size; by default an sm80's (the capability transfer answers where bf16 is computed)."""
    assert head_dim <= 256
    if head_dim <= 32:
        return 128
    if head_dim <= 64:
        return 128 if not is_dropout else 64
    if head_dim <= 96:
        return 64
    if head_dim <= 128:
        if is_sm8x:
            return 64 if (not is_dropout and causal) else 32
        return 64 if not is_dropout else 32
    if head_dim <= 160:
        return 64 if is_sm8x else 32
    return 64


__all__ = [
    "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
]


def _check(q, k, v):
    if q.shape[-1] > 256:
        raise RuntimeError("FlashAttention forward only supports head dimension at most 256")
    if k.shape[-2] == 0 or q.shape[-2] % k.shape[-2] != 0:
        raise RuntimeError("Number of heads in key/value must divide number of heads in query")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise RuntimeError("query and key must have the same dtype")
    if not q.is_floating_point():
        raise RuntimeError("FlashAttention only support fp16 and bf16 data type")


def _scale(q, softmax_scale):
    return q.shape[-1] ** (-0.5) if softmax_scale is None else float(softmax_scale)


def _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs):
    _check(q, k, v)
    left, right = _impl.window_bounds(causal, window_size, k.shape[1])
    out, lse, probs = _impl.attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=_scale(q, softmax_scale), left=left,
        right=right, softcap=float(softcap or 0.0), alibi_slopes=alibi_slopes, dropout_p=float(dropout_p),
        want_lse=return_attn_probs, want_probs=return_attn_probs)
    out = out.transpose(1, 2)
    if return_attn_probs:
        probs = _kernel_probs(probs, q.shape[-1], dropout_p > 0, causal)
    return (out, lse, probs) if return_attn_probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q: (batch, seqlen_q, nheads, headdim); k, v: (batch, seqlen_k, nheads_k, headdim).

    Returns out (batch, seqlen_q, nheads, headdim), and with return_attn_probs also
    softmax_lse (batch, nheads, seqlen_q) float32 and the attention probabilities.
    """
    return _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv: (batch, seqlen, 3, nheads, headdim)."""
    q, k, v = qkv.unbind(dim=2)
    return _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q: (batch, seqlen_q, nheads, headdim); kv: (batch, seqlen_k, 2, nheads_k, headdim)."""
    k, v = kv.unbind(dim=2)
    return _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs)


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
            window_size, softcap, alibi_slopes, return_attn_probs, block_table=None):
    _check(q, k, v)
    if block_table is not None:
        raise NotImplementedError("flash_attn_varlen_func: a paged KV cache (block_table) is not provided by "
                                  "transfer's flash_attn; pass contiguous k/v")
    if cu_seqlens_q.dtype != torch.int32 or cu_seqlens_k.dtype != torch.int32:
        raise RuntimeError("cu_seqlens_q must have dtype int32")
    left, right = _impl.window_bounds(causal, window_size, int(max_seqlen_k))
    out, lse, probs = _impl.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), scale=_scale(q, softmax_scale),
        left=left, right=right, softcap=float(softcap or 0.0), alibi_slopes=alibi_slopes, dropout_p=float(dropout_p),
        want_lse=return_attn_probs, want_probs=return_attn_probs)
    if return_attn_probs:
        probs = _kernel_probs(_per_sequence(probs, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k)),
                              q.shape[-1], dropout_p > 0, causal)
    return (out, lse, probs) if return_attn_probs else out


def _per_sequence(probs, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """The varlen probabilities in flash_attn's layout, [batch, H, max_seqlen_q, max_seqlen_k]: sequence b's block
    at the top-left of [b], zeros elsewhere (flash_attn also rounds the last two sizes up to 128). Reads the lengths
    on the host: a debugging output."""
    if probs is None or probs.dim() == 4:
        return probs
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    out = probs.new_zeros(len(starts_q) - 1, probs.shape[0], max_seqlen_q, max_seqlen_k)
    for b in range(len(starts_q) - 1):
        nq, nk = starts_q[b + 1] - starts_q[b], starts_k[b + 1] - starts_k[b]
        out[b, :, :nq, :nk] = probs[:, starts_q[b]:starts_q[b + 1], starts_k[b]:starts_k[b + 1]]
    return out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q: (total_q, nheads, headdim), k, v: (total_k, nheads_k, headdim); cu_seqlens_*: (batch + 1,) int32.

    Returns out (total_q, nheads, headdim); with return_attn_probs also softmax_lse
    (nheads, total_q) float32 and the probabilities.
    """
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                   causal, window_size, softcap, alibi_slopes, return_attn_probs, block_table)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv: (total, 3, nheads, headdim)."""
    q, k, v = qkv.unbind(dim=1)
    return _varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                   window_size, softcap, alibi_slopes, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q: (total_q, nheads, headdim); kv: (total_k, 2, nheads_k, headdim)."""
    k, v = kv.unbind(dim=1)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                   causal, window_size, softcap, alibi_slopes, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = None,
                            cache_batch_idx: Optional[torch.Tensor] = None, cache_leftpad: Optional[torch.Tensor] = None,
                            block_table: Optional[torch.Tensor] = None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0, return_softmax_lse=False):
    """Incremental decoding: k/v (if given) are written into k_cache/v_cache in place at
    cache_seqlens (rotated by rotary_cos/sin at those positions: cache_seqlens counts from the cache's
    start, left padding included, as flash_attn's kernel and its tests have it), then q attends to each
    sequence's cache[leftpad : seqlen + new]. Inference only, as in flash_attn."""
    if block_table is not None:
        raise NotImplementedError("flash_attn_with_kvcache: a paged KV cache (block_table) is not provided by "
                                  "transfer's flash_attn; use a contiguous k_cache/v_cache")
    _check(q, k_cache, v_cache)
    scale = _scale(q, softmax_scale)
    batch, seqlen_q = q.shape[0], q.shape[1]
    if cache_seqlens is None:
        lengths = [k_cache.shape[1]] * batch
    elif isinstance(cache_seqlens, int):
        lengths = [cache_seqlens] * batch
    else:
        lengths = cache_seqlens.tolist()
    slots = list(range(batch)) if cache_batch_idx is None else cache_batch_idx.tolist()
    pads = [0] * batch if cache_leftpad is None else cache_leftpad.tolist()
    new = 0 if k is None else k.shape[1]
    local = causal or tuple(window_size) != (-1, -1)
    from flash_attn.layers.rotary import apply_rotary_emb

    outs, lses = [], []
    for b in range(batch):
        slot, length, pad = slots[b], int(lengths[b]), int(pads[b])
        qb = q[b:b + 1]
        if k is not None:
            kb, vb = k[b:b + 1], v[b:b + 1]
            if rotary_cos is not None:
                kb = apply_rotary_emb(kb, rotary_cos, rotary_sin, interleaved=rotary_interleaved,
                                      seqlen_offsets=length)
            k_cache[slot, length:length + new] = kb[0]
            v_cache[slot, length:length + new] = vb[0]
        if rotary_cos is not None and k is not None:
            if local:
                qb = apply_rotary_emb(qb, rotary_cos, rotary_sin, interleaved=rotary_interleaved,
                                      seqlen_offsets=length)
            else:  # every query token at position cache_seqlens
                position = length
                cos = rotary_cos[position:position + 1].expand(seqlen_q, -1)
                sin = rotary_sin[position:position + 1].expand(seqlen_q, -1)
                qb = apply_rotary_emb(qb, cos, sin, interleaved=rotary_interleaved)
        keys, values = k_cache[slot:slot + 1, pad:length + new], v_cache[slot:slot + 1, pad:length + new]
        left, right = _impl.window_bounds(causal, window_size, keys.shape[1])
        slopes = alibi_slopes if alibi_slopes is None or alibi_slopes.dim() == 1 else alibi_slopes[b]
        out, lse, _ = _impl.attention(qb.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), scale=scale,
                                      left=left, right=right, softcap=float(softcap or 0.0), alibi_slopes=slopes,
                                      want_lse=return_softmax_lse)
        outs.append(out.transpose(1, 2))
        lses.append(lse)
    out = torch.cat(outs)
    return (out, torch.cat(lses)) if return_softmax_lse else out


del math
