"""Autocast, GradScaler and custom_fwd/custom_bwd with device type 'cuda'.

Every spelling reaches one place: ``torch.autocast('cuda')``,
``torch.autocast(device_type='cuda')``, ``torch.amp.autocast('cuda', ...)`` and
``torch.cuda.amp.autocast()`` (a subclass passing "cuda") construct
``torch.amp.autocast_mode.autocast``, whose ``__init__`` is wrapped here; the
GradScalers and ``custom_fwd`` likewise. A device type torch parses as CUDA
(`devices.parse_cuda`) becomes the target's; anything else is torch's to judge.

Inside a translated region the CUDA autocast state answers as on CUDA:
``torch.is_autocast_enabled('cuda')`` (or ``()``), ``torch.get_autocast_dtype('cuda')``
and ``torch.get_autocast_gpu_dtype()`` give the region's state (entering sets
CUDA's slot too, leaving restores it; no tensor carries the CUDA dispatch key
on these targets, so the slot changes nothing else).

dtype on the cpu target (`cpu_amp_dtype`): CUDA autocasts to float16 (no
dtype given means CUDA's autocast dtype, float16 unless the script set it).
fp16 matmul on CPUs is ~1000x slower than bf16 (measured on a 2-core x86 build machine, torch 2.13), so float16 becomes
bfloat16 by default, in every spelling, in ``custom_fwd(cast_inputs=...)``
too; TRANSFER_CPU_AMP_DTYPE=float16 keeps float16. The substitution is said
once (the banner) and listed by `transfer.status()['substitutions']`.
GradScaler is left as CUDA has it (enabled, scale 2**16, the same growth and
state_dict, so checkpoints and ``get_scale()`` agree): with bfloat16 it is
harmless, since scaling by a power of two is exact and bfloat16 has
float32's exponent range, so it skips a step only where float32 would overflow.
"""

from __future__ import annotations

import warnings

import torch
import torch.amp.autocast_mode

from .. import settings
from ..devices import parse_cuda
from ..errors import TransferError

#: TRANSFER_CPU_AMP_DTYPE's values (any case): what fp16 autocast runs as on the cpu target.
CPU_AMP_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
                  "fp16": torch.float16}

# torch < 2.4 has only the CUDA spellings of the autocast state (no device_type argument).
_TYPED_STATE = hasattr(torch, "get_autocast_dtype")


