"""nn.DataParallel on the target.

torch's DataParallel scatters with CUDA-only C++ (torch._C._scatter), so on
the targets it runs the module on one device, moving inputs there, which gives
the bare module's results; asking for several devices logs one warning.
Multi-device data parallelism on these accelerators is DDP's job.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DataParallel
from torch.utils._pytree import tree_map


def apply(ctx) -> None:
    translate = ctx.target.translator("DataParallel(device_ids)")

    def dp_init(wrapped, instance, args, kwargs):
        wrapped(*args, **kwargs)
        if instance.device_ids:
            if len(instance.device_ids) > 1:
                ctx.warn_once("DataParallel", f"nn.DataParallel over {len(instance.device_ids)} devices runs on "
                                              f"one {ctx.profile.device_type} device under transfer; use "
                                              "DistributedDataParallel for several devices")
            instance.device_ids = instance.device_ids[:1]
            instance.output_device = instance.device_ids[0]
            instance.src_device_obj = translate(torch.device("cuda", instance.device_ids[0]))
            instance.module.to(instance.src_device_obj)

    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        device = self.src_device_obj
        for t in self.module.parameters():
            if t.device != device:
                raise RuntimeError(f"module must have its parameters and buffers on device {device} "
                                   f"(device_ids[0]) but found one of them on device: {t.device}")
        move = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
        return self.module(*tree_map(move, inputs), **tree_map(move, kwargs))

    ctx.registry.wrap("data_parallel.init", DataParallel, "__init__", dp_init)
    ctx.registry.replace("data_parallel.forward", DataParallel, "forward", forward)
