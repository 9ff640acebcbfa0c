"""xformers.ops.common (0.0.29 API): the operator base class and the storage helper xformers' ops use."""

from typing import Any

import torch


def _get_storage_base(x: torch.Tensor) -> int:
    """The address of the storage ``x`` views (not of its first element)."""
    return x.untyped_storage().data_ptr()


class BaseOperator:
    """An xformers operator by name (OPERATOR_CATEGORY, NAME); computed by torch here, so always available."""

    OPERATOR: Any = None
    OPERATOR_CATEGORY = ""
    NAME = ""

    @classmethod
    def is_available(cls) -> bool:
        return True
