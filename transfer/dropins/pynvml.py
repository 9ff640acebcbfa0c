"""pynvml (nvidia-ml-py's module), provided by transfer: NVML's queries answered by the target.

NVIDIA's management library exists only beside NVIDIA's driver. Training code calls it directly
(DeepLearningExamples' GPU affinity and memory reports at import, wandb's and accelerate's monitors);
while transfer is active these names answer for the target's devices, through ``torch.cuda`` (so
through the vendor's own runtime and management calls: ``torch.npu.mem_get_info`` /
``torch.npu.utilization`` on Ascend):

=================================  =================================================================
call                               answer
=================================  =================================================================
nvmlInit, nvmlInitWithFlags,       succeed (nothing to load); calls before nvmlInit raise
nvmlShutdown                       NVMLError_Uninitialized, as NVML does
nvmlDeviceGetCount                 ``torch.cuda.device_count()`` (the target's devices)
nvmlDeviceGetHandleByIndex         a handle for that device (NVMLError_InvalidArgument past the count)
nvmlDeviceGetName                  ``torch.cuda.get_device_name(i)``
nvmlDeviceGetMemoryInfo            total / free / used from ``torch.cuda.mem_get_info(i)``
nvmlDeviceGetUtilizationRates      ``gpu``: the target's utilization (``torch.npu.utilization``), and
                                   ``memory`` the share of device memory in use (said in a warning: NVML's
                                   is the time memory was busy, which no target reports); on the cpu
                                   target (no utilization) NVMLError_NotSupported naming the call
nvmlDeviceGetCpuAffinity           the CPUs this process may run on (os.sched_getaffinity), as a bit mask
nvmlSystemGetDriverVersion         the target's plug-in and version ("torch_npu 2.13.0", "cpu target")
every other ``nvml*`` function     NVMLError_NotSupported naming the call and the target
=================================  =================================================================
"""

from __future__ import annotations

import os
from typing import List

NVML_SUCCESS = 0
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2

#: NVML's return codes (nvml.h, as nvidia-ml-py 13.615 names them): each is the constant NVML_ERROR_<NAME> and the
#: class NVMLError_<Name> (an NVMLError subclass), as in nvidia-ml-py, so `except pynvml.NVMLError_LibraryNotFound:`
#: and `from pynvml import NVMLError_DriverNotLoaded` (torch.cuda's own) work; the text is NVML's error string.
_ERRORS = {
    1: ("UNINITIALIZED", "Uninitialized"), 2: ("INVALID_ARGUMENT", "Invalid Argument"),
    3: ("NOT_SUPPORTED", "Not Supported"), 4: ("NO_PERMISSION", "Insufficient Permissions"),
    5: ("ALREADY_INITIALIZED", "Already Initialized"), 6: ("NOT_FOUND", "Not Found"),
    7: ("INSUFFICIENT_SIZE", "Insufficient Size"), 8: ("INSUFFICIENT_POWER", "Insufficient External Power"),
    9: ("DRIVER_NOT_LOADED", "Driver Not Loaded"), 10: ("TIMEOUT", "Timeout"),
    11: ("IRQ_ISSUE", "Interrupt Request Issue"), 12: ("LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"),
    13: ("FUNCTION_NOT_FOUND", "Function Not Found"), 14: ("CORRUPTED_INFOROM", "Corrupted infoROM"),
    15: ("GPU_IS_LOST", "GPU is lost"), 16: ("RESET_REQUIRED", "GPU requires restart"),
    17: ("OPERATING_SYSTEM", "The operating system has blocked the request."),
    18: ("LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."),
    19: ("IN_USE", "In Use"), 20: ("MEMORY", "Insufficient Memory"), 21: ("NO_DATA", "No Data"),
    22: ("VGPU_ECC_NOT_SUPPORTED", "vGPU ECC Not Supported"), 23: ("INSUFFICIENT_RESOURCES", "Insufficient Resources"),
    24: ("FREQ_NOT_SUPPORTED", "Frequency Not Supported"), 25: ("ARGUMENT_VERSION_MISMATCH", "Argument Version Mismatch"),
    26: ("DEPRECATED", "Deprecated"), 27: ("NOT_READY", "Not Ready"), 28: ("GPU_NOT_FOUND", "GPU Not Found"),
    29: ("INVALID_STATE", "Invalid State"), 30: ("RESET_TYPE_NOT_SUPPORTED", "Reset Type Not Supported"),
    999: ("UNKNOWN", "Unknown Error"),
}


class NVMLError(Exception):
    """pynvml's error: ``value`` the NVML return code (``NVMLError(3)`` is an NVMLError_NotSupported)."""

    _by_value: dict = {}

    def __new__(cls, value, message=None):
        if cls is NVMLError:
            cls = NVMLError._by_value.get(value, NVMLError)
        err = Exception.__new__(cls)
        err.value = value
        return err

    def __init__(self, value, message=None):
        self.value = value
        self.message = message
        super().__init__(message or self.__class__.__name__)

    def __str__(self):
        return self.message or _ERRORS.get(self.value, ("", f"NVML Error with code {self.value}"))[1]

    def __eq__(self, other):
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self):
        return hash(self.value)


