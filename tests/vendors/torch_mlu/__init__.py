"""Test stand-in for Cambricon ``torch_mlu`` (device ``mlu``, backend ``cncl``).

CPU-backed simulation for tests; never shipped. See ``tests/vendors/README.md`` ("mlu").

Read in Cambricon/torch_mlu (github, branch r2.4_develop, the newest public one): ``torch.mlu`` is the package
``torch_mlu.mlu``, whose ``__all__`` has every name published here and more (caching_allocator_alloc/delete,
change_current_allocator, MLUPluggableAllocator, ipc_collect, set_per_process_memory_fraction, ExternalStream,
check_error, cnrt, cnpx, is_fp8_supported, the typed *Storage classes, and the graph API MLUGraph / graph /
graph_pool_handle / make_graphed_callables: not mirrored, so transfer's op replay runs here). The autocast
getters/setters and ``get_amp_supported_dtype() == [float16, bfloat16]`` are torch_mlu/mlu/autocast_utils.py's;
``is_bf16_supported()`` is ``major >= 5`` of the device properties (``_MLUDeviceProperties``); the stand-in is a
5.x device. ``cncl`` is registered as torch_mlu/mlu/cncl.py registers it (no extended_api); what ProcessGroupCNCL
refuses is ``_sim_accel._backend_rules.CnclRules``.
"""

from _sim_accel import VendorSpec, install
from _sim_accel import api as _api

__version__ = "2.13.0+sim"

SPEC = VendorSpec(
    package="torch_mlu",
    name="mlu",
    visible_devices_env="MLU_VISIBLE_DEVICES",
    backend="cncl",
    vendor="Cambricon",
    api=_api.COMMON + ("can_device_access_peer", "get_device_capability", "is_current_stream_capturing",
                       "memory_snapshot") + _api.TYPED_TENSORS,
    device_name="MLU590 (simulated)",
    properties_class="_MLUDeviceProperties",
    properties=(("major", 5), ("minor", 0), ("multi_processor_count", 16)),
    capability="properties",
    amp_dtypes=("float16", "bfloat16"),
)

mlu = install(SPEC)
