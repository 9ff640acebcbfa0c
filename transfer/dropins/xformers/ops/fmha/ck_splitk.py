"""xformers.ops.fmha.ck_splitk (0.0.29 API): its FwOp / BwOp, names of a CUDA kernel; computed by torch here
(xformers.ops.fmha.common)."""

from xformers.ops.fmha.common import _ops

FwOp, BwOp = _ops("ck_splitk", "ck_splitK")

#: its variants with a fixed number of key splits, by name
FwOp_S1, FwOp_S2, FwOp_S4, FwOp_S8, FwOp_S16, FwOp_S32, FwOp_S64, FwOp_S128 = (
    type(f"FwOp_S{k}", (FwOp,), {"NAME": f"ck_splitK{k}", "SPLIT_K": k, "__module__": __name__,
                                 "__qualname__": f"FwOp_S{k}"}) for k in (1, 2, 4, 8, 16, 32, 64, 128))
