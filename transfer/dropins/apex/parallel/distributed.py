"""apex.parallel.DistributedDataParallel on torch's DistributedDataParallel.

apex's semantics, honoured: parameters broadcast from rank 0 at construction,
buffers not synchronised afterwards (torch DDP's ``broadcast_buffers=False``);
gradients all-reduced after ``grads *= 1/gradient_predivide_factor`` and, with
``gradient_average`` (default), multiplied by ``gradient_predivide_factor /
world_size`` (a DDP communication hook doing exactly that);
``allreduce_always_fp32`` all-reduces half gradients in float32;
``message_size`` (elements) sets the bucket size; ``delay_allreduce`` only
moves when communication happens (torch overlaps it with backward), so results
are the same; ``disable_allreduce()`` / ``enable_allreduce()`` skip / resume
gradient synchronisation; ``shared_param`` raises, as apex does.
Not honoured, with one warning naming them: ``allreduce_trigger_params``,
``num_allreduce_streams`` > 1, ``allreduce_communicators``,
``retain_allreduce_buffers``, ``prof`` (timing and memory tuning of apex's own
bucketing; the results do not depend on them).
"""

import warnings

import torch
import torch.distributed as dist


class DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """apex's DistributedDataParallel interface over torch's DDP."""

    def __init__(self, module, message_size=10000000, delay_allreduce=False, shared_param=None,
                 allreduce_trigger_params=None, retain_allreduce_buffers=False, allreduce_always_fp32=False,
                 num_allreduce_streams=1, allreduce_communicators=None, gradient_average=True,
                 gradient_predivide_factor=1.0, gradient_average_split_factor=None, prof=False):
        if num_allreduce_streams > 1 and delay_allreduce:
            raise ValueError("self.allreduce_different_streams may only be used if delay_allreduce=False.")
        if shared_param is not None:
            raise ValueError("shared_param is no longer supported as an option.  It was misleadingly named from the "
                             "start.  It turns out overlapping communication with computation should work fine with "
                             "shared parameters.  If you still wish to delay communication to the end of the backward "
                             "pass, use delay_allreduce=True|False instead.")
        if allreduce_trigger_params is not None and delay_allreduce:
            raise ValueError("Setting allreduce_trigger_params is only valid if delay_allreduce=False.")
        if gradient_average_split_factor is not None:
            warnings.warn("gradient_average_split_factor has been renamed to gradient_predivide_factor.  "
                          "For now, gradient_average_split_factor will also work, but please update to use "
                          "gradient_predivide_factor instead.")
            gradient_predivide_factor = gradient_average_split_factor
        ignored = [name for name, value, default in (
            ("allreduce_trigger_params", allreduce_trigger_params, None),
            ("num_allreduce_streams", num_allreduce_streams, 1),
            ("allreduce_communicators", allreduce_communicators, None),
            ("retain_allreduce_buffers", retain_allreduce_buffers, False),
            ("prof", prof, False)) if value != default]
        if ignored:
            warnings.warn(f"apex.parallel.DistributedDataParallel: {', '.join(ignored)} tune apex's own bucketing "
                          "and streams and are not honoured by transfer's version (torch's DDP schedules the "
                          "all-reduces); gradients are the same.")
        with warnings.catch_warnings():  # torch 2.13 deprecates broadcast_buffers; its False is apex's semantics
            warnings.filterwarnings("ignore", message=".*broadcast_buffers.* is deprecated", category=FutureWarning)
            super().__init__(module, broadcast_buffers=False, bucket_cap_mb=max(1, int(message_size)) * 4 / 2 ** 20)
        self.message_size = message_size
        self.delay_allreduce = delay_allreduce
        self.allreduce_always_fp32 = allreduce_always_fp32
        self.gradient_average = gradient_average
        self.gradient_predivide_factor = gradient_predivide_factor
        self.world_size = float(dist.get_world_size(self.process_group))
        self._disable_allreduce = False
        self.register_comm_hook(self, _apex_allreduce)

    def enable_allreduce(self):
        self._disable_allreduce = False
        self.require_backward_grad_sync = True

    def disable_allreduce(self):
        self._disable_allreduce = True
        self.require_backward_grad_sync = False

    def forward(self, *inputs, **kwargs):
        self.require_backward_grad_sync = not self._disable_allreduce
        return super().forward(*inputs, **kwargs)


def _apex_allreduce(ddp, bucket):
    """apex's allreduce_bucket: *= 1/predivide, all-reduce (sum), *= predivide/world (if averaging)."""
    buffer = bucket.buffer()
    tensor = buffer.float() if ddp.allreduce_always_fp32 and buffer.dtype != torch.float32 else buffer
    if ddp.gradient_predivide_factor != 1.0:
        tensor.mul_(1.0 / ddp.gradient_predivide_factor)
    future = dist.all_reduce(tensor, group=ddp.process_group, async_op=True).get_future()

    def finish(fut):
        reduced = fut.value()[0]
        if ddp.gradient_average:
            reduced.mul_(ddp.gradient_predivide_factor / ddp.world_size)
        if reduced is not buffer:
            buffer.copy_(reduced)
        return buffer

    return future.then(finish)


class Reducer(object):
    """apex's manual gradient all-reduce helper: broadcast a module's parameters from rank 0 at
    construction, ``reduce()`` all-reduces (sums) its gradients, or the given gradient list's."""

    def __init__(self, module_or_grads_list):
        if isinstance(module_or_grads_list, torch.nn.Module):
            self.module = module_or_grads_list
            for param in self.module.parameters():
                dist.broadcast(param.data, 0)
        else:
            self.module = None
            self.grads = [t for t in module_or_grads_list]

    def reduce(self):
        grads = ([p.grad.data for p in self.module.parameters() if p.grad is not None] if self.module
                 else self.grads)
        for grad in grads:
            dist.all_reduce(grad)
