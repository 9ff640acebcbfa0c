"""Tensor.to / .cuda / .new_* / .pin_memory / .is_cuda."""

from __future__ import annotations

import inspect

import torch

from ._calls import _NOTHING_SEEN, _finish, device_first, device_keyword
from ..devices import DEVICE_SPEC_TYPES

# torch < 2.3 names the C base class of torch.Tensor `_TensorBase`.
_TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase

_NEW_METHODS = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor")


def apply(ctx) -> None:
    reg, Tensor = ctx.registry, torch.Tensor
    reg.replace("tensor.to", Tensor, "to", device_first(ctx, "Tensor.to", Tensor.to, to_signature=True))
    reg.replace("tensor.cuda", Tensor, "cuda", _cuda(ctx))
    for name in _NEW_METHODS:
        reg.replace(f"tensor.{name}", Tensor, name, device_keyword_method(ctx, name))
    reg.replace("tensor.pin_memory", Tensor, "pin_memory", _pin_memory(ctx))
    reg.replace("tensor.is_cuda", Tensor, "is_cuda", _is_cuda(ctx))


def device_keyword_method(ctx, name: str):
    return device_keyword(ctx, f"Tensor.{name}", getattr(torch.Tensor, name))


def _cuda(ctx):
    """x.cuda(device) is x.to(<target device>): one identity test, then the C method.

    Same memo as `_calls.device_first` (the last argument and its translation,
    one tuple). On the cpu target every translation is the CPU, so the call
    ends in the C `Tensor.cpu`, ~200 ns cheaper than `Tensor.to`.
    """
    translator = ctx.target.translator("Tensor.cuda")
    preserve = torch.preserve_format
    last = _NOTHING_SEEN
    native_cuda, probe = _TensorBase.cuda, torch.empty(0)

    def translate(device):
        """The slow path: the memo missed."""
        nonlocal last
        spec = "cuda" if device is None else device  # None: the current device
        result = translator(spec)
        if result is spec:
            # Not a CUDA device ('cpu', 'CUDA:0', 'cuda:01'): torch's own C method
            # raises CUDA's error for it ("Invalid device, must be cuda device", the parser's).
            native_cuda(probe, device)
        if type(spec) in DEVICE_SPEC_TYPES:
            last = (device, result)
        return result

    if ctx.profile.is_cpu:
        native_cpu = _TensorBase.cpu

        def cuda(self, device=None, non_blocking=False, memory_format=preserve):
            if device is not last[0]:
                translate(device)  # checks the index, records the call for the report
            if memory_format is preserve:
                return native_cpu(self)
            return native_cpu(self, memory_format=memory_format)
    else:
        native_to = _TensorBase.to  # the C method, not our Tensor.to wrapper

        def cuda(self, device=None, non_blocking=False, memory_format=preserve):
            seen = last
            device = seen[1] if device is seen[0] else translate(device)
            if memory_format is preserve:
                return native_to(self, device, None, non_blocking)  # keywords cost ~250 ns
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
        return _TensorBase.__dict__["is_cpu"]  # C getset descriptor
    try:
        return inspect.getattr_static(torch.Tensor, f"is_{ctx.profile.device_type}")
    except AttributeError:
        device_type = ctx.profile.device_type
        return property(lambda self: self.device.type == device_type, doc="True on the target device")
