"""xformers.ops, provided by transfer: memory_efficient_attention and its attention biases."""

import torch

from xformers.ops.fmha import (  # noqa: F401
    AttentionBias,
    BlockDiagonalCausalFromBottomRightMask,
    BlockDiagonalCausalLocalAttentionFromBottomRightMask,
    BlockDiagonalCausalLocalAttentionMask,
    BlockDiagonalCausalMask,
    BlockDiagonalMask,
    LowerTriangularFromBottomRightLocalAttentionMask,
    LowerTriangularFromBottomRightMask,
    LowerTriangularMask,
    LowerTriangularMaskWithTensorBias,
    memory_efficient_attention,
    memory_efficient_attention_backward,
    memory_efficient_attention_forward,
    memory_efficient_attention_forward_requires_grad,
)


def unbind(x: torch.Tensor, dim: int):
    """torch.unbind (xformers' version avoids a copy in backward; same values)."""
    return torch.unbind(x, dim)


def stack_or_none(*args, **kwargs):
    return None
