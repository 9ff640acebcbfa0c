"""xformers.ops.swiglu_op (0.0.29 API) in torch: ``SwiGLU`` and ``swiglu``.

``swiglu(x, w1, b1, w2, b2, w3, b3)`` is ``linear(silu(linear(x, w1, b1)) * linear(x, w2, b2), w3, b3)``,
what xformers' eager op computes; its fused CUDA ops (``SwiGLUFusedOp``, ``SwiGLUPackedFusedOp``) are
accepted as ``op=`` and compute the same. ``SwiGLU`` has xformers' parameters (``w12`` packed, or
``w1``/``w2`` with ``_pack_weights=False``, and ``w3``), so its state dicts load unchanged.
"""

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SwiGLU", "swiglu", "SwiGLUOp", "SwiGLUOpDispatch", "SwiGLUEagerOp", "SwiGLUFusedOp",
           "SwiGLUPackedFusedOp"]


class SwiGLUOp:
    """Names one of xformers' SwiGLU kernels; every one computes `swiglu`'s formula here."""

    def __init__(self, op=None, packed_weights: bool = False, name: str = "", constraints: Sequence = ()):
        self.NAME = name
        self.PACKED_WEIGHTS = packed_weights
        self.op = op
        self.constraints = constraints

    def supports(self, op: "SwiGLUOpDispatch") -> bool:
        """As xformers: a packed-weights kernel takes only packed weights; nothing else is refused here."""
        return not (self.PACKED_WEIGHTS and not op.packed_weights)

    def __call__(self, *args: Optional[torch.Tensor]) -> torch.Tensor:
        return _swiglu(*args)

    def __str__(self) -> str:
        return f"SwiGLUOp:{self.NAME}"


SwiGLUEagerOp = SwiGLUOp(name="swiglu_eager")
SwiGLUFusedOp = SwiGLUOp(name="swiglu_fused")
SwiGLUPackedFusedOp = SwiGLUOp(packed_weights=True, name="swiglu_packedw")


@dataclass
class SwiGLUOpDispatch:
    """What xformers picks the kernel by (device, dtype, autocast dtype, packed weights, bias); `op` is the
    kernel it would pick (packed-weights fused first); every one computes the same formula here."""

    device: Union[torch.device, str]
    dtype: torch.dtype
    dtype_autocast_gpu: Optional[torch.dtype]
    packed_weights: bool
    bias_enabled: bool

    @property
    def op(self) -> SwiGLUOp:
        for op in (SwiGLUPackedFusedOp, SwiGLUFusedOp):
            if op.supports(self):
                return op
        return SwiGLUEagerOp

    @staticmethod
    def from_arguments(x, w1, b1, w2, b2, w3, b3) -> "SwiGLUOpDispatch":
        from xformers.ops import stack_or_none

        dtype_of = getattr(torch, "get_autocast_dtype", None)  # torch >= 2.4; get_autocast_gpu_dtype before
        autocast = ((dtype_of("cuda") if dtype_of else torch.get_autocast_gpu_dtype())
                    if torch.is_autocast_enabled() else None)
        return SwiGLUOpDispatch(device=x.device, dtype=x.dtype, dtype_autocast_gpu=autocast,
                                packed_weights=stack_or_none((w1, w2), dim=0) is not None,
                                bias_enabled=b1 is not None and b2 is not None and b3 is not None)


def _swiglu(x, w1, b1, w2, b2, w3, b3):
    return F.linear(F.silu(F.linear(x, w1, b1)) * F.linear(x, w2, b2), w3, b3)


_eager_functional_swiglu = _swiglu  # xformers' name for the eager formula


def swiglu(x: torch.Tensor, w1: torch.Tensor, b1: Optional[torch.Tensor], w2: torch.Tensor,
           b2: Optional[torch.Tensor], w3: torch.Tensor, b3: Optional[torch.Tensor], *, op=None) -> torch.Tensor:
    """``linear(silu(linear(x, w1, b1)) * linear(x, w2, b2), w3, b3)`` over x's last dimension."""
    return _swiglu(x, w1, b1, w2, b2, w3, b3)


class SwiGLU(nn.Module):
    """xformers.ops.SwiGLU: the three linear layers of a SwiGLU feed-forward and `swiglu` over them."""

    def __init__(self, in_features: int, hidden_features: int, out_features: Optional[int] = None,
                 bias: bool = True, *, _pack_weights: bool = True) -> None:
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.w12: Optional[nn.Linear]
        if _pack_weights:
            self.w12 = nn.Linear(in_features, 2 * hidden_features, bias=bias)
        else:
            self.w12 = None
            self.w1 = nn.Linear(in_features, hidden_features, bias=bias)
            self.w2 = nn.Linear(in_features, hidden_features, bias=bias)
        self.w3 = nn.Linear(hidden_features, out_features, bias=bias)
        self.hidden_features = hidden_features
        self.out_features = out_features
        self.in_features = in_features
        self.op: Optional[SwiGLUOp] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _swiglu(x, *self._ordered_params())

    def _ordered_params(self) -> Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor, Optional[torch.Tensor],
                                       torch.Tensor, Optional[torch.Tensor]]:
        if self.w12 is not None:
            w1, w2 = self.w12.weight.chunk(2, dim=0)
            b1, b2 = self.w12.bias.chunk(2, dim=0) if self.w12.bias is not None else (None, None)
        else:
            w1, w2, b1, b2 = self.w1.weight, self.w2.weight, self.w1.bias, self.w2.bias
        return w1, b1, w2, b2, self.w3.weight, self.w3.bias
