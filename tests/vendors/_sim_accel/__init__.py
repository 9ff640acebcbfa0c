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
    amp_dtypes: tuple = ("float16", "bfloat16", "float32")  # get_amp_supported_dtype(): what torch.autocast accepts
    # A device built into torch (torch.xpu): the simulated device takes that device type and dispatch key,
    # `torch.<name>` is replaced, the collective backend is torch's own name (xpu.cpp, README "xpu").
    builtin: bool = False

    @property
    def dispatch_key(self) -> str:
        return self.name.upper() if self.builtin else "PrivateUse1"


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
    if spec.builtin:
        _check_builtin(spec)
    current = torch._C._get_privateuse1_backend_name()
    if current != "privateuseone" and not spec.builtin:
        raise ImportError(
            f"cannot import {spec.package}: the PrivateUse1 backend is already registered as "
            f"'{current}' in this process. Only one accelerator vendor package can be used per process."
        )

    from . import _build, _device_module, _distributed, _exit, _fault

    C = _build.load_extension()
    physical = visible_devices(spec)
    C._init(len(physical), spec.builtin)

    if spec.builtin:  # torch has the device's names (Tensor.xpu, is_xpu, Module.xpu) and its module: replaced
        original = getattr(torch, spec.name)
        module = _device_module.build_device_module(spec, C)
        module._is_compiled = lambda: False  # true of this torch build: torch skips its own compiled-XPU paths
        for name in dir(original):  # torch reads its own names at import (dynamo's XpuInterface): the rest stay
            if not name.startswith("__") and not hasattr(module, name):  # torch's, which fail as without XPU
                setattr(module, name, getattr(original, name))
        setattr(torch, spec.name, module)
    else:
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
    _fault.from_environment()  # SIM_ACCEL_FAULT: one kernel made wrong on purpose (tests of accuracy checks)
    _exit.install(spec, C)
    _installed["state"] = (spec, module, C)
    return module


def _check_builtin(spec: VendorSpec) -> None:
    """A device built into torch is simulated only where this torch lacks it and has its collectives (xccl is in
    torch from 2.8)."""
    release = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if release < (2, 8):
        raise ImportError(f"cannot import {spec.package}: the simulated {spec.name} device needs torch >= 2.8 "
                          f"({spec.backend} in torch), this is {torch.__version__}")
    if getattr(torch._C, f"_has_{spec.name}", False):
        raise ImportError(f"cannot import {spec.package}: this torch is built with {spec.name}; nothing to simulate")

