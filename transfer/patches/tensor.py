"""Tensor.to / .cuda / .new_* / .pin_memory / .is_cuda."""

from __future__ import annotations

import inspect

import torch

from ._calls import _MISS, _finish, device_first, device_keyword
from ..devices import DEVICE_SPEC_TYPES

_NEW_METHODS = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor")


def apply(ctx) -> None:
    reg, Tensor = ctx.registry, torch.Tensor
    reg.replace("tensor.to", Tensor, "to", device_first(ctx, "Tensor.to", Tensor.to))
    reg.replace("tensor.cuda", Tensor, "cuda", _cuda(ctx))
    for name in _NEW_METHODS:
        reg.replace(f"tensor.{name}", Tensor, name, device_keyword_method(ctx, name))
    reg.replace("tensor.pin_memory", Tensor, "pin_memory", _pin_memory(ctx))
    reg.replace("tensor.is_cuda", Tensor, "is_cuda", _is_cuda(ctx))


def device_keyword_method(ctx, name: str):
    return device_keyword(ctx, f"Tensor.{name}", getattr(torch.Tensor, name))


def _cuda(ctx):
    """x.cuda(device) is x.to(<target device>): one cache lookup, then native `to`."""
    translator = ctx.target.translator("Tensor.cuda")
    lookup, miss, spec_types = translator.cache.get, translator.miss, DEVICE_SPEC_TYPES
    native_to = torch._C.TensorBase.to  # the C method, not our Tensor.to wrapper
    preserve = torch.preserve_format

    def cuda(self, device="cuda", non_blocking=False, memory_format=preserve):
        # 'cuda' alone means the current device; so does the target's bare type.
        if device is None:
            device = "cuda"
        if type(device) in spec_types:
            result = lookup(device, _MISS)
            device = miss(device) if result is _MISS else result
        if memory_format is preserve:
            return native_to(self, device, None, non_blocking)  # positional: keywords cost ~250 ns
        return native_to(self, device, None, non_blocking, memory_format=memory_format)

    return _finish(cuda, torch.Tensor.cuda, "cuda")


def _pin_memory(ctx):
    native = torch.Tensor.pin_memory
    if ctx.profile.is_cpu:
        # Pinned host memory only speeds up copies to an accelerator; the cpu
        # target has none, and stock torch raises here without one.
        def pin_memory(self, device=None):
            return self

        return _finish(pin_memory, native, "pin_memory")
    return device_keyword(ctx, "Tensor.pin_memory", native)


def _is_cuda(ctx):
    """The target's own getter, so `x.is_cuda` costs what `x.is_npu` costs."""
    if ctx.profile.is_cpu:
        return torch._C.TensorBase.__dict__["is_cpu"]  # C getset descriptor
    try:
        return inspect.getattr_static(torch.Tensor, f"is_{ctx.profile.device_type}")
    except AttributeError:
        device_type = ctx.profile.device_type
        return property(lambda self: self.device.type == device_type, doc="True on the target device")
