"""The `torch.cuda` API answered by the CPU, for the `cpu` target.

PyTorch has no complete device module for the CPU (`torch.cpu` is partial),
so this module is the `cpu` target's stand-in for ``torch.<vendor>``: every
name here replaces the `torch.cuda` name of the same spelling. Devices are
virtual: the target reports as many as the job needs so that
``world_size = torch.cuda.device_count()`` scripts start the right number of
workers, and each of them computes on the CPU.
"""

from __future__ import annotations

import os
import contextvars
import threading
import time
from typing import Any, Callable, NamedTuple, Optional, Tuple

import torch

from .. import settings
from ..devices import invalid_ordinal, parse_cuda, raise_as_torch


# The current device, per thread as with CUDA (a new thread starts at 0). A
# ContextVar, not threading.local: every thread has its own context, and
# ContextVar.get is a C call (~20 ns) where reading a threading.local attribute
# costs ~100 ns; current_device() sits on hot paths. (An asyncio task sees a
# copy: a set_device inside a task stays in that task.)
_current_index = contextvars.ContextVar("transfer_cpu_current_device", default=0)
_get_index = _current_index.get
#: The C getter of the current device's index: torch.cuda.current_device's fast path (patches/cuda_namespace.py).
index_getter = _get_index
_peak_lock = threading.Lock()


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    pass


#: Devices the cpu target reports when neither TRANSFER_CPU_DEVICES, CUDA_VISIBLE_DEVICES nor
#: LOCAL_WORLD_SIZE says otherwise. Two, deliberately: the smallest count that
#: takes a script's multi-device paths (``mp.spawn(nprocs=device_count())``
#: starts 2 workers, so DistributedSampler, DDP and collectives run), that
#: launchers counting devices before any worker exists accept for the usual
#: ``devices=2`` (Lightning), and whose cost does not grow with the machine
#: (os.cpu_count() workers would oversubscribe the cores every worker already
#: uses). One device would silently skip every distributed path.
DEFAULT_DEVICES = 2


def visible_devices(value: Optional[str]) -> Optional[int]:
    """How many devices a CUDA_VISIBLE_DEVICES value lists, read as the CUDA runtime reads it.

    Comma-separated device ids (ordinals, or ``GPU-``/``MIG-`` UUIDs); the list ends at
    the first entry that is neither (CUDA ignores it and everything after:
    ``"0,1,x,2"`` is 2 devices); a repeated id ends it too. None when the value
    lists no device (unset, ``""``, ``"-1"``): that is how users hide GPUs to run on
    the CPU, which is what the cpu target does, so it keeps its own count.
    The order of the ids has no effect here: every virtual device is the same CPU,
    and virtual device N is the N-th listed, as CUDA numbers them.
    """
    if value is None:
        return None
    seen = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.isdigit():
            entry = str(int(entry))
        elif not entry.startswith(("GPU-", "MIG-")):
            break
        if entry in seen:
            break
        seen.append(entry)
    return len(seen) or None


def device_count() -> int:
    """TRANSFER_CPU_DEVICES, else the devices CUDA_VISIBLE_DEVICES lists, else LOCAL_WORLD_SIZE
    (set by torchrun), else DEFAULT_DEVICES (2).

    TRANSFER_CPU_DEVICES is the cpu target's own setting and wins when both are set (a
    launcher or container may set CUDA_VISIBLE_DEVICES for a GPU job; TRANSFER_CPU_DEVICES
    can only mean the cpu target). Under torchrun, CUDA_VISIBLE_DEVICES=0 with 2 workers per
    node leaves one device, so rank 1's ``set_device(1)`` raises, as on CUDA.
    """
    devices = settings.cpu_devices()
    if devices is not None:
        return devices
    listed = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if listed is not None:
        return listed
    value = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return DEFAULT_DEVICES


