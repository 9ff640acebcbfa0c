"""xformers.ops.fmha.dispatch (0.0.29 API): which operator xformers picks for given inputs.

Every operator computes the same attention here (xformers.ops.fmha.common); the order is xformers' on CUDA
without FlashAttention-3: flash first, then cutlass, each kept where it takes the inputs.
"""

from typing import List, Type

from xformers.ops.fmha import cutlass, flash
from xformers.ops.fmha.common import AttentionBwOpBase, AttentionFwOpBase, Inputs


def _dispatch_fw_priority_list(inp: Inputs, needs_gradient: bool) -> List[Type[AttentionFwOpBase]]:
    return [flash.FwOp, cutlass.FwOp]


def _dispatch_fw(inp: Inputs, needs_gradient: bool) -> Type[AttentionFwOpBase]:
    for op in _dispatch_fw_priority_list(inp, needs_gradient):
        if op.supports(inp):
            return op
    raise NotImplementedError(f"No operator found for `memory_efficient_attention_forward` with inputs: {inp}")


def _dispatch_bw(inp: Inputs) -> Type[AttentionBwOpBase]:
    for op in (flash.BwOp, cutlass.BwOp):
        if op.supports(inp):
            return op
    raise NotImplementedError(f"No operator found for `memory_efficient_attention_backward` with inputs: {inp}")
