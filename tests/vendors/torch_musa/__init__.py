"""Test stand-in for Moore Threads ``torch_musa`` (device ``musa``, backend ``mccl``).

CPU-backed simulation for tests; never shipped. See ``tests/vendors/README.md`` ("musa").

Read in MooreThreads/torch_musa (github main, 2026-01, built for torch 2.7.1): ``torch.musa`` is the torch_musa
module itself, with the names its ``__init__.py`` imports: published here, except what the stand-in leaves out
(MUSAGraph / graph / graph_pool_handle / make_graphed_callables, ExternalStream, MUSAPluggableAllocator,
change_current_allocator, MemPool, use_mem_pool, set_per_process_memory_fraction, get_arch_list,
is_tf32_supported, current_blas_handle, musart: transfer's op replay runs for graphs). It has no ``init``,
``memory_cached`` or ``max_memory_cached`` (so neither has the stand-in) and no autocast getters/setters of its own
(torch's ``torch.is_autocast_enabled(device)`` serves them on the torch it supports).
``get_amp_supported_dtype()`` is float16, plus bfloat16 where ``is_bf16_supported()`` (compute capability >= 2.2,
torch_musa/core/device.py): the stand-in is a 3.1 device (``_MusaDeviceProperties``). ``mccl`` is registered as
torch_musa/csrc/distributed/Register.cpp registers it (no extended_api); what ProcessGroupMCCL refuses is
``_sim_accel._backend_rules.McclRules``. torch_musa's inductor code generation and ``musagraphs`` dynamo backend
are not simulated (a torch_musa without its patched torch's MUSA Triton): torch.compile here takes transfer's
fallback.
"""

import torch

from _sim_accel import VendorSpec, install
from _sim_accel import api as _api

__version__ = "2.7.1+sim"

# torch < 2.4's autocast requires the autocast getters/setters of every device module, so a build for it has them.
_NOT_IN_MUSA = ("init", "memory_cached", "max_memory_cached") + (() if not hasattr(torch, "get_autocast_dtype") else (
    "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype"))

SPEC = VendorSpec(
    package="torch_musa",
    name="musa",
    visible_devices_env="MUSA_VISIBLE_DEVICES",
    backend="mccl",
    vendor="Moore Threads",
    api=tuple(n for n in _api.COMMON if n not in _NOT_IN_MUSA) + (
        "can_device_access_peer", "get_device_capability", "is_current_stream_capturing", "memory_snapshot",
        "get_allocator_backend"),
    device_name="MTT S4000 (simulated)",
    properties_class="_MusaDeviceProperties",
    properties=(("major", 3), ("minor", 1), ("multi_processor_count", 48)),
    capability="properties",
    amp_dtypes=("float16", "bfloat16"),
)

musa = install(SPEC)
