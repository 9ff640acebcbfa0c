"""Attention with flash_attn's semantics on torch's SDPA, or npu_fusion_attention on npu.

One place for what flash_attn and xformers both need. Layout here is
[batch, heads, seq, dim] ("BHSD"); the public modules transpose.

Semantics (flash_attn 2.x, read in its interface and kernels):

* scores = q k^T * scale; with ``softcap > 0``: ``softcap * tanh(scores / softcap)``;
  then the alibi bias ``-slope * |i + sk - sq - j|``; then the mask; softmax; dropout
  (kept entries scaled by 1/(1-p)); times v.
* the mask: query i sees key j iff ``i + sk - sq - left <= j <= i + sk - sq + right``
  (a negative bound is unbounded; ``causal`` sets right = 0): causal is aligned to
  the bottom-right corner when sq != sk.
* a row that sees no key gives output 0 and log-sum-exp +inf (the kernel's
  ``sum == 0`` case), never NaN.
* ``lse`` is float32 [B, H, sq]: log sum exp of the (softcapped, biased, masked)
  scores, dropout not included.

Backends: `sdpa` (every target): torch.nn.functional.scaled_dot_product_attention
with ``is_causal`` for the square causal case and a boolean (or, with alibi, an
additive float) mask otherwise; GQA through ``enable_gqa`` (torch 2.5+) or repeated
k/v heads. softcap and the returned probabilities/LSE need the scores themselves,
which SDPA does not expose: those run the same formula explicitly (`_explicit`).
`npu` (torch_npu.npu_fusion_attention, used when it exists and the tensors are on
npu): see `npu_dense`.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

_SDPA_DOC = F.scaled_dot_product_attention.__doc__ or ""
HAS_GQA = "enable_gqa" in _SDPA_DOC  # torch 2.5+
HAS_SCALE = "scale=" in _SDPA_DOC  # torch 2.1+
_BIG = 2147483647  # npu_fusion_attention's "unbounded" token count
#: varlen: above this many (total_q * total_k) mask entries, one SDPA call per sequence
#: (reads cu_seqlens on the host once) instead of one call over a block-diagonal mask.
VARLEN_MASK_LIMIT = 1 << 24


def window_bounds(causal: bool, window_size, seqlen_k: int) -> Tuple[int, int]:
    """flash_attn's normalisation: (left, right), -1 meaning unbounded."""
    left, right = (int(window_size[0]), int(window_size[1])) if window_size is not None else (-1, -1)
    # flash_api.cpp (mha_fwd, then set_params_fprop), kept step by step: a bound >= seqlen_k
    # becomes unbounded, but when only one side is unbounded it is set back to seqlen_k.
    if left >= seqlen_k:
        left = -1
    if right >= seqlen_k:
        right = -1
    if causal:
        right = 0
    if left < 0 and right >= 0:
        left = seqlen_k
    if left >= 0 and right < 0:
        right = seqlen_k
    return left, right


def band(sq: int, sk: int, left: int, right: int, device, qpos=None, kpos=None, offset=None):
    """Boolean [sq, sk] (or per-token, for varlen) mask: True where query i may see key j."""
    i = torch.arange(sq, device=device).view(-1, 1) if qpos is None else qpos.view(-1, 1)
    j = torch.arange(sk, device=device).view(1, -1) if kpos is None else kpos.view(1, -1)
    diag = i + (sk - sq if offset is None else offset.view(-1, 1))
    allowed = None
    if left >= 0:
        allowed = j >= diag - left
    if right >= 0:
        upper = j <= diag + right
        allowed = upper if allowed is None else allowed & upper
    return allowed


def alibi_bias(slopes, sq: int, sk: int, device, dtype, qpos=None, kpos=None, offset=None, rows=None):
    """-slope * |i + sk - sq - j| as [B|1, H, sq, sk] (float32 slopes, `dtype` result)."""
    i = torch.arange(sq, device=device).view(-1, 1) if qpos is None else qpos.view(-1, 1)
    j = torch.arange(sk, device=device).view(1, -1) if kpos is None else kpos.view(1, -1)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    dist = (i + (sk - sq if offset is None else offset.view(-1, 1)) - j).abs().to(work)
    slopes = slopes.to(device=device, dtype=work)
    if slopes.dim() == 1:
        bias = -slopes.view(1, -1, 1, 1) * dist
    elif rows is None:  # (batch, heads)
        bias = -slopes.view(slopes.shape[0], slopes.shape[1], 1, 1) * dist
    else:  # varlen: each query row takes its sequence's slopes
        bias = -(slopes[rows].t().unsqueeze(-1)) * dist  # [H, tq, tk]
        bias = bias.unsqueeze(0)
    return bias.to(dtype)


