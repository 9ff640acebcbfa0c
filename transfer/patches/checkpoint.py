"""torch.distributed.checkpoint (DCP) on a vendor target: the device it stages from is the target's.

DCP's file writer copies each tensor to host memory before writing it: its
overlapping loader (used when one thread writes and ``torch.cuda.is_available()``)
asks ``torch._utils._get_available_device_type()`` which device type to copy
from, and that answers ``'cuda'`` (``torch.cuda.is_available()`` is the
vendor's answer under transfer). The vendor's tensors are then neither 'cuda'
nor CPU and ``dcp.save`` stops with "AssertionError: Tensor must be on CPU". The
name DCP's filesystem module bound answers the target's device type instead
(``'npu'``...), as it does with the plug-in alone. The cpu target needs nothing:
its tensors are CPU tensors, which the loader writes as they are.
"""

from __future__ import annotations


def apply(ctx) -> None:
    if ctx.cpu is not None:
        return
    device_type = ctx.profile.device_type

    def make(original):
        def _get_available_device_type():
            found = original()
            return device_type if found == "cuda" else found

        return _get_available_device_type

    ctx.registry.replace_when_imported("checkpoint.staging_device", "torch.distributed.checkpoint.filesystem", "",
                                       "_get_available_device_type", make)
