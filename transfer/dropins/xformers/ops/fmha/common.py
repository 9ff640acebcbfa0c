"""xformers.ops.fmha.common (0.0.29 API): the base classes of the attention operators.

xformers' operators are CUDA kernels chosen per input; here each class only names one, for code that
passes it as ``op=`` / ``attention_op=`` or checks ``is_available()``: every operator computes the same
attention through `memory_efficient_attention` (torch's scaled_dot_product_attention).

The operator interface xformers' own tests drive is as in xformers: `Inputs` (query, key, value, attn_bias,
p, scale, output_dtype), ``FwOp.apply(inp, needs_gradient) -> (out, Context or None)``,
``BwOp.apply(ctx, inp, grad) -> Gradients``, ``not_supported_reasons(inp)`` /
``shape_not_supported_reasons(Mq, Mkv, K, Kv)``, and the capability attributes (SUPPORTED_DEVICES, _DTYPES,
_ATTN_BIAS_TYPES, _MAX_K, CUDA_MINIMUM_COMPUTE_CAPABILITY, ERROR_ATOL / ERROR_RTOL). The values of the
operators given in full (cutlass, flash) are xformers 0.0.29's, limited to the biases transfer provides.
"""

import math
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Set, Tuple, Type, Union

import torch

from xformers.ops.fmha.attn_bias import AttentionBias, LowerTriangularMask

__all__ = ["AttentionOpBase", "AttentionFwOpBase", "AttentionBwOpBase", "AttentionOp", "Inputs", "Context",
           "Gradients"]


def _is_bias_type_supported_in_BMK(attn_bias_type: Any) -> bool:
    """As xformers: [B, M, K] inputs take no bias, a tensor, or LowerTriangularMask."""
    return isinstance(None, attn_bias_type) or attn_bias_type in (LowerTriangularMask, torch.Tensor)


