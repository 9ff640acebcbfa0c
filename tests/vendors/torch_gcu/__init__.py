"""Test stand-in for Enflame ``torch_gcu`` (device ``gcu``, backend ``eccl``).

CPU-backed simulation for tests; never shipped. See ``tests/vendors/README.md``.

``torch.gcu`` mirrors the public names of a published torch_gcu
``torch_gcu/gcu/__init__.py`` ``__all__`` (Enflame, 2019-2023) that concern
devices, streams/events, RNG, memory statistics, properties and AMP,
including get_device_capability (major, minor from the properties),
is_current_stream_capturing, is_fp16_supported and can_device_access_peer.
Real names deliberately left out: GCUGraph/graph/graph_pool_handle/
make_graphed_callables, topstx (the nvtx-like module), tunable, efficient,
gcurt/check_error/GcuError, ExternalStream, get_arch_list/get_gencode_flags,
set_sync_debug_mode, device_memory_used, gcu_device, copy, the typed
*Storage classes (the *Tensor classes are here), set_per_process_memory_fraction.
"""

from _sim_accel import VendorSpec, install
from _sim_accel import api as _api

__version__ = "2.13.0+sim"

SPEC = VendorSpec(
    package="torch_gcu",
    name="gcu",
    visible_devices_env="TOPS_VISIBLE_DEVICES",
    backend="eccl",
    vendor="Enflame",
    api=_api.COMMON + ("can_device_access_peer", "get_device_capability", "is_current_stream_capturing",
                       "is_fp16_supported", "memory_snapshot", "get_allocator_backend") + _api.TYPED_TENSORS,
    device_name="S60 (simulated)",
    properties_class="_GcuDeviceProperties",
    properties=(("major", 3), ("minor", 0), ("multi_processor_count", 24)),
    capability="properties",
)

gcu = install(SPEC)
