"""DataLoader pin_memory, torch.Generator(device=...), default devices.

* DataLoader(pin_memory=True): on the cpu target there is nothing to pin for,
  and stock torch warns on every loader; the flag is dropped. Elsewhere the
  deprecated pin_memory_device='cuda' is translated.
* torch.Generator('cuda'): Generator is a C type whose constructor cannot be
  wrapped, so torch.Generator becomes a subclass whose ``__new__`` returns a
  plain generator on the target and whose metaclass keeps
  ``isinstance(g, torch.Generator)`` true for every generator.
* torch.set_default_device('cuda') and ``with torch.device('cuda'):``.
"""

from __future__ import annotations

import torch
import torch.utils._device
import torch.utils.data

from ._calls import device_first
from ..devices import parse_cuda


def apply(ctx) -> None:
    reg = ctx.registry
    cpu = ctx.cpu
    device_type = ctx.profile.device_type

    def loader_init(wrapped, instance, args, kwargs):
        if cpu is not None:
            cpu.loader_kwargs(kwargs)
        elif isinstance(kwargs.get("pin_memory_device"), str) and parse_cuda(kwargs["pin_memory_device"]) is not None:
            kwargs["pin_memory_device"] = device_type
        return wrapped(*args, **kwargs)

    reg.wrap("data.DataLoader", torch.utils.data.DataLoader, "__init__", loader_init)
    reg.replace("data.Generator", torch, "Generator", _generator_class(ctx))
    reg.replace("data.set_default_device", torch, "set_default_device",
                _positional_device(ctx, "torch.set_default_device", torch.set_default_device))
    reg.replace("data.device_context", torch.utils._device.DeviceContext, "__init__",
                device_first(ctx, "with torch.device(...)", torch.utils._device.DeviceContext.__init__))


def _positional_device(ctx, api, original):
    translate = ctx.target.translator(api)

    def set_default_device(device):
        return original(translate(device))

    set_default_device.__wrapped__ = original
    set_default_device.__doc__ = original.__doc__
    return set_default_device


def _generator_class(ctx):
    native = torch._C.Generator
    translate = ctx.target.translator("torch.Generator")

    class _GeneratorMeta(type(native)):
        # Every generator is a torch.Generator; a user's subclass of it keeps type()'s own answer.
        def __instancecheck__(cls, instance):
            return isinstance(instance, native) if cls is Generator else type.__instancecheck__(cls, instance)

        def __subclasscheck__(cls, subclass):
            return issubclass(subclass, native) if cls is Generator else type.__subclasscheck__(cls, subclass)

    class Generator(native, metaclass=_GeneratorMeta):
        __doc__ = native.__doc__

        def __new__(cls, device="cpu"):
            return native(translate(device))

    return Generator  # named torch.Generator by the registry (transfer/presentation.py)
