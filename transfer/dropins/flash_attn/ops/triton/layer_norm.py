"""flash_attn.ops.triton.layer_norm (2.7 API) in plain torch (no Triton).

``layer_norm_fn`` / ``rms_norm_fn``: optional dropout of x (and x1), rowscale, residual add,
then LayerNorm / RMSNorm in float32, output in x's dtype; ``prenorm`` also returns the
pre-norm sum (the residual stream: float32 with ``residual_in_fp32`` and no residual, else
the residual's dtype, else x's). The same formula as the package's own ``layer_norm_ref`` /
``rms_norm_ref`` with upcasting.
"""

import torch
import torch.nn.functional as F

__all__ = ["layer_norm_fn", "rms_norm_fn", "layer_norm_ref", "rms_norm_ref", "RMSNorm", "LayerNorm"]


def _dropout(x, p, given):
    if p <= 0.0:
        return x, None
    keep = given if given is not None else (torch.rand_like(x, dtype=torch.float32) >= p)
    return x.masked_fill(~keep, 0.0) / (1.0 - p), keep


def _norm(x, weight, bias, eps, is_rms):
    if is_rms:
        rstd = torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)
        out = x * rstd * weight.float()
        return out + bias.float() if bias is not None else out
    return F.layer_norm(x, x.shape[-1:], weight.float(), None if bias is None else bias.float(), eps)


def _fn(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0, rowscale=None,
        prenorm=False, residual_in_fp32=False, is_rms_norm=False, return_dropout_mask=False, dropout_mask=None,
        dropout_mask1=None):
    dtype = x.dtype
    if residual is not None:
        residual_dtype = residual.dtype
    else:
        residual_dtype = torch.float32 if residual_in_fp32 else dtype
    if x1 is not None and rowscale is not None:
        raise AssertionError("rowscale is not supported with parallel LayerNorm")
    h = x.float()
    if rowscale is not None:
        h = h * rowscale.float()[..., None]
    h, mask = _dropout(h, dropout_p, dropout_mask)
    mask1 = None
    if x1 is not None:
        h1, mask1 = _dropout(x1.float(), dropout_p, dropout_mask1)
        h = h + h1
    if residual is not None:
        h = h + residual.float()
    out = _norm(h, weight, bias, eps, is_rms_norm).to(dtype)
    outs = [out]
    if weight1 is not None:
        outs.append(_norm(h, weight1, bias1, eps, is_rms_norm).to(dtype))
    if prenorm:
        outs.append(h.to(residual_dtype))
    if return_dropout_mask:
        outs += [mask, mask1]
    return outs[0] if len(outs) == 1 else tuple(outs)


def layer_norm_fn(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0,
                  rowscale=None, prenorm=False, residual_in_fp32=False, is_rms_norm=False, return_dropout_mask=False,
                  out=None, residual_out=None):
    result = _fn(x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm, residual_in_fp32,
                 is_rms_norm, return_dropout_mask)
    return _into(result, out, residual_out, prenorm)


def rms_norm_fn(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0,
                rowscale=None, prenorm=False, residual_in_fp32=False, return_dropout_mask=False, out=None,
                residual_out=None):
    result = _fn(x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm, residual_in_fp32,
                 True, return_dropout_mask)
    return _into(result, out, residual_out, prenorm)


def _into(result, out, residual_out, prenorm):
    if out is None and residual_out is None:
        return result
    values = list(result) if isinstance(result, tuple) else [result]
    if out is not None:
        out.copy_(values[0])
        values[0] = out
    if residual_out is not None and prenorm:
        residual_out.copy_(values[1])
        values[1] = residual_out
    return values[0] if len(values) == 1 else tuple(values)


def layer_norm_ref(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0,
                   rowscale=None, prenorm=False, dropout_mask=None, dropout_mask1=None, upcast=False):
    return _fn(x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm,
               dropout_mask=dropout_mask, dropout_mask1=dropout_mask1)


def rms_norm_ref(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0,
                 rowscale=None, prenorm=False, dropout_mask=None, dropout_mask1=None, upcast=False):
    return _fn(x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm, is_rms_norm=True,
               dropout_mask=dropout_mask, dropout_mask1=dropout_mask1)


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-5, dropout_p=0.0, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.drop = torch.nn.Dropout(dropout_p) if dropout_p > 0.0 else None
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.ones_(self.weight)

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return rms_norm_fn(x, self.weight, self.bias, residual=residual, eps=self.eps,
                           dropout_p=self.drop.p if self.drop is not None and self.training else 0.0,
                           prenorm=prenorm, residual_in_fp32=residual_in_fp32)


class LayerNorm(torch.nn.LayerNorm):
    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return layer_norm_fn(x, self.weight, self.bias, residual=residual, eps=self.eps, prenorm=prenorm,
                             residual_in_fp32=residual_in_fp32)
