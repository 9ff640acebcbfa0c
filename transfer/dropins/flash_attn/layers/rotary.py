"""flash_attn.layers.rotary (2.7 API) in plain torch.

``apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
cu_seqlens=None, max_seqlen=None)``: x (batch, seqlen, nheads, headdim), or
(total, nheads, headdim) with cu_seqlens; cos/sin (seqlen_ro, rotary_dim / 2); the
first rotary_dim features rotate (GPT-NeoX halves, or GPT-J pairs when interleaved),
the rest pass through. Computed in float32 and cast back, as the kernel does.
"""

from typing import Optional, Tuple, Union

import torch

__all__ = ["apply_rotary_emb", "apply_rotary_emb_func", "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_",
           "apply_rotary_emb_torch", "rotate_half", "RotaryEmbedding"]


def _positions(x, seqlen_offsets, cu_seqlens, max_seqlen):
    """Position of every token: (batch, seqlen) for dense x, (total,) for varlen."""
    device = x.device
    if cu_seqlens is None:
        pos = torch.arange(x.shape[1], device=device).view(1, -1)
        if isinstance(seqlen_offsets, torch.Tensor):
            return pos + seqlen_offsets.to(device=device, dtype=torch.long).view(-1, 1)
        return pos + int(seqlen_offsets)
    cu = cu_seqlens.to(device=device, dtype=torch.long)
    token = torch.arange(x.shape[0], device=device)
    seq = torch.searchsorted(cu[1:], token, right=True)
    pos = token - cu[seq]
    if isinstance(seqlen_offsets, torch.Tensor):
        return pos + seqlen_offsets.to(device=device, dtype=torch.long)[seq]
    return pos + int(seqlen_offsets)


