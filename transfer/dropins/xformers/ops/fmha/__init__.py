"""xformers.ops.fmha (0.0.29 API) on SDPA (transfer/dropins/_attention.py).

``memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
output_dtype=None)``: tensors [B, M, H, K] (also [B, M, K], and [B, M, G, H, K] for grouped
heads); scale defaults to 1/sqrt(K); ``p`` is dropout; ``attn_bias`` a tensor broadcastable to
[B, H, Mq, Mk] or one of `attn_bias`'s classes. ``op`` chooses a CUDA kernel: xformers' operator classes (``cutlass.FwOp``, the
``MemoryEfficientAttention*Op`` pairs, fmha/common.py) are accepted and every one computes the same
attention. A bias type not listed raises TypeError.
"""

from transfer.dropins._missing import missing
import math

import torch

from transfer.dropins import _attention as _impl
from xformers.ops.fmha import attn_bias  # noqa: F401
from xformers.ops.fmha import attn_bias as _biases
from xformers.ops.fmha.attn_bias import (  # noqa: F401 (the biases xformers' fmha re-exports, and no others)
    VARLEN_BIASES, AttentionBias, BlockDiagonalMask, LowerTriangularMask,
)
from xformers.ops.fmha import (  # noqa: F401,E402
    ck, ck_decoder, ck_splitk, common, cutlass, flash, flash3, triton_splitk,
)
from xformers.ops.fmha.common import (  # noqa: F401
    AttentionBwOpBase, AttentionFwOpBase, AttentionOp, AttentionOpBase, Context, Gradients, Inputs,
)
from xformers.ops.fmha import dispatch  # noqa: F401,E402

#: xformers' registry of the operators it tests, here the ones given in full (cutlass's, flash's): on CUDA
#: xformers 0.0.29 also lists flash3 and triton_splitk, which transfer names only
ALL_FW_OPS = [cutlass.FwOp, flash.FwOp]
ALL_BW_OPS = [cutlass.BwOp, flash.BwOp]

MemoryEfficientAttentionCutlassOp = (cutlass.FwOp, cutlass.BwOp)
MemoryEfficientAttentionCutlassFwdFlashBwOp = (cutlass.FwOp, flash.BwOp)
MemoryEfficientAttentionFlashAttentionOp = (flash.FwOp, flash.BwOp)
MemoryEfficientAttentionCkOp = (ck.FwOp, ck.BwOp)
MemoryEfficientAttentionCkDecoderOp = (ck_decoder.FwOp, ck.BwOp)
MemoryEfficientAttentionSplitKCkOp = (ck_splitk.FwOp, ck.BwOp)


def _window(bias):
    """(left, right) of a causal bias: right 0, left window - 1 (or unbounded)."""
    return (-1 if bias._window is None else bias._window - 1), 0


def memory_efficient_attention(query, key, value, attn_bias=None, p: float = 0.0, scale=None, *, op=None,
                               output_dtype=None):
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(2), key.unsqueeze(2), value.unsqueeze(2)
        if isinstance(attn_bias, torch.Tensor) and attn_bias.dim() == 3:  # [B, Mq, Mk] -> one head
            attn_bias = attn_bias.unsqueeze(1)
    grouped = query.dim() == 5
    if grouped:
        b, m, g, h, kdim = query.shape
        query = query.reshape(b, m, g * h, kdim)
        key = key.reshape(key.shape[0], key.shape[1], -1, key.shape[-1])
        value = value.reshape(value.shape[0], value.shape[1], -1, value.shape[-1])
    scale = query.shape[-1] ** -0.5 if scale is None else float(scale)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if attn_bias is None or isinstance(attn_bias, torch.Tensor):
        extra = attn_bias
        out = _impl.attention(q, k, v, scale=scale, left=-1, right=-1, dropout_p=p, top_left=True, bias=extra)[0]
    elif isinstance(attn_bias, _biases.BlockDiagonalMask):
        if query.shape[0] != 1:
            raise ValueError(f"BlockDiagonalMask expects packed inputs of batch size 1, got {tuple(query.shape)}")
        left, right = _window(attn_bias) if attn_bias._causal else (-1, -1)
        cu_q = attn_bias.q_seqinfo.seqstart.to(query.device)
        cu_k = attn_bias.k_seqinfo.seqstart.to(query.device)
        out = _impl.varlen_attention(query[0], key[0], value[0], cu_q, cu_k, attn_bias.q_seqinfo.max_seqlen,
                                     attn_bias.k_seqinfo.max_seqlen, scale=scale, left=left, right=right,
                                     dropout_p=p, top_left=attn_bias._top_left)[0].unsqueeze(0).transpose(1, 2)
    elif isinstance(attn_bias, _biases.BlockDiagonalPaddedKeysMask):
        out = _padded_keys(query, key, value, attn_bias, scale, p).transpose(1, 2)
    elif isinstance(attn_bias, _biases.LocalAttentionFromBottomRightMask):
        out = _impl.attention(q, k, v, scale=scale, left=attn_bias.window_left, right=attn_bias.window_right,
                              dropout_p=p, top_left=False)[0]
    elif isinstance(attn_bias, (_biases.LowerTriangularMask, _biases.LowerTriangularFromBottomRightMask)):
        left, right = _window(attn_bias)
        extra = attn_bias._bias if isinstance(attn_bias, _biases.LowerTriangularMaskWithTensorBias) else None
        out = _impl.attention(q, k, v, scale=scale, left=left, right=right, dropout_p=p,
                              top_left=attn_bias._top_left, bias=extra)[0]
    else:
        raise TypeError(f"memory_efficient_attention: attn_bias of type {type(attn_bias).__name__} is not provided "
                        "by transfer's xformers (a torch.Tensor, LowerTriangularMask*, BlockDiagonal* masks are)")
    out = out.transpose(1, 2)
    if grouped:
        out = out.reshape(b, m, g, h, -1)
    if squeeze:
        out = out.squeeze(2)
    return out if output_dtype is None else out.to(output_dtype)


