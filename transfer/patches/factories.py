"""torch.zeros(..., device='cuda') and every other tensor factory.

The list is torch's own (`torch.utils._device._device_constructors()`, the set
`with torch.device(...)` relies on), plus the ``*_like`` factories and ``torch.normal``. It is
cached by torch, so it is read before any factory is replaced.
"""

from __future__ import annotations

import torch
import torch.utils._device

from ._calls import device_keyword
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
        if ctx.cpu is not None and module is torch and name in ctx.cpu.SHARING:
            wrapper = ctx.cpu.copying_factory(wrapper, name)  # as_tensor/asarray to CUDA copy
        ctx.registry.replace(f"factories.{name}", module, name, wrapper)