def dead_rows(sq: int, sk: int, left: int, right: int, top_left: bool = False) -> Optional[torch.Tensor]:
    """Host-side: the query rows that see no key (None when there are none)."""
    rows = []
    shift = 0 if top_left else sk - sq
    for i in range(sq):
        lo = i + shift - left if left >= 0 else 0
        hi = i + shift + right if right >= 0 else sk - 1
        if max(lo, 0) > min(hi, sk - 1):
            rows.append(i)
    return torch.tensor(rows, dtype=torch.long) if rows else None


def _repeat_kv(k, v, heads):
    if k.shape[1] != heads:
        k = k.repeat_interleave(heads // k.shape[1], dim=1)
        v = v.repeat_interleave(heads // v.shape[1], dim=1)
    return k, v


def _explicit(q, k, v, scale, allowed, bias, dropout_p, softcap, want_probs):
    """The formula itself (softcap, probabilities, LSE). Returns (out, lse, probs)."""
    k, v = _repeat_kv(k, v, q.shape[1])
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    scores = torch.matmul(q.to(work), k.to(work).transpose(-1, -2)) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias.to(work)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    empty = torch.isneginf(lse)
    probs = torch.exp(scores - torch.where(empty, torch.zeros_like(lse), lse).unsqueeze(-1))
    if dropout_p > 0:
        keep = torch.rand_like(probs) >= dropout_p
        used = probs * keep / (1.0 - dropout_p)
    else:
        keep, used = None, probs
    out = torch.matmul(used, v.to(work)).to(q.dtype)
    lse = torch.where(empty, torch.full_like(lse, float("inf")), lse).to(torch.float32)
    if not want_probs:
        return out, lse, None
    shown = probs if keep is None else torch.where(keep, probs, -probs)  # flash_attn: negative = dropped
    return out, lse, shown.to(q.dtype)


def _sdpa(q, k, v, scale, allowed, bias, causal_square, dropout_p):
    if not HAS_GQA:  # torch < 2.5: no enable_gqa
        k, v = _repeat_kv(k, v, q.shape[1])
    mask = allowed
    if bias is not None:
        mask = bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))
        mask = mask.to(q.dtype)
    kwargs = {}
    if HAS_GQA and k.shape[1] != q.shape[1]:
        kwargs["enable_gqa"] = True
    if HAS_SCALE:
        kwargs["scale"] = scale
    elif scale != 1.0 / math.sqrt(q.shape[-1]):  # torch 2.0: no scale argument
        q = q * (scale * math.sqrt(q.shape[-1]))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          is_causal=causal_square and mask is None, **kwargs)


def attention(q, k, v, *, scale, left, right, softcap=0.0, alibi_slopes=None, dropout_p=0.0,
              want_lse=False, want_probs=False, top_left=False, bias=None):
    """Dense attention, BHSD. Returns (out, lse or None, probs or None).

    `top_left` aligns the window to the top-left corner instead (xformers'
    LowerTriangularMask); `bias` is an extra additive float bias (xformers' tensor bias).
    """
    sq, sk = q.shape[2], k.shape[2]
    extra = bias
    if alibi_slopes is None and softcap == 0 and not (want_lse or want_probs) and not top_left and extra is None:
        npu = _npu_op(q)
        if npu is not None:
            return npu_dense(npu, q, k, v, scale, left, right, dropout_p), None, None
    shift = torch.zeros((), dtype=torch.long, device=q.device) if top_left else None
    allowed = band(sq, sk, left, right, q.device, offset=shift)
    dead = dead_rows(sq, sk, left, right, top_left) if allowed is not None else None
    if dead is not None:  # a row that sees nothing: let it see everything, then zero it
        allowed = allowed.clone()
        allowed[dead.to(q.device)] = True
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    bias = alibi_bias(alibi_slopes, sq, sk, q.device, work) if alibi_slopes is not None else None
    if extra is not None:
        bias = extra if bias is None else bias + extra
    if softcap > 0 or want_lse or want_probs:
        out, lse, probs = _explicit(q, k, v, scale, allowed, bias, dropout_p, softcap, want_probs)
    else:
        causal_square = left < 0 and right == 0 and (sq == sk or top_left) and dead is None and bias is None
        out = _sdpa(q, k, v, scale, None if causal_square else allowed, bias, causal_square, dropout_p)
        lse = probs = None
    if dead is not None:
        keep = torch.ones(sq, dtype=torch.bool, device=q.device)
        keep[dead.to(q.device)] = False
        out = torch.where(keep.view(1, 1, -1, 1), out, torch.zeros((), dtype=out.dtype, device=out.device))
        if lse is not None:
            lse = torch.where(keep.view(1, 1, -1), lse, torch.full_like(lse, float("inf")))
        if probs is not None:
            probs = torch.where(keep.view(1, 1, -1, 1), probs, torch.zeros_like(probs))
    return out, lse, probs


def varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k, *, scale, left, right, softcap=0.0,
                     alibi_slopes=None, dropout_p=0.0, want_lse=False, want_probs=False, top_left=False):
    """Packed sequences [total, heads, dim] delimited by int32 cumulative lengths.

    Returns (out [total_q, H, D], lse [H, total_q] or None, probs or None). One call over
    a block-diagonal mask built on the device (no host sync) while total_q * total_k <=
    VARLEN_MASK_LIMIT; beyond, one call per sequence (the lengths are read once).
    """
    tq, tk = q.shape[0], k.shape[0]
    if alibi_slopes is None and softcap == 0 and not (want_lse or want_probs) and not top_left:
        npu = _npu_op(q)
        if npu is not None:
            return npu_varlen(npu, q, k, v, cu_q, cu_k, scale, left, right, dropout_p), None, None
    if tq * tk > VARLEN_MASK_LIMIT and not want_probs:
        return _varlen_loop(q, k, v, cu_q, cu_k, scale, left, right, softcap, alibi_slopes, dropout_p, want_lse,
                            top_left)
    device = q.device
    cu_q, cu_k = cu_q.to(device=device, dtype=torch.long), cu_k.to(device=device, dtype=torch.long)
    rows = torch.searchsorted(cu_q[1:], torch.arange(tq, device=device), right=True)
    cols = torch.searchsorted(cu_k[1:], torch.arange(tk, device=device), right=True)
    qpos, kpos = torch.arange(tq, device=device) - cu_q[rows], torch.arange(tk, device=device) - cu_k[cols]
    lq, lk = (cu_q[1:] - cu_q[:-1])[rows], (cu_k[1:] - cu_k[:-1])
    offset = lk[rows] - lq if not top_left else torch.zeros_like(lq)  # sk - sq of each query's sequence
    allowed = rows.view(-1, 1) == cols.view(1, -1)
    inside = band(tq, tk, left, right, device, qpos=qpos, kpos=kpos, offset=offset)
    if inside is not None:
        allowed = allowed & inside
    keep = allowed.any(dim=-1)
    allowed = allowed | ~keep.view(-1, 1)  # rows seeing nothing: computed on everything, zeroed below
    bias = None
    if alibi_slopes is not None:
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
        bias = alibi_bias(alibi_slopes, tq, tk, device, work, qpos=qpos, kpos=kpos, offset=offset,
                          rows=rows if alibi_slopes.dim() == 2 else None)
    q4, k4, v4 = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    if softcap > 0 or want_lse or want_probs:
        out, lse, probs = _explicit(q4, k4, v4, scale, allowed, bias, dropout_p, softcap, want_probs)
    else:
        out, lse, probs = _sdpa(q4, k4, v4, scale, allowed, bias, False, dropout_p), None, None
    out = out[0].transpose(0, 1)
    out = torch.where(keep.view(-1, 1, 1), out, torch.zeros((), dtype=out.dtype, device=device))
    if lse is not None:
        lse = torch.where(keep.view(1, -1), lse[0], torch.full_like(lse[0], float("inf")))
    if probs is not None:  # a row seeing nothing has no probabilities (0), as out (0) and lse (inf)
        probs = torch.where(keep.view(1, -1, 1), probs[0], torch.zeros((), dtype=probs.dtype, device=device))
    return out, lse, probs


