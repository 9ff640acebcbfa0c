"""torch.accelerator on the cpu target: no accelerator, as on a CPU-only build.

A CUDA build of torch names CUDA as its accelerator even on a machine without
a GPU; ``torch.accelerator.is_available()`` then asks ``torch.cuda.is_available()``,
which the cpu target answers True, and torch goes on into CUDA's C++ runtime
(Adam's ``step``, dynamo's stream tracking, ``torch.load``): "CUDA driver
version is insufficient". On the cpu target torch.accelerator answers what a
CPU-only build answers: no accelerator (``current_accelerator()`` is None, so
``is_available()`` is False and ``device_count()`` 0). Vendor targets need
nothing here: a PrivateUse1 backend is torch's accelerator.

``torch.device(N)``: torch >= 2.6 resolves an int device to the accelerator,
and a CPU-only build of torch has none ("Cannot access accelerator device when
none is available"), where a CUDA build answers ``cuda:N`` (transformers'
``device_map="auto"`` resolves to ``{"": 0}``; ``torch.device(local_rank)``).
On the cpu target over such a build, ``torch.device(N)`` answers ``cuda:N``
(item ``accelerator.int_device``: torch.device's C constructor, swapped by
transfer/_fastcalls.c; every other call goes to torch's own). Where that
extension is not built, a warning says ``torch.device(N)`` still raises. A
vendor's plug-in is the accelerator: ``torch.device(0)`` is ``npu:0`` there, as
with torch_npu alone.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger("transfer")


def _int_device(ctx) -> None:
    try:
        torch.device(0)
        return  # a CUDA build, or torch < 2.6 (an int is CUDA's ordinal there)
    except RuntimeError:
        pass
    from .. import fastcalls

    native = fastcalls._fastcalls
    if native is None or not hasattr(native, "int_device"):
        logger.warning("transfer: torch.device(N) raises on this CPU-only build of torch (no accelerator), "
                       "and transfer's C extension, which makes it cuda:N, is not built: write "
                       "torch.device('cuda', N)")
        return
    if native.int_device(torch.device, True):
        ctx.registry.on_revert("accelerator.int_device", lambda: native.int_device(torch.device, False))


def apply(ctx) -> None:
    if ctx.cpu is not None and ctx.registry.enabled("accelerator.int_device"):
        _int_device(ctx)
    accelerator = getattr(torch, "accelerator", None)
    # torch >= 2.7 on a CUDA build: torch.accelerator.is_available() asks the patched torch.cuda.is_available().
    if ctx.cpu is None or accelerator is None or not hasattr(accelerator, "current_accelerator"):
        return
    try:
        native = torch._C._accelerator_getAccelerator()
    except RuntimeError:  # torch 2.6 raises "Cannot access accelerator device when none is available"
        return  # and never asks torch.cuda.is_available(): it already answers no accelerator
    if native is None:
        return

    def current_accelerator(check_available: bool = False):
        """None: the cpu target runs on the CPU, which torch does not count as an accelerator."""
        return None

    answers = {"current_accelerator": current_accelerator, "is_available": lambda: False, "device_count": lambda: 0}
    for name, replacement in answers.items():
        if hasattr(accelerator, name):  # each asks the C++ runtime directly in some torch version
            replacement.__name__ = name
            ctx.registry.replace(f"accelerator.{name}", accelerator, name, replacement)
