"""apex.normalization.fused_layer_norm, provided by transfer.

The semantics of apex's CUDA kernels (csrc/layer_norm_cuda*.cpp/cu), on torch ops:

* statistics and the affine transform in float32 (float64 for float64 input),
  biased variance, ``eps`` inside the square root; one rounding to the output
  dtype; gradients through the same math (input grads in the input's dtype,
  weight/bias grads in theirs);
* ``FusedLayerNorm`` / ``FusedRMSNorm`` (and the functions they call): under
  autocast on the input's device every tensor is first cast to the autocast
  dtype (apex's ``_cast_if_autocast_enabled``), and the output has the
  input's dtype; weight and bias must have the input's dtype (the kernel
  raises otherwise, as here);
* ``MixedFusedLayerNorm`` / ``MixedFusedRMSNorm`` (Megatron's): the output has
  the *weight's* dtype; the input is float32 (or float64, or the weight's dtype);
  always affine (``elementwise_affine=False`` raises);
* defaults: modules ``eps=1e-5``, the functions ``eps=1e-6``, as apex;
* input not on the target device (``not input.is_cuda``), TorchScript and
  torch.compile: apex's own fallback, ``F.layer_norm`` / `manual_rms_norm`;
* ``memory_efficient`` only chose what the CUDA kernel kept for backward; it is
  accepted and changes nothing.

Forward on float32 input calls ``F.layer_norm`` / ``F.rms_norm`` directly.
"""

import numbers
from typing import Optional

import torch
from torch.nn import Parameter, init
from torch.nn import functional as F

from transfer.dropins import _mixed

__all__ = ["FusedLayerNorm", "FusedRMSNorm", "MixedFusedLayerNorm", "MixedFusedRMSNorm", "fused_layer_norm",
           "fused_layer_norm_affine", "mixed_dtype_fused_layer_norm_affine", "fused_rms_norm",
           "fused_rms_norm_affine", "mixed_dtype_fused_rms_norm_affine", "manual_rms_norm",
           "FusedLayerNormAffineFunction", "FusedLayerNormFunction", "FusedRMSNormAffineFunction",
           "FusedRMSNormFunction", "FusedLayerNormAffineMixedDtypesFunction", "FusedRMSNormAffineMixedDtypesFunction"]

_HALF_TYPES = (torch.float16, torch.bfloat16)
_rms_norm = getattr(F, "rms_norm", None)  # torch >= 2.4


