"""xformers.ops.fmha.ck_splitk (0.0.29 API): its FwOp / BwOp, names of a CUDA kernel; computed by torch here
(xformers.ops.fmha.common)."""

from xformers.ops.fmha.common import _ops

FwOp, BwOp = _ops("ck_splitk", "ck_splitK")
