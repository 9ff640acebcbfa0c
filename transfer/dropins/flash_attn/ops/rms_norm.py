"""flash_attn.ops.rms_norm (2.x API) in plain torch: RMSNorm, rms_norm, DropoutAddRMSNorm,
dropout_add_rms_norm; RMS in float32, output in the input's dtype."""

import torch
from torch.nn import init

from flash_attn.ops.layer_norm import _old

__all__ = ["rms_norm", "dropout_add_rms_norm", "RMSNorm", "DropoutAddRMSNorm"]


def rms_norm(x, weight, epsilon):
    return _old(x, None, weight, None, 0.0, epsilon, None, None, False, False, False, True)


def dropout_add_rms_norm(x0, residual, weight, bias, dropout_p, epsilon, rowscale=None, layerscale=None,
                         prenorm=False, residual_in_fp32=False, return_dropout_mask=False):
    return _old(x0, residual, weight, bias, dropout_p, epsilon, rowscale, layerscale, prenorm, residual_in_fp32,
                return_dropout_mask, True)


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-5, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.ones_(self.weight)

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class DropoutAddRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, prenorm=False, p=0.0, eps=1e-5, residual_in_fp32=False, device=None, dtype=None):
        super().__init__()
        self.prenorm, self.p, self.eps, self.residual_in_fp32 = prenorm, p, eps, residual_in_fp32
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.ones_(self.weight)

    def forward(self, x0, residual=None):
        return dropout_add_rms_norm(x0, residual, self.weight, None, self.p if self.training else 0.0, self.eps,
                                    prenorm=self.prenorm, residual_in_fp32=self.residual_in_fp32)
