"""torch.accelerator on the cpu target: no accelerator, as on a CPU-only build.

A CUDA build of torch names CUDA as its accelerator even on a machine without
a GPU; ``torch.accelerator.is_available()`` then asks ``torch.cuda.is_available()``,
which the cpu target answers True, and torch goes on into CUDA's C++ runtime
(Adam's ``step``, dynamo's stream tracking, ``torch.load``): "CUDA driver
version is insufficient". On the cpu target torch.accelerator answers what a
CPU-only build answers: no accelerator (``current_accelerator()`` is None, so
``is_available()`` is False and ``device_count()`` 0). Vendor targets need
nothing here: a PrivateUse1 backend is torch's accelerator.
"""

from __future__ import annotations

import torch


def apply(ctx) -> None:
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
