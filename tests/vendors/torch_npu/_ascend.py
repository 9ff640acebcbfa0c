"""The torch_npu names beyond ``torch.npu``'s CUDA-style core that frameworks import.

Mirrors torch_npu 2.13.0 (the PyPI wheel, read without importing it):

* ``torch.npu.set_compile_mode(jit_compile=False)`` and
  ``torch.npu.is_jit_compile_false()`` (``torch_npu/npu/npu_config.py``);
  MMEngine calls ``set_compile_mode`` while detecting the npu and silently
  takes its CUDA path if it fails.
* ``torch_npu.npu.utils``: the device/stream helpers of the real module
  (``torch_npu/npu/utils.py``), plus ``get_cann_version``, ``get_soc_version``,
  ``is_support_inf_nan``; MMEngine imports it to detect the npu.
* ``torch_npu.npu_fusion_attention`` (an op of the real wheel,
  ``npu_native_functions_by_codegen.yaml``): transformers imports it when it
  detects an npu. Plain attention math on the device; see ``npu_fusion_attention``.
* ``torch_npu.optim``: ``NpuFused{SGD,Adadelta,Adam,AdamW,RMSprop}``
  (transformers' ``adamw_torch_npu_fused``, MMEngine's optimizer registry) as
  subclasses of the torch optimizers with the same update rule.
* ``aten::_fused_adamw_`` for the npu (``AdamW(fused=True)``) on torches whose
  CPU has no such kernel (before 2.4); see ``register_fused_adamw``.

Behaviour of the real functions that cannot be observed here is listed in
``tests/vendors/README.md``.
"""

from __future__ import annotations

import sys
import types

import torch

CANN_VERSION = "8.3.RC1"  # what get_cann_version() reports (simulated)

_FULL_WINDOW = 2147483647


def extend(npu: types.ModuleType, package: types.ModuleType) -> None:
    """Add the names above to ``torch.npu`` (``npu``) and to the ``torch_npu`` package."""
    state = {"jit_compile": False}

    def set_compile_mode(jit_compile=False):
        """Switch operator compilation (Ascend jit compile) on or off; recorded only."""
        if npu.is_initialized():
            npu.synchronize()
        state["jit_compile"] = bool(jit_compile)

    def is_jit_compile_false() -> bool:
        npu._lazy_init()
        return not state["jit_compile"]

    def utilization(device=None):
        """torch_npu 2.13.0's (torch_npu/npu/__init__.py): the index as its _get_device_index reads it
        (optional: None is the current device; another device type raises ValueError), AssertionError
        "Invalid device id" outside [0, device_count()), then the device's utilization in percent
        (an int, from ACL). The simulated device runs each op on the host when it is called, so it is
        idle whenever Python asks: 0."""
        device_id = npu._get_device_index(device, optional=True)
        if device_id < 0 or device_id >= npu.device_count():
            raise AssertionError("Invalid device id" + _pta_error_value())
        npu._lazy_init()
        return 0

    for fn in (set_compile_mode, is_jit_compile_false, utilization):
        fn.__module__ = npu.__name__
        setattr(npu, fn.__name__, fn)
        npu.__all__.append(fn.__name__)

    utils = types.ModuleType(f"{npu.__name__}.utils", "torch_npu.npu.utils (simulated).")
    for name in ("synchronize", "set_device", "current_device", "device", "device_of", "StreamContext",
                 "stream", "set_stream", "current_stream", "default_stream", "is_bf16_supported"):
        setattr(utils, name, getattr(npu, name))
    utils.get_cann_version = get_cann_version
    utils.get_soc_version = get_soc_version
    utils.is_support_inf_nan = lambda: True
    utils.__all__ = [n for n in vars(utils) if not n.startswith("_")]
    npu.utils = utils
    sys.modules[utils.__name__] = sys.modules[f"torch.{npu.__name__.rsplit('.', 1)[1]}.utils"] = utils

    package.npu_fusion_attention = npu_fusion_attention
    package.optim = _optim_module(package.__name__)
    sys.modules[package.optim.__name__] = package.optim
    _kept["fused_adamw"] = register_fused_adamw()


_kept = {}  # libraries of kernels registered here, alive for the process


def _pta_error_value() -> str:
    """torch_npu's pta_error(ErrCode.VALUE) suffix."""
    return _pta_error(3, "invalid value")


