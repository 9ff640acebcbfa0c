"""xformers.ops.fmha.common (0.0.29 API): the base classes of the attention operators.

xformers' operators are CUDA kernels chosen per input; here each class only names one, for code that
passes it as ``op=`` / ``attention_op=`` or checks ``is_available()``: every operator computes the same
attention through `memory_efficient_attention` (torch's scaled_dot_product_attention).
"""

from typing import Any, Optional, Set, Tuple, Type, Union

import torch

from xformers.ops.fmha.attn_bias import AttentionBias

__all__ = ["AttentionOpBase", "AttentionFwOpBase", "AttentionBwOpBase", "AttentionOp"]


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

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def not_supported_reasons(cls, d: Any) -> list:
        return []

    @classmethod
    def supports(cls, d: Any) -> bool:
        return True


class AttentionFwOpBase(AttentionOpBase):
    pass


class AttentionBwOpBase(AttentionOpBase):
    pass


AttentionOp = Tuple[Optional[Type[AttentionFwOpBase]], Optional[Type[AttentionBwOpBase]]]


def _ops(module: str, name: str) -> Tuple[type, type]:
    """FwOp and BwOp classes of xformers' fmha.<module>, named as xformers names them."""
    fw = type("FwOp", (AttentionFwOpBase,), {"NAME": f"{name}F", "__module__": f"xformers.ops.fmha.{module}",
                                             "__qualname__": "FwOp"})
    bw = type("BwOp", (AttentionBwOpBase,), {"NAME": f"{name}B", "__module__": f"xformers.ops.fmha.{module}",
                                             "__qualname__": "BwOp"})
    return fw, bw