def _error_classes() -> None:
    """NVML_ERROR_<NAME> and NVMLError_<Name> for each of `_ERRORS`, as nvidia-ml-py makes them."""
    for value, (name, _) in _ERRORS.items():
        cls = type("NVMLError_" + "".join(part.capitalize() for part in name.split("_")), (NVMLError,),
                   {"__module__": __name__})
        globals()[f"NVML_ERROR_{name}"] = value
        globals()[cls.__name__] = NVMLError._by_value[value] = cls


_error_classes()
NVML_ERROR_UNINITIALIZED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED = 1, 2, 3  # for readers of this file


def nvmlExceptionClass(nvmlErrorCode: int):
    """The NVMLError subclass of an NVML return code (ValueError for one NVML does not have), as nvidia-ml-py."""
    if nvmlErrorCode not in NVMLError._by_value:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._by_value[nvmlErrorCode]


class c_nvmlMemory_t:
    def __init__(self, total: int, free: int, used: int):
        self.total, self.free, self.used = total, free, used

    def __repr__(self):
        return f"c_nvmlMemory_t(total: {self.total} B, free: {self.free} B, used: {self.used} B)"


class c_nvmlUtilization_t:
    def __init__(self, gpu: int, memory: int):
        self.gpu, self.memory = gpu, memory


class c_nvmlDevice_t:
    """A device handle: the target's device ``index``."""

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"<nvmlDevice {self.index} (transfer)>"


_initialized = 0


def _torch():
    import torch

    return torch


def _target() -> str:
    import transfer

    device = transfer.status().get("device") or "cpu"
    return "the cpu target" if device == "cpu" else device


def _check(handle=None) -> None:
    if not _initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if handle is not None and not isinstance(handle, c_nvmlDevice_t):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def _not_supported(call: str, why: str = "") -> NVMLError:
    return NVMLError(NVML_ERROR_NOT_SUPPORTED,
                     f"pynvml.{call} is not answered on {_target()}: NVML exists only beside NVIDIA's driver, and "
                     f"{why or 'the target has no equivalent query'} (transfer's pynvml answers "
                     "device count, names, memory info, utilization where the target measures it and CPU affinity)")


def nvmlInit() -> None:
    global _initialized
    _initialized += 1


def nvmlInitWithFlags(flags: int) -> None:
    nvmlInit()


def nvmlShutdown() -> None:
    global _initialized
    _check()
    _initialized -= 1


def nvmlDeviceGetCount() -> int:
    _check()
    return _torch().cuda.device_count()


def nvmlDeviceGetHandleByIndex(index: int) -> c_nvmlDevice_t:
    _check()
    if not 0 <= int(index) < nvmlDeviceGetCount():
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return c_nvmlDevice_t(int(index))


def nvmlDeviceGetIndex(handle: c_nvmlDevice_t) -> int:
    _check(handle)
    return handle.index


def nvmlDeviceGetName(handle: c_nvmlDevice_t) -> str:
    _check(handle)
    return _torch().cuda.get_device_name(handle.index)


def nvmlDeviceGetMemoryInfo(handle: c_nvmlDevice_t, version=None) -> c_nvmlMemory_t:
    _check(handle)
    free, total = _torch().cuda.mem_get_info(handle.index)
    return c_nvmlMemory_t(total=int(total), free=int(free), used=int(total) - int(free))


def nvmlDeviceGetUtilizationRates(handle: c_nvmlDevice_t) -> c_nvmlUtilization_t:
    _check(handle)
    from transfer.errors import UnsupportedCudaAPI

    try:
        gpu = _torch().cuda.utilization(handle.index)
    except (UnsupportedCudaAPI, AttributeError, RuntimeError) as err:
        raise _not_supported("nvmlDeviceGetUtilizationRates", f"the target measures no device utilization ({err})")
    free, total = _torch().cuda.mem_get_info(handle.index)
    import warnings

    warnings.warn("pynvml.nvmlDeviceGetUtilizationRates: the target reports the device's utilization but not "
                  "the time its memory was busy, which NVML's `memory` field is; transfer's `memory` is the "
                  "percentage of device memory in use", stacklevel=2)
    return c_nvmlUtilization_t(gpu=int(gpu), memory=int(round(100 * (total - free) / total)) if total else 0)


def nvmlDeviceGetCpuAffinity(handle: c_nvmlDevice_t, cpuSetSize: int) -> List[int]:
    """The CPUs this process may use, as NVML's array of `cpuSetSize` 64-bit words (bit i: CPU i)."""
    _check(handle)
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    words = [0] * int(cpuSetSize)
    for cpu in cpus:
        if cpu // 64 < len(words):
            words[cpu // 64] |= 1 << (cpu % 64)
    return words


def nvmlSystemGetDriverVersion() -> str:
    _check()
    import transfer

    device = transfer.status().get("device") or "cpu"
    if device == "cpu":
        return "cpu target"
    package = f"torch_{device}"
    try:
        from importlib.metadata import version

        return f"{package} {version(package.replace('_', '-'))}"
    except Exception:
        return package


def __getattr__(name: str):
    if name.startswith("nvml"):
        def not_answered(*args, **kwargs):
            _check()
            raise _not_supported(name)

        not_answered.__name__ = name
        return not_answered
    raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
