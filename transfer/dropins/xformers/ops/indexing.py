"""xformers.ops.indexing (0.0.29 API) in torch: ``scaled_index_add``, ``index_select_cat``."""

from typing import Optional, Sequence

import torch

__all__ = ["scaled_index_add", "index_select_cat"]


def scaled_index_add(input: torch.Tensor, index: torch.Tensor, source: torch.Tensor,
                     scaling: Optional[torch.Tensor] = None, alpha: float = 1.0) -> torch.Tensor:
    """``input.index_add_(0, index, scaling * source, alpha=alpha)``: in place, as xformers' (input [B, M, D],
    index [Bi] unique, source [Bi, M, D], scaling [D]); returns input."""
    return input.index_add_(0, index, source if scaling is None else source * scaling, alpha=alpha)


def index_select_cat(sources: Sequence[torch.Tensor], indices: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices)])``, as xformers documents it."""
    return torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices)], dim=0)
