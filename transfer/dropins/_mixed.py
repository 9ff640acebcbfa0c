"""Mixed-precision state of a device type, for the provided packages (apex).

apex asks CUDA's autocast (``torch.is_autocast_enabled()``,
``torch.get_autocast_gpu_dtype()``) and casts models to float16; on the
target these questions concern the target's device type, and "float16"
means what the target's autocast makes of a CUDA float16 request (`half_dtype`:
bfloat16 on the cpu target unless TRANSFER_CPU_AMP_DTYPE=float16, decided by
transfer's amp patch, asked here rather than repeated). Version differences
(torch < 2.4 has no device argument to the autocast getters) live here.
"""

from __future__ import annotations

import warnings

import torch

_HAS_DEVICE_ARG = hasattr(torch, "get_autocast_dtype")  # torch >= 2.4


def autocast_enabled(device_type: str) -> bool:
    if _HAS_DEVICE_ARG:
        return torch.is_autocast_enabled(device_type)
    if device_type == "cpu":
        return torch.is_autocast_cpu_enabled()
    if device_type == "cuda":
        return torch.is_autocast_enabled()
    module = getattr(torch, device_type, None)
    return bool(module is not None and hasattr(module, "is_autocast_enabled") and module.is_autocast_enabled())


def autocast_dtype(device_type: str) -> torch.dtype:
    if _HAS_DEVICE_ARG:
        return torch.get_autocast_dtype(device_type)
    if device_type == "cpu":
        return torch.get_autocast_cpu_dtype()
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype()
    return getattr(torch, device_type).get_autocast_dtype()


def half_dtype(device_type: str) -> torch.dtype:
    """The dtype CUDA's float16 becomes on the target: what the target's autocast makes of a CUDA
    float16 request (transfer's amp patch decides: bfloat16 on the cpu target unless
    TRANSFER_CPU_AMP_DTYPE=float16, float16 on the vendors). `device_type` is the target's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dtype = torch.autocast(device_type="cuda", dtype=torch.float16).fast_dtype
    return dtype if dtype in (torch.float16, torch.bfloat16) else torch.float16


def cast_if_autocast_enabled(device_type: str, *args):
    """apex._autocast_utils._cast_if_autocast_enabled for `device_type`: floating tensors (also in
    lists/dicts) to the autocast dtype while autocast is on, else the arguments unchanged."""
    if not autocast_enabled(device_type):
        return args
    dtype = autocast_dtype(device_type)

    def cast(value):
        if isinstance(value, torch.Tensor):
            return value.to(dtype) if value.is_floating_point() else value
        if isinstance(value, (list, tuple)):
            return type(value)(cast(v) for v in value)
        if isinstance(value, dict):
            return {k: cast(v) for k, v in value.items()}
        return value

    return tuple(cast(a) for a in args)
