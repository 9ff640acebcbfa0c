"""apex.contrib.clip_grad: ``clip_grad_norm_``, which apex documents as identical to
``torch.nn.utils.clip_grad_norm_`` (apex fuses the 2-norm's kernels on CUDA): torch's, here."""

from typing import Iterable, Union

import torch

_tensor_or_tensors = Union[torch.Tensor, Iterable[torch.Tensor]]


def clip_grad_norm_(parameters: _tensor_or_tensors, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> torch.Tensor:
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = [p for p in parameters if p.grad is not None]
    if len(parameters) == 0:
        return torch.tensor(0.0)
    return torch.nn.utils.clip_grad_norm_(parameters, float(max_norm), norm_type=float(norm_type),
                                          error_if_nonfinite=error_if_nonfinite)
