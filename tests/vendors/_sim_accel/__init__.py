"""Shared implementation of the CPU-backed vendor stand-ins (tests only).

``torch_npu``, ``torch_sdaa`` and ``torch_gcu`` under ``tests/vendors`` are
thin packages that call :func:`install` with their :class:`VendorSpec`.
Installing one:

* builds/loads the C++ extension (``_build.py``): allocator, device guard,
  PrivateUse1 hooks, generators, aten kernels, CPU fallback, autocast;
* renames PrivateUse1 to the vendor's device name and registers
  ``torch.<name>`` and the generated Tensor/Module/Storage methods;
* registers the vendor's collective backend for that device type;
* records statistics for ``SIM_ACCEL_STATS_DIR`` and makes the process exit
  cleanly (``_exit.py``).

Only one vendor can be installed per process, as with the real packages.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types

import torch

__all__ = ["VendorSpec", "install", "installed"]

_DEFAULT_DEVICE_COUNT = 4


@dataclasses.dataclass(frozen=True)
class VendorSpec:
    package: str  # "torch_npu"
    name: str  # device type: "npu"
    visible_devices_env: str  # "ASCEND_RT_VISIBLE_DEVICES": which physical devices this process sees
    backend: str  # collective backend: "hccl"
    vendor: str  # "Huawei Ascend"
    api: tuple  # public names of torch.<name> (mirrors the real module)
    device_name: str = "simulated accelerator"
    bf16: bool = True  # is_bf16_supported(): what the chip computes in bf16 (Ascend 910A: False)
    total_memory: int = 64 * 1024**3
    properties_class: str = "_DeviceProperties"
    properties: tuple = ()  # extra (field, value) pairs of get_device_properties()
    capability: str | None = None  # None | "properties" | "env"
    capability_env: str = ""
    extended_api: bool = False  # register_backend(extended_api=...)
    requires_set_device: bool = False  # backend quirk: init_process_group needs set_device first
    one_process_per_device: bool = False  # backend quirk: one rank per device index
    unsupported_dtypes: tuple = ()


_installed: dict = {}


def installed():
    """The installed (spec, device module, extension) or None."""
    return _installed.get("state")


def _device_count() -> int:
    """Devices installed in the (simulated) machine."""
    raw = os.environ.get("SIM_ACCEL_DEVICE_COUNT", str(_DEFAULT_DEVICE_COUNT))
    try:
        count = int(raw)
    except ValueError:
        raise ImportError(f"SIM_ACCEL_DEVICE_COUNT must be an integer, got {raw!r}") from None
    if not 0 <= count <= 16:
        raise ImportError(f"SIM_ACCEL_DEVICE_COUNT must be between 0 and 16, got {count}")
    return count


def visible_devices(spec: VendorSpec) -> list:
    """Physical ids of the devices this process sees, in local-index order.

    Like CUDA_VISIBLE_DEVICES on the real runtimes: a comma-separated list of
    physical ids; the list stops at the first entry that is not a valid id
    (so an empty value hides every device). Unset: every device.
    """
    installed = _device_count()
    raw = os.environ.get(spec.visible_devices_env)
    if raw is None:
        return list(range(installed))
    ids = []
    for part in raw.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= installed or int(part) in ids:
            break
        ids.append(int(part))
    return ids


def install(spec: VendorSpec) -> types.ModuleType:
    """Install the simulated vendor ``spec`` in this process; return ``torch.<name>``."""
    state = installed()
    if state is not None:
        if state[0].name == spec.name:
            return state[1]
        raise ImportError(
            f"cannot import {spec.package}: this process already imported {state[0].package}, "
            f"which owns the PrivateUse1 backend as '{state[0].name}'. Only one accelerator "
            f"vendor package can be used per process."
        )
    if not hasattr(torch.utils, "generate_methods_for_privateuse1_backend"):  # torch 2.0 has none
        raise ImportError(
            f"cannot import {spec.package}: torch {torch.__version__} has no PrivateUse1 mechanism "
            f"(hooks interface, generate_methods_for_privateuse1_backend); vendor plug-ins need torch >= 2.1"
        )
    current = torch._C._get_privateuse1_backend_name()
    if current != "privateuseone":
        raise ImportError(
            f"cannot import {spec.package}: the PrivateUse1 backend is already registered as "
            f"'{current}' in this process. Only one accelerator vendor package can be used per process."
        )

    from . import _build, _device_module, _distributed, _exit, _fault

    C = _build.load_extension()
    physical = visible_devices(spec)
    C._init(len(physical))

    torch.utils.rename_privateuse1_backend(spec.name)
    module = _device_module.build_device_module(spec, C)
    torch._register_device_module(spec.name, module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True,
        for_module=True,
        for_storage=True,
        unsupported_dtype=list(spec.unsupported_dtypes) or None,
    )
    _distributed.register_backend(spec, C, physical)
    _register_record_stream(spec)
    _fault.from_environment()  # SIM_ACCEL_FAULT: one kernel made wrong on purpose (tests of accuracy checks)
    _exit.install(spec, C)
    _installed["state"] = (spec, module, C)
    return module


def _register_record_stream(spec: VendorSpec) -> None:
    """``Tensor.record_stream(stream)`` for the device's tensors, as the real plug-ins register it (their
    caching allocators keep a block until the recorded streams' work is done). Work here is synchronous,
    so there is nothing to defer; a stream of another device type is refused, as CUDA's allocator does."""

    def record_stream(tensor, stream):
        if stream.device_type != int(torch._C._autograd.DeviceType.PrivateUse1):
            raise RuntimeError(f"record_stream: expected a {spec.name} stream for a tensor on {tensor.device}, "
                               f"got a stream of device type {stream.device_type}")

    library = torch.library.Library("aten", "IMPL")
    library.impl("record_stream", record_stream, "PrivateUse1")
    _installed["record_stream"] = library  # kept alive for the process