def _index(device: Any = None, optional: bool = True) -> int:
    """The virtual device ordinal `device` names; raises as CUDA's ``torch.cuda._utils._get_device_index``.

    A CUDA device string or ``torch.device('cuda', N)`` names ordinal N (no
    index: the current device, unless not `optional`: then torch's ValueError,
    as ``torch.cuda.set_device('cuda')`` raises); an int is an ordinal; a device string torch
    rejects raises torch's own error (``'CUDA:0'``); another device type
    raises CUDA's ValueError, except the CPU: this target's devices are the
    CPU (``x.cuda().device``), so it names the current device. A
    ``torch.cuda.device`` object names its ``idx``, as torch's ``_get_device_index``
    reads it. An ordinal past the device count raises InvalidDeviceError as CUDA would.
    """
    if device is None:
        return current_device()
    if isinstance(device, _Device):  # torch.cuda.device(...) here (the class below)
        device = device.idx
    parsed = (int(device),) if isinstance(device, int) else parse_cuda(device)
    if parsed is None:
        if isinstance(device, str):
            raise_as_torch(device)
            device = torch.device(device)
        if not isinstance(device, torch.device):
            raise TypeError(f"not a device: {device!r}")
        if device.type != "cpu":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        parsed = (None,)
    elif parsed[0] is None and not optional:
        torch._utils._get_device_index(torch.device(device), optional=False)  # raises torch's ValueError
    index = parsed[0] if parsed[0] is not None else current_device()
    count = device_count()
    if not 0 <= index < count:
        raise invalid_ordinal(index, "cpu", count)
    return index


def current_device() -> int:
    return _get_index()


def set_device(device: Any) -> None:
    if isinstance(device, _Device):
        device = device.idx
    if isinstance(device, int) and device < 0:
        return  # CUDA's set_device ignores a negative ordinal (torch.cuda._get_device_index -> -1)
    index = _index(device, optional=False)
    _current_index.set(index)
    _current_generator.set(generator(index))


class device:
    """Context manager that selects a (virtual) device, like torch.cuda.device."""

    def __init__(self, device: Any):
        # None and -1 select nothing, as in torch.cuda.device
        self.idx = -1 if device is None or (isinstance(device, int) and device == -1) else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0:
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        set_device(self.prev_idx)
        return False


class device_of(device):
    def __init__(self, obj: Any):
        super().__init__(-1)


_Device = device  # `device` is also the parameter name of the functions that accept one


def synchronize(device: Any = None) -> None:
    """CPU kernels run synchronously; nothing to wait for."""
    if device is not None:
        _index(device)


def get_device_name(device: Any = None) -> str:
    if device is not None:
        _index(device)
    return "cpu (transfer cpu target)"


