"""SyncBatchNorm on the target.

Vendors: torch >= 2.1 accepts the PrivateUse1 device in SyncBatchNorm.forward;
older torch checked ``input.is_cuda``, which the tensor area answers for the
target's tensors. Nothing more is needed there.

cpu target: stock torch has no CPU kernels for the batch_norm_stats family and
its forward rejects CPU input. `transfer.cpu.kernels` registers the kernels and
the forward below runs torch's own synchronising autograd function over gloo.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.modules._functions import SyncBatchNorm as sync_batch_norm


def apply(ctx) -> None:
    if ctx.cpu is None:
        return
    from ..cpu import kernels as cpu_kernels

    library = cpu_kernels.register()
    ctx.registry.on_revert("sync_batchnorm.cpu_kernels", lambda: cpu_kernels.destroy(library))
    native_forward = torch.nn.SyncBatchNorm.forward

    def forward(self, input):
        if input.device.type != "cpu":
            return native_forward(self, input)
        return _cpu_forward(self, input)

    forward.__wrapped__ = native_forward
    ctx.registry.replace("sync_batchnorm.forward", torch.nn.SyncBatchNorm, "forward", forward)


def _cpu_forward(self, input):
    """torch 2.13's SyncBatchNorm.forward with the device check widened to 'cpu'."""
    self._check_input_dim(input)
    self._check_non_zero_input_channels(input)
    factor = 0.0 if self.momentum is None else self.momentum
    if self.training and self.track_running_stats:
        self.num_batches_tracked.add_(1)
        factor = 1.0 / self.num_batches_tracked.item() if self.momentum is None else self.momentum
    bn_training = self.training or (self.running_mean is None and self.running_var is None)
    tracked = not self.training or self.track_running_stats
    running_mean = self.running_mean if tracked else None
    running_var = self.running_var if tracked else None

    world_size = 1
    need_sync = bn_training and self.training and dist.is_available() and dist.is_initialized()
    if need_sync:
        group = self.process_group or dist.group.WORLD
        world_size = dist.get_world_size(group)
        need_sync = world_size > 1
    if not need_sync:
        return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                            bn_training, factor, self.eps)
    return sync_batch_norm.apply(input, self.weight, self.bias, running_mean, running_var,
                                 self.eps, factor, group, world_size)
