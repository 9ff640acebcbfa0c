"""FullyShardedDataParallel (FSDP1) on the cpu target: torch's own CPU path.

FSDP1 takes its compute device from ``device_id`` (``torch.cuda.current_device()``
in every tutorial) and refuses host tensors where CUDA has device memory. On the
cpu target the device is the CPU, so FSDP1 runs the way torch runs it on the CPU:

* ``device_id``: a CUDA ordinal or device (checked against the device count and
  reported, as every translated device) becomes ``torch.device('cpu')``, torch's
  CPU FSDP (device handle ``torch.cpu``, gloo collectives); without it, FSDP1
  on torch 2.13 finds no accelerator ("FSDP needs a non-CPU accelerator device");
* ``sync_module_states=True``: torch refuses CPU parameters there ("requires them
  to be on GPU") because NCCL cannot broadcast host memory; gloo can, and host
  memory is the virtual devices' memory, so rank 0's parameters and buffers are
  broadcast as on CUDA.

Vendor targets need nothing here: to FSDP's own code ``torch.device(N)`` is ``<vendor>:N`` (only the
user's script gets ``cuda:N``: patches/accelerator.py) and the plug-in's device handle serves FSDP1 (FSDP2
and DTensor: patches/device_mesh.py).
"""

from __future__ import annotations

import torch

from ..devices import parse_cuda


def apply(ctx) -> None:
    import torch.distributed as dist

    if ctx.cpu is None or not dist.is_available():
        return
    translate = ctx.target.translator("FullyShardedDataParallel(device_id)")
    cpu = torch.device("cpu")

    def device_id(value):
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int) or parse_cuda(value) is not None:
            translate(value)  # checks the ordinal (InvalidDeviceError past the count), reports it
            return cpu
        return value

    def init(wrapped, instance, args, kwargs):
        if "device_id" in kwargs:
            kwargs = dict(kwargs, device_id=device_id(kwargs["device_id"]))
        elif len(args) > 9:  # positional: device_id is the 10th parameter on torch 2.0-2.14
            args = tuple(args[:9]) + (device_id(args[9]),) + tuple(args[10:])
        return wrapped(*args, **kwargs)

    def sync_on_host(module_states):
        """gloo broadcasts host memory: nothing to refuse (see the module docstring)."""

    def patch_fsdp(module):
        owner = getattr(module, "FullyShardedDataParallel", None)
        if owner is not None and "__init__" in vars(owner):
            ctx.registry.wrap("fsdp.device_id", owner, "__init__", init)

    def patch_init_utils(module):
        if hasattr(module, "_check_module_states_for_sync_module_states"):
            ctx.registry.replace("fsdp.sync_module_states", module, "_check_module_states_for_sync_module_states",
                                 sync_on_host)

    ctx.registry.when_imported("fsdp.device_id", "torch.distributed.fsdp.fully_sharded_data_parallel", patch_fsdp)
    ctx.registry.when_imported("fsdp.sync_module_states", "torch.distributed.fsdp._init_utils", patch_init_utils)
