"""torch.autocast / torch.amp.GradScaler / custom_fwd with device_type 'cuda'.

torch.cuda.amp.autocast and torch.cuda.amp.GradScaler are subclasses that pass
"cuda" to these constructors, so they are covered too. dtype policy on the cpu
target: fp16 autocast becomes bf16 (fp16 matmul on these CPUs is ~3000x slower
than bf16, see FACTS); TRANSFER_CPU_AMP_DTYPE=float16 keeps fp16.
"""

from __future__ import annotations

import logging
import os
import warnings

import torch
import torch.amp.autocast_mode

from ..devices import parse_cuda
from ..errors import TransferError

logger = logging.getLogger("transfer")


def apply(ctx) -> None:
    device_type = ctx.profile.device_type
    cpu_fp16_to = _cpu_amp_dtype() if ctx.profile.is_cpu else None

    def type_of(value):
        return device_type if isinstance(value, str) and parse_cuda(value) is not None else value

    def autocast_init(wrapped, instance, args, kwargs):
        if args:
            args = (type_of(args[0]),) + tuple(args[1:])
        elif "device_type" in kwargs:
            kwargs["device_type"] = type_of(kwargs["device_type"])
        if cpu_fp16_to is not None and kwargs.get("dtype") is torch.float16:
            kwargs["dtype"] = cpu_fp16_to
        elif cpu_fp16_to is not None and len(args) > 1 and args[1] is torch.float16:
            args = (args[0], cpu_fp16_to) + tuple(args[2:])
        return wrapped(*args, **kwargs)

    def scaler_init(wrapped, instance, args, kwargs):
        if args:
            args = (type_of(args[0]),) + tuple(args[1:])
        elif "device" in kwargs:
            kwargs["device"] = type_of(kwargs["device"])
        else:
            kwargs["device"] = device_type  # GradScaler() defaults to "cuda"
        return wrapped(*args, **kwargs)

    def custom(wrapped, instance, args, kwargs):
        if "device_type" in kwargs:
            kwargs["device_type"] = type_of(kwargs["device_type"])
        return wrapped(*args, **kwargs)

    reg = ctx.registry
    reg.wrap("amp.autocast", torch.amp.autocast_mode.autocast, "__init__", autocast_init)
    if hasattr(torch.amp, "GradScaler"):  # torch < 2.3: only the CUDA-only torch.cuda.amp.GradScaler
        reg.wrap("amp.GradScaler", torch.amp.GradScaler, "__init__", scaler_init)
    elif ctx.profile.is_cpu:
        from .. import cpu_kernels

        library = cpu_kernels.register_grad_scaler()
        if library is not None:
            reg.on_revert("amp.cpu_kernels", lambda: cpu_kernels.destroy(library))
    if hasattr(torch.amp, "custom_fwd"):  # torch < 2.4: torch.cuda.amp.custom_fwd takes no device_type
        reg.wrap("amp.custom_fwd", torch.amp, "custom_fwd", custom)
        reg.wrap("amp.custom_bwd", torch.amp, "custom_bwd", custom)


def _cpu_amp_dtype():
    name = os.environ.get("TRANSFER_CPU_AMP_DTYPE", "bfloat16").strip().lower()
    dtype = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": None, "fp16": None}.get(name, torch.bfloat16)
    if dtype is None and not _cpu_autocast_takes_float16():
        raise TransferError(f"TRANSFER_CPU_AMP_DTYPE={name}: torch {torch.__version__} has no float16 CPU autocast "
                            "(only bfloat16); unset TRANSFER_CPU_AMP_DTYPE to run fp16 autocast as bfloat16")
    return dtype


def _cpu_autocast_takes_float16() -> bool:
    """Feature probe: torch < 2.3's CPU autocast rejects float16 on entry."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast("cpu", dtype=torch.float16):
                pass
    except RuntimeError:
        return False
    return True