def _varlen_loop(q, k, v, cu_q, cu_k, scale, left, right, softcap, alibi_slopes, dropout_p, want_lse, top_left):
    bounds_q, bounds_k = cu_q.tolist(), cu_k.tolist()  # the one host sync
    outs, lses = [], []
    for b in range(len(bounds_q) - 1):
        qs, ks = slice(bounds_q[b], bounds_q[b + 1]), slice(bounds_k[b], bounds_k[b + 1])
        slopes = alibi_slopes if alibi_slopes is None or alibi_slopes.dim() == 1 else alibi_slopes[b]
        out, lse, _ = attention(q[qs].transpose(0, 1).unsqueeze(0), k[ks].transpose(0, 1).unsqueeze(0),
                                v[ks].transpose(0, 1).unsqueeze(0), scale=scale, left=left, right=right, softcap=softcap,
                                alibi_slopes=slopes, dropout_p=dropout_p, want_lse=want_lse,
                                top_left=top_left)
        outs.append(out[0].transpose(0, 1))
        if lse is not None:
            lses.append(lse[0])
    return torch.cat(outs), (torch.cat(lses, dim=-1) if want_lse else None), None


# ---------------------------------------------------------------- npu

_COMPRESSED = {}


def _npu_op(q):
    """torch_npu.npu_fusion_attention when the tensors are on npu and the op exists."""
    if q.device.type != "npu":
        return None
    import sys

    torch_npu = sys.modules.get("torch_npu")
    return getattr(torch_npu, "npu_fusion_attention", None)


def compressed_mask(device):
    """The 2048x2048 upper-triangular boolean mask sparse_mode 2/3/4 take (True = masked)."""
    mask = _COMPRESSED.get(device)
    if mask is None:
        mask = _COMPRESSED[device] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=device), diagonal=1)
    return mask


def _sparse(left, right):
    """(sparse_mode, pre_tockens, next_tockens, needs the mask) for flash_attn's window."""
    if left < 0 and right < 0:
        return 0, _BIG, _BIG, False
    if left < 0 and right == 0:
        return 3, _BIG, 0, True  # rightDownCausal
    return 4, (left if left >= 0 else _BIG), (right if right >= 0 else _BIG), True  # band, from the bottom-right


def npu_dense(op, q, k, v, scale, left, right, dropout_p):
    """npu_fusion_attention, BSND. Rows that see no key are zeroed, as flash_attn returns them."""
    sq, sk = q.shape[2], k.shape[2]
    mode, pre, nxt, needs_mask = _sparse(left, right)
    out = op(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), q.shape[1], "BSND",
             atten_mask=compressed_mask(q.device) if needs_mask else None, scale=scale, keep_prob=1.0 - dropout_p,
             pre_tockens=pre, next_tockens=nxt, sparse_mode=mode)[0].transpose(1, 2)
    dead = dead_rows(sq, sk, left, right) if needs_mask else None
    if dead is not None:
        keep = torch.ones(sq, dtype=torch.bool, device=q.device)
        keep[dead.to(q.device)] = False
        out = torch.where(keep.view(1, 1, -1, 1), out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out


def npu_varlen(op, q, k, v, cu_q, cu_k, scale, left, right, dropout_p):
    """npu_fusion_attention, TND: the op takes the cumulative lengths as host lists (one sync)."""
    mode, pre, nxt, needs_mask = _sparse(left, right)
    lens_q, lens_k = cu_q[1:].tolist(), cu_k[1:].tolist()
    out = op(q, k, v, q.shape[1], "TND", atten_mask=compressed_mask(q.device) if needs_mask else None,
             scale=scale, keep_prob=1.0 - dropout_p, pre_tockens=pre, next_tockens=nxt, sparse_mode=mode,
             actual_seq_qlen=lens_q, actual_seq_kvlen=lens_k)[0]
    if needs_mask:
        starts_q, starts_k = [0] + lens_q[:-1], [0] + lens_k[:-1]
        dead = []
        for b, (a, e) in enumerate(zip(starts_q, lens_q)):
            rows = dead_rows(e - a, lens_k[b] - starts_k[b], left, right)
            if rows is not None:
                dead.extend((rows + a).tolist())
        if dead:
            keep = torch.ones(q.shape[0], dtype=torch.bool, device=q.device)
            keep[torch.tensor(dead, device=q.device)] = False
            out = torch.where(keep.view(-1, 1, 1), out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out