def _rotate(x, cos, sin, interleaved):
    rd = cos.shape[-1] * 2
    head, tail = x[..., :rd].float(), x[..., rd:]
    cos, sin = cos.float().unsqueeze(-2), sin.float().unsqueeze(-2)  # broadcast over heads
    if interleaved:
        even, odd = head[..., 0::2], head[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    else:
        first, second = head[..., : rd // 2], head[..., rd // 2:]
        rotated = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    return torch.cat((rotated.to(x.dtype), tail), dim=-1)


def _rotated(x, cos, sin, interleaved, seqlen_offsets, cu_seqlens, max_seqlen, conjugate=False):
    rd = cos.shape[-1] * 2
    if rd > x.shape[-1]:
        raise AssertionError("rotary_dim must be <= headdim")
    pos = _positions(x, seqlen_offsets, cu_seqlens, max_seqlen)
    sin = sin[pos]
    return _rotate(x, cos[pos], -sin if conjugate else sin, interleaved)


class _ApplyRotaryEmb(torch.autograd.Function):
    """flash_attn's ApplyRotaryEmb: x rotated (in place when asked, also on a leaf that requires grad, as
    the kernel writes in place); the gradient of x is the gradient rotated back; none for cos and sin."""

    @staticmethod
    def forward(ctx, x, cos, sin, interleaved, inplace, seqlen_offsets, cu_seqlens, max_seqlen):
        out = _rotated(x, cos, sin, interleaved, seqlen_offsets, cu_seqlens, max_seqlen)
        if isinstance(seqlen_offsets, torch.Tensor):
            ctx.save_for_backward(cos, sin, cu_seqlens, seqlen_offsets)
            ctx.seqlen_offsets = None
        else:
            ctx.save_for_backward(cos, sin, cu_seqlens)
            ctx.seqlen_offsets = seqlen_offsets
        ctx.interleaved, ctx.inplace, ctx.max_seqlen = interleaved, inplace, max_seqlen
        if inplace:
            x.copy_(out)
            return x
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.seqlen_offsets is None:
            cos, sin, cu_seqlens, offsets = ctx.saved_tensors
        else:
            (cos, sin, cu_seqlens), offsets = ctx.saved_tensors, ctx.seqlen_offsets
        dx = _rotated(grad, cos, sin, ctx.interleaved, offsets, cu_seqlens, ctx.max_seqlen, conjugate=True)
        return dx, None, None, None, None, None, None, None


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets: Union[int, torch.Tensor] = 0,
                     cu_seqlens: Optional[torch.Tensor] = None, max_seqlen: Optional[int] = None):
    """Rotary embedding of x; returns x rotated (x itself, changed, when inplace)."""
    return _ApplyRotaryEmb.apply(x, cos, sin, interleaved, inplace, seqlen_offsets, cu_seqlens, max_seqlen)


apply_rotary_emb_func = apply_rotary_emb


def rotate_half(x, interleaved=False):
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_emb_torch(x, cos, sin, interleaved=False):
    """flash_attn's reference: x (batch, seqlen, nheads, headdim); cos, sin (seqlen, rotary_dim / 2) or
    (batch, seqlen, rotary_dim / 2); computed in x's dtype, as upstream's."""
    ro_dim = cos.shape[-1] * 2
    assert ro_dim <= x.shape[-1]
    if interleaved:
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    else:
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return torch.cat([x[..., :ro_dim] * cos + rotate_half(x[..., :ro_dim], interleaved) * sin, x[..., ro_dim:]],
                     dim=-1)


class _ApplyRotaryEmbQKV(torch.autograd.Function):
    """flash_attn's ApplyRotaryEmbQKV_ / ApplyRotaryEmbKV_: q and k rotated in place inside qkv (or k inside kv)."""

    @staticmethod
    def forward(ctx, qkv, cos, sin, cos_k, sin_k, interleaved, seqlen_offsets, num_heads_q, kv_only):
        cos_k = cos if cos_k is None else cos_k
        sin_k = sin if sin_k is None else sin_k
        parts = _qk(qkv, num_heads_q, kv_only)
        for part, (c, s) in zip(parts, [(cos_k, sin_k)] if kv_only else [(cos, sin), (cos_k, sin_k)]):
            part.copy_(_rotated(part, c, s, interleaved, seqlen_offsets, None, None))
        ctx.save_for_backward(cos, sin, cos_k, sin_k)
        ctx.args = (interleaved, seqlen_offsets, num_heads_q, kv_only)
        return qkv

    @staticmethod
    def backward(ctx, grad):
        cos, sin, cos_k, sin_k = ctx.saved_tensors
        interleaved, offsets, num_heads_q, kv_only = ctx.args
        grad = grad.clone()
        parts = _qk(grad, num_heads_q, kv_only)
        for part, (c, s) in zip(parts, [(cos_k, sin_k)] if kv_only else [(cos, sin), (cos_k, sin_k)]):
            part.copy_(_rotated(part, c, s, interleaved, offsets, None, None, conjugate=True))
        return grad, None, None, None, None, None, None, None, None


def _qk(qkv, num_heads_q, kv_only):
    if kv_only:
        return [qkv[:, :, 0]]
    if qkv.dim() == 5:
        return [qkv[:, :, 0], qkv[:, :, 1]]
    if num_heads_q is None:
        raise AssertionError("num_heads_q must be given for a (batch, seqlen, heads, headdim) qkv")
    heads_k = (qkv.shape[2] - num_heads_q) // 2
    return [qkv[:, :, :num_heads_q], qkv[:, :, num_heads_q:num_heads_q + heads_k]]


def apply_rotary_emb_qkv_(qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False,
                          seqlen_offsets: Union[int, torch.Tensor] = 0, num_heads_q: Optional[int] = None):
    """qkv (batch, seqlen, 3, nheads, headdim), or (batch, seqlen, nheads_q + 2 * nheads_k, headdim)
    with num_heads_q: q and k rotated in place (k with cos_k/sin_k when given)."""
    return _ApplyRotaryEmbQKV.apply(qkv, cos, sin, cos_k, sin_k, interleaved, seqlen_offsets, num_heads_q, False)


def apply_rotary_emb_kv_(kv, cos, sin, interleaved=False, seqlen_offsets: Union[int, torch.Tensor] = 0):
    """kv (batch, seqlen, 2, nheads, headdim): k rotated in place."""
    return _ApplyRotaryEmbQKV.apply(kv, cos, sin, None, None, interleaved, seqlen_offsets, None, True)


class RotaryEmbedding(torch.nn.Module):
    """RoFormer rotary embedding (XPos when scale_base is set), applied in place to qkv / (q, kv)."""

    def __init__(self, dim: int, base=10000.0, interleaved=False, scale_base=None, pos_idx_in_fp32=True,
                 device=None):
        super().__init__()
        self.dim = dim
        self.base = float(base)
        self.pos_idx_in_fp32 = pos_idx_in_fp32
        self.register_buffer("inv_freq", self._compute_inv_freq(device), persistent=False)
        self.interleaved = interleaved
        self.scale_base = scale_base
        scale = ((torch.arange(0, dim, 2, device=device, dtype=torch.float32) + 0.4 * dim) / (1.4 * dim)
                 if scale_base is not None else None)
        self.register_buffer("scale", scale, persistent=False)
        self._seq_len_cached = 0
        self._cos_cached = self._sin_cached = self._cos_k_cached = self._sin_k_cached = None

    def _compute_inv_freq(self, device=None):
        return 1.0 / (self.base ** (torch.arange(0, self.dim, 2, device=device, dtype=torch.float32) / self.dim))

    def _update_cos_sin_cache(self, seqlen, device=None, dtype=None):
        if (seqlen > self._seq_len_cached or self._cos_cached is None or self._cos_cached.device != device
                or self._cos_cached.dtype != dtype or (self.training and self._cos_cached.is_inference())):
            self._seq_len_cached = seqlen
            if self.pos_idx_in_fp32:
                t = torch.arange(seqlen, device=device, dtype=torch.float32)
                inv_freq = self.inv_freq if self.inv_freq.dtype == torch.float32 else self._compute_inv_freq(device)
            else:
                t = torch.arange(seqlen, device=device, dtype=self.inv_freq.dtype)
                inv_freq = self.inv_freq
            freqs = torch.outer(t, inv_freq)
            if self.scale is None:
                self._cos_cached, self._sin_cached = torch.cos(freqs).to(dtype), torch.sin(freqs).to(dtype)
            else:
                power = (torch.arange(seqlen, dtype=self.scale.dtype, device=self.scale.device)
                         - seqlen // 2) / self.scale_base
                scale = self.scale.to(device=power.device) ** power.view(-1, 1)
                self._cos_cached = (torch.cos(freqs) * scale).to(dtype)
                self._sin_cached = (torch.sin(freqs) * scale).to(dtype)
                self._cos_k_cached = (torch.cos(freqs) / scale).to(dtype)
                self._sin_k_cached = (torch.sin(freqs) / scale).to(dtype)

    def forward(self, qkv, kv=None, seqlen_offset: Union[int, torch.Tensor] = 0, max_seqlen: Optional[int] = None,
                num_heads_q: Optional[int] = None) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        seqlen = qkv.shape[1]
        if max_seqlen is not None:
            self._update_cos_sin_cache(max_seqlen, device=qkv.device, dtype=qkv.dtype)
        elif isinstance(seqlen_offset, int):
            self._update_cos_sin_cache(seqlen + seqlen_offset, device=qkv.device, dtype=qkv.dtype)
        if kv is None:
            return apply_rotary_emb_qkv_(qkv, self._cos_cached, self._sin_cached, self._cos_k_cached,
                                         self._sin_k_cached, interleaved=self.interleaved,
                                         seqlen_offsets=seqlen_offset, num_heads_q=num_heads_q)
        q = apply_rotary_emb(qkv, self._cos_cached, self._sin_cached, interleaved=self.interleaved, inplace=True,
                             seqlen_offsets=seqlen_offset)
        cos_k = self._cos_cached if self.scale is None else self._cos_k_cached
        sin_k = self._sin_cached if self.scale is None else self._sin_k_cached
        kv = apply_rotary_emb_kv_(kv, cos_k, sin_k, interleaved=self.interleaved, seqlen_offsets=seqlen_offset)
        return q, kv
