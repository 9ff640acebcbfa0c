"""Test stand-in for torch's own xpu device (Intel GPUs): ``torch.xpu`` in a torch built without XPU.

CPU-backed simulation for tests; never shipped. See ``tests/vendors/README.md`` ("xpu").

A torch built for Intel GPUs has the device at ``import torch``; there is no plug-in to import. This stand-in
is loaded the same way, at ``import torch``: ``dist-info/entry_points.txt`` declares it a ``torch.backends``
entry point (torch >= 2.5 calls those at import), and a folder holding it as ``sim_xpu-0.dist-info`` beside this
package (tests/vendors/only/xpu) is what importlib.metadata finds. It needs torch >= 2.8
(xccl is in torch from 2.8) and a torch without XPU (``torch._C._has_xpu`` False).

What it installs (``_sim_accel.install`` with ``builtin=True``): the simulated device under DeviceType::XPU
(csrc/xpu.cpp: guard, allocator, XPU hooks, the XPU key's kernels), ``torch.xpu`` replaced by the stand-in's
module publishing the names of torch 2.13's ``torch.xpu.__all__`` it implements, and xccl: torch's own code path
for it with the stand-in's backend as ``ProcessGroupXCCL``. torch's own names (``Tensor.xpu``, ``Tensor.is_xpu``,
``Module.xpu``, the AutocastXPU kernels, DDP's and SyncBatchNorm's acceptance of xpu) are torch's.

Left out (present in torch.xpu): XPUGraph / graph / graph_pool_handle / make_graphed_callables (transfer's op
replay runs), MemPool, use_mem_pool, XPUPluggableAllocator, change_current_allocator, get_arch_list,
get_gencode_flags, get_stream_from_external, get_per_process_memory_fraction, set_per_process_memory_fraction,
is_tf32_supported, memory_usage, utilization, temperature, power_draw, clock_rate, device_memory_used, and
``get_device_capability`` (torch.xpu's returns a dict of the device's properties).
"""

from _sim_accel import VendorSpec, install
from _sim_accel import api as _api

__version__ = "0+sim"

# torch.xpu has no memory_cached, max_memory_cached, reset_max_memory_*, memory_summary, amp module or autocast
# getters (torch/xpu/__init__.py __all__, torch 2.13 and 2.15).
_NOT_IN_TORCH_XPU = ("memory_cached", "max_memory_cached", "reset_max_memory_allocated", "reset_max_memory_cached",
                     "memory_summary") + _api.AMP

SPEC = VendorSpec(
    package="torch",
    name="xpu",
    visible_devices_env="ZE_AFFINITY_MASK",
    backend="xccl",
    vendor="Intel",
    api=tuple(n for n in _api.COMMON if n not in _NOT_IN_TORCH_XPU) + (
        "can_device_access_peer", "is_current_stream_capturing", "memory_snapshot"),
    device_name="Intel(R) Data Center GPU Max 1550 (simulated)",
    properties_class="_XpuDeviceProperties",
    properties=(("max_compute_units", 448), ("gpu_eu_count", 448), ("has_fp16", True), ("has_fp64", True)),
    builtin=True,
)

xpu = install(SPEC)
# torch.xpu's graph API is left out (above): torch's own names would fail here as in any torch without XPU
# ("Tried to instantiate dummy base class"), so the module has none, as a plug-in without a graph API
for _name in ("XPUGraph", "graph", "graph_pool_handle", "make_graphed_callables"):
    if _name in vars(xpu):
        delattr(xpu, _name)


def _autoload():
    """torch's ``torch.backends`` entry point: importing this package installed the device."""
