"""xformers.ops.fmha.flash3 (0.0.29 API): its FwOp / BwOp, names of a CUDA kernel (FlashAttention-3, Hopper);
computed by torch here (xformers.ops.fmha.common)."""

from xformers.ops.fmha.common import _ops

FwOp, BwOp = _ops("flash3", "fa3")