@dataclass
class Inputs:
    """The inputs of the attention operators, as xformers' ``fmha.Inputs``."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_bias: Optional[Union[torch.Tensor, AttentionBias]] = None
    p: float = 0.0
    scale: Optional[float] = None
    output_dtype: Optional[torch.dtype] = None
    is_partial: bool = False

    @property
    def device(self) -> torch.device:
        return self.query.device

    @property
    def scale_float(self) -> float:
        return self.query.shape[-1] ** (-0.5) if self.scale is None else self.scale

    def get_qkv_in_bmghk(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.query.ndim == 5:
            return self.query, self.key, self.value
        if self.query.ndim == 4:
            return self.query.unsqueeze(2), self.key.unsqueeze(2), self.value.unsqueeze(2)
        return self.query[:, :, None, None], self.key[:, :, None, None], self.value[:, :, None, None]

    def get_output_dtype(self) -> torch.dtype:
        if self.output_dtype is None:
            return torch.float32 if self.is_partial and self.query.dtype is not torch.float64 else self.query.dtype
        return self.output_dtype

    def validate_inputs(self) -> None:
        """The checks xformers makes before any kernel: same rank, device and dtype, dropout in [0, 1]."""
        qkv = (self.query, self.key, self.value)
        if self.query.ndim not in (3, 4, 5) or any(x.ndim != self.query.ndim for x in qkv):
            raise ValueError(f"Query/Key/Value should all have BMGHK, BMHK or BMK shape.\n  query.shape: "
                             f"{self.query.shape}\n  key.shape  : {self.key.shape}\n  value.shape: {self.value.shape}")
        if any(x.device != self.query.device for x in qkv):
            raise ValueError("Query/Key/Value should all be on the same device")
        if any(x.dtype != self.query.dtype for x in qkv):
            raise ValueError(f"Query/Key/Value should all have the same dtype\n  query.dtype: {self.query.dtype}\n"
                             f"  key.dtype  : {self.key.dtype}\n  value.dtype: {self.value.dtype}")
        if self.query.ndim == 3 and not _is_bias_type_supported_in_BMK(type(self.attn_bias)):
            raise ValueError("Please provide inputs in BMHK format rather than BMK when using bias type "
                             f"`{type(self.attn_bias).__name__}`")
        if self.p < 0.0 or self.p > 1.0:
            raise ValueError(f"Invalid dropout probability: p={self.p}")


@dataclass
class Context:
    """What a forward operator keeps for the backward one: the log-sum-exp [B, H, Mq] and the output."""

    lse: torch.Tensor
    out: torch.Tensor
    op_bw: Optional[Type["AttentionBwOpBase"]] = None
    rng_state: Optional[Any] = None
    qkv_share_storage: bool = False


@dataclass
class Gradients:
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    db: Optional[torch.Tensor] = None


class AttentionOpBase:
    """One of xformers' attention kernels, by name; computed by torch here."""

    OPERATOR: Any = None
    SUPPORTED_DEVICES: Set[str] = {"cuda"}
    SUPPORTED_DTYPES: Set[torch.dtype] = {torch.float32, torch.float16, torch.bfloat16}
    SUPPORTED_MAX_K: float = float("inf")
    SUPPORTED_ATTN_BIAS_TYPES: Tuple[Any, ...] = (type(None), torch.Tensor, AttentionBias)
    SUPPORTS_DROPOUT = True
    SUPPORTS_CUSTOM_SCALE = True
    SUPPORTS_DIFFERENT_VALUE_EMBED = True
    SUPPORTS_OUTPUT_DTYPE = True
    IS_DETERMINISTIC = True
    NAME = "torch"
    CUDA_MINIMUM_COMPUTE_CAPABILITY: Tuple[int, int] = (5, 0)
    SUPPORTED_MIN_K: int = 0
    SUPPORTS_PARTIAL = False
    SUPPORTS_BMGHK = False
    VARLEN_LSE_PACKED = True
    OPERATOR_CATEGORY = "memory_efficient_attention"
    _TEST_BATCH_SIZES: List[int] = [1, 300]
    _TEST_K: List[int] = [32, 128]

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def shape_not_supported_reasons(cls, Mq: int, Mkv: int, K: int, Kv: int) -> List[str]:
        reasons = []
        if not cls.SUPPORTS_DIFFERENT_VALUE_EMBED and K != Kv:
            reasons.append("query.shape[-1] != value.shape[-1]")
        if max(K, Kv) > cls.SUPPORTED_MAX_K:
            reasons.append(f"max(query.shape[-1], value.shape[-1]) > {cls.SUPPORTED_MAX_K}")
        if min(K, Kv) < cls.SUPPORTED_MIN_K:
            reasons.append(f"min(query.shape[-1], value.shape[-1]) < {cls.SUPPORTED_MIN_K}")
        return reasons

    @classmethod
    def not_supported_reasons(cls, d: Any) -> List[str]:
        """Why the operator refuses the inputs ``d`` (an `Inputs`), xformers' checks: device type, dtype,
        head dims, bias type, dropout, scale, format; [] when it takes them."""
        if not isinstance(d, Inputs):
            return []
        reasons = cls.shape_not_supported_reasons(d.query.shape[1], d.key.shape[1], d.query.shape[-1],
                                                  d.value.shape[-1])
        device_type = "cuda" if d.query.is_cuda else d.device.type  # the target's tensors answer is_cuda
        if device_type not in cls.SUPPORTED_DEVICES:
            reasons.append(f"device={device_type} (supported: {cls.SUPPORTED_DEVICES})")
        if d.query.dtype not in cls.SUPPORTED_DTYPES:
            reasons.append(f"dtype={d.query.dtype} (supported: {cls.SUPPORTED_DTYPES})")
        if type(d.attn_bias) not in cls.SUPPORTED_ATTN_BIAS_TYPES:
            reasons.append(f"attn_bias type is {type(d.attn_bias)}")
        if d.p != 0.0 and not cls.SUPPORTS_DROPOUT:
            reasons.append("dropout > 0.0")
        if d.scale is not None and not cls.SUPPORTS_CUSTOM_SCALE:
            reasons.append("has custom scale")
        if not cls.SUPPORTS_BMGHK and d.query.ndim == 5:
            reasons.append("operator does not support BMGHK format")
        return reasons

    @classmethod
    def supports(cls, d: Any) -> bool:
        return not cls.not_supported_reasons(d)