def _accumulate(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_shape(input: torch.Tensor, normalized_shape) -> None:
    shape = tuple(normalized_shape)
    if len(shape) < 1:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           f"element, but got normalized_shape={list(shape)}")
    if input.dim() < len(shape) or tuple(input.shape[input.dim() - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size{list(input.shape)}")


def _check_same(what: str, tensor: Optional[torch.Tensor], dtype: torch.dtype) -> None:
    if tensor is not None and tensor.dtype != dtype:
        raise RuntimeError(f"{what}: expected scalar type {_name(dtype)} but found {_name(tensor.dtype)} "
                           "(apex's fused layer norm needs the weight and bias in the input's dtype; under "
                           "autocast it casts them itself)")


def _name(dtype: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.float64: "Double"}.get(dtype, str(dtype))


def _check_mixed(what: str, input: torch.Tensor, weight: torch.Tensor) -> None:
    if input.dtype in _HALF_TYPES and weight.dtype != input.dtype:
        raise RuntimeError(f"{what}: expected scalar type {_name(input.dtype)} but found {_name(weight.dtype)} "
                           "(the mixed-dtype kernel takes float32 input with any weight dtype, or input and "
                           "weight of one dtype)")


def _layer_norm(input, normalized_shape, weight, bias, eps, out_dtype):
    acc = _accumulate(input.dtype)
    if input.dtype == acc and (weight is None or weight.dtype == acc) and out_dtype == acc:
        return F.layer_norm(input, normalized_shape, weight, bias, eps)
    cast = (lambda t: None if t is None else t.to(acc))
    return F.layer_norm(input.to(acc), normalized_shape, cast(weight), cast(bias), eps).to(out_dtype)


def _rms(input, normalized_shape, weight, eps, out_dtype):
    acc = _accumulate(input.dtype)
    x = input if input.dtype == acc else input.to(acc)
    w = weight if weight is None or weight.dtype == acc else weight.to(acc)
    if _rms_norm is not None:
        y = _rms_norm(x, normalized_shape, w, eps)
    else:
        dims = tuple(range(-1, -len(normalized_shape) - 1, -1))
        y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
        if w is not None:
            y = y * w
    return y if y.dtype == out_dtype else y.to(out_dtype)


# ---------------------------------------------------------------- the autograd-function entry points

class FusedLayerNormAffineFunction:
    """``.apply(input, weight, bias, normalized_shape, eps, memory_efficient=False)``: no autocast cast."""

    @staticmethod
    def apply(input, weight, bias, normalized_shape, eps, memory_efficient=False):
        _check_shape(input, normalized_shape)
        _check_same("fused_layer_norm_affine", weight, input.dtype)
        _check_same("fused_layer_norm_affine", bias, input.dtype)
        return _layer_norm(input, normalized_shape, weight, bias, eps, input.dtype)


class FusedLayerNormAffineMixedDtypesFunction:
    @staticmethod
    def apply(input, weight, bias, normalized_shape, eps, memory_efficient=False):
        _check_shape(input, normalized_shape)
        _check_mixed("mixed_dtype_fused_layer_norm_affine", input, weight)
        return _layer_norm(input, normalized_shape, weight, bias, eps, weight.dtype)


class FusedLayerNormFunction:
    @staticmethod
    def apply(input, normalized_shape, eps, memory_efficient=False):
        _check_shape(input, normalized_shape)
        return _layer_norm(input, normalized_shape, None, None, eps, input.dtype)


class FusedRMSNormAffineFunction:
    @staticmethod
    def apply(input, weight, normalized_shape, eps, memory_efficient=False):
        _check_shape(input, normalized_shape)
        _check_same("fused_rms_norm_affine", weight, input.dtype)
        return _rms(input, normalized_shape, weight, eps, input.dtype)


class FusedRMSNormAffineMixedDtypesFunction:
    @staticmethod
    def apply(input, weight, normalized_shape, eps, memory_efficient=False):
        _check_shape(input, normalized_shape)
        _check_mixed("mixed_dtype_fused_rms_norm_affine", input, weight)
        return _rms(input, normalized_shape, weight, eps, weight.dtype)


class FusedRMSNormFunction:
    @staticmethod
    def apply(input, normalized_shape, eps, memory_efficient=False):
        _check_shape(input, normalized_shape)
        return _rms(input, normalized_shape, None, eps, input.dtype)


def _autocast_cast(function, input, *args):
    """apex's pattern: under autocast cast every tensor to the autocast dtype and run with autocast off;
    without autocast run as is (disabling an autocast that is off changes nothing)."""
    device_type = input.device.type
    if not _mixed.autocast_enabled(device_type):
        return function.apply(input, *args)
    args = _mixed.cast_if_autocast_enabled(device_type, input, *args)
    with torch.autocast(device_type=device_type, enabled=False):
        return function.apply(*args)


def fused_layer_norm_affine(input, weight, bias, normalized_shape, eps=1e-6, memory_efficient=False):
    return _autocast_cast(FusedLayerNormAffineFunction, input, weight, bias, normalized_shape, eps, memory_efficient)


def fused_layer_norm(input, normalized_shape, eps=1e-6, memory_efficient=False):
    return _autocast_cast(FusedLayerNormFunction, input, normalized_shape, eps, memory_efficient)


def mixed_dtype_fused_layer_norm_affine(input, weight, bias, normalized_shape, eps=1e-6, memory_efficient=False):
    return _autocast_cast(FusedLayerNormAffineMixedDtypesFunction, input, weight, bias, normalized_shape, eps,
                          memory_efficient)


def fused_rms_norm_affine(input, weight, normalized_shape, eps=1e-6, memory_efficient=False):
    return _autocast_cast(FusedRMSNormAffineFunction, input, weight, normalized_shape, eps, memory_efficient)


def fused_rms_norm(input, normalized_shape, eps=1e-6, memory_efficient=False):
    return _autocast_cast(FusedRMSNormFunction, input, normalized_shape, eps, memory_efficient)


def mixed_dtype_fused_rms_norm_affine(input, weight, normalized_shape, eps=1e-6, memory_efficient=False):
    return _autocast_cast(FusedRMSNormAffineMixedDtypesFunction, input, weight, normalized_shape, eps,
                          memory_efficient)


def manual_rms_norm(input, normalized_shape, weight, eps):
    """apex's reference RMSNorm (its path for non-CUDA input, TorchScript and torch.compile)."""
    dims = tuple(i for i in range(-1, -len(normalized_shape) - 1, -1))
    variance = input.to(torch.float32).pow(2).mean(dims, keepdim=True)
    input = input * torch.rsqrt(variance + eps)
    if weight is None:
        return input
    if weight.dtype in [torch.float16, torch.bfloat16]:
        input = input.to(weight.dtype)
    return weight * input


def _apex_fallback(input: torch.Tensor) -> bool:
    """apex's own condition for its pure-torch path."""
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
    return torch.jit.is_tracing() or torch.jit.is_scripting() or compiling() or not input.is_cuda


# ---------------------------------------------------------------- modules

class FusedLayerNorm(torch.nn.Module):
    r"""Layer normalization over the trailing ``normalized_shape`` dimensions (apex's fused kernel semantics)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = torch.Size(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.memory_efficient = memory_efficient
        if self.elementwise_affine:
            self.weight = Parameter(torch.empty(*normalized_shape))
            self.bias = Parameter(torch.empty(*normalized_shape))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, input):
        if _apex_fallback(input):
            return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)
        if self.elementwise_affine:
            return fused_layer_norm_affine(input, self.weight, self.bias, self.normalized_shape, self.eps,
                                           self.memory_efficient)
        return fused_layer_norm(input, self.normalized_shape, self.eps, self.memory_efficient)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)


class FusedRMSNorm(torch.nn.Module):
    r"""RMS normalization: ``x / sqrt(mean(x**2) + eps) * weight`` (apex's fused kernel semantics)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = torch.Size(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.memory_efficient = memory_efficient
        if self.elementwise_affine:
            self.weight = Parameter(torch.empty(*normalized_shape))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        if _apex_fallback(input):
            return manual_rms_norm(input, self.normalized_shape, self.weight, self.eps)
        if self.elementwise_affine:
            return fused_rms_norm_affine(input, self.weight, self.normalized_shape, self.eps, self.memory_efficient)
        return fused_rms_norm(input, self.normalized_shape, self.eps, self.memory_efficient)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)


def _mixed_affine(name: str, kwargs: dict) -> None:
    if "elementwise_affine" in kwargs:
        import warnings

        warnings.warn(f"{name} does not support `elementwise_affine` argument")
        if not kwargs.pop("elementwise_affine"):
            raise RuntimeError(f"{name} does not support `elementwise_affine = False`")


class MixedFusedLayerNorm(FusedLayerNorm):
    """FusedLayerNorm whose output has the parameters' dtype (Megatron's mixed-dtype layer norm)."""

    def __init__(self, normalized_shape, eps=1e-5, *, memory_efficient=False, **kwargs):
        _mixed_affine("MixedFusedLayerNorm", kwargs)
        super().__init__(normalized_shape=normalized_shape, eps=eps, elementwise_affine=True,
                         memory_efficient=memory_efficient)

    def forward(self, input: torch.Tensor):
        if _apex_fallback(input):
            return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)
        return mixed_dtype_fused_layer_norm_affine(input, self.weight, self.bias, self.normalized_shape, self.eps,
                                                   self.memory_efficient)


class MixedFusedRMSNorm(FusedRMSNorm):
    """FusedRMSNorm whose output has the parameter's dtype."""

    def __init__(self, normalized_shape, eps=1e-5, *, memory_efficient=False, **kwargs):
        _mixed_affine("MixedFusedRMSNorm", kwargs)
        super().__init__(normalized_shape=normalized_shape, eps=eps, elementwise_affine=True,
                         memory_efficient=memory_efficient)

    def forward(self, input: torch.Tensor):
        if _apex_fallback(input):
            return manual_rms_norm(input, self.normalized_shape, self.weight, self.eps)
        return mixed_dtype_fused_rms_norm_affine(input, self.weight, self.normalized_shape, self.eps,
                                                 self.memory_efficient)

