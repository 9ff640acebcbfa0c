"""Test stand-in for Biren ``torch_supa`` (device ``supa``, backend ``bccl``).

CPU-backed simulation for tests; never shipped. See ``tests/vendors/README.md`` ("supa").

Read in BIRENSUPA/torch-supa (github, 68fb624): ``torch.supa`` is the package ``torch_supa.supa``, whose
``__all__`` has every name published here and more (SUPAGraph / graph / graph_pool_handle /
make_graphed_callables, ExternalStream, MemPool, SUPAPluggableAllocator, caching_allocator_*, check_error, supart,
brtx, bccl, ipc_collect, set_per_process_memory_fraction, the typed *Storage classes: not mirrored; transfer's op
replay runs for graphs). It has no ``device_of``; its ``get_device_capability`` (imported, not in ``__all__``) is
left out, its numbering not being documented. ``get_amp_supported_dtype()`` is [bfloat16, float16, float32]
(torch_supa/supa/amp/autocast_mode.py). ``bccl`` is registered as torch_supa/distributed/distributed_c10d.py
registers it (extended_api=True); what ProcessGroupBCCL refuses is ``_sim_accel._backend_rules.BcclRules``.

Not simulated: torch_supa's ``torch.backends`` entry point, which imports ``torch_supa.contrib.transfer_to_supa``
(Biren's own CUDA migration module) at every ``import torch``; this stand-in is imported by name only. Its
inductor code generation for supa (Biren's Triton) is not simulated either: torch.compile takes transfer's fallback.
"""

from _sim_accel import VendorSpec, install
from _sim_accel import api as _api

__version__ = "2.13.0+sim"

SPEC = VendorSpec(
    package="torch_supa",
    name="supa",
    visible_devices_env="SUPA_VISIBLE_DEVICES",
    backend="bccl",
    vendor="Biren",
    api=tuple(n for n in _api.COMMON if n != "device_of") + (
        "can_device_access_peer", "is_current_stream_capturing", "memory_snapshot", "get_allocator_backend")
    + _api.TYPED_TENSORS,
    device_name="BR166 (simulated)",
    properties=(("multi_processor_count", 32),),
    extended_api=True,
    amp_dtypes=("bfloat16", "float16", "float32"),
)

supa = install(SPEC)
