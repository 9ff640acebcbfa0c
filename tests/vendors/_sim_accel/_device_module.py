"""The ``torch.<name>`` module of a simulated vendor (``torch.npu`` & co.).

``build_device_module`` creates the module for one vendor. It implements the
superset of the CUDA-style API the three vendors expose and then publishes
only the names that vendor's real module has (``spec.api``), so a name the
real package lacks is missing here as well.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
import sys
import threading
import time
import types
import warnings
from typing import Any

import torch

GiB = 1024**3
_accelerator = getattr(torch, "accelerator", None)  # torch < 2.6 has none


def build_device_module(spec, C) -> types.ModuleType:
    name = spec.name
    modname = f"{spec.package}.{name}"
    mod = types.ModuleType(modname, f"Simulated {spec.vendor} device module (test stand-in for {modname}).")
    ns: dict[str, Any] = {}

    def export(obj, public_name=None):
        ns[public_name or obj.__name__] = obj
        return obj

    # ------------------------------------------------------------- devices
    def _get_device_index(device, optional=False, allow_cpu=False) -> int:
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if allow_cpu and device.type == "cpu":
                return -1
            if device.type != name:
                raise ValueError(f"Expected a {name} device, but got: {device}")
            index = device.index
        elif isinstance(device, int):
            index = device
        elif device is None:
            index = None
        elif isinstance(device, (ns["device"], torch.cuda.device)):
            # torch_npu's _get_device_index reads its own device objects' idx and hands anything else to
            # torch's _get_device_index, which reads a torch.cuda.device's idx (nanotron's set_device)
            index = device.idx
        else:
            raise ValueError(f"Expected a torch.device, str or int for a {name} device, got {device!r}")
        if index is None:
            if optional:
                return C.current_device()
            raise ValueError(
                f"Expected a {name} device with a specified index or an integer, but got: {device}"
            )
        return index

    utils_mod = types.ModuleType(f"{modname}._utils")
    utils_mod._get_device_index = _get_device_index
    ns["_utils"] = utils_mod
    ns["_get_device_index"] = _get_device_index

    state = {"initialized": False}
    queued: list = []
    init_lock = threading.Lock()

    @export
    def is_available() -> bool:
        return C.device_count() > 0

    @export
    def device_count() -> int:
        return C.device_count()

    @export
    def is_initialized() -> bool:
        return state["initialized"]

    @export
    def _lazy_init() -> None:
        if state["initialized"]:
            return
        with init_lock:
            if state["initialized"]:
                return
            state["initialized"] = True
            calls, queued[:] = list(queued), []
            for call in calls:
                call()

    @export
    def init() -> None:
        _lazy_init()

    @export
    def _lazy_call(callable, **kwargs) -> None:
        if state["initialized"]:
            callable()
        else:
            queued.append(callable)

    @export
    def _is_in_bad_fork() -> bool:
        return False

    @export
    def set_device(device) -> None:
        index = _get_device_index(device)
        if index >= 0:
            C.set_device(index)
            _lazy_init()

    @export
    def current_device() -> int:
        _lazy_init()
        return C.current_device()

    ns["_exchange_device"] = C.exchange_device
    ns["_maybe_exchange_device"] = C.maybe_exchange_device

    class device:
        r"""Context manager that changes the selected device."""

        def __init__(self, device: Any):
            self.idx = -1 if device is None else _get_device_index(device, optional=True)
            self.prev_idx = -1

        def __enter__(self):
            self.prev_idx = C.exchange_device(self.idx)

        def __exit__(self, type: Any, value: Any, traceback: Any):
            self.idx = C.maybe_exchange_device(self.prev_idx)
            return False

    class device_of(device):
        r"""Context manager that selects the device of the given tensor or storage."""

        def __init__(self, obj):
            idx = obj.get_device() if obj.device.type == name else -1
            super().__init__(idx)

    export(device)
    export(device_of)

    @export
    def synchronize(device=None) -> None:
        _lazy_init()
        if _accelerator is not None:
            _accelerator.synchronize(_get_device_index(device, optional=True))

    @export
    def can_device_access_peer(device, peer_device) -> bool:
        a = _get_device_index(device, optional=True)
        b = _get_device_index(peer_device)
        for i in (a, b):
            if i < 0 or i >= device_count():
                raise AssertionError("Invalid device id")
        return True

    # ------------------------------------------------------------- streams
    def _device_type_id():
        return int(getattr(torch._C._autograd.DeviceType, spec.dispatch_key))

    # torch < 2.6 has no torch.accelerator: work is synchronous, so a stream is then an id only
    # (0 the default, new ones numbered), set_stream remembers the choice and synchronize() returns.
    current_streams: dict = {}
    new_stream_ids = itertools.count(1)

    class Stream(torch.Stream):
        r"""A stream of the simulated device (work is synchronous, so streams
        are always idle)."""

        def __new__(cls, device=None, priority=0, **kwargs):
            if "stream_id" in kwargs:
                return super().__new__(
                    cls,
                    stream_id=kwargs["stream_id"],
                    device_index=kwargs["device_index"],
                    device_type=kwargs["device_type"],
                )
            idx = _get_device_index(device, optional=True)
            if _accelerator is None:  # 2.1's torch.Stream takes ids only
                return super().__new__(cls, stream_id=next(new_stream_ids), device_index=idx,
                                       device_type=_device_type_id())
            return super().__new__(cls, device=torch.device(name, idx), priority=priority)

        def __init__(self, *args, **kwargs):
            pass

        def record_event(self, event=None):
            if event is None:
                event = Event()
            event.record(self)
            return event

        # torch < 2.4's torch.Stream has no methods (nor value equality): synchronous work makes them trivial.
        if not hasattr(torch.Stream, "query"):

            def __eq__(self, other):
                return isinstance(other, torch.Stream) and (self.stream_id, self.device_index, self.device_type) \
                    == (other.stream_id, other.device_index, other.device_type)

            def __hash__(self):
                return hash((self.stream_id, self.device_index, self.device_type))

            def query(self):
                return True

            def synchronize(self):
                pass

            def wait_event(self, event):
                pass

            def wait_stream(self, stream):
                pass

    Stream.__name__ = Stream.__qualname__ = "Stream"
    Stream.__module__ = modname

    class _EventMeta(type):
        # torch.Event's C++ methods (elapsed_time, Stream.record_event) accept
        # only exact torch.Event objects, so Event(...) returns one; isinstance
        # and issubclass still recognise it as this device's Event.
        def __call__(cls, enable_timing=False, blocking=False, interprocess=False):
            return torch.Event(
                device=torch.device(name, C.current_device()),
                enable_timing=enable_timing,
                blocking=blocking,
                interprocess=interprocess,
            )

        def __instancecheck__(cls, obj):
            return isinstance(obj, torch.Event) and obj.device.type == name

    class Event(metaclass=_EventMeta):
        r"""An event of the simulated device (a ``torch.Event`` on it);
        ``elapsed_time`` measures host wall-clock time between the two
        ``record`` calls, in milliseconds."""

    if not hasattr(torch, "Event"):  # torch < 2.4 has no torch.Event: a Python event instead

        class Event:  # noqa: F811
            r"""An event of the simulated device; work is synchronous, so it is always
            complete, and ``elapsed_time`` measures host wall-clock time between the
            two ``record`` calls, in milliseconds."""

            def __init__(self, enable_timing=False, blocking=False, interprocess=False):
                self.device = torch.device(name, C.current_device())
                self.enable_timing = enable_timing
                self._recorded_at = None

            def record(self, stream=None):
                self._recorded_at = time.perf_counter()

            def query(self):
                return True

            def synchronize(self):
                pass

            def wait(self, stream=None):
                pass

            def elapsed_time(self, end_event):
                if not (self.enable_timing and end_event.enable_timing):
                    raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
                if self._recorded_at is None or end_event._recorded_at is None:
                    raise RuntimeError("Both events must be recorded before calculating elapsed time.")
                return (end_event._recorded_at - self._recorded_at) * 1000.0

    Event.__module__ = modname
    export(Stream)
    export(Event)

    def _wrap_stream(s) -> Stream:
        return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)

    @export
    def current_stream(device=None) -> Stream:
        _lazy_init()
        idx = _get_device_index(device, optional=True)
        if _accelerator is None:
            return current_streams.get(idx) or default_stream(idx)
        return _wrap_stream(_accelerator.current_stream(idx))

    @export
    def default_stream(device=None) -> Stream:
        _lazy_init()
        idx = _get_device_index(device, optional=True)
        return Stream(stream_id=0, device_index=idx, device_type=_device_type_id())

    @export
    def set_stream(stream) -> None:
        if stream is None:
            return
        if _accelerator is None:
            current_streams[stream.device_index] = stream
            return
        _accelerator.set_stream(stream)

    class StreamContext:
        r"""Context manager that selects a given stream (no-op for None)."""

        def __init__(self, stream):
            self.stream = stream
            self.src_prev_stream = None
            self.dst_prev_stream = None

        def __enter__(self):
            cur = self.stream
            if cur is None:
                return
            self.src_prev_stream = current_stream(None)
            if self.src_prev_stream.device != cur.device:
                with device(cur.device):
                    self.dst_prev_stream = current_stream(cur.device)
            set_stream(cur)

        def __exit__(self, type: Any, value: Any, traceback: Any):
            cur = self.stream
            if cur is None:
                return
            if self.src_prev_stream.device != cur.device:
                set_stream(self.dst_prev_stream)
            set_stream(self.src_prev_stream)

    export(StreamContext)

    @export
    def stream(stream) -> StreamContext:
        return StreamContext(stream)

    @export
    def is_current_stream_capturing() -> bool:
        return False

    # ---------------------------------------------------------------- RNG
    default_generators = tuple(C.default_generator(i) for i in range(C.device_count()))
    ns["default_generators"] = default_generators

    @export
    def manual_seed(seed) -> None:
        seed = int(seed)
        default_generators[C.current_device()].manual_seed(seed)

    @export
    def manual_seed_all(seed) -> None:
        seed = int(seed)
        for g in default_generators:
            g.manual_seed(seed)

    @export
    def seed() -> None:
        default_generators[C.current_device()].seed()

    @export
    def seed_all() -> None:
        random_seed = default_generators[0].seed()
        for g in default_generators[1:]:
            g.manual_seed(random_seed)

    @export
    def initial_seed() -> int:
        return default_generators[C.current_device()].initial_seed()

    @export
    def get_rng_state(device=name) -> torch.Tensor:
        return default_generators[_get_device_index(device, optional=True)].get_state()

    @export
    def set_rng_state(new_state, device=name) -> None:
        state_copy = new_state.clone(memory_format=torch.contiguous_format)
        default_generators[_get_device_index(device, optional=True)].set_state(state_copy)

    @export
    def get_rng_state_all() -> list:
        return [g.get_state() for g in default_generators]

    @export
    def set_rng_state_all(new_states) -> None:
        for i, s in enumerate(new_states):
            set_rng_state(s, i)

    # ------------------------------------------------------------- memory
    def _counters(device):
        return C.memory_counters(_get_device_index(device, optional=True))

    @export
    def memory_stats(device=None) -> dict:
        c = _counters(device)
        stats = {
            "active.all.current": c["alloc_count_current"],
            "active_bytes.all.current": c["allocated_current"],
            "active_bytes.all.peak": c["allocated_peak"],
            "allocated_bytes.all.allocated": c["allocated_total"],
            "allocated_bytes.all.current": c["allocated_current"],
            "allocated_bytes.all.freed": c["freed_total"],
            "allocated_bytes.all.peak": c["allocated_peak"],
            "allocation.all.allocated": c["alloc_count_total"],
            "allocation.all.current": c["alloc_count_current"],
            "allocation.all.freed": c["free_count_total"],
            "inactive_split_bytes.all.current": c["cached_bytes"],
            "num_alloc_retries": 0,
            "num_ooms": 0,
            "reserved_bytes.all.current": c["reserved_current"],
            "reserved_bytes.all.peak": c["reserved_peak"],
            "segment.all.current": c["segment_count"],
        }
        return collections.OrderedDict(sorted(stats.items()))

    @export
    def memory_stats_as_nested_dict(device=None) -> dict:
        nested: dict = {}
        for key, value in memory_stats(device).items():
            node = nested
            parts = key.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
        return nested

    @export
    def memory_allocated(device=None) -> int:
        return _counters(device)["allocated_current"]

    @export
    def max_memory_allocated(device=None) -> int:
        return _counters(device)["allocated_peak"]

    @export
    def memory_reserved(device=None) -> int:
        return _counters(device)["reserved_current"]

    @export
    def max_memory_reserved(device=None) -> int:
        return _counters(device)["reserved_peak"]

    @export
    def memory_cached(device=None) -> int:
        return memory_reserved(device)

    @export
    def max_memory_cached(device=None) -> int:
        return max_memory_reserved(device)

    @export
    def reset_peak_memory_stats(device=None) -> None:
        C.reset_peak(_get_device_index(device, optional=True))

    @export
    def reset_max_memory_allocated(device=None) -> None:
        reset_peak_memory_stats(device)

    @export
    def reset_max_memory_cached(device=None) -> None:
        reset_peak_memory_stats(device)

    @export
    def reset_accumulated_memory_stats(device=None) -> None:
        C.reset_accumulated(_get_device_index(device, optional=True))

    @export
    def empty_cache() -> None:
        C.empty_cache()

    @export
    def mem_get_info(device=None) -> tuple:
        total = spec.total_memory
        return total - memory_reserved(device), total

    @export
    def memory_summary(device=None, abbreviated=False) -> str:
        s = memory_stats(device)
        idx = _get_device_index(device, optional=True)
        lines = [f"simulated {name}:{idx} memory summary"]
        lines += [f"  {k:<36} {v}" for k, v in s.items()]
        return "\n".join(lines)

    @export
    def memory_snapshot() -> list:
        return []

    @export
    def get_allocator_backend() -> str:
        return "native"

    # --------------------------------------------------------- properties
    prop_fields = dict(spec.properties)

    class _DeviceProperties:
        def __init__(self, index):
            self.index = index
            self.name = spec.device_name
            self.total_memory = spec.total_memory
            for key, value in prop_fields.items():
                setattr(self, key, value)

        def __repr__(self):
            fields = ", ".join(
                f"{k}={v!r}" if k != "total_memory" else f"total_memory={v // (1024 * 1024)}MB"
                for k, v in [("name", self.name), ("total_memory", self.total_memory), *prop_fields.items()]
            )
            return f"{spec.properties_class}({fields})"

    _DeviceProperties.__name__ = _DeviceProperties.__qualname__ = spec.properties_class
    ns[spec.properties_class] = _DeviceProperties

    @export
    def get_device_properties(device=None):
        idx = _get_device_index(device, optional=True)
        if idx < 0 or idx >= device_count():
            raise AssertionError("Invalid device id")
        return _DeviceProperties(idx)

    @export
    def get_device_name(device=None) -> str:
        return get_device_properties(device).name

    def _capability_from_properties(device=None):
        prop = get_device_properties(device)
        return prop.major, prop.minor

    def _capability_from_env(device=None):
        # torch_npu 2.13: configured by TORCH_NPU_DEVICE_CAPABILITY, else None
        # (with a warning); the value is not a real hardware capability.
        env_name = spec.capability_env
        value = os.environ.get(env_name)
        note = (
            "The return value of get_device_capability is only for compatibility with PyTorch "
            f"and does not represent the actual capability of the {name.upper()} device."
        )
        if not value:
            warnings.warn(f"You can set the device capability via the environment variable {env_name}. {note}")
            return None
        major, _, minor = value.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            warnings.warn(f"can't parse {env_name}={value!r}, expected 'major.minor'")
            return None
        warnings.warn(note)
        return int(major), int(minor)

    if spec.capability == "properties":
        ns["get_device_capability"] = _capability_from_properties
    elif spec.capability == "env":
        ns["get_device_capability"] = _capability_from_env
    if "get_device_capability" in ns:
        ns["get_device_capability"].__name__ = "get_device_capability"

    @export
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return spec.bf16

    @export
    def is_fp16_supported() -> bool:
        return True

    @export
    def get_amp_supported_dtype() -> list:
        return [getattr(torch, n) for n in spec.amp_dtypes]

    @export
    def is_autocast_enabled() -> bool:
        if hasattr(C, "is_autocast_enabled"):
            return C.is_autocast_enabled()
        return torch.is_autocast_enabled(name)

    @export
    def set_autocast_enabled(enabled: bool) -> None:
        if hasattr(C, "set_autocast_enabled"):
            return C.set_autocast_enabled(enabled)
        torch.set_autocast_enabled(name, enabled)

    # torch < 2.4 has no torch.get_autocast_dtype(device): its autocast asks these of the module,
    # and the extension exports ATen's PrivateUse1 autocast state for them.
    @export
    def get_autocast_dtype() -> torch.dtype:
        if hasattr(C, "get_autocast_dtype"):
            return C.get_autocast_dtype()
        return torch.get_autocast_dtype(name)

    @export
    def set_autocast_dtype(dtype: torch.dtype) -> None:
        if hasattr(C, "set_autocast_dtype"):
            return C.set_autocast_dtype(dtype)
        torch.set_autocast_dtype(name, dtype)

    # ------------------------------------------------- typed tensor classes
    # Legacy classes like torch.cuda.FloatTensor: isinstance() is true for a tensor of that
    # dtype on this device; calling one makes a tensor on the current device.
    for cls_name, dtype in TYPED_TENSORS.items():
        ns[cls_name] = _typed_tensor_class(cls_name, dtype, name, modname)

    # --------------------------------------------------------------- amp
    amp_mod = types.ModuleType(f"{modname}.amp")

    class autocast(torch.amp.autocast_mode.autocast):
        r"""``torch.amp.autocast`` with ``device_type`` fixed to this device."""

        def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
            super().__init__(name, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    # torch < 2.3 has no device-generic torch.amp.GradScaler (and < 2.4 no torch.amp.custom_fwd):
    # the stand-in's amp module then offers autocast only (tests/vendors/README.md, "Old torch").
    class GradScaler(getattr(torch.amp, "GradScaler", object)):
        r"""``torch.amp.GradScaler`` for this device."""

        def __init__(
            self,
            init_scale: float = 2.0**16,
            growth_factor: float = 2.0,
            backoff_factor: float = 0.5,
            growth_interval: int = 2000,
            enabled: bool = True,
        ):
            super().__init__(
                name,
                init_scale=init_scale,
                growth_factor=growth_factor,
                backoff_factor=backoff_factor,
                growth_interval=growth_interval,
                enabled=enabled,
            )

    autocast.__module__ = GradScaler.__module__ = amp_mod.__name__
    amp_mod.autocast = autocast
    amp_mod.__all__ = ["autocast"]
    if hasattr(torch.amp, "GradScaler"):
        amp_mod.GradScaler = GradScaler
        amp_mod.__all__.append("GradScaler")
    if hasattr(torch.amp, "custom_fwd"):
        amp_mod.custom_fwd = functools.partial(torch.amp.custom_fwd, device_type=name)
        amp_mod.custom_bwd = functools.partial(torch.amp.custom_bwd, device_type=name)
        amp_mod.__all__ += ["custom_fwd", "custom_bwd"]
    ns["amp"] = amp_mod

    # ---------------------------------------------------------- publish
    missing = [n for n in spec.api if n not in ns]
    if missing:
        raise AssertionError(f"stand-in for {spec.package}: API names without implementation: {missing}")
    private = [n for n in ns if n.startswith("_")]
    for n in list(spec.api) + private:
        setattr(mod, n, ns[n])
    mod.__all__ = [n for n in spec.api if not n.startswith("_")]
    # The real torch.<name> is the package <vendor>.<name> (torch._register_device_module puts it
    # in sys.modules as "torch.<name>"), so `from torch.<name>.amp import GradScaler` (MMEngine)
    # imports its submodules under both names.
    for prefix in (modname, f"torch.{name}"):
        sys.modules[f"{prefix}.amp"] = amp_mod
        sys.modules[f"{prefix}._utils"] = utils_mod
    sys.modules[modname] = mod
    return mod


TYPED_TENSORS = {
    "BoolTensor": torch.bool, "ByteTensor": torch.uint8, "CharTensor": torch.int8, "ShortTensor": torch.int16,
    "IntTensor": torch.int32, "LongTensor": torch.int64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "FloatTensor": torch.float32, "DoubleTensor": torch.float64,
}


def _typed_tensor_class(cls_name: str, dtype: torch.dtype, device_type: str, modname: str) -> type:
    class _Meta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.device.type == device_type

        def __call__(cls, *args, device=None):
            device = torch.device(device_type) if device is None else torch.device(device)
            if len(args) == 1 and isinstance(args[0], torch.Size):  # sizes, as torch's legacy constructor reads it
                args = tuple(args[0])
            if len(args) == 1 and not isinstance(args[0], int):
                return torch.tensor(args[0], dtype=dtype, device=device)
            return torch.empty(*args, dtype=dtype, device=device)

    return _Meta(cls_name, (), {"__module__": modname, "dtype": dtype, "is_cuda": False})