class AttentionFwOpBase(AttentionOpBase):
    ERROR_ATOL: Mapping[torch.dtype, float] = {torch.float: 3e-4, torch.half: 4e-3, torch.bfloat16: 2e-2}
    ERROR_RTOL: Mapping[torch.dtype, float] = {torch.float: 2e-5, torch.half: 4e-4, torch.bfloat16: 5e-3}

    @classmethod
    def apply(cls, inp: Inputs, needs_gradient: bool) -> Tuple[torch.Tensor, Optional[Context]]:
        """The attention of ``inp`` (memory_efficient_attention) and, with ``needs_gradient``, a Context
        holding its log-sum-exp [B, H, Mq] in float32 (block-diagonal biases: per block, [blocks, H, longest],
        where VARLEN_LSE_PACKED is False)."""
        from xformers.ops.fmha import _lse, memory_efficient_attention

        out = memory_efficient_attention(inp.query, inp.key, inp.value, inp.attn_bias, inp.p, inp.scale,
                                         op=(cls, None), output_dtype=inp.output_dtype)
        if not needs_gradient:
            return out, None
        from xformers.ops.fmha import _lse_per_block
        from xformers.ops.fmha.attn_bias import VARLEN_BIASES

        lse = _lse(inp)
        if isinstance(inp.attn_bias, VARLEN_BIASES) and not cls.VARLEN_LSE_PACKED:
            lse = _lse_per_block(lse, inp.attn_bias)
        return out, Context(lse=lse, out=out, op_bw=None)


class AttentionBwOpBase(AttentionOpBase):
    ERROR_ATOL: Mapping[torch.dtype, float] = {torch.float: 9e-4, torch.half: 0.2, torch.bfloat16: 0.9}
    ERROR_RTOL: Mapping[torch.dtype, float] = {torch.float: 1e-4, torch.half: 2e-2, torch.bfloat16: 0.1}
    SUPPORTS_ATTN_BIAS_GRAD = False
    SUPPORTS_PARTIAL = True

    @classmethod
    def apply(cls, ctx: Context, inp: Inputs, grad: torch.Tensor) -> Gradients:
        """The gradients of the attention of ``inp`` for the output gradient ``grad``: the forward is
        recomputed by memory_efficient_attention and differentiated by autograd (dropout: p must be 0)."""
        from xformers.ops.fmha import memory_efficient_attention

        if inp.p != 0.0:
            raise NotImplementedError(f"{cls.NAME}.apply with dropout is not provided by transfer: the forward's "
                                      "dropout mask is not kept; call memory_efficient_attention and use autograd")
        with torch.enable_grad():
            q, k, v = (x.detach().requires_grad_(True) for x in (inp.query, inp.key, inp.value))
            bias = inp.attn_bias
            bias_grad = isinstance(bias, torch.Tensor) and bias.requires_grad
            if bias_grad:
                bias = bias.detach().requires_grad_(True)
            out = memory_efficient_attention(q, k, v, bias, 0.0, inp.scale)
            wrt = (q, k, v, bias) if bias_grad else (q, k, v)
            grads = torch.autograd.grad(out, wrt, grad.to(out.dtype))
        return Gradients(*grads)


AttentionOp = Tuple[Optional[Type[AttentionFwOpBase]], Optional[Type[AttentionBwOpBase]]]


def _ops(module: str, name: str) -> Tuple[type, type]:
    """FwOp and BwOp classes of xformers' fmha.<module>, named as xformers names them."""
    fw = type("FwOp", (AttentionFwOpBase,), {"NAME": f"{name}F", "__module__": f"xformers.ops.fmha.{module}",
                                             "__qualname__": "FwOp"})
    bw = type("BwOp", (AttentionBwOpBase,), {"NAME": f"{name}B", "__module__": f"xformers.ops.fmha.{module}",
                                             "__qualname__": "BwOp"})
    return fw, bw
