"""MMEngine on the target: the device its collectives use.

MMEngine moves every object it broadcasts or gathers (the run's timestamp and
seed in ``Runner.setup_env``, metrics, ``all_gather_object``) to
``mmengine.dist.utils.get_comm_device(group)``, which knows backends by name:
``nccl`` and ``smddp`` -> ``cuda``, ``hccl`` -> ``npu``, ``cncl`` -> ``mlu``,
``mccl`` -> ``musa``, anything else -> ``cpu`` (gloo's device). On CUDA a
script's nccl group gets CUDA tensors. A vendor backend MMEngine does not name
(tccl, eccl) would get CPU tensors, which a plug-in's process group registered
for its own device type refuses (``No backend type associated with device type
cpu``): ``Runner(launcher="pytorch")`` dies at start. Here a group whose
backend is the target's own answers the target's current device, as nccl's
answers the current CUDA device.

Switch: ``TRANSFER_DISABLE=mmengine.comm_device``.
"""

from __future__ import annotations

#: The modules that hold ``get_comm_device``: its own, and those that imported it by name.
_HOLDERS = ("mmengine.dist.utils", "mmengine.dist.dist", "mmengine.dist")


def apply(ctx) -> None:
    if ctx.profile.is_cpu:  # gloo: MMEngine's own answer (cpu) is the target's device
        return
    for module in _HOLDERS:
        ctx.registry.replace_when_imported("mmengine.comm_device", module, "", "get_comm_device",
                                           lambda original: _on_target(ctx, original))


def _on_target(ctx, original):
    """The replacement of `original`; None where it is already ours (a module that imported it by name from
    one patched before). After `revert_all` a copy bound that way answers as MMEngine's own."""
    if getattr(original, "_transfer_target_device", False):
        return None
    backend, device_type = ctx.profile.backend, ctx.profile.device_type

    def get_comm_device(group=None):
        device = original(group)
        if device.type == "cpu" and not ctx.registry.reverted:
            import torch
            import torch.distributed as dist

            if str(dist.get_backend(group)) == backend:
                return torch.device(device_type, ctx.runtime.current_device())
        return device

    get_comm_device.__wrapped__ = original
    get_comm_device.__doc__ = original.__doc__
    get_comm_device._transfer_target_device = True
    return get_comm_device