def apply(ctx) -> None:
    device_type = ctx.profile.device_type
    half = cpu_amp_dtype() if ctx.cpu is not None else torch.float16
    if half is not torch.float16:
        ctx.substitutions["float16 autocast"] = f"{_name(half)} (TRANSFER_CPU_AMP_DTYPE=float16 keeps float16)"

    def is_cuda_type(value):
        return isinstance(value, str) and parse_cuda(value) is not None

    def dtype_for(dtype):
        """The dtype a CUDA autocast region with `dtype` runs in on the target."""
        if ctx.cpu is None:
            return dtype
        if dtype is None:
            dtype = _cuda_state()[1]  # what CUDA uses when no dtype is given
        return half if dtype is torch.float16 else dtype

    def autocast_init(wrapped, instance, args, kwargs):
        given = args[0] if args else kwargs.get("device_type")
        if not is_cuda_type(given):
            return wrapped(*args, **kwargs)
        if args:
            args = (device_type,) + tuple(args[1:])
        else:
            kwargs["device_type"] = device_type
        if len(args) > 1:
            args = (args[0], dtype_for(args[1])) + tuple(args[2:])
        else:
            kwargs["dtype"] = dtype_for(kwargs.get("dtype"))
        wrapped(*args, **kwargs)
        instance._transfer_cuda = True  # a CUDA region: __enter__ mirrors it in CUDA's state

    def autocast_enter(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        if getattr(instance, "_transfer_cuda", False) and not torch._jit_internal.is_scripting():
            instance._transfer_prev_cuda = _cuda_state()
            _set_cuda_state(instance._enabled, instance.fast_dtype)
        return result

    def autocast_exit(wrapped, instance, args, kwargs):
        previous = getattr(instance, "_transfer_prev_cuda", None)
        if previous is not None:
            instance._transfer_prev_cuda = None
            _set_cuda_state(*previous)
        return wrapped(*args, **kwargs)

    def scaler_init(wrapped, instance, args, kwargs):
        if args:
            args = ((device_type if is_cuda_type(args[0]) else args[0]),) + tuple(args[1:])
        elif "device" in kwargs:
            kwargs["device"] = device_type if is_cuda_type(kwargs["device"]) else kwargs["device"]
        else:
            kwargs["device"] = device_type  # GradScaler() defaults to "cuda"
        return wrapped(*args, **kwargs)

    def custom(wrapped, instance, args, kwargs):
        if is_cuda_type(kwargs.get("device_type")):
            kwargs["device_type"] = device_type
            if kwargs.get("cast_inputs") is not None:
                kwargs["cast_inputs"] = dtype_for(kwargs["cast_inputs"])
        return wrapped(*args, **kwargs)

    def cuda_custom_fwd(wrapped, instance, args, kwargs):  # torch < 2.4's own torch.cuda.amp.custom_fwd
        if kwargs.get("cast_inputs") is not None:
            kwargs["cast_inputs"] = dtype_for(kwargs["cast_inputs"])
        return wrapped(*args, **kwargs)

    reg = ctx.registry
    autocast = torch.amp.autocast_mode.autocast
    reg.wrap("amp.autocast", autocast, "__init__", autocast_init)
    reg.wrap("amp.autocast_state", autocast, "__enter__", autocast_enter)
    reg.wrap("amp.autocast_state_exit", autocast, "__exit__", autocast_exit)
    if hasattr(torch.amp, "GradScaler"):  # torch < 2.3: only the CUDA-only torch.cuda.amp.GradScaler
        reg.wrap("amp.GradScaler", torch.amp.GradScaler, "__init__", scaler_init)
    elif ctx.cpu is not None:  # its CPU kernels
        from ..cpu import kernels as cpu_kernels

        library = cpu_kernels.register_grad_scaler()
        if library is not None:
            reg.on_revert("amp.cpu_kernels", lambda: cpu_kernels.destroy(library))
    if hasattr(torch.amp, "custom_fwd"):  # torch < 2.4: torch.cuda.amp.custom_fwd takes no device_type
        reg.wrap("amp.custom_fwd", torch.amp, "custom_fwd", custom)
        reg.wrap("amp.custom_bwd", torch.amp, "custom_bwd", custom)
    elif ctx.cpu is not None:
        reg.wrap("amp.custom_fwd", torch.cuda.amp, "custom_fwd", cuda_custom_fwd)


def cpu_amp_dtype() -> torch.dtype:
    """What CUDA's float16 autocast runs as on the cpu target: TRANSFER_CPU_AMP_DTYPE (default bfloat16).

    Raises TransferError at install for a value that is not one of `CPU_AMP_DTYPES`, and for
    float16 where torch's CPU autocast has none."""
    raw, name = settings.cpu_amp_dtype_name()
    if name not in CPU_AMP_DTYPES:
        raise TransferError(f"TRANSFER_CPU_AMP_DTYPE={raw!r} is not a choice.{settings.did_you_mean(name, CPU_AMP_DTYPES)} "
                            f"Use bfloat16 (or bf16; the default) "
                            f"or float16 (or fp16), or unset it")
    dtype = CPU_AMP_DTYPES[name]
    if dtype is torch.float16 and not _cpu_autocast_takes_float16():
        raise TransferError(f"TRANSFER_CPU_AMP_DTYPE={name}: torch {torch.__version__} has no float16 CPU autocast "
                            "(only bfloat16); unset TRANSFER_CPU_AMP_DTYPE to run fp16 autocast as bfloat16")
    return dtype


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _cuda_state():
    """(enabled, dtype) of CUDA's autocast slot."""
    if _TYPED_STATE:
        return torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()


def _set_cuda_state(enabled: bool, dtype: torch.dtype) -> None:
    if _TYPED_STATE:
        torch.set_autocast_enabled("cuda", enabled)
        torch.set_autocast_dtype("cuda", dtype)
    else:
        torch.set_autocast_enabled(enabled)
        torch.set_autocast_gpu_dtype(dtype)


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
