"""Public names of ``torch.<name>`` shared by the three simulated vendors.

Each vendor package adds or leaves out names relative to this list; see the
comments in ``torch_npu/__init__.py``, ``torch_sdaa/__init__.py`` and
``torch_gcu/__init__.py`` for where each list comes from.
"""

DEVICE = (
    "is_available", "device_count", "is_initialized", "init", "set_device", "current_device",
    "device", "device_of", "synchronize",
)
STREAMS = (
    "Stream", "Event", "StreamContext", "stream", "set_stream", "current_stream", "default_stream",
)
RNG = (
    "default_generators", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
)
MEMORY = (
    "empty_cache", "memory_stats", "memory_stats_as_nested_dict", "reset_accumulated_memory_stats",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "mem_get_info", "memory_summary",
)
PROPERTIES = ("get_device_name", "get_device_properties", "is_bf16_supported")
AMP = (
    "amp", "get_amp_supported_dtype", "is_autocast_enabled", "set_autocast_enabled",
    "get_autocast_dtype", "set_autocast_dtype",
)
COMMON = DEVICE + STREAMS + RNG + MEMORY + PROPERTIES + AMP
# The legacy typed tensor classes (torch.cuda.FloatTensor-like); torch_npu and torch_gcu have them.
TYPED_TENSORS = (
    "BoolTensor", "ByteTensor", "CharTensor", "ShortTensor", "IntTensor", "LongTensor", "HalfTensor",
    "BFloat16Tensor", "FloatTensor", "DoubleTensor",
)
