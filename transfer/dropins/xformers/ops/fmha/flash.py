"""xformers.ops.fmha.flash (0.0.29 API): FwOp / BwOp, FlashAttention-2 by name and capabilities (xformers
0.0.29's values, its biases limited to those transfer provides); computed by torch here
(xformers.ops.fmha.common)."""

from typing import Any, Iterable, Set

import torch

from xformers.ops.fmha import attn_bias as _b
from xformers.ops.fmha.common import AttentionBwOpBase, AttentionFwOpBase

#: xformers names the operator after the flash-attention it runs: here transfer's flash_attn drop-in's version
FLASH_VERSION = "2.7.4.post1"


class FwOp(AttentionFwOpBase):
    """FlashAttention-2 (forward), as xformers wraps it; computed by torch here."""

    SUPPORTED_DEVICES: Set[str] = {"cuda"}
    CUDA_MINIMUM_COMPUTE_CAPABILITY = (8, 0)
    SUPPORTED_DTYPES: Set[torch.dtype] = {torch.half, torch.bfloat16}
    SUPPORTED_MAX_K = 256
    SUPPORTED_ATTN_BIAS_TYPES: Iterable[Any] = (
        type(None), _b.LowerTriangularMask, _b.LowerTriangularFromBottomRightMask,
        _b.LowerTriangularFromBottomRightLocalAttentionMask, _b.BlockDiagonalMask, _b.BlockDiagonalCausalMask,
        _b.BlockDiagonalCausalLocalAttentionMask, _b.BlockDiagonalCausalLocalAttentionFromBottomRightMask,
        _b.BlockDiagonalCausalLocalAttentionPaddedKeysMask, _b.BlockDiagonalCausalFromBottomRightMask,
        _b.BlockDiagonalCausalWithOffsetPaddedKeysMask, _b.BlockDiagonalPaddedKeysMask,
        _b.LocalAttentionFromBottomRightMask,
    )
    SUPPORTS_DROPOUT = True
    SUPPORTS_CUSTOM_SCALE = True
    SUPPORTS_DIFFERENT_VALUE_EMBED = False
    SUPPORTS_BMGHK = True
    SUPPORTS_PARTIAL = True
    VARLEN_LSE_PACKED = True
    NAME = f"fa2F@{FLASH_VERSION}"


class BwOp(AttentionBwOpBase):
    """FlashAttention-2 (backward), as xformers wraps it; computed by torch here."""

    SUPPORTED_DEVICES = FwOp.SUPPORTED_DEVICES
    CUDA_MINIMUM_COMPUTE_CAPABILITY = FwOp.CUDA_MINIMUM_COMPUTE_CAPABILITY
    SUPPORTED_DTYPES = FwOp.SUPPORTED_DTYPES
    SUPPORTED_MAX_K = FwOp.SUPPORTED_MAX_K
    SUPPORTED_ATTN_BIAS_TYPES: Iterable[Any] = tuple(
        b for b in FwOp.SUPPORTED_ATTN_BIAS_TYPES
        if b not in (_b.BlockDiagonalCausalLocalAttentionPaddedKeysMask, _b.BlockDiagonalCausalWithOffsetPaddedKeysMask,
                     _b.BlockDiagonalPaddedKeysMask))
    SUPPORTS_DROPOUT = FwOp.SUPPORTS_DROPOUT
    SUPPORTS_CUSTOM_SCALE = FwOp.SUPPORTS_CUSTOM_SCALE
    SUPPORTS_DIFFERENT_VALUE_EMBED = FwOp.SUPPORTS_DIFFERENT_VALUE_EMBED
    IS_DETERMINISTIC = False
    SUPPORTS_BMGHK = False
    VARLEN_LSE_PACKED = True
    NAME = f"fa2B@{FLASH_VERSION}"
