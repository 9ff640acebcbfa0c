"""xformers.ops.fmha.flash (0.0.29 API): its FwOp / BwOp, names of a CUDA kernel; computed by torch here
(xformers.ops.fmha.common)."""

from xformers.ops.fmha.common import _ops

FwOp, BwOp = _ops("flash", "fa2")
