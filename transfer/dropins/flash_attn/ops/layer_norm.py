"""flash_attn.ops.layer_norm (2.x API: dropout + residual + LayerNorm) in plain torch.

Returns out, or (out, residual stream) with prenorm, plus the dropout mask with
return_dropout_mask; computed by flash_attn.ops.triton.layer_norm's formula.
"""

import torch
from torch.nn import init

from flash_attn.ops.triton.layer_norm import _fn

__all__ = ["layer_norm", "dropout_add_layer_norm", "DropoutAddLayerNorm"]


def _old(x0, residual, weight, bias, dropout_p, epsilon, rowscale, layerscale, prenorm, residual_in_fp32,
         return_dropout_mask, is_rms):
    x = x0 if layerscale is None else x0 * layerscale
    result = _fn(x, weight, bias, residual, eps=epsilon, dropout_p=dropout_p, rowscale=rowscale, prenorm=prenorm,
                 residual_in_fp32=residual_in_fp32, is_rms_norm=is_rms, return_dropout_mask=return_dropout_mask)
    if return_dropout_mask:  # (out[, residual], mask, mask1) -> (out[, residual], mask)
        result = result[:-1]
        if result[-1] is None:
            result = result[:-1] + (torch.ones_like(x0, dtype=torch.bool),)
    return result


def layer_norm(x, weight, bias, epsilon):
    return _old(x, None, weight, bias, 0.0, epsilon, None, None, False, False, False, False)


def dropout_add_layer_norm(x0, residual, weight, bias, dropout_p, epsilon, rowscale=None, layerscale=None,
                           prenorm=False, residual_in_fp32=False, return_dropout_mask=False):
    return _old(x0, residual, weight, bias, dropout_p, epsilon, rowscale, layerscale, prenorm, residual_in_fp32,
                return_dropout_mask, False)


class DropoutAddLayerNorm(torch.nn.Module):
    def __init__(self, hidden_size, prenorm=False, p=0.0, eps=1e-5, residual_in_fp32=False, device=None, dtype=None):
        super().__init__()
        self.prenorm, self.p, self.eps, self.residual_in_fp32 = prenorm, p, eps, residual_in_fp32
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        init.ones_(self.weight)
        init.zeros_(self.bias)

    def forward(self, x0, residual=None):
        return dropout_add_layer_norm(x0, residual, self.weight, self.bias, self.p if self.training else 0.0,
                                      self.eps, prenorm=self.prenorm, residual_in_fp32=self.residual_in_fp32)
