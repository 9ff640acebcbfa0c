"""DeviceMesh / init_device_mesh: the device type 'cuda' is the target's.

A mesh's device type decides everything FSDP2 (``fully_shard``), DTensor and
tensor parallelism do with devices: ``torch.<device_type>`` is their device
handle, ``torch.device(device_type, handle.current_device())`` the device
parameters must be on and shards are created on, and the device type of the
process groups the mesh creates. A mesh built for CUDA (``init_device_mesh
("cuda", (2,))``, ``DeviceMesh("cuda", [0, 1])``, ``DeviceMesh.from_group(pg,
"cuda")``, the meshes torch builds from them) is built for the target:

* vendor target: ``'<vendor>'`` (parameters on ``<vendor>:<rank>``; the
  vendor's collectives, hccl/tccl/eccl);
* cpu target: ``'cpu'``, torch's own CPU mesh over gloo: the device
  ``torch.cuda`` answers is the CPU, which is where a ``model.to('cuda')``
  put the parameters (without this, FSDP2 expects them on ``cuda:N`` and
  stops: "Expects the parameter to already be moved to device cuda:0 but got
  cpu").

Every other device type is left as given. ``mesh.device_type`` then says the
target's type (as ``x.device.type`` does for a tensor moved to 'cuda').
The constructor is patched, not init_device_mesh, so every path that builds a
mesh (torch's own ones included) is covered.
"""

from __future__ import annotations


def apply(ctx) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    target_type = ctx.profile.device_type
    record = ctx.target.translator("DeviceMesh(device_type)")

    def translate(device_type):
        if device_type == "cuda":  # exactly: torch refuses "CUDA" and "cuda:0" here, and still does
            record("cuda")  # counted in the report, as every translated device
            return target_type
        return device_type

    def init(wrapped, instance, args, kwargs):
        if args:
            args = (translate(args[0]),) + tuple(args[1:])
        elif "device_type" in kwargs:
            kwargs = dict(kwargs, device_type=translate(kwargs["device_type"]))
        return wrapped(*args, **kwargs)

    def patch(module):
        mesh = getattr(module, "DeviceMesh", None)
        if mesh is None or not isinstance(vars(mesh).get("__init__"), type(apply)):
            return  # distributed built without it (a stub)
        if ctx.registry.record_for(mesh, "__init__") is None:  # 2.2+: the class is in both modules
            ctx.registry.wrap("device_mesh.init", mesh, "__init__", init)

    # torch 2.2+: torch.distributed.device_mesh; 2.1: torch.distributed._tensor.device_mesh
    for module in ("torch.distributed.device_mesh", "torch.distributed._tensor.device_mesh"):
        ctx.registry.when_imported("device_mesh.init", module, patch)