def _padded_keys(query, key, value, attn_bias, scale, p):
    """The padded-keys masks: each block's keys in use gathered (the padding never read), then the packed
    varlen attention, causal blocks from their bottom-right corner; [1, Mq, H, K] out."""
    if query.shape[0] != 1 or key.shape[0] != 1:
        raise ValueError(f"{type(attn_bias).__name__} expects packed inputs of batch size 1, got query "
                         f"{tuple(query.shape)} and key {tuple(key.shape)}")
    if key.shape[1] != attn_bias.k_seqinfo.seqstart_py[-1] or query.shape[1] != attn_bias.q_seqinfo.seqstart_py[-1]:
        raise ValueError(f"{type(attn_bias).__name__}: query {tuple(query.shape)} / key {tuple(key.shape)} do not "
                         f"match the bias (queries {attn_bias.q_seqinfo.seqstart_py[-1]}, keys with padding "
                         f"{attn_bias.k_seqinfo.seqstart_py[-1]})")
    used = torch.cat([torch.arange(s, e, device=key.device) for s, e in attn_bias.k_seqinfo.intervals()])
    lens = attn_bias.k_seqinfo.seqlen_py
    cu_k = torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32, device=query.device)
    left, right = _window(attn_bias) if attn_bias._causal else (-1, -1)
    return _impl.varlen_attention(query[0], key[0, used], value[0, used], attn_bias.q_seqinfo.seqstart.to(query.device),
                                  cu_k, attn_bias.q_seqinfo.max_seqlen, attn_bias.k_seqinfo.max_seqlen, scale=scale,
                                  left=left, right=right, dropout_p=p, top_left=False)[0].unsqueeze(0)


def memory_efficient_attention_forward(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                                       output_dtype=None):
    return memory_efficient_attention(query, key, value, attn_bias, p, scale, op=op, output_dtype=output_dtype)


def _lse(inp: Inputs) -> torch.Tensor:
    """The log-sum-exp over keys of the scaled scores plus bias, float32, [B, H, Mq] ([B, G, H, Mq] for
    grouped heads): what xformers' kernels return beside the output (rows that see no key: -inf)."""
    q, k, _ = inp.get_qkv_in_bmghk()
    b, mq, g, h, kdim = q.shape
    q = q.reshape(b, mq, g * h, kdim).transpose(1, 2).float()
    k = k.reshape(k.shape[0], k.shape[1], -1, k.shape[-1]).transpose(1, 2).float()
    scores = (q @ k.transpose(-1, -2)) * inp.scale_float
    bias = inp.attn_bias
    if isinstance(bias, AttentionBias):
        bias = bias.materialize(tuple(scores.shape), dtype=torch.float32, device=scores.device)
    if bias is not None:
        scores = scores + (bias.float().unsqueeze(1) if bias.dim() == 3 else bias.float())
    lse = torch.logsumexp(scores, dim=-1)
    return lse.reshape(b, g, h, mq) if inp.query.ndim == 5 else lse


def _lse_per_block(lse: torch.Tensor, attn_bias) -> torch.Tensor:
    """[1, H, total] -> [blocks, H, longest block] (padding +inf): the layout of kernels whose
    VARLEN_LSE_PACKED is False (cutlass)."""
    blocks = [lse[0, :, s:e] for s, e in attn_bias.q_seqinfo.intervals()]
    width = max(e - s for s, e in attn_bias.q_seqinfo.intervals())
    return torch.stack([torch.nn.functional.pad(x, (0, width - x.shape[-1]), value=math.inf) for x in blocks])


def memory_efficient_attention_forward_requires_grad(query, key, value, attn_bias=None, p=0.0, scale=None, *,
                                                     op=None, output_dtype=None):
    """(output, lse) as xformers: lse [B, H, Mq] float32, for `memory_efficient_attention_backward`."""
    if p != 0.0:
        raise NotImplementedError("dropout is not supported on the non-autograd API. If you want to use dropout, "
                                  "please call `memory_efficient_attention` directly")
    out, ctx = (op or cutlass.FwOp).apply(Inputs(query, key, value, attn_bias, p, scale, output_dtype), True)
    return out, ctx.lse


def memory_efficient_attention_backward(grad, output, lse, query, key, value, attn_bias=None, p=0.0, scale=None,
                                        *, op=None):
    """(dq, dk, dv) of the attention for the output gradient ``grad``, as xformers (the forward is recomputed)."""
    if p != 0.0:
        raise NotImplementedError("dropout is not supported on the non-autograd API. If you want to use dropout, "
                                  "please call `memory_efficient_attention` directly")
    g = (op or cutlass.BwOp).apply(Context(out=output, lse=lse), Inputs(query, key, value, attn_bias, p, scale), grad)
    return g.dq, g.dk, g.dv


_PROVIDED = sorted(n for n in dir() if not n.startswith('_') and n not in ('torch', 'missing'))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing('xformers.ops.fmha', name, _PROVIDED, 'xformers')
