"""Test stand-in for Huawei Ascend ``torch_npu`` (device ``npu``, backend ``hccl``).

CPU-backed simulation for tests; never shipped. See ``tests/vendors/README.md``.

``torch.npu`` mirrors the public names of the real ``torch_npu.npu.__all__``
(torch_npu 2.13.0 wheel from PyPI, read without importing it) that concern
devices, streams/events, RNG, memory statistics, properties and AMP. Real
names deliberately left out (absent here too, so fallbacks get exercised):
mstx, the typed
*Storage classes (the *Tensor classes are here), set_option/set_dump/set_aoe and the other
Ascend tuning switches, MemPool/use_mem_pool, NPUPluggableAllocator,
caching_allocator_alloc/delete, ipc_collect, stress_detect,
ExternalEvent/ExternalStream, SyncLaunchStream, set_sync_debug_mode.
``get_device_capability`` behaves like torch_npu 2.13: None (with a
warning) unless TORCH_NPU_DEVICE_CAPABILITY="major.minor" is set.

The names frameworks import beyond that (set_compile_mode, utilization, npu.utils,
npu_fusion_attention, optim) come from ``_ascend.py``; the graph API
(NPUGraph, graph, graph_pool_handle, make_graphed_callables,
is_current_stream_capturing) from ``_graphs.py``.
"""

import os as _os

import torch
import torch.distributed

from _sim_accel import VendorSpec, install
from _sim_accel import api as _api

__version__ = "2.13.0+sim"

# The simulated chip: SIM_NPU_SOC picks one of these (default Ascend910B2). torch_npu answers
# get_device_name() with the SoC name and is_bf16_supported() from the SoC (_npu_is_bf16_supported):
# the 910B family computes in bf16, the 910A in fp16 only. The SocVersion numbers are assumed
# (torch_npu's enum is C++; 910A in its 100 group, 910B1.. from 220).
SOCS = {"Ascend910B2": (221, True), "Ascend910A": (102, False)}
SOC = _os.environ.get("SIM_NPU_SOC", "Ascend910B2")
if SOC not in SOCS:
    raise ImportError(f"SIM_NPU_SOC={SOC!r}: choose one of {', '.join(SOCS)}")

SPEC = VendorSpec(
    package="torch_npu",
    name="npu",
    visible_devices_env="ASCEND_RT_VISIBLE_DEVICES",
    backend="hccl",
    vendor="Huawei Ascend",
    api=_api.COMMON + ("can_device_access_peer", "get_device_capability", "is_current_stream_capturing",
                       "memory_snapshot", "get_allocator_backend") + _api.TYPED_TENSORS,
    device_name=f"{SOC} (simulated)",
    bf16=SOCS[SOC][1],
    properties_class="_NPUDeviceProperties",
    properties=(("cube_core_num", 24), ("vector_core_num", 48), ("L2_cache_size", 192 * 1024 * 1024),
                ("multi_processor_count", 24)),
    capability="env",
    capability_env="TORCH_NPU_DEVICE_CAPABILITY",
    extended_api=True,  # torch_npu registers hccl with extended_api=True
    unsupported_dtypes=(torch.quint8, torch.quint4x2, torch.quint2x4, torch.qint32, torch.qint8),
)

npu = install(SPEC)

import sys as _sys  # noqa: E402

from . import _ascend, _dynamo, _graphs, _strict  # noqa: E402

STRICT = _strict.install()  # as strict as torch_npu for this torch (SIM_ACCEL_PERMISSIVE=1: the old permissive one)

_ascend.extend(npu, _sys.modules[__name__])
_graphs.extend(npu, _sys.modules[__name__])
_dynamo.extend(npu)  # torch.compile: the npu device interface and backends (torch_npu/utils/_dynamo.py)



def _module_npu(self, device=None):
    """torch_npu 2.13's ``torch.nn.Module.npu`` (torch_npu/utils/_module.py), which replaces torch's generated
    one: the argument is an index (``torch.device("npu", device)``), so a device or a string raises TypeError,
    where ``Tensor.npu`` (torch's generated method) takes an index, a string or a device."""
    device = torch.device("npu", device) if device is not None else torch.device("npu")
    return self._apply(lambda t: t.npu(device))


_module_npu.__name__ = _module_npu.__qualname__ = "npu"
torch.nn.Module.npu = _module_npu

# torch_npu adds this to torch.distributed (torch_npu/_init/patches/distributed_patches.py).
if not hasattr(torch.distributed, "is_hccl_available"):
    torch.distributed.is_hccl_available = lambda: True

# Module.share_memory and npu tensors sent to other processes, as torch_npu has them for this torch
from . import _ipc  # noqa: E402

_ipc.install()
