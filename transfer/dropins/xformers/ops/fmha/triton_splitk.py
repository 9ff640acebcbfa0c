"""xformers.ops.fmha.triton_splitk (0.0.29 API): its FwOp / BwOp, names of a CUDA kernel; computed by torch here
(xformers.ops.fmha.common)."""

from dataclasses import dataclass
from typing import Optional

import torch

from xformers.ops.fmha.common import Inputs, _ops

FwOp, BwOp = _ops("triton_splitk", "triton_splitK")

#: its variants with a fixed number of key splits, by name
FwOp_Map = {k: type(f"FwOp_S{k}", (FwOp,), {"NAME": f"triton_splitK{k}", "SPLIT_K": k,
                                          "__module__": __name__, "__qualname__": f"FwOp_S{k}"})
            for k in (1, 2, 4, 8, 16, 32, 48, 64, 72, 80, 96, 112, 128)}
FwOp_S1, FwOp_S2, FwOp_S4, FwOp_S8, FwOp_S16, FwOp_S32, FwOp_S64, FwOp_S128 = (
    FwOp_Map[k] for k in (1, 2, 4, 8, 16, 32, 64, 128))


@dataclass
class InputsFp8(Inputs):
    """`Inputs` with row-wise FP8 quantized keys / values (int32 tensors packing two float16 numbers, scale and
    shift, per row), as xformers; its operator, the split-K Triton kernel, is not given by transfer."""

    k_fp8_scale_shift: Optional[torch.Tensor] = None
    v_fp8_scale_shift: Optional[torch.Tensor] = None
