"""Module.share_memory / Tensor.share_memory_ / is_shared, and device tensors sent to other processes, as on CUDA.

On CUDA, ``model.share_memory()`` moves nothing for CUDA tensors (their storages are not host memory) and
``is_shared()`` is True for them: they reach another process (``mp.Process`` arguments, queues) through CUDA
IPC, and both processes then use the same device memory. pytorch/examples' mnist_hogwild trains one model
from several spawned processes this way, and the parent tests what they trained.

On a vendor target the same holds wherever the plug-in shares device memory between processes:

* ``share_memory()`` / ``share_memory_()`` leave the target's tensors as they are, as CUDA does, also where
  the plug-in refuses the call (torch_npu 2.1.0-2.12.0 raise "... is not supported in npu." for a module
  with npu parameters, 2.3.1-2.6.0 for ``Tensor.share_memory_`` and ``is_shared`` too); host tensors are
  shared as torch shares them;
* ``is_shared()`` of a target tensor answers whether it can be shared: True where the plug-in has IPC;
* a target tensor pickled for another process travels through the plug-in's IPC when it registers one
  (torch_npu 2.1.0.post*, 2.7.1 and later replace ``torch.multiprocessing.reductions.reduce_tensor``);
  where it registers none, it stops there with `UnsupportedCudaAPI` naming the reason and what to use
  instead, never torch's "_share_fd_: only available on CPU" from deep inside its CPU path.

Nothing changes on the cpu target: its tensors are host tensors, shared as torch shares them.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing.reductions as reductions

from ..errors import UnsupportedCudaAPI


def apply(ctx) -> None:
    if ctx.cpu is not None:
        return
    device_type = ctx.profile.device_type
    ipc = plugin_has_ipc()

    def share_memory_(self):
        if self.device.type == device_type:
            return self  # CUDA's storages are not moved either: IPC shares device memory as it is
        return original_share(self)

    def is_shared(self):
        if self.device.type == device_type:
            return ipc
        return original_is_shared(self)

    def share_memory(self):
        return self._apply(lambda t: t.share_memory_())

    original_share, original_is_shared = torch.Tensor.share_memory_, torch.Tensor.is_shared
    for name, value in (("share_memory_", share_memory_), ("is_shared", is_shared)):
        value.__doc__ = getattr(torch.Tensor, name).__doc__
        ctx.registry.replace(f"share_memory.{name}", torch.Tensor, name, value)
    share_memory.__doc__ = torch.nn.Module.share_memory.__doc__
    ctx.registry.replace("share_memory.module", torch.nn.Module, "share_memory", share_memory)
    if not ipc:
        _refuse_sending(ctx)


def plugin_has_ipc() -> bool:
    """Whether the vendor's plug-in pickles its tensors for other processes itself (torch_npu's reductions
    replace torch's ``reduce_tensor``, as CUDA's IPC path sits inside torch's own)."""
    return getattr(reductions.reduce_tensor, "__module__", "") != reductions.__name__


def _refuse_sending(ctx) -> None:
    """A target tensor pickled for another process raises a clear error; every other tensor goes as torch sends it."""
    device_type, package = ctx.profile.device_type, ctx.profile.package
    version = getattr(__import__(package), "__version__", "") if package else ""
    send = reductions.reduce_tensor

    def reduce_tensor(tensor):
        if tensor.device.type == device_type:
            raise UnsupportedCudaAPI(
                f"a tensor on {tensor.device} cannot be sent to another process: {package} {version} shares no "
                f"{device_type} memory between processes (CUDA does, through CUDA IPC: hogwild training with "
                f"model.share_memory() and mp.Process relies on it). Keep the shared model on the CPU "
                f"(share_memory() of a CPU model; each worker trains it there), or train on {device_type} with "
                "DistributedDataParallel (one process per device).")
        return send(tensor)

    if not ctx.registry.enabled("share_memory.send"):
        return
    # torch registers reduce_tensor with multiprocessing's pickler for every tensor class (init_reductions)
    tensor_classes = [cls for cls, reduce in ForkingPickler._extra_reducers.items() if reduce is send]
    for cls in tensor_classes:
        ForkingPickler.register(cls, reduce_tensor)
    ctx.registry.on_revert("share_memory.send", lambda: [ForkingPickler.register(cls, send) for cls in tensor_classes])
