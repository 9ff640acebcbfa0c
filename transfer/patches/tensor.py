"""Tensor.to / .cuda / .new_* / .pin_memory / .is_cuda (/ .record_stream on the cpu target)."""

from __future__ import annotations

import inspect

import torch

from ..devices import DEVICE_SPEC_TYPES, TensorBase
from ..fastcalls import finish
from ._calls import NOTHING_SEEN, device_first, device_keyword
from .vendor_ops import float64_for


_NEW_METHODS = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor")


def apply(ctx) -> None:
    reg, Tensor = ctx.registry, torch.Tensor
    # cpu target: device memory is host memory, so a move to a CUDA device copies, as on CUDA.
    reg.replace("tensor.to", Tensor, "to", device_first(ctx, "Tensor.to", Tensor.to, to_signature=True,
                                                       copy_moves=ctx.cpu is not None, float64=float64_for(ctx)))
    reg.replace("tensor.cuda", Tensor, "cuda", _cuda(ctx))
    for name in _NEW_METHODS:
        reg.replace(f"tensor.{name}", Tensor, name, device_keyword_method(ctx, name))
    reg.replace("tensor.pin_memory", Tensor, "pin_memory", _pin_memory(ctx))
    reg.replace("tensor.is_cuda", Tensor, "is_cuda", _is_cuda(ctx))
    if ctx.cpu is not None:  # torch.cuda's streams are the cpu runtime's, which torch does not know
        reg.replace("tensor.record_stream", Tensor, "record_stream", ctx.cpu.record_stream(Tensor.record_stream))
    _lazy_parameters_move(ctx)


class _Installed:
    """Equal to whatever ``torch.Tensor.<name>`` is when compared: transfer's replacement, or the call-site log's
    layer over it, or torch's own once uninstalled."""

    __hash__ = None

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return other is getattr(torch.Tensor, self.name, None)


def _lazy_parameters_move(ctx) -> None:
    """``nn.LazyLinear(4).to("cuda")`` / ``.cuda()`` before the first forward: torch lets an uninitialized
    parameter through ``Tensor.to`` / ``.cuda`` only (``UninitializedTensorMixin._allowed_methods``, compared
    by identity with the functions of ``import torch``); the replacements are let through the same way."""
    mixin = getattr(torch.nn.parameter, "UninitializedTensorMixin", None)
    allowed = getattr(mixin, "_allowed_methods", None)
    if not isinstance(allowed, list) or not ctx.registry.enabled("tensor.lazy_parameters"):
        return
    added = [_Installed(name) for name in ("to", "cuda")]
    allowed.extend(added)
    ctx.registry.on_revert("tensor.lazy_parameters",
                           lambda: allowed.__setitem__(slice(None), [m for m in allowed if all(m is not a for a in added)]))


def device_keyword_method(ctx, name: str):
    return device_keyword(ctx, f"Tensor.{name}", getattr(torch.Tensor, name))


def _cuda(ctx):
    """x.cuda(device) is x.to(<target device>): one identity test, then the C method.

    Same memo as `_calls.device_first` (the last argument and its translation,
    one tuple). On the cpu target the call is a copy (``copy=True``): ``x.cuda()``
    of a host tensor is a new tensor on CUDA, never ``x`` itself.
    """
    translator = ctx.target.translator("Tensor.cuda")
    preserve = torch.preserve_format
    last = NOTHING_SEEN
    native_cuda, probe = TensorBase.cuda, torch.empty(0)

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

    native_to = TensorBase.to  # the C method, not our Tensor.to wrapper
    copy = ctx.cpu is not None  # a vendor's move copies by itself; the cpu target's must be told to

    def cuda(self, device=None, non_blocking=False, memory_format=preserve):
        seen = last
        device = seen[1] if device is seen[0] else translate(device)
        if memory_format is preserve:
            return native_to(self, device, None, non_blocking, copy)  # keywords cost ~250 ns
        return native_to(self, device, None, non_blocking, copy, memory_format=memory_format)

    return finish(cuda, torch.Tensor.cuda, "cuda")


def _pin_memory(ctx):
    native = torch.Tensor.pin_memory
    if ctx.cpu is not None:
        return ctx.cpu.pin_memory(native)
    return device_keyword(ctx, "Tensor.pin_memory", native)


def _is_cuda(ctx):
    """The target's own getter (``is_cpu``: the C getset descriptor on the cpu target), so
    `x.is_cuda` costs what `x.is_npu` costs."""
    try:
        return inspect.getattr_static(torch.Tensor, f"is_{ctx.profile.device_type}")
    except AttributeError:
        device_type = ctx.profile.device_type
        return property(lambda self: self.device.type == device_type, doc="True on the target device")