def _pta_error(code: int, text: str) -> str:
    """torch_npu's pta_error(ErrCode.<X>) suffix for the code and text of <X> (torch_npu/utils/_error_code.py:
    ERR00<code> PTA <text>; empty when TORCH_NPU_COMPACT_ERROR_OUTPUT=1)."""
    import os
    import time

    if int(os.getenv("TORCH_NPU_COMPACT_ERROR_OUTPUT", "0")):
        return ""
    return "\n[ERROR] {} (PID:{}, Device:-1, RankID:-1) ERR00{:0>3d} PTA {}".format(
        time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime()), os.getpid(), code, text)


def get_soc_version() -> int:
    """The chip's SocVersion number (torch_npu/npu/_backends.py); MMEngine compares it with 220."""
    from . import SOC, SOCS

    return SOCS[SOC][0]


def get_cann_version(module="CANN"):
    """Version string of an installed CANN module ("" when unknown), as in torch_npu 2.13."""
    return CANN_VERSION if module == "CANN" else ""


# ----------------------------------------------------------------- attention

def _to_bnsd(t: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        b, s, h = t.shape
        return t.view(b, s, heads, h // heads).transpose(1, 2)
    if layout == "SBH":
        s, b, h = t.shape
        return t.view(s, b, heads, h // heads).permute(1, 2, 0, 3)
    raise NotImplementedError(
        f"npu_fusion_attention: input_layout {layout!r} is not simulated (BSH, SBH, BSND, BNSD are); "
        f"use one of those, or run on a real Ascend device"
    )


def _from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    b, n, s, d = t.shape
    if layout == "BSH":
        return t.transpose(1, 2).reshape(b, s, n * d)
    return t.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


_COMPRESSED = 2048  # sparse_mode 2/3/4 take the optimised 2048x2048 upper-triangular mask


def _mask(atten_mask, sparse_mode: int, sq: int, skv: int, pre: int, nxt: int, device):
    """Boolean mask, True where attention is NOT allowed, broadcastable to [B, N, Sq, Skv].

    As the CANN op's tiling decides (FlashAttentionScore, read in its published sources
    and the sparse_mode documentation): without ``atten_mask`` nothing is masked and
    sparse_mode / pre_tockens / next_tockens are ignored; mode 0 keeps keys j with
    i - pre <= j <= i + next (top-left); 1 takes the mask as given; 2 is causal from the
    top-left; 3 causal from the bottom-right; 4 a band counted from the bottom-right
    (pre/next shifted by Skv - Sq); 2-4 need the compressed 2048x2048 mask.
    """
    if atten_mask is None:
        return None
    q = torch.arange(sq, device=device).view(-1, 1)
    k = torch.arange(skv, device=device).view(1, -1)
    if sparse_mode in (2, 3, 4) and tuple(atten_mask.shape) != (_COMPRESSED, _COMPRESSED):
        raise RuntimeError(
            f"npu_fusion_attention: sparse_mode={sparse_mode} requires the optimised atten_mask of shape "
            f"[2048, 2048] (torch.triu(torch.ones(2048, 2048), diagonal=1).bool()), got {list(atten_mask.shape)}"
        )
    if sparse_mode == 0:
        masked = atten_mask.bool()
        if pre < _FULL_WINDOW or nxt < _FULL_WINDOW:
            band = (k < q - pre) | (k > q + nxt)
            masked = masked | band
        return masked
    if sparse_mode == 1:  # allMask: the mask as given, tokens ignored
        return atten_mask.bool()
    if sparse_mode == 2:  # leftUpCausal
        return k > q
    if sparse_mode == 3:  # rightDownCausal
        return k > q + (skv - sq)
    if sparse_mode == 4:  # band, pre/next counted from the bottom-right vertex
        pre_tl, nxt_tl = pre + sq - skv, nxt + skv - sq
        if pre_tl < 0 and nxt_tl < 0:
            raise RuntimeError(f"npu_fusion_attention: PreTokens[{pre}] and nextTokens[{nxt}] config error, there is "
                               "no valid data block.")
        return (k < q - pre_tl) | (k > q + nxt_tl)
    if sparse_mode in (5, 6, 7, 8):
        raise NotImplementedError(
            f"npu_fusion_attention: sparse_mode={sparse_mode} (prefix / varlen-split modes) is not simulated (0-4 are)"
        )
    raise RuntimeError(f"npu_fusion_attention: Not support sparse mode of {sparse_mode}.")


def _attend(q, k, v, scale, pse, masked, keep_prob):
    """One attention on BNSD tensors: (out float32, row max, row sum)."""
    if k.shape[1] != q.shape[1]:
        if q.shape[1] % k.shape[1]:
            raise RuntimeError("npu_fusion_attention: N1 must be a multiple of N2 (grouped-query heads)")
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if pse is not None:
        scores = scores + pse.float()
    if masked is not None:
        if masked.dim() == 2 and masked.shape != scores.shape[-2:]:
            masked = masked[: scores.shape[-2], : scores.shape[-1]]
        scores = scores.masked_fill(masked, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    exp = torch.exp(scores - row_max)
    row_sum = exp.sum(dim=-1, keepdim=True)
    probs = exp / row_sum.clamp_min(torch.finfo(torch.float32).tiny)
    if keep_prob < 1.0:
        probs = torch.nn.functional.dropout(probs, p=1.0 - keep_prob)
    return torch.matmul(probs, v.float()), row_max, row_sum


def _tnd(query, key, value, head_num, atten_mask, scale, keep_prob, pre, nxt, sparse_mode, seq_q, seq_kv):
    """The varlen TND layout: [T, N, D] with cumulative lengths given as host int lists."""
    if seq_q is None or seq_kv is None:
        raise RuntimeError("npu_fusion_attention: input_layout TND needs actual_seq_qlen and actual_seq_kvlen")
    seq_q, seq_kv = [int(x) for x in seq_q], [int(x) for x in seq_kv]
    if len(seq_q) != len(seq_kv) or seq_q[-1] != query.shape[0] or seq_kv[-1] != key.shape[0]:
        raise RuntimeError(
            f"npu_fusion_attention: actual_seq_qlen/actual_seq_kvlen must be cumulative lengths ending at T "
            f"(query T={query.shape[0]}, key T={key.shape[0]}), got {seq_q} and {seq_kv}"
        )
    outs, maxes, sums = [], [], []
    q0 = k0 = 0
    for q1, k1 in zip(seq_q, seq_kv):
        q = query[q0:q1].transpose(0, 1).unsqueeze(0)
        k = key[k0:k1].transpose(0, 1).unsqueeze(0)
        v = value[k0:k1].transpose(0, 1).unsqueeze(0)
        masked = _mask(atten_mask, sparse_mode, q1 - q0, k1 - k0, pre, nxt, query.device)
        out, row_max, row_sum = _attend(q, k, v, scale, None, masked, keep_prob)
        outs.append(out[0].transpose(0, 1))
        maxes.append(row_max[0, :, :, 0].transpose(0, 1))
        sums.append(row_sum[0, :, :, 0].transpose(0, 1))
        q0, k0 = q1, k1
    out = torch.cat(outs).to(query.dtype)
    softmax_max = torch.cat(maxes).unsqueeze(-1).expand(-1, -1, 8).contiguous()
    softmax_sum = torch.cat(sums).unsqueeze(-1).expand(-1, -1, 8).contiguous()
    return out, softmax_max, softmax_sum


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=_FULL_WINDOW,
                         next_tockens=_FULL_WINDOW, inner_precise=0, prefix=None, actual_seq_qlen=None,
                         actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                         softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    """Scaled dot-product attention with the Ascend fused-attention signature (torch_npu 2.13).

    Returns ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)``
    like the real op: ``softmax_max``/``softmax_sum`` are float32 ``[B, N, Sq, 8]`` (``[T, N, 8]``
    for TND: the row max of the scaled scores and the row sum of ``exp(score - max)``, repeated
    8 times), ``softmax_out`` is empty. ``atten_mask`` is True/1 where attention is NOT allowed;
    ``sparse_mode`` 0-4 (see `_mask`), the BSH/SBH/BSND/BNSD layouts and TND (varlen, with
    ``actual_seq_qlen``/``actual_seq_kvlen`` as cumulative host lists) are simulated;
    grouped-query key/value heads are repeated. ``pse`` is added to the scaled scores.
    Differentiable (plain torch ops on the device).
    """
    if padding_mask is not None:
        raise RuntimeError("npu_fusion_attention: padding_mask is not supported yet")
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise RuntimeError(f"npu_fusion_attention: query dtype {query.dtype} is not supported "
                           "(float16, bfloat16, float32 are)")
    if input_layout == "TND":
        if pse is not None:
            raise NotImplementedError("npu_fusion_attention: pse with the TND layout is not simulated")
        out, softmax_max, softmax_sum = _tnd(query, key, value, head_num, atten_mask, scale, keep_prob, pre_tockens,
                                             next_tockens, sparse_mode, actual_seq_qlen, actual_seq_kvlen)
        softmax_out = torch.empty(0, dtype=query.dtype, device=query.device)
        return out, softmax_max, softmax_sum, softmax_out, seed, offset, 0
    if actual_seq_qlen is not None or actual_seq_kvlen is not None:
        raise RuntimeError("npu_fusion_attention: actual_seq_qlen/actual_seq_kvlen are only used with input_layout TND")
    q = _to_bnsd(query, input_layout, head_num)
    kv_heads = head_num if input_layout in ("BSND", "BNSD") else None
    if kv_heads is None:
        kv_heads = key.shape[-1] // q.shape[-1]
    k = _to_bnsd(key, input_layout, kv_heads)
    v = _to_bnsd(value, input_layout, kv_heads)
    if input_layout in ("BSND", "BNSD") and q.shape[1] != head_num:
        raise RuntimeError(f"npu_fusion_attention: head_num {head_num} does not match the query's N {q.shape[1]}")
    masked = _mask(atten_mask, sparse_mode, q.shape[2], k.shape[2], pre_tockens, next_tockens, q.device)
    out, row_max, row_sum = _attend(q, k, v, scale, pse, masked, keep_prob)
    out = out.to(query.dtype)
    softmax_max = row_max.detach().expand(*row_max.shape[:-1], 8).contiguous()
    softmax_sum = row_sum.detach().expand(*row_sum.shape[:-1], 8).contiguous()
    softmax_out = torch.empty(0, dtype=query.dtype, device=query.device)
    numels = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] if keep_prob < 1.0 else 0
    return _from_bnsd(out, input_layout), softmax_max, softmax_sum, softmax_out, seed, offset, numels


# ---------------------------------------------------------------- optimizers

def _optim_module(package_name: str) -> types.ModuleType:
    mod = types.ModuleType(f"{package_name}.optim", "torch_npu.optim (simulated: torch optimizers' update rules).")

    class NpuFusedOptimizerBase(torch.optim.Optimizer):
        """Base class of the fused optimizers (the real one fuses parameters into one buffer)."""

    names = {"NpuFusedSGD": torch.optim.SGD, "NpuFusedAdadelta": torch.optim.Adadelta,
             "NpuFusedAdam": torch.optim.Adam, "NpuFusedAdamW": torch.optim.AdamW,
             "NpuFusedRMSprop": torch.optim.RMSprop}
    mod.NpuFusedOptimizerBase = NpuFusedOptimizerBase
    for name, base in names.items():
        cls = type(name, (base, NpuFusedOptimizerBase), {"__doc__": f"{base.__name__}'s update rule (simulated)."})
        cls.__module__ = mod.__name__
        setattr(mod, name, cls)
    mod.__all__ = ["NpuFusedOptimizerBase", *names]
    return mod


# ---------------------------------------------------------------- aten::_fused_adamw_

def fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    """``aten::_fused_adamw_`` for npu tensors, as torch's CUDA kernel computes it (``fused_adam_utils.cuh``,
    ADAMW mode) in float32 (``opmath``) for half types: nothing when ``found_inf`` is 1; the gradient divided
    by ``grad_scale`` (and stored back so), negated for ``maximize``; decoupled weight decay; the moments;
    bias corrections of the step count the optimizer already incremented."""
    if found_inf is not None and float(found_inf) == 1.0:
        return
    scale = float(grad_scale) if grad_scale is not None else None
    for i, param in enumerate(params):
        grad = grads[i].float()
        if scale is not None:
            grad = grad / scale
            grads[i].copy_(grad)
        if maximize:
            grad = -grad
        step = float(state_steps[i])
        p, exp_avg, exp_avg_sq = param.float(), exp_avgs[i].float(), exp_avg_sqs[i].float()
        p = p - lr * weight_decay * p
        exp_avg = beta1 * exp_avg + (1 - beta1) * grad
        exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
        if amsgrad:
            max_sq = torch.maximum(max_exp_avg_sqs[i].float(), exp_avg_sq)
            max_exp_avg_sqs[i].copy_(max_sq)
            denom = max_sq.sqrt() / bias_correction2_sqrt + eps
        else:
            denom = exp_avg_sq.sqrt() / bias_correction2_sqrt + eps
        param.copy_(p - (lr / bias_correction1) * exp_avg / denom)
        exp_avgs[i].copy_(exp_avg)
        exp_avg_sqs[i].copy_(exp_avg_sq)


def register_fused_adamw():
    """torch_npu registers ``aten::_fused_adamw_`` for PrivateUse1 (``wrapper_NPU___fused_adamw_`` in
    ``libtorch_npu.so`` of the 2.1.0.post3 and 2.13.0 wheels), so ``AdamW(fused=True)`` (nanoGPT's
    choice on CUDA) steps on the npu on every torch. Where torch has a CPU kernel (2.4 and later) the
    stand-in's CPU fallback runs it; before, this kernel. Returns the library (kept alive) or None."""
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_adamw_", "CPU"):
        return None
    library = torch.library.Library("aten", "IMPL")
    library.impl("_fused_adamw_", fused_adamw_, "PrivateUse1")
    return library
