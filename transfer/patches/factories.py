"""torch.zeros(..., device='cuda') and every other tensor factory.

The list is torch's own (`torch.utils._device._device_constructors()`, the set
`with torch.device(...)` relies on), plus the ``*_like`` factories and ``torch.normal``. It is
cached by torch, so it is read before any factory is replaced.
"""

from __future__ import annotations

import torch
import torch.utils._device

from ._calls import _finish, device_keyword
from .tensor import _TensorBase
from .rng import factory_draws

_LIKE = ("empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like")
# torch.normal(mean, std, size, device=...) takes a device but is not in torch's list.
_ALSO = _LIKE + ("normal",)
_NAMESPACES = ("torch", "torch.fft", "torch.nested", "torch.sparse")


def factory_locations():
    """(module, name) for every public home of a device-taking factory."""
    import importlib

    wanted = {id(f) for f in torch.utils._device._device_constructors()}
    wanted |= {id(getattr(torch, name)) for name in _ALSO}
    found = []
    for modname in _NAMESPACES:
        module = importlib.import_module(modname)
        for name, value in list(vars(module).items()):
            if id(value) in wanted and not name.startswith("_") and not _stray_alias(module, name, value):
                found.append((module, name))
    return found


def _stray_alias(module, name, value) -> bool:
    """True for a second name of a factory the module also holds under its own name: torch 2.0's
    __init__ leaves its loop variable `torch.obj` (= torch.zeros_like) behind; that is no API."""
    own = getattr(value, "__name__", name)
    return own != name and vars(module).get(own) is value


def apply(ctx) -> None:
    for module, name in factory_locations():
        api, original = f"{module.__name__}.{name}", getattr(module, name)
        draws = factory_draws(ctx, name, original) if module is torch else None
        wrapper = device_keyword(ctx, api, original, draws)
        if ctx.profile.is_cpu and module is torch and name in _SHARING:
            wrapper = _copying(ctx, wrapper, name)
        ctx.registry.replace(f"factories.{name}", module, name, wrapper)


#: Factories that return their input (or share its memory) when it already is on the device.
_SHARING = ("as_tensor", "asarray")


def _copying(ctx, translated, name):
    """cpu target: ``torch.as_tensor(x, device='cuda')`` / ``torch.asarray(x, device='cuda')``
    copy, as on CUDA where the data (a host tensor, a NumPy array) is in host memory and the
    result in device memory. Without a CUDA device they share memory as natively."""
    from ..devices import parse_cuda

    to, asarray = _TensorBase.to, torch.asarray

    def factory(*args, **kwargs):
        device = kwargs.get("device") if kwargs else None
        if device is None or parse_cuda(device) is None:
            return translated(*args, **kwargs)
        if name == "asarray":
            if kwargs.get("copy") is None:
                kwargs["copy"] = True
            return translated(*args, **kwargs)
        data = args[0] if args else kwargs.get("data")
        if isinstance(data, (list, tuple, int, float, bool, complex)):
            return translated(*args, **kwargs)  # a new tensor already
        result = translated(*args, **kwargs)  # translates and checks the device
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
        if isinstance(data, torch.Tensor):  # as_tensor(t, dtype, device) is t.to(device, dtype)
            return to(data, result.device, dtype, False, True)
        return asarray(data, dtype=dtype, device=result.device, copy=True)  # NumPy and other array-likes

    return _finish(factory, translated, name)
