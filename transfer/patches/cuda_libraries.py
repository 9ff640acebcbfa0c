"""The CUDA runtime library loaded by name: ``ctypes.CDLL('libcudart.so')`` -> the target's answers.

Training code calls the CUDA runtime directly through ctypes (Transformer-XL's ``l2_promote``:
``cudaDeviceSetLimit`` / ``cudaDeviceGetLimit``; profiling scripts' ``cudaProfilerStart``). Where
transfer is active no CUDA runtime drives the devices: loading it fails (``OSError``), or, where a
CUDA toolkit is installed, its calls act on no device. ``ctypes.CDLL`` and ``ctypes.cdll.LoadLibrary``
given a CUDA runtime name (``libcudart.so[.N]``, a path to one, ``cudart64_*.dll``) return
`CudaRuntime` instead, whose functions answer as the CUDA runtime would for the target's devices and
return CUDA's status codes:

=======================  ====================================================================
function                 answer
=======================  ====================================================================
cudaGetDeviceCount(*n)   ``torch.cuda.device_count()`` (the target's devices); 0 (cudaSuccess)
cudaGetDevice(*d),       the current device / ``torch.cuda.set_device``
cudaSetDevice(d)
cudaDeviceSynchronize    ``torch.cuda.synchronize()``
cudaMemGetInfo(*f, *t)   ``torch.cuda.mem_get_info()``
cudaDeviceSetLimit,      the value is kept for this process (a later Get returns it) but no
cudaDeviceGetLimit       target has CUDA's limits: said once; an unset limit answers 215
                         (cudaErrorUnsupportedLimit)
cudaProfilerStart/Stop   nothing to do (said once); 0
cudaGetLastError,        0
cudaPeekAtLastError
anything else            `UnsupportedCudaAPI` naming the function (never a crash inside ctypes)
=======================  ====================================================================

Other libraries load as they do natively. NVML's Python module (pynvml) is served by transfer/dropins/ (switch: ``thirdparty.pynvml``).
"""

from __future__ import annotations

import ctypes
import re
from typing import Any, Callable, Dict

import torch

from ..errors import UnsupportedCudaAPI

#: CUDA runtime library names as code loads them (a bare name, a versioned soname, a path, the Windows dll).
CUDA_RUNTIME = re.compile(r"(^|[/\\])(libcudart\.so(\.\d+)*|cudart64_\d+\.dll)$")

CUDA_SUCCESS = 0
CUDA_ERROR_UNSUPPORTED_LIMIT = 215


def apply(ctx) -> None:
    native = ctypes.CDLL
    runtime = CudaRuntime(ctx)

    class CDLL(native):
        __doc__ = native.__doc__

        def __new__(cls, name, *args, **kwargs):
            if isinstance(name, (str, bytes)) and CUDA_RUNTIME.search(name if isinstance(name, str) else name.decode()):
                return runtime
            return super().__new__(cls)

    CDLL.__qualname__ = CDLL.__name__ = "CDLL"
    CDLL.__module__ = native.__module__
    if ctx.registry.replace("cuda_libraries.CDLL", ctypes, "CDLL", CDLL) is not None:
        ctx.registry.replace("cuda_libraries.cdll", ctypes.cdll, "_dlltype", CDLL)


def _value(arg: Any) -> Any:
    return arg.value if hasattr(arg, "value") else arg


def _store(pointer: Any, value: Any) -> None:
    """Write `value` where a ctypes out-argument points (byref(x), a POINTER, an array)."""
    target = getattr(pointer, "_obj", None)  # ctypes.byref(x)
    if target is not None:
        target.value = value
    elif hasattr(pointer, "contents"):
        pointer.contents.value = value
    else:
        pointer[0] = value


class CudaRuntime:
    """The CUDA runtime's functions answered for the target (see the module docstring)."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._limits: Dict[int, int] = {}
        self._name = "libcudart.so (transfer)"

    def _said(self, call: str, what: str) -> None:
        self._ctx.warn_once(f"libcudart.{call}", f"{call} (CUDA runtime, loaded through ctypes): {what}")

    def cudaGetDeviceCount(self, count) -> int:
        _store(count, torch.cuda.device_count())
        return CUDA_SUCCESS

    def cudaGetDevice(self, device) -> int:
        _store(device, torch.cuda.current_device())
        return CUDA_SUCCESS

    def cudaSetDevice(self, device) -> int:
        torch.cuda.set_device(int(_value(device)))
        return CUDA_SUCCESS

    def cudaDeviceSynchronize(self) -> int:
        torch.cuda.synchronize()
        return CUDA_SUCCESS

    def cudaMemGetInfo(self, free, total) -> int:
        free_bytes, total_bytes = torch.cuda.mem_get_info()
        _store(free, free_bytes)
        _store(total, total_bytes)
        return CUDA_SUCCESS

    def cudaDeviceSetLimit(self, limit, value) -> int:
        self._said("cudaDeviceSetLimit", "the target has no CUDA device limits; the value is kept for "
                                         "cudaDeviceGetLimit and changes nothing")
        self._limits[int(_value(limit))] = int(_value(value))
        return CUDA_SUCCESS

    def cudaDeviceGetLimit(self, value, limit) -> int:
        kept = self._limits.get(int(_value(limit)))
        if kept is None:
            return CUDA_ERROR_UNSUPPORTED_LIMIT
        _store(value, kept)
        return CUDA_SUCCESS

    def cudaProfilerStart(self) -> int:
        self._said("cudaProfilerStart", "no CUDA profiler runs on the target (use torch.profiler)")
        return CUDA_SUCCESS

    def cudaProfilerStop(self) -> int:
        return CUDA_SUCCESS

    def cudaGetLastError(self) -> int:
        return CUDA_SUCCESS

    cudaPeekAtLastError = cudaGetLastError

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("__"):
            raise AttributeError(name)
        target = "the cpu target" if self._ctx.cpu is not None else f"torch.{self._ctx.profile.device_type}"
        raise UnsupportedCudaAPI(
            f"{name} (CUDA runtime, loaded through ctypes.CDLL) is not supported on {target}: transfer answers "
            "cudaGetDeviceCount, cudaGetDevice, cudaSetDevice, cudaDeviceSynchronize, cudaMemGetInfo, "
            "cudaDeviceSetLimit/GetLimit, cudaProfilerStart/Stop and cudaGetLastError. Use the torch.cuda "
            "equivalent, or guard the call with `if torch.version.cuda:`.")

    def __getitem__(self, name: str) -> Callable:
        return getattr(self, name)

    def __repr__(self) -> str:
        return f"<CDLL '{self._name}'>"
