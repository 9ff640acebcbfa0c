"""DistributedDataParallel: device_ids / output_device in any CUDA form.

On a vendor, DDP itself accepts any single non-CPU device type and keeps only
the index, so 'cuda:1' and torch.device('cuda', 1) are translated for clarity
and that is all. On the cpu target DDP rejects device_ids for CPU modules (the
seed-002 ValueError) and SyncBatchNorm inside a CPU module: both are lifted.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from ..devices import raise_as_torch


def apply(ctx) -> None:
    translate = ctx.target.translator("DistributedDataParallel(device_ids)")
    on_cpu = ctx.cpu is not None

    def ddp_init(wrapped, instance, args, kwargs):
        args = list(args)
        for pos, name in ((1, "device_ids"), (2, "output_device")):
            if len(args) > pos:
                value, where = args[pos], "args"
            elif name in kwargs:
                value, where = kwargs[name], "kwargs"
            else:
                continue
            if value is not None:
                if on_cpu:
                    for spec in (value if name == "device_ids" else [value]):
                        raise_as_torch(spec)  # 'CUDA:0' fails as in torch's DDP
                    value = None  # a CPU module takes no device_ids
                elif name == "device_ids":
                    value = [translate(v) for v in value]
                else:
                    value = translate(value)
            if where == "args":
                args[pos] = value
            else:
                kwargs[name] = value
        result = wrapped(*args, **kwargs)
        for built in ctx.ddp_built:  # other areas' look at the built module (collectives: its reducer's dtypes)
            built(instance)
        return result

    ctx.registry.wrap("ddp.init", DistributedDataParallel, "__init__", ddp_init)
    if on_cpu:
        # SyncBatchNorm runs on the CPU here (see sync_batchnorm), so DDP's
        # "SyncBatchNorm layers only work with GPU modules" guard is lifted.
        ctx.registry.replace("ddp.sync_batchnorm_check", DistributedDataParallel,
                             "_passing_sync_batchnorm_handle", lambda self, module: None)
