"""flash_attn.ops.fused_dense (2.7 API) in torch: ``FusedDense``, ``fused_dense_func``, ``FusedMLP``,
``fused_mlp_func``.

The cuBLASLt fusions compute ``linear(x, W, b)`` and ``linear(act(linear(x, W1, b1)), W2, b2)`` with
``act`` one of ``gelu_approx`` (tanh GELU), ``relu``, ``sqrelu`` (relu squared); so do these, with
``return_residual`` returning ``(out, x)``. ``checkpoint_lvl``, ``heuristic`` and ``save_pre_act`` only
traded memory for speed in the kernels: accepted. Tensor / sequence parallelism (``process_group``,
``ColumnParallelLinear``, ``RowParallelLinear``, ``ParallelFusedMLP``) is not provided: NotImplementedError.
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = ["FusedDense", "fused_dense_func", "FusedMLP", "fused_mlp_func"]

_ACTIVATIONS = {"gelu_approx": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu,
                "sqrelu": lambda x: F.relu(x) ** 2}


def _no_parallel(process_group, what):
    if process_group is not None:
        raise NotImplementedError(f"flash_attn.ops.fused_dense.{what} with a process_group (tensor / sequence "
                                  "parallelism) is not provided by transfer")


def fused_dense_func(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, return_residual: bool = False,
                     process_group=None, sequence_parallel: bool = True):
    _no_parallel(process_group, "fused_dense_func")
    out = F.linear(x, weight, bias)
    return out if not return_residual else (out, x)


class FusedDense(nn.Linear):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, return_residual: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.return_residual = return_residual

    def forward(self, x, process_group=None):
        return fused_dense_func(x, self.weight, self.bias, return_residual=self.return_residual,
                                process_group=process_group)


def fused_mlp_func(x: Tensor, weight1: Tensor, weight2: Tensor, bias1: Optional[Tensor] = None,
                   bias2: Optional[Tensor] = None, activation: str = "gelu_approx", save_pre_act: bool = True,
                   return_residual: bool = False, checkpoint_lvl: int = 0, heuristic: int = 0,
                   process_group=None, sequence_parallel: bool = True):
    assert activation in ["gelu_approx", "relu", "sqrelu"]
    _no_parallel(process_group, "fused_mlp_func")
    out = F.linear(_ACTIVATIONS[activation](F.linear(x, weight1, bias1)), weight2, bias2)
    return out if not return_residual else (out, x)


class FusedMLP(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, bias1=True, bias2=True,
                 activation="gelu_approx", return_residual=False, checkpoint_lvl=0, heuristic="auto", device=None,
                 dtype=None):
        assert checkpoint_lvl in [0, 1, 2]
        assert activation in ["gelu_approx", "relu", "sqrelu"]
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features * 4
        self.activation = activation
        self.return_residual = return_residual
        self.checkpoint_lvl = checkpoint_lvl
        self.heuristic = heuristic if activation != "sqrelu" else -1
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias1, **factory_kwargs)
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias2, **factory_kwargs)

    def forward(self, x, process_group=None):
        out = fused_mlp_func(x, self.fc1.weight, self.fc2.weight, self.fc1.bias, self.fc2.bias,
                             activation=self.activation, save_pre_act=self.training,
                             return_residual=self.return_residual, checkpoint_lvl=self.checkpoint_lvl,
                             process_group=process_group)
        if self.return_residual:
            out, x = out
        return out if not self.return_residual else (out, x)
