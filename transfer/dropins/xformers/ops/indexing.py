"""xformers.ops.indexing (0.0.29 API) in torch: ``scaled_index_add``, ``index_select_cat``."""

from typing import Optional, Sequence

import torch

from xformers.ops.common import BaseOperator

__all__ = ["scaled_index_add", "index_select_cat"]


class ScaledIndexAddFw(BaseOperator):
    OPERATOR_CATEGORY = "indexing"
    NAME = "scaled_index_addF"


class ScaledIndexAddBw(BaseOperator):
    OPERATOR_CATEGORY = "indexing"
    NAME = "scaled_index_addB"


class IndexSelect(BaseOperator):
    OPERATOR_CATEGORY = "indexing"
    NAME = "index_select"


def scaled_index_add(input: torch.Tensor, index: torch.Tensor, source: torch.Tensor,
                     scaling: Optional[torch.Tensor] = None, alpha: float = 1.0) -> torch.Tensor:
    """``input.index_add_(0, index, scaling * source, alpha=alpha)``: in place, as xformers' (input [B, M, D],
    index [Bi] unique, source [Bi, M, D], scaling [D]); returns input. As xformers' kernel, the sum is formed in
    float32 and rounded once to input's dtype (so are the gradients)."""
    scaled = source.float() if scaling is None else source.float() * scaling.float()
    input[index] = (input[index].float() + alpha * scaled).to(input.dtype)
    return input


def index_select_cat(sources: Sequence[torch.Tensor], indices: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices)])``, as xformers documents it."""
    return torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices)], dim=0)