class DeviceProperties(NamedTuple):
    """Every field torch's own _CudaDeviceProperties has, so any reader finds its field."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int = 0
    minor: int = 0
    is_integrated: bool = True
    is_multi_gpu_board: bool = False
    uuid: str = "cpu"
    L2_cache_size: int = 0
    gcnArchName: str = "cpu"  # read by torch._inductor's cache key when torch.version.cuda is None
    warp_size: int = 1
    max_threads_per_multi_processor: int = 1
    regs_per_multiprocessor: int = 0
    shared_memory_per_block: int = 0
    shared_memory_per_multiprocessor: int = 0
    shared_memory_per_block_optin: int = 0
    clock_rate: int = 0
    memory_clock_rate: int = 0
    memory_bus_width: int = 0


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def get_device_properties(device: Any = None) -> DeviceProperties:
    major, minor = get_device_capability(device)
    return DeviceProperties(get_device_name(), _total_memory(), os.cpu_count() or 1, major, minor)


def get_device_capability(device: Any = None) -> tuple:
    """(8, 0): the cpu target computes in bf16 (its autocast's dtype), as Ampere-class GPUs do.

    transfer's capability policy (support.capability_policy): `>= (8, 0)` gates pick
    bf16, which CPUs run ~5x faster than fp32 and ~3000x faster than fp16 here.
    """
    if device is not None:
        _index(device)
    return (8, 0)


def mem_get_info(device: Any = None) -> tuple:
    if device is not None:
        _index(device)
    total = _total_memory()
    try:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        free = total
    return free, total


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def is_tf32_supported() -> bool:
    return False


def is_current_stream_capturing() -> bool:
    return False


# RNG: each virtual device has a generator of its own, as each CUDA device has:
# torch.cuda.manual_seed & co. never touch the CPU generator (torch.default_generator),
# so the CPU stream (torch.randperm, RandomSampler, random_split) is the one a CUDA run
# sees. torch.manual_seed seeds them all (it calls torch.cuda.manual_seed_all itself).
# Draws that use them: random factories with a CUDA device and the dropout family
# (transfer/cpu/target.py). A new generator starts from the seed torch gives every
# generator, CPU or CUDA (67280421310721), as a CUDA device's does.
_generators: list = [torch.Generator()]  # appended to, never replaced: an entry is that device's generator for good
_generators_lock = threading.Lock()
# The current device's generator, kept beside its index by set_device: read by a C call on the
# random factories' hot path (generator_lookup).
_current_generator = contextvars.ContextVar("transfer_cpu_current_generator", default=_generators[0])
current_generator = _current_generator.get
_MISSING = object()


def generator(index: Optional[int] = None) -> torch.Generator:
    """The generator of virtual device `index` (None: the current device)."""
    if index is None:
        index = _get_index()
    try:
        return _generators[index]
    except IndexError:
        with _generators_lock:
            while len(_generators) <= index:
                _generators.append(torch.Generator())
        return _generators[index]


def generator_lookup() -> Tuple[Callable[[Any], Any], Callable[[Any], Optional[torch.Generator]]]:
    """``(memo_get, generator_of)`` for the random factories' hot path (patches/_calls.py).

    ``generator_of(device_argument)`` is the generator of the virtual device a CUDA
    device argument names, None for another device (``'cpu'``); it records its
    answer in a memo (at most 512 arguments) that ``memo_get(argument)`` reads with
    one C call: a `torch.Generator` for an argument naming an ordinal, or
    `current_generator` (a C callable: the current device's generator) for one
    naming none (``'cuda'``); None when not seen or not a CUDA device.
    """
    memo: dict = {}

    def generator_of(device: Any) -> Optional[torch.Generator]:
        parsed = parse_cuda(device)
        if parsed is None:
            return None
        found = current_generator if parsed[0] is None else generator(parsed[0])
        if len(memo) < 512:
            memo[device] = found
        return current_generator() if found is current_generator else found

    return memo.get, generator_of


def _generator_of(device: Any) -> torch.Generator:
    return generator(_index(device))


def manual_seed(seed: int) -> None:
    generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for index in range(device_count()):
        generator(index).manual_seed(int(seed))


def seed() -> None:
    generator().seed()


def seed_all() -> None:
    """A random seed, the same on every device (torch.cuda.seed_all)."""
    chosen = generator(0).seed()
    for index in range(1, device_count()):
        generator(index).manual_seed(chosen)


def initial_seed() -> int:
    return generator().initial_seed()


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    return _generator_of(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    _generator_of(device).set_state(new_state)


def get_rng_state_all() -> list:
    return [generator(index).get_state() for index in range(device_count())]


def set_rng_state_all(new_states: list) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def __getattr__(name: str) -> Any:
    # torch.cuda.default_generators, read when the cpu target installs (the device count may
    # come from the environment set just before): one generator per virtual device.
    if name == "default_generators":
        return tuple(generator(index) for index in range(device_count()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Streams and events: CPU work is synchronous, so streams only need to exist;
# events measure wall time so CUDA-event timing code reports real durations.
class Stream:
    """One stream per virtual device: ``stream_id`` 0 (CUDA's default stream), ``device_index`` the
    virtual ordinal, ``device_type`` 1 (c10's DeviceType.CUDA), as torch's test harness reads them."""

    stream_id = 0
    device_type = 1

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.device = torch.device("cpu")
        self.priority = priority
        self.device_index = _index(device)

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def wait_event(self, event: "Event") -> None:
        pass

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return hash(Stream)


_DEFAULT_STREAM = Stream(0)


def current_stream(device: Any = None) -> Stream:
    return _DEFAULT_STREAM


default_stream = current_stream


def set_stream(stream: Stream) -> None:
    pass


class StreamContext:
    def __init__(self, stream: Optional[Stream]):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def stream(stream: Optional[Stream]) -> StreamContext:
    return StreamContext(stream)


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time: Optional[float] = None

    def record(self, stream: Optional[Stream] = None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream: Optional[Stream] = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event's and `end_event`'s record()."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True to measure elapsed time")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end_event._time - self._time) * 1000.0


# Memory: the CPU allocator keeps no per-device statistics; these report zero.
def _zero(device: Any = None) -> int:
    if device is not None:
        _index(device)
    return 0


memory_allocated = max_memory_allocated = memory_reserved = max_memory_reserved = _zero
memory_cached = max_memory_cached = _zero


def memory_stats(device: Any = None) -> dict:
    if device is not None:
        _index(device)
    return {}


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    if device is not None:
        _index(device)
    return "memory statistics are not tracked on the cpu target"


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


empty_cache = ipc_collect = reset_peak_memory_stats = reset_max_memory_allocated = _noop
reset_max_memory_cached = reset_accumulated_memory_stats = set_per_process_memory_fraction = _noop
set_sync_debug_mode = _noop


def get_sync_debug_mode() -> int:
    return 0


#: Names whose values here are placeholders (no such measurement on a CPU):
#: the torch.cuda patch warns once when a script uses them.
PLACEHOLDERS = frozenset(
    {
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_cached",
        "max_memory_cached",
        "memory_stats",
        "memory_summary",
    }
)


# ---------------------------------------------------------------- torch._C's private CUDA entry points
# torch's own CUDA test harness (torch/testing/_internal/common_utils.py: CudaNonDefaultStream,
# CudaMemoryLeakCheck, setBlasBackendsToDefaultFinally) and code copied from it call these directly on
# torch._C; a CPU build has none of them. patches/legacy_types.py installs them on the cpu target.

def _cuda_setStream(stream_id: int = 0, device_index: int = 0, device_type: int = 1) -> None:
    """Make a stream current: every virtual device has one stream, so this selects nothing."""


def _cuda_getCurrentStream(device_index: int = 0) -> tuple:
    return (0, _index(device_index), 1)


def _cuda_setDevice(device: int) -> None:
    set_device(device)


def _cuda_getDevice() -> int:
    return current_device()


def _cuda_cudaCachingAllocator_is_enabled() -> bool:
    return True  # CUDA's default: tests that need the caching allocator run (memory_allocated() is 0)


PRIVATE_ENTRY_POINTS = {
    "_cuda_setStream": _cuda_setStream, "_cuda_getCurrentStream": _cuda_getCurrentStream,
    "_cuda_setDevice": _cuda_setDevice, "_cuda_getDevice": _cuda_getDevice,
    # not _cuda_getDeviceCount: torch.cuda._is_compiled() is hasattr(torch._C, "_cuda_getDeviceCount"), and
    # torch's dynamo then imports the CUDA build's other entry points (_cuda_getCurrentRawStream, ...)
    "_cuda_cudaCachingAllocator_is_enabled": _cuda_cudaCachingAllocator_is_enabled,
    # cuBLAS workspaces: none to free or resize
    "_cuda_clearCublasWorkspaces": _noop, "_cuda_resetCublasWorkspaceSize": _noop,
    "_cuda_resetCublasLtWorkspaceSize": _noop, "_cuda_synchronize": _noop, "_cuda_emptyCache": _noop,
}
