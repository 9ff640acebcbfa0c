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

    for fn in (set_compile_mode, is_jit_compile_false):
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


def _mask(atten_mask, sparse_mode: int, sq: int, skv: int, pre: int, nxt: int, device):
    """Boolean mask, True where attention is NOT allowed, broadcastable to [B, N, Sq, Skv]."""
    q = torch.arange(sq, device=device).view(-1, 1)
    k = torch.arange(skv, device=device).view(1, -1)
    if sparse_mode == 0:
        masked = None if atten_mask is None else atten_mask.bool()
        if pre < _FULL_WINDOW or nxt < _FULL_WINDOW:
            band = (k < q - pre) | (k > q + nxt)
            masked = band if masked is None else masked | band
        return masked
    if sparse_mode == 1:  # allMask: the mask as given, tokens ignored
        return None if atten_mask is None else atten_mask.bool()
    if sparse_mode == 2:  # leftUpCausal
        return k > q
    if sparse_mode == 3:  # rightDownCausal
        return k > q + (skv - sq)
    raise NotImplementedError(
        f"npu_fusion_attention: sparse_mode={sparse_mode} is not simulated (0-3 are)"
    )


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=_FULL_WINDOW,
                         next_tockens=_FULL_WINDOW, inner_precise=0, prefix=None, actual_seq_qlen=None,
                         actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                         softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    """Scaled dot-product attention with the Ascend fused-attention signature.

    Returns ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)``
    like the real op: ``softmax_max``/``softmax_sum`` are float32 ``[B, N, Sq, 8]`` (the
    row max of the scaled scores and the row sum of ``exp(score - max)``, repeated 8 times),
    ``softmax_out`` is empty. ``atten_mask`` is True/1 where attention is NOT allowed;
    ``sparse_mode`` 0-3 and the BSH/SBH/BSND/BNSD layouts are simulated, grouped-query
    key/value heads are repeated. Differentiable (plain torch ops on the device).
    """
    if input_layout == "TND" or actual_seq_qlen is not None:
        raise NotImplementedError("npu_fusion_attention: the varlen TND layout is not simulated")
    q = _to_bnsd(query, input_layout, head_num)
    kv_heads = head_num if input_layout in ("BSND", "BNSD") else None
    if kv_heads is None:
        kv_heads = key.shape[-1] // q.shape[-1]
    k = _to_bnsd(key, input_layout, kv_heads)
    v = _to_bnsd(value, input_layout, kv_heads)
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if pse is not None:
        scores = scores + pse.float()
    masked = _mask(atten_mask, sparse_mode, q.shape[2], k.shape[2], pre_tockens, next_tockens, q.device)
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
    out = torch.matmul(probs, v.float()).to(query.dtype)
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
