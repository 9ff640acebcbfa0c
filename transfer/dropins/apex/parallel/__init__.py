"""apex.parallel, provided by transfer: DistributedDataParallel and SyncBatchNorm on torch's.

See distributed.py and sync_batchnorm.py for which of apex's arguments are
honoured. ``convert_syncbn_model`` and ``create_syncbn_process_group`` behave
as apex's; ``LARC`` is apex's (LARC.py).
"""

import torch

ReduceOp = torch.distributed.ReduceOp

from .distributed import DistributedDataParallel, Reducer  # noqa: E402
from .sync_batchnorm import SyncBatchNorm  # noqa: E402
from .LARC import LARC  # noqa: E402

__all__ = ["DistributedDataParallel", "Reducer", "SyncBatchNorm", "convert_syncbn_model",
           "create_syncbn_process_group", "ReduceOp", "LARC"]


def convert_syncbn_model(module, process_group=None, channel_last=False):
    """Replace every ``torch.nn.modules.batchnorm._BatchNorm`` in `module` by an apex SyncBatchNorm
    (running statistics shared, affine parameters copied), as apex does; instance norms stay."""
    mod = module
    if isinstance(module, torch.nn.modules.instancenorm._InstanceNorm):
        return module
    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
        mod = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group, channel_last=channel_last)
        mod.running_mean = module.running_mean
        mod.running_var = module.running_var
        mod.num_batches_tracked = module.num_batches_tracked
        if module.affine:
            mod.weight.data = module.weight.data.clone().detach()
            mod.bias.data = module.bias.data.clone().detach()
    for name, child in module.named_children():
        mod.add_module(name, convert_syncbn_model(child, process_group=process_group, channel_last=channel_last))
    del module
    return mod


def create_syncbn_process_group(group_size):
    """The process group of `group_size` consecutive ranks this rank belongs to (None for 0: the world)."""
    if group_size == 0:
        return None
    world_size = torch.distributed.get_world_size()
    assert world_size >= group_size
    assert world_size % group_size == 0
    group = None
    for group_num in range(world_size // group_size):
        group_ids = range(group_num * group_size, (group_num + 1) * group_size)
        cur_group = torch.distributed.new_group(ranks=group_ids)
        if torch.distributed.get_rank() // group_size == group_num:
            group = cur_group
    assert group is not None
    return group
