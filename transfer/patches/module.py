"""nn.Module.to / .to_empty. (Module.cuda needs no patch: it calls Tensor.cuda.)"""

from __future__ import annotations

import torch

from ._calls import device_first, device_keyword
from .vendor_ops import float64_for


def apply(ctx) -> None:
    Module = torch.nn.Module
    if ctx.cpu is not None:
        to = ctx.cpu.module_to(ctx, Module.to)  # the device stays CUDA for Tensor.to, which copies
    else:
        # Translating once here spares one cache lookup per parameter in _apply.
        to = device_first(ctx, "Module.to", Module.to, to_signature=True, float64=float64_for(ctx))
    ctx.registry.replace("module.to", Module, "to", to)
    ctx.registry.replace("module.to_empty", Module, "to_empty",
                         device_keyword(ctx, "Module.to_empty", Module.to_empty))
