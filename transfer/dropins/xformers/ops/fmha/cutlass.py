"""xformers.ops.fmha.cutlass (0.0.29 API): FwOp / BwOp, xformers' CUTLASS kernel by name and capabilities
(xformers 0.0.29's values); computed by torch here (xformers.ops.fmha.common)."""

from typing import Any, Iterable, List, Set

import torch

from xformers.ops.fmha import attn_bias as _b
from xformers.ops.fmha.common import AttentionBwOpBase, AttentionFwOpBase


class FwOp(AttentionFwOpBase):
    """xFormers' memory-efficient attention kernel based on CUTLASS (forward); computed by torch here."""

    SUPPORTED_DEVICES: Set[str] = {"cuda"}
    SUPPORTED_DTYPES: Set[torch.dtype] = {torch.float, torch.half, torch.bfloat16}
    SUPPORTED_MAX_K = 65536
    SUPPORTED_ATTN_BIAS_TYPES: Iterable[Any] = (
        type(None), torch.Tensor, _b.LowerTriangularMask, _b.LowerTriangularFromBottomRightMask,
        _b.LowerTriangularFromBottomRightLocalAttentionMask, _b.LowerTriangularMaskWithTensorBias,
        _b.BlockDiagonalMask, _b.BlockDiagonalCausalMask, _b.BlockDiagonalCausalWithOffsetPaddedKeysMask,
        _b.BlockDiagonalCausalFromBottomRightMask, _b.BlockDiagonalCausalLocalAttentionMask,
        _b.BlockDiagonalCausalLocalAttentionFromBottomRightMask,
    )
    SUPPORTS_DROPOUT = True
    SUPPORTS_CUSTOM_SCALE = True
    SUPPORTS_DIFFERENT_VALUE_EMBED = True
    SUPPORTS_BMGHK = True
    VARLEN_LSE_PACKED = False
    NAME = "cutlassF-pt"
    _TEST_K: List[int] = [32, 128, 256]


class BwOp(AttentionBwOpBase):
    """xFormers' memory-efficient attention kernel based on CUTLASS (backward); computed by torch here."""

    SUPPORTED_DEVICES = FwOp.SUPPORTED_DEVICES
    SUPPORTED_DTYPES = FwOp.SUPPORTED_DTYPES
    SUPPORTED_MAX_K = FwOp.SUPPORTED_MAX_K
    SUPPORTED_ATTN_BIAS_TYPES: Iterable[Any] = (
        type(None), torch.Tensor, _b.LowerTriangularMask, _b.LowerTriangularFromBottomRightMask,
        _b.BlockDiagonalMask, _b.BlockDiagonalCausalMask, _b.BlockDiagonalCausalFromBottomRightMask,
        _b.BlockDiagonalCausalLocalAttentionMask,
    )
    SUPPORTS_ATTN_BIAS_GRAD = True
    SUPPORTS_DROPOUT = FwOp.SUPPORTS_DROPOUT
    SUPPORTS_CUSTOM_SCALE = FwOp.SUPPORTS_CUSTOM_SCALE
    SUPPORTS_DIFFERENT_VALUE_EMBED = FwOp.SUPPORTS_DIFFERENT_VALUE_EMBED
    VARLEN_LSE_PACKED = False
    NAME = "cutlassB-pt"
    _TEST_K: List[int] = [32, 128, 256]
