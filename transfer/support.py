"""The support table: what each target does with each CUDA-facing API.

One source of truth, read by the patches (`patches/cuda_namespace.py` derives
its defaults, no-ops and placeholders from it), by the offline tools
(`transfer scan`, `transfer port`), by the runtime log (``TRANSFER_LOG``) and
by ``docs/support-matrix.md`` (generated: ``python -m transfer.migrate.docs``).
Plain data; importing this module imports neither torch nor any patch.

Every (profile, API) pair has one `Support`: its class (one of `CLASSES`),
what the call becomes, and why. `lookup(profile, api)` answers it.

Contract for ``torch.cuda.<name>`` (the API ``"torch.cuda.<name>"``), decided
in this order, exactly as `patches/cuda_namespace.py` behaves:

1. the target's module has the name (the profile's `cuda_api`; the cpu
   target's module is `transfer.cpu.runtime`): translated to
   ``torch.<device>.<name>`` (placeholder when the target answers with a fixed
   value: the profile's `placeholders`);
2. torch calls it on itself (`INTERNAL_DEFAULTS`): a silent fixed answer;
3. harmless to skip (`HARMLESS`): no-op (returns None) or placeholder (returns
   a fixed value), with one warning;
4. anything else that is callable: unsupported (`UnsupportedCudaAPI` on use).

Other APIs (Tensor methods, factories, amp, distributed, string comparisons,
apex, ...) are rows of `OTHER_APIS`; the third-party packages transfer serves
under their public names (flash_attn, xformers, ...) rows of `THIRDPARTY_APIS`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from .profiles import PROFILES
from .dropins import FLASH_ATTN_VERSION

TRANSLATED, NOOP, PLACEHOLDER, UNSUPPORTED = "translated", "no-op", "placeholder", "unsupported"
# Classes of the operator rows (transfer/opsupport.py: torch APIs, not CUDA spellings): the target's plug-in
# runs the operator on the host through its CPU fallback (CUDA's result, slower), or computes in float32
# what CUDA computes in float64.
CPU_FALLBACK, FLOAT32 = "cpu fallback", "float32"
CLASSES = (TRANSLATED, NOOP, PLACEHOLDER, UNSUPPORTED, CPU_FALLBACK, FLOAT32)


class Support(NamedTuple):
    """How one profile handles one API."""

    cls: str  # one of CLASSES
    to: str  # what the call becomes ("" when nothing replaces it)
    reason: str


# ------------------------------------------------------------------ torch.cuda

#: Public torch.cuda callables scripts use (torch 2.13's ``torch.cuda.__all__``
#: without submodules, constants and the legacy typed *Storage/*Tensor classes).
CUDA_NAMES: Tuple[str, ...] = (
    "CUDAGraph", "Event", "ExternalStream", "Stream", "StreamContext", "GreenContext",
    "caching_allocator_alloc", "caching_allocator_delete", "caching_allocator_disabled",
    "caching_allocator_enable", "can_device_access_peer", "check_error", "current_blas_handle",
    "current_solver_handle", "current_device", "current_stream", "default_stream", "device",
    "device_count", "device_memory_used", "device_of", "empty_cache", "get_allocator_backend",
    "CUDAPluggableAllocator", "change_current_allocator", "get_arch_list", "get_device_capability",
    "get_device_name", "get_device_properties", "get_gencode_flags", "get_per_process_memory_fraction",
    "get_rng_state", "get_rng_state_all", "get_stream_from_external", "get_sync_debug_mode", "graph",
    "graph_pool_handle", "host_memory_stats", "host_memory_stats_as_nested_dict", "init", "initial_seed",
    "ipc_collect", "is_available", "is_bf16_supported", "is_current_stream_capturing", "is_initialized",
    "is_tf32_supported", "list_gpu_processes", "make_graphed_callables", "manual_seed", "manual_seed_all",
    "max_memory_allocated", "max_memory_cached", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_cached", "memory_reserved", "memory_snapshot", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "memory_usage", "MemPool", "use_mem_pool", "temperature", "power_draw", "clock_rate",
    "reset_accumulated_host_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
    "reset_max_memory_cached", "reset_peak_host_memory_stats", "reset_peak_memory_stats", "seed", "seed_all",
    "set_device", "set_per_process_memory_fraction", "set_rng_state", "set_rng_state_all", "set_stream",
    "set_sync_debug_mode", "stream", "synchronize", "utilization", "default_generators",
    # torch 2.15: CUDA graph debugging hooks (a DOT dump, pickled graph data) for CUDAGraph's capture hooks
    "export_dot", "export_graph_data",
    # not in __all__, but torch calls them on itself once is_available() is True
    "_lazy_init", "_is_in_bad_fork",
)

#: CUDA-only helpers torch calls on itself once torch.cuda.is_available() is
#: True (nn/modules/_functions.py asks is_current_stream_capturing): a silent answer.
INTERNAL_DEFAULTS: Mapping[str, Any] = {
    "is_current_stream_capturing": False,
    "_lazy_init": None,
    "is_initialized": True,
    "init": None,
    "_is_in_bad_fork": False,
}

#: Missing on the target but safe to skip (housekeeping, statistics): the
#: value returned, with one warning.
HARMLESS: Mapping[str, Any] = {
    "empty_cache": None, "ipc_collect": None, "reset_peak_memory_stats": None,
    "reset_max_memory_allocated": None, "reset_max_memory_cached": None,
    "reset_accumulated_memory_stats": None, "set_per_process_memory_fraction": None,
    "set_sync_debug_mode": None, "synchronize": None,
    "memory_allocated": 0, "max_memory_allocated": 0, "memory_reserved": 0, "max_memory_reserved": 0,
    "memory_cached": 0, "max_memory_cached": 0, "memory_stats": {}, "get_sync_debug_mode": 0,
    "is_bf16_supported": False, "is_tf32_supported": False,
}


#: Capability policy (docs/features.md, "Capability checks"). Targets whose own
#: get_device_capability answers a CUDA-style value when the named variable is
#: set (torch_npu: TORCH_NPU_DEVICE_CAPABILITY="8.0"; None otherwise). Every
#: other answer is derived: the CUDA-equivalent of what the hardware computes,
#: CAPABILITY_BF16 where the target's is_bf16_supported() is True, else
#: CAPABILITY_FP16. A vendor's own numbering (torch_gcu's properties say 3.0) is
#: not CUDA's and is not passed through. get_device_properties().major/minor
#: answer the same; torch.version.cuda is None on every target and torch build (it names a CUDA
#: toolkit; patches/cuda_namespace.py). The variable is each profile's `native_capability_env`.
CAPABILITY_BF16 = (8, 0)  # Ampere-class: bf16 (A100's is the capability `>= (8, 0)` gates look for)
CAPABILITY_FP16 = (7, 0)  # Volta-class: fp16 only


def capability_policy(profile: str) -> str:
    """What get_device_capability answers on `profile`, in words (docs, scan, notices)."""
    env = PROFILES[profile].native_capability_env
    derived = (f"{CAPABILITY_BF16} where the device supports bf16 (torch.cuda.is_bf16_supported()), "
               f"else {CAPABILITY_FP16}")
    if profile == "cpu":
        derived = f"{CAPABILITY_BF16}: CPU autocast computes in bf16"
    return f"{env} when set, else {derived}" if env else derived


def capability_notice(profile: str, value: tuple) -> str:
    """The one notice a script's first get_device_capability call gets where the answer is derived."""
    p = PROFILES[profile]
    env = p.native_capability_env
    choose = f"; set {env}=major.minor to choose the value" if env else ""
    return (f"torch.cuda.get_device_capability: {p.vendor} ({p.device_type}) has no CUDA compute capability; "
            f"transfer answers {value}, the CUDA-equivalent of what the device computes "
            f"({'bf16 supported' if value >= CAPABILITY_BF16 else 'no bf16'}){choose}")


def native_spelling(profile: str, api: str) -> str:
    """What code ported to `profile` (running without transfer) writes instead of ``torch.cuda.<name>`` where
    the target's module has no such function: `transfer port` leaves the call for a person with this advice.
    The first backquoted text is code that runs natively on the target."""
    p = PROFILES[profile]
    name = api[len("torch.cuda."):]
    dev, pkg = p.device_type, p.package or "torch"
    if name == "get_device_capability":
        own = p.own_capability or f"{pkg} has no CUDA compute capability"
        return (f"write `(8, 0) if torch.{dev}.is_bf16_supported() else (7, 0)` (what transfer answers), or test "
                f"`torch.{dev}.is_bf16_supported()` where the capability only picks bf16 ({own})")
    verdict = lookup(profile, api)
    if verdict.cls == UNSUPPORTED:
        return verdict.reason
    if name in GRAPH_NAMES:
        return f"run the captured code eagerly: {pkg} has no graph API (transfer replays it op by op)"
    if verdict.cls == NOOP or verdict.to in ("", "None"):
        return f"remove it: {pkg} has no torch.{dev}.{name} (transfer skips it)"
    if verdict.cls == PLACEHOLDER:
        return (f"write `{verdict.to}` in its place: {pkg} has no torch.{dev}.{name} ({verdict.to} is what transfer "
                "answers)")
    return f"{pkg} has no torch.{dev}.{name}: rewrite it by hand (transfer provides {verdict.to} at run time)"


#: CUDA graph names (patches/graphs.py): the vendor's graph API where it has one (`Profile.graphs`),
#: else transfer's op-by-op replay (transfer/cpu/graph_replay.py).
GRAPH_NAMES = ("CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle", "is_current_stream_capturing")
_REPLAY = {
    "CUDAGraph": "capture records the ops (tensors created then are the graph's static memory; writes are not "
                 "applied during capture, as CUDA does not run its kernels then); replay() re-runs them on the same "
                 "tensors: CUDA's results, no launch savings; one notice",
    "graph": "the capture context of the replaying CUDAGraph (pool and stream accepted)",
    "make_graphed_callables": "returns the callables running eagerly (same results, fresh outputs), one notice",
    "graph_pool_handle": "an opaque token (each graph holds its own tensors)",
    "is_current_stream_capturing": "True while a capture is underway on this thread",
}


def _graph_support(profile: str, name: str) -> Support:
    p = PROFILES[profile]
    vendor = p.graphs
    if name in vendor:
        pkg = p.package or "torch"  # xpu: torch's own
        return Support(TRANSLATED, f"torch.{p.device_type}.{vendor[name]}",
                       f"{pkg}'s graph API (on a {pkg} without it: transfer's op replay)")
    home = "transfer.cpu.graph_replay"
    return Support(TRANSLATED, f"{home}.{name}", _REPLAY[name])


def target_api(profile: str) -> frozenset:
    """The torch.cuda names the target's own module provides (`Profile.cuda_api`)."""
    return PROFILES[profile].cuda_api


def _cuda_support(profile: str, name: str) -> Support:
    p = PROFILES[profile]
    home = "transfer.cpu.runtime" if p.is_cpu else f"torch.{p.device_type}"
    if name in GRAPH_NAMES:
        return _graph_support(profile, name)
    if name == "get_device_capability":
        return Support(PLACEHOLDER, capability_policy(profile),
                       f"{p.vendor} has no CUDA compute capability; the CUDA-equivalent of what it computes, so "
                       "`capability >= (8, 0)` picks bf16 exactly where the device has it (docs/features.md, Capability checks)")
    if name in target_api(profile):
        if name in p.placeholders:
            return Support(PLACEHOLDER, f"{home}.{name}", "no real value on this target; returns 0 / a neutral value")
        return Support(TRANSLATED, f"{home}.{name}", "same function on the target's device module")
    if name == "default_generators":
        return Support(NOOP, "", "a tuple of CUDA generators, left as it is (empty without CUDA)")
    if name in INTERNAL_DEFAULTS:
        return Support(PLACEHOLDER, repr(INTERNAL_DEFAULTS[name]),
                       "torch calls it on itself once is_available() is True; answered silently")
    if name in HARMLESS:
        value = HARMLESS[name]
        if value is None:
            return Support(NOOP, "", f"missing on {home}; housekeeping, safe to skip (one warning)")
        return Support(PLACEHOLDER, repr(value), f"missing on {home}; a statistic, returns {value!r} (one warning)")
    return Support(UNSUPPORTED, "", f"{p.package or 'torch'} has no equivalent (raises UnsupportedCudaAPI); "
                                    "remove it or guard it with `if torch.version.cuda:` (None under transfer)")


# ------------------------------------------------------------------ other APIs

# (api, class, to, reason) with {dev}, {backend}, {pkg}, {vendor} filled per
# profile, and per-profile overrides. `to` "" means nothing replaces the call.
_Row = Tuple[str, str, str, str, Dict[str, Tuple[str, str, str]]]

#: The cpu target's autocast: CUDA's float16 (also the default when no dtype is given) runs as bfloat16.
_CPU_AUTOCAST = (TRANSLATED, "torch.autocast('cpu', dtype=bfloat16)",
                 "float16 (CUDA's default) runs as bfloat16: fp16 matmul on CPUs is ~1000x slower; "
                 "TRANSFER_CPU_AMP_DTYPE=float16 keeps float16")


def _collectives() -> Dict[str, Tuple[str, str, str]]:
    """The all_reduce row's per-profile entries: what each backend does not reduce as NCCL does
    (`Profile.collectives`), computed by transfer (patches/collectives.py)."""
    from .profiles import NCCL_REDUCES

    found = {}
    for name, p in PROFILES.items():
        limits = p.collectives
        if limits is None:
            continue
        reduce = sorted(NCCL_REDUCES - limits.reduce_dtypes)
        scatter = sorted(set(NCCL_REDUCES - limits.reduce_scatter_dtypes) - set(reduce))
        what = [f"{', '.join(reduce)} tensors" if reduce else "",
                f"reduce_scatter of {', '.join(scatter)}" if scatter else "",
                "" if limits.integer_avg else "ReduceOp.AVG of integer tensors"]
        found[name] = (TRANSLATED, f"'{p.backend}', or computed as NCCL computes it",
                       f"{p.backend} does not reduce as NCCL does {'; '.join(w for w in what if w)} ({limits.source}): "
                       "those are all-gathered over the same group and reduced on the host in their dtype, in rank "
                       "order (world size times the data moved), named once with the script's line")
    return found


OTHER_APIS: Tuple[_Row, ...] = (
    ("Tensor.cuda", TRANSLATED, "Tensor.to('{dev}')", "moves to the target device; the index is kept",
     {"cpu": (TRANSLATED, "Tensor.to('cpu', copy=True)", "a copy, as CUDA copies host memory to the device "
                                                          "(also for a tensor already 'on CUDA', where CUDA returns it)")}),
    ("Module.cuda", TRANSLATED, "Module.to('{dev}')", "Module.cuda calls Tensor.cuda for each parameter", {}),
    (".cuda()", TRANSLATED, ".to('{dev}')",
     "Tensor.cuda or Module.cuda, whichever the receiver is (a static scan cannot tell): moves to the target "
     "device; the index is kept",
     {"cpu": (TRANSLATED, ".to('cpu')", "Tensor.cuda or Module.cuda, whichever the receiver is (a static scan "
                                        "cannot tell): a tensor is copied, as CUDA copies host memory to the device; "
                                        "a module's parameters stay the same objects")}),
    ("Tensor.is_cuda", TRANSLATED, "Tensor.is_{dev}", "True on the target device", {}),
    ("Tensor.to", TRANSLATED, "Tensor.to('{dev}')", "a 'cuda' device argument is translated exactly",
     {"cpu": (TRANSLATED, "Tensor.to('cpu', copy=True)", "a 'cuda' device argument is translated exactly; the "
                                                          "move copies, as CUDA's from host memory")}),
    ("Module.to", TRANSLATED, "Module.to('{dev}')", "a 'cuda' device argument is translated exactly",
     {"cpu": (TRANSLATED, "Module.to('cpu') with copied data", "Parameters stay the same objects, their data "
                                                               "is copied, as on CUDA")}),
    ("Tensor.pin_memory", TRANSLATED, "Tensor.pin_memory('{dev}')", "pinned for the target device",
     {"cpu": (TRANSLATED, "Tensor.clone()", "a copy, as on CUDA; not pinned (no accelerator to pin for): "
                                            "is_pinned() is False")}),
    ("device='cuda'", TRANSLATED, "device='{dev}'",
     "factories, new_* methods, torch.Generator, torch.load(map_location=...) take the target device", {}),
    ("torch.Generator('cuda')", TRANSLATED, "torch.Generator('{dev}')",
     "a generator on the target; isinstance(g, torch.Generator) holds for every generator", {}),
    ("torch.set_default_device('cuda')", TRANSLATED, "torch.set_default_device('{dev}')",
     "also `with torch.device('cuda'):` blocks", {}),
    ("DataLoader(pin_memory=True)", TRANSLATED, "DataLoader(pin_memory=True)",
     "batches are pinned for the target device; pin_memory_device='cuda' becomes '{dev}'",
     {"cpu": (NOOP, "DataLoader(pin_memory=False)", "nothing to pin for on the CPU: the flag is dropped "
                                                    "(stock torch would warn on every loader)")}),
    ("torch.device('cuda')", TRANSLATED, "torch.device('{dev}') where used",
     "the object stays a CUDA device; every patched API translates it where it is passed", {}),
    ("torch.cuda.amp.autocast", TRANSLATED, "torch.autocast('{dev}')", "torch.cuda.amp.autocast passes 'cuda'",
     {"cpu": _CPU_AUTOCAST}),
    ("torch.cuda.amp.GradScaler", TRANSLATED, "torch.amp.GradScaler('{dev}')", "scaler on the target device", {}),
    ("torch.cuda.amp.custom_fwd", TRANSLATED, "torch.amp.custom_fwd(device_type='{dev}')", "",
     {"cpu": (TRANSLATED, "torch.amp.custom_fwd(device_type='cpu')",
              "cast_inputs=torch.float16 casts to bfloat16 unless TRANSFER_CPU_AMP_DTYPE=float16")}),
    ("torch.cuda.amp.custom_bwd", TRANSLATED, "torch.amp.custom_bwd(device_type='{dev}')", "", {}),
    ("torch.autocast", TRANSLATED, "torch.autocast('{dev}')", "device_type 'cuda' is translated",
     {"cpu": _CPU_AUTOCAST}),
    ("torch.amp.GradScaler", TRANSLATED, "torch.amp.GradScaler('{dev}')", "device 'cuda' is translated", {}),
    ("torch.backends.cudnn", NOOP, "", "cuDNN flags; the target runs its own kernels and never reads them", {}),
    ("torch.backends.cuda", NOOP, "", "CUDA matmul/SDPA flags; the target never reads them", {}),
    ("torch.cuda.nvtx", NOOP, "", "profiler ranges are not recorded on the target; the calls do nothing", {}),
    ("torch.cuda.amp", TRANSLATED, "torch.amp", "autocast/GradScaler with the target device", {}),
    ("backend='nccl'", TRANSLATED, "'{backend}'",
     "init_process_group/new_group: 'nccl', None, 'cuda:nccl' become the target's collectives", {}),
    ("torch.distributed.init_process_group", TRANSLATED, "init_process_group('{backend}')",
     "backend and device_id translated", {}),
    ("torch.distributed.new_group", TRANSLATED, "new_group(backend='{backend}')", "backend translated", {}),
    ("torch.distributed.get_backend", TRANSLATED, "'{backend}'",
     "returns the backend in use, never 'nccl': `== 'nccl'` tests are False", {}),
    ("torch.distributed.is_nccl_available", PLACEHOLDER, "True", "the target's backend stands in for nccl", {}),
    ("compare 'cuda'", UNSUPPORTED, "",
     "devices are not disguised: `x.device.type == 'cuda'` is False on {dev}; `transfer port --unsafe` "
     "makes the test accept '{dev}'", {}),
    ("compare 'nccl'", UNSUPPORTED, "",
     "get_backend() returns '{backend}', so `== 'nccl'` is False; `transfer port --unsafe` accepts '{backend}'", {}),
    ("torch.nn.parallel.DistributedDataParallel", TRANSLATED, "DDP on {dev}",
     "device_ids/output_device keep their index", {}),
    ("torch.distributed.all_reduce", TRANSLATED, "all_reduce over '{backend}'",
     "also reduce, reduce_scatter(_tensor), DDP's gradient buckets and the functional collectives (DTensor): what "
     "'{backend}' reduces as NCCL does goes to it", _collectives()),
    ("ReduceOp.PREMUL_SUM", TRANSLATED, "each input times the factor, then a SUM",
     "NCCL's pre-multiplied sum (FSDP2's gradient divide factor), computed so on every backend (gloo and the "
     "plug-ins have none or refuse it); integer tensors refused with NCCL's words", {}),
    ("ReduceOp.BAND/BOR/BXOR", UNSUPPORTED, "",
     "NCCL has no bitwise reductions: the script fails as on CUDA, with NCCL's error ('Cannot use ReduceOp.BAND "
     "with NCCL'), not {backend}'s; reduce 0/1 values with ReduceOp.MIN (and) or MAX (or)", {}),
    ("torch.distributed.recv(src=None)", UNSUPPORTED, "",
     "receiving from any rank: 'ProcessGroupNCCL does not support recvAnysource', as on CUDA; pass src=", {}),
    ("torch.distributed.gather", TRANSLATED, "dist.gather over '{backend}'", "the group's own gather",
     {"npu": (TRANSLATED, "torch_npu's dist.gather (an all_gather)",
              "ProcessGroupHCCL has no gather: torch_npu puts an all_gather in dist.gather's place and warns once on "
              "the destination; the destination gets what NCCL's gather gives")}),
    ("DeviceMesh('cuda')", TRANSLATED, "DeviceMesh('{dev}')",
     "init_device_mesh('cuda', ...), DeviceMesh('cuda', ...), DeviceMesh.from_group: FSDP2, DTensor and tensor "
     "parallelism place parameters and shards on {dev}:<rank>, collectives '{backend}'",
     {"cpu": (TRANSLATED, "DeviceMesh('cpu')", "torch's CPU mesh over gloo: FSDP2, DTensor and tensor "
                                               "parallelism run as torch runs them on the CPU")}),
    ("torch.distributed.fsdp.FullyShardedDataParallel", TRANSLATED, "FSDP1 on {dev}",
     "device_id=torch.cuda.current_device() is {dev}:<index>",
     {"cpu": (TRANSLATED, "FSDP1 with device_id=torch.device('cpu')",
              "torch's CPU FSDP; sync_module_states=True broadcasts host memory over gloo (torch refuses it on "
              "the CPU because NCCL cannot)")}),
    ("torch.distributed.checkpoint", TRANSLATED, "dcp.save / dcp.load on {dev}",
     "the writer stages the target's tensors to host memory; checkpoints load at another world size and on "
     "another target", {"cpu": (TRANSLATED, "dcp.save / dcp.load on cpu", "host tensors, written as they are")}),
    ("torch.nn.SyncBatchNorm", TRANSLATED, "SyncBatchNorm on {dev}", "the device check accepts the target",
     {"cpu": (TRANSLATED, "SyncBatchNorm on cpu", "transfer adds the CPU kernels stock torch lacks")}),
    ("torch.nn.DataParallel", TRANSLATED, "replicas on {dev}:<i>, run in turn",
     "torch's scatter/broadcast/gather are CUDA-only C++: done by device copies, CUDA's split, replicas and "
     "per-chunk BatchNorm statistics; the replicas run one after another (CUDA overlaps them); use DDP for speed",
     {"cpu": (TRANSLATED, "replicas on the CPU, run in turn",
              "torch's scatter/broadcast/gather are CUDA-only C++: done by copies, CUDA's split, replicas and "
              "per-chunk BatchNorm statistics, one replica after another")}),
    ("torch.nn.parallel.data_parallel", TRANSLATED, "replicas on {dev}:<i>, run in turn",
     "the functional form of nn.DataParallel (DCGAN's `if input.is_cuda and ngpu > 1`), computed as it is",
     {"cpu": (TRANSLATED, "replicas on the CPU, run in turn",
              "the functional form of nn.DataParallel (DCGAN's `if input.is_cuda and ngpu > 1`), computed as it is")}),
    ("Module.share_memory", TRANSLATED, "no-op for {dev} tensors; sent through {pkg}'s IPC",
     "as CUDA: device tensors stay where they are and reach mp.Process workers through the plug-in's IPC "
     "(hogwild); where the plug-in has none (torch_npu 2.3.1-2.6.0), sending one raises UnsupportedCudaAPI",
     {"cpu": (TRANSLATED, "Module.share_memory()", "host tensors: moved to shared memory, as torch does"),
      **{p.name: (TRANSLATED, f"no-op for {p.device_type} tensors", f"as CUDA, device tensors stay where they are; "
                  f"{p.package or 'torch'} is not known to share device memory between processes: sending one to an "
                  "mp.Process raises UnsupportedCudaAPI unless the plug-in registers its IPC (keep the shared model "
                  "on the CPU, or use DDP)") for p in PROFILES.values() if not p.is_cpu and not p.device_ipc}}),
    ("torch.utils.cpp_extension.CUDAExtension", UNSUPPORTED, "",
     "CUDA C++ kernels do not run on {vendor}: CUDAExtension (and cpp_extension.load / load_inline of .cu "
     "sources, cuda_sources or with_cuda=True) raises UnsupportedCudaAPI naming the files and what the target "
     "offers instead, before any compiler runs; C++-only builds are untouched", {}),
    ("torch.library CUDA kernels", TRANSLATED, "the same kernel for {key}",
     "Library.impl / torch.library.impl / register_kernel / custom_op(device_types='cuda') registrations for "
     "CUDA, AutogradCUDA, AutocastCUDA (...) also register for the target's key (not overrides of torch's own "
     "aten ops: the target's kernels compute those); a kernel registered natively for the target wins; removed on "
     "uninstall; register_fake / register_autograd need nothing",
     {"cpu": (TRANSLATED, "the same kernel for CPU", "as for a vendor, with the CPU keys (CPU, AutogradCPU, ...)")}),
    ("torch.utils.cpp_extension.load", UNSUPPORTED, "",
     "load / load_inline of CUDA sources (.cu/.cuh files, cuda_sources=, with_cuda=True): CUDA C++ kernels do not "
     "run on {vendor}; raises UnsupportedCudaAPI naming the files and what the target offers instead, before any "
     "compiler runs", {}),
    ("CUDA source file", UNSUPPORTED, "",
     "a .cu/.cuh file: CUDA C++ kernels do not run on {vendor}; port them to the vendor's kernel language", {}),
    ("torch.jit.script", TRANSLATED, "torch.jit.script on {dev}",
     "the graphs' 'cuda' constants name the target (patches/torchscript.py); not rewritten: x.cuda() inside TorchScript "
     "and CUDA models loaded with torch.jit.load",
     {"npu": (TRANSLATED, "torch.jit.script on npu",
              "scripted code runs on npu where torch_npu runs its ops; torch_npu's own transfer_to_npu turns "
              "torch.jit.script into a no-op instead, so scripted code on a real npu is not vendor-tested: "
              "if an op fails there, drop @torch.jit.script")}),
    ("torch.cuda.OutOfMemoryError", TRANSLATED, "unchanged",
     "torch's own exception class (also torch.OutOfMemoryError), never replaced: `except "
     "torch.cuda.OutOfMemoryError` catches what torch raises when the target's allocator reports out of memory", {}),
    ("torch.version.cuda", TRANSLATED, "None",
     "None on every target and every torch build (a CUDA build's '13.0' too): it names a CUDA toolkit, "
     "and `if torch.version.cuda:` is how code skips CUDA-only calls", {}),
)

# ------------------------------------------------------------------ third-party packages
#
# CUDA-only packages served under their public names (transfer/dropins/,
# whose PACKAGES table says which are provided and which refused). A row's API
# is a dotted name; `thirdparty_api` maps a use in code to its row: the longest
# row equal to the name or, for a module row, a prefix of it (`flash_attn.bert_padding`
# covers `flash_attn.bert_padding.pad_input`); a package's own row (`flash_attn`)
# covers only itself and its dunders; anything else under it is the `<package>.*` row.

_NPU_FA = "torch_npu.npu_fusion_attention"
_FA_SDPA = ("exact flash_attn semantics (softmax_scale, bottom-right causal, window_size, GQA/MQA, alibi_slopes, "
            "softcap, dropout_p, return_attn_probs/LSE) on torch's scaled_dot_product_attention")
_FA_NPU = ("flash_attn semantics on npu_fusion_attention (BSND; sparse_mode 3 with the compressed 2048x2048 mask for "
           "bottom-right causal, 4 for windows); alibi_slopes, softcap and return_attn_probs, which the op cannot "
           "express exactly, run on SDPA on the same device")
_FA_VARLEN_SDPA = ("packed sequences through cu_seqlens: one SDPA call over a block-diagonal mask built on the "
                   "device (no host sync)")
_FA_VARLEN_NPU = ("npu_fusion_attention TND with actual_seq_qlen/actual_seq_kvlen (cumulative lengths read on the "
                  "host: one sync per call, as the op requires)")
_FA_PROVIDED = "transfer's flash_attn {fa} (transfer/dropins/flash_attn): the real package's CUDA kernels cannot run on {dev}"

_APEX = "transfer's apex (transfer/dropins/apex): the real package's CUDA kernels cannot run on {dev}"
_HALF = "float16"
_AMP_FNS = ("state_dict", "load_state_dict", "disable_casts", "half_function", "float_function", "promote_function",
            "register_half_function", "register_float_function", "register_promote_function")
_AMP_C = {
    "multi_tensor_scale": "out = in * scale (float32 math); noop_flag = 1 on inf/nan input (GradScaler's unscale kernel)",
    "multi_tensor_axpby": "out = a*x + b*y; noop_flag on inf/nan of the checked argument",
    "multi_tensor_l2norm": "(total, per-tensor) float32 L2 norms (foreach norm); noop_flag when not finite",
    "multi_tensor_l2norm_mp": "as multi_tensor_l2norm",
    "multi_tensor_unscale_l2norm": "norms of tensors * inv_scale, tensors unchanged",
    "multi_tensor_adam": "apex's Adam/AdamW update (mode 1/0) in float32, foreach ops",
    "multi_tensor_sgd": "apex's SGD update (momentum, nesterov, wd before/after momentum, scale); skipped when "
                        "noop_flag is set",
    "multi_tensor_lamb": "apex's LAMB (global-norm clipping, trust ratio); the grads receive the updates",
    "multi_tensor_lamb_mp": "FusedMixedPrecisionLamb's LAMB: lr/step tensors, grads * inv_scale, float32 masters "
                            "written to the model copies; nothing written when noop_flag is set",
    "multi_tensor_novograd": "apex's NovoGrad (per-tensor norms blended in place, moment modes 0/1) in float32",
}
_APEX_ROWS: Tuple[_Row, ...] = (
    ("apex", TRANSLATED, "transfer's apex", _APEX, {}),
    ("apex.amp", TRANSLATED, "torch.amp", "apex's amp on torch.autocast and GradScaler's unscale kernel", {}),
    ("apex.amp.initialize", TRANSLATED, "torch.autocast / model casts",
     "O0-O3 with apex's properties, overrides, checks and returned structures; O1: each model's forward under "
     "torch.autocast with apex's half dtype, floating outputs in float32 (apex's loss functions ran in float32; "
     "ops outside the models are not cast, apex patched them process-wide); O2/O3: model cast to the half dtype "
     "(O2 keeps BatchNorm float32), float32 master weights (O2), state_dict in float32; half = " + _HALF,
     {"cpu": (TRANSLATED, "torch.autocast('cpu') / model casts",
              "as on the vendors, with apex's float16 made bfloat16 by the cpu target's autocast policy "
              "(TRANSFER_CPU_AMP_DTYPE=float16 keeps it)")}),
    ("apex.amp.scale_loss", TRANSLATED, "apex's loss scaler",
     "loss.float() * scale; dynamic: 2**16 start, skip + halve on inf/nan, x2 after 2000 clean steps, "
     "min/max_loss_scale; unscale + check in one GradScaler kernel; one host read per backward, as apex", {}),
    ("apex.amp.master_params", TRANSLATED, "the optimizer's parameters", "the float32 masters with O2", {}),
    *((f"apex.amp.{name}", TRANSLATED, "apex's", "as apex; O1 casts follow torch.autocast", {}) for name in _AMP_FNS),
    ("apex.optimizers", TRANSLATED, "transfer's apex.optimizers", "FusedAdagrad, FusedAdam, FusedLAMB, "
     "FusedMixedPrecisionLamb, FusedNovoGrad, FusedSGD", {}),
    ("apex.optimizers.FusedAdagrad", TRANSLATED, "torch foreach ops",
     "apex's rule: L2 g += wd*p (adagrad_w_mode: decoupled), h += g*g, p -= lr*g/(sqrt(h)+eps), float32 math", {}),
    ("apex.optimizers.FusedAdam", TRANSLATED, "torch fused AdamW / foreach ops",
     "apex's rule (adam_w_mode=True default: decoupled decay; False: L2), bias_correction, one step counter per "
     "group, float32 moments for half parameters, amsgrad raises; torch's fused Adam(W) kernel for float32 "
     "parameters where the target has one", {}),
    ("apex.optimizers.FusedLAMB", TRANSLATED, "torch foreach ops",
     "apex's LAMB: global grad norm clipped to max_grad_norm (the defaults'), trust ratio ||p||/||u|| with "
     "weight_decay or use_nvlamb, grads receive the updates", {}),
    ("apex.optimizers.FusedMixedPrecisionLamb", TRANSLATED, "torch ops",
     "apex's LAMB with float32 masters and moments for reduced_precision_dtype parameters, lr/step as device "
     "tensors, the update stored in the gradient's dtype; step(grad_scaler=) unscales and skips inf/nan steps", {}),
    ("apex.optimizers.FusedNovoGrad", TRANSLATED, "torch foreach ops",
     "apex's NovoGrad: per-tensor gradient norms (L2 or inf) blended with beta2, first-step or zero start, "
     "reg_inside_moment (moment mode 0) or decoupled decay, bias_correction (sqrt on the second), float32 math", {}),
    ("apex.optimizers.FusedSGD", TRANSLATED, "torch foreach ops",
     "apex's SGD: wd before (or after) momentum, first-run momentum = grad, nesterov; O2 master weights; float16 "
     "weights and momenta are rounded once per step as the kernel does (not after each op as torch.optim.SGD)", {}),
    ("apex.optimizers.fused_adam", TRANSLATED, "transfer's apex.optimizers.fused_adam", "FusedAdam", {}),
    ("apex.optimizers.fused_lamb", TRANSLATED, "transfer's apex.optimizers.fused_lamb", "FusedLAMB", {}),
    ("apex.optimizers.fused_sgd", TRANSLATED, "transfer's apex.optimizers.fused_sgd", "FusedSGD", {}),
    ("apex.optimizers.fused_novograd", TRANSLATED, "transfer's apex.optimizers.fused_novograd", "FusedNovoGrad", {}),
    ("apex.optimizers.fused_mixed_precision_lamb", TRANSLATED, "transfer's apex.optimizers.fused_mixed_precision_lamb",
     "FusedMixedPrecisionLamb", {}),
    ("apex.normalization", TRANSLATED, "transfer's apex.normalization", "the four fused norms", {}),
    ("apex.normalization.FusedLayerNorm", TRANSLATED, "F.layer_norm in float32",
     "apex's kernel semantics: float32 statistics, under autocast input and parameters cast to the autocast "
     "dtype and the output in it (torch.nn.LayerNorm answers float32 there), eps 1e-5", {}),
    ("apex.normalization.FusedRMSNorm", TRANSLATED, "F.rms_norm in float32",
     "x / sqrt(mean(x**2) + eps) * weight, float32 math, autocast as FusedLayerNorm, eps 1e-5", {}),
    ("apex.normalization.MixedFusedLayerNorm", TRANSLATED, "F.layer_norm in float32",
     "output in the parameters' dtype (Megatron's mixed-dtype norm), always affine", {}),
    ("apex.normalization.MixedFusedRMSNorm", TRANSLATED, "F.rms_norm in float32",
     "output in the parameter's dtype, always affine", {}),
    ("apex.normalization.fused_layer_norm", TRANSLATED, "transfer's apex.normalization.fused_layer_norm",
     "the modules, the fused_* functions (eps 1e-6), the *Function.apply entry points, manual_rms_norm", {}),
    ("apex.parallel", TRANSLATED, "transfer's apex.parallel", "DDP, SyncBatchNorm, convert_syncbn_model", {}),
    ("apex.parallel.DistributedDataParallel", TRANSLATED, "torch DDP + apex's averaging hook",
     "parameters broadcast at construction, no buffer sync, grads * 1/gradient_predivide_factor, all-reduce, "
     "* predivide/world (gradient_average), allreduce_always_fp32, message_size as the bucket size, "
     "delay_allreduce and disable/enable_allreduce honoured; stream/trigger tuning warns once", {}),
    ("apex.parallel.SyncBatchNorm", TRANSLATED, "torch.nn.SyncBatchNorm",
     "plus apex's channel_last, fuse_relu and forward(input, z)", {}),
    ("apex.parallel.convert_syncbn_model", TRANSLATED, "apex.parallel.SyncBatchNorm", "as apex", {}),
    ("apex.parallel.Reducer", TRANSLATED, "torch.distributed", "broadcast at construction, reduce() sums grads", {}),
    ("apex.parallel.create_syncbn_process_group", TRANSLATED, "torch.distributed.new_group", "as apex", {}),
    ("apex.parallel.ReduceOp", TRANSLATED, "torch.distributed.ReduceOp", "", {}),
    ("apex.parallel.LARC", TRANSLATED, "apex's LARC", "local lr trust*||p||/(||g||+wd*||p||+eps) (clip: "
     "min(local/lr, 1)) folded into the grads, then the wrapped optimizer's step", {}),
    ("apex.amp.init", TRANSLATED, "torch.autocast + apex's loss scaler", "apex's old handle API: O1 casts for the "
     "process until handle._deactivate(), handle.scale_loss / wrap_optimizer", {}),
    ("apex.mlp", TRANSLATED, "F.linear + activation", "MLP(mlp_sizes, bias, activation): every layer linear then "
     "relu/sigmoid/none (the last included, as mlp_cuda), weight_i/bias_i as apex", {}),
    ("apex.contrib", TRANSLATED, "transfer's apex.contrib", "clip_grad only", {}),
    ("apex.contrib.clip_grad", TRANSLATED, "torch.nn.utils.clip_grad_norm_", "clip_grad_norm_, which apex "
     "documents as identical to torch's", {}),
    ("apex.fp16_utils", TRANSLATED, "torch ops", "network_to_half, FP16Model, prep_param_lists, "
     "model_grads_to_master_grads, master_params_to_model_params, ..., the legacy LossScaler / DynamicLossScaler",
     {}),
    ("apex.fp16_utils.FP16_Optimizer", TRANSLATED, "apex.amp's LossScaler + amp_C",
     "apex's: float32 masters replace the float16 params in the wrapped optimizer, backward scales and unscales "
     "into the masters, an overflow (dynamic_loss_scale) skips the step and halves the scale, the model gets "
     "the masters in float16; state_dict holds the masters", {}),
    ("apex.multi_tensor_apply", TRANSLATED, "transfer's amp_C",
     "multi_tensor_applier(op, noop_flag, lists, *args) calls op(2048 * 32, noop_flag, lists, *args)", {}),
    ("apex.*", UNSUPPORTED, "",
     "transfer's apex provides amp, optimizers (FusedAdagrad/FusedAdam/FusedLAMB/FusedMixedPrecisionLamb/"
     "FusedNovoGrad/FusedSGD), normalization, "
     "parallel (with LARC), multi_tensor_apply, mlp, fp16_utils and contrib.clip_grad; transformer, the other "
     "contrib packages, fused_dense, ... raise ModuleNotFoundError naming what is provided", {}),
    ("amp_C", TRANSLATED, "transfer's amp_C", "apex's multi-tensor kernels as torch foreach ops "
     "(transfer/dropins/amp_C.py); chunk_size is ignored", {}),
    *((f"amp_C.{name}", TRANSLATED, "torch foreach ops", why, {}) for name, why in _AMP_C.items()),
    ("amp_C.update_scale_hysteresis", TRANSLATED, "torch ops", "apex's kernel on the one-element tensors, in "
     "place (hysteresis, backoff, growth every growth_interval clean steps)", {}),
    ("amp_C.*", UNSUPPORTED, "", "other amp_C kernels (novograd, adagrad, lamb_mp, ...) "
     "are not provided: AttributeError naming what is", {}),
)


THIRDPARTY_APIS: Tuple[_Row, ...] = (
    ("flash_attn", TRANSLATED, "transfer's flash_attn", _FA_PROVIDED, {}),
    ("flash_attn.flash_attn_func", TRANSLATED, "scaled_dot_product_attention", _FA_SDPA,
     {"npu": (TRANSLATED, _NPU_FA, _FA_NPU)}),
    ("flash_attn.flash_attn_qkvpacked_func", TRANSLATED, "scaled_dot_product_attention", _FA_SDPA,
     {"npu": (TRANSLATED, _NPU_FA, _FA_NPU)}),
    ("flash_attn.flash_attn_kvpacked_func", TRANSLATED, "scaled_dot_product_attention", _FA_SDPA,
     {"npu": (TRANSLATED, _NPU_FA, _FA_NPU)}),
    ("flash_attn.flash_attn_varlen_func", TRANSLATED, "scaled_dot_product_attention", _FA_VARLEN_SDPA,
     {"npu": (TRANSLATED, _NPU_FA, _FA_VARLEN_NPU)}),
    ("flash_attn.flash_attn_varlen_qkvpacked_func", TRANSLATED, "scaled_dot_product_attention", _FA_VARLEN_SDPA,
     {"npu": (TRANSLATED, _NPU_FA, _FA_VARLEN_NPU)}),
    ("flash_attn.flash_attn_varlen_kvpacked_func", TRANSLATED, "scaled_dot_product_attention", _FA_VARLEN_SDPA,
     {"npu": (TRANSLATED, _NPU_FA, _FA_VARLEN_NPU)}),
    ("flash_attn.flash_attn_with_kvcache", TRANSLATED, "scaled_dot_product_attention",
     "k_cache/v_cache updated in place at cache_seqlens (or cache_batch_idx), rotary on the new k/q, then attention "
     "over each sequence's cache (paged block_table raises NotImplementedError)", {}),
    ("flash_attn.flash_attn_interface", TRANSLATED, "transfer's flash_attn.flash_attn_interface",
     "the interface functions above; the private _flash_attn_forward/_backward kernels are not provided", {}),
    ("flash_attn.layers", TRANSLATED, "transfer's flash_attn.layers", "the package; see its modules", {}),
    ("flash_attn.ops", TRANSLATED, "transfer's flash_attn.ops", "the package; see its modules", {}),
    ("flash_attn.bert_padding", TRANSLATED, "torch indexing", "pad_input, unpad_input (5 values, as 2.7), "
     "index_first_axis, index_put_first_axis: plain torch ops", {}),
    ("flash_attn.layers.rotary", TRANSLATED, "torch ops", "apply_rotary_emb (interleaved or not, partial rotary_dim, "
     "seqlen_offsets, varlen cu_seqlens, in place also on a leaf), apply_rotary_emb_qkv_/kv_, RotaryEmbedding, "
     "apply_rotary_emb_torch", {}),
    ("rotary_emb", TRANSLATED, "torch ops", "flash-attention's compiled rotary extension: apply_rotary(x1, x2, cos, "
     "sin, out1, out2, conj) with the kernel's float32 arithmetic", {}),
    ("xentropy_cuda_lib", UNSUPPORTED, "", "flash-attention's compiled cross-entropy kernel: `import` raises "
     "ModuleNotFoundError naming torch.nn.CrossEntropyLoss instead", {}),
    ("dropout_layer_norm", UNSUPPORTED, "", "flash-attention's compiled dropout+LayerNorm kernel: `import` raises "
     "ModuleNotFoundError naming flash_attn.ops.layer_norm / rms_norm (provided) instead", {}),
    ("fused_lamb_CUDA", UNSUPPORTED, "", "the project's OWN compiled CUDA extension (NVIDIA DeepLearningExamples' "
     "BERT builds it from lamb_amp_opt/ with CUDAExtension): not a package transfer provides; build it for the "
     "target or use apex.optimizers.FusedLAMB (provided)", {}),
    ("flash_attn.ops.rms_norm", TRANSLATED, "torch ops", "RMSNorm, rms_norm, DropoutAddRMSNorm, dropout_add_rms_norm "
     "in float32 accumulation, as the fused kernel computes", {}),
    ("flash_attn.ops.layer_norm", TRANSLATED, "torch ops", "DropoutAddLayerNorm, dropout_add_layer_norm, "
     "layer_norm", {}),
    ("flash_attn.ops.triton.layer_norm", TRANSLATED, "torch ops", "layer_norm_fn, rms_norm_fn (residual, "
     "prenorm, dropout, residual_in_fp32), LayerNorm, RMSNorm", {}),
    ("flash_attn.losses.cross_entropy", TRANSLATED, "torch ops", "CrossEntropyLoss / cross_entropy_loss with the "
     "kernel's formula (label_smoothing, logit_scale, z-loss, ignore_index), float32; process_group raises", {}),
    ("flash_attn.modules.mha", TRANSLATED, "transfer's flash_attn functions", "MHA with flash-attention's "
     "parameters (Wqkv / Wq+Wkv, out_proj, rotary_emb): MQA/GQA, rotary, causal, ALiBi, windows, key_padding_mask, "
     "varlen cu_seqlens, return_residual, generation with inference_params (the KV cache filled at seqlen_offset, "
     "rotary from there, flash_attn_with_kvcache past the prompt; CrossAttention causal from the bottom-right); "
     "dwconv raises", {}),
    ("flash_attn.utils.generation", TRANSLATED, "transfer's flash_attn.utils.generation", "InferenceParams; "
     "flash-attention's decode loops raise ImportError naming what is provided", {}),
    ("flash_attn.ops.fused_dense", TRANSLATED, "F.linear", "FusedDense, fused_dense_func, FusedMLP, fused_mlp_func "
     "(gelu_approx, relu, sqrelu; return_residual); tensor parallelism raises", {}),
    ("flash_attn.*", UNSUPPORTED, "", "transfer's flash_attn provides the interface functions, bert_padding, "
     "layers.rotary, losses.cross_entropy, modules.mha, ops.fused_dense and the ops norms; other modules (models, "
     "modules.block, ...) raise ModuleNotFoundError naming what is provided and what to use instead", {}),
    ("xformers", TRANSLATED, "transfer's xformers",
     "transfer's xformers (transfer/dropins/xformers): the real package's CUDA kernels cannot run on {dev}", {}),
    ("xformers.ops.memory_efficient_attention", TRANSLATED, "scaled_dot_product_attention",
     "[B, M, H, K] layout, scale, p (dropout), GQA via 5-D [B, M, G, H, K] inputs; attn_bias: a tensor, "
     "LowerTriangularMask (and FromBottomRight), LowerTriangularMaskWithTensorBias, BlockDiagonalMask "
     "(causal variants, from_seqlens), LocalAttentionFromBottomRightMask, the padded-keys masks of KV-cache "
     "decoding (BlockDiagonalPaddedKeysMask, BlockDiagonalCausalWithOffsetPaddedKeysMask, "
     "BlockDiagonalCausalLocalAttentionPaddedKeysMask: each block's keys in use, never the padding; the paged "
     "and gappy ones raise TypeError) as SDPA masks; op= / attention_op= "
     "accept xformers' operator classes (MemoryEfficientAttention*Op, fmha.cutlass.FwOp, ...), a kernel choice", {}),
    ("xformers.ops", TRANSLATED, "transfer's xformers.ops", "memory_efficient_attention, AttentionBias and "
     "LowerTriangularMask (the other biases from xformers.ops.fmha.attn_bias, as xformers), "
     "operator classes, SwiGLU/swiglu, scaled_index_add, index_select_cat, unbind", {}),
    ("xformers.ops.SwiGLU", TRANSLATED, "F.linear + F.silu", "linear(silu(x W1 + b1) * (x W2 + b2), W3, b3); w12 "
     "packed (or w1/w2) and w3 as xformers'", {}),
    ("xformers.ops.scaled_index_add", TRANSLATED, "Tensor.index_add_", "in place: input.index_add_(0, index, "
     "scaling * source, alpha)", {}),
    ("xformers.ops.index_select_cat", TRANSLATED, "torch.cat", "cat of each source[index].flatten()", {}),
    ("xformers.ops.fmha", TRANSLATED, "transfer's xformers.ops.fmha",
     "memory_efficient_attention(_forward), attn_bias classes", {}),
    ("xformers.ops.unbind", TRANSLATED, "torch.unbind", "", {}),
    ("xformers.*", UNSUPPORTED, "", "transfer's xformers provides xformers.ops attention (memory_efficient_attention, "
     "fmha, attn_bias, operator classes), SwiGLU, the indexing ops and unbind; other modules raise "
     "ModuleNotFoundError, other names ImportError, naming what is provided", {}),
    *_APEX_ROWS,
    # Packages transfer does not serve (no transfer/dropins/ tree): what breaks, and what to use on the target.
    ("bitsandbytes", UNSUPPORTED, "",
     "not provided by transfer: its 8-bit/4-bit layers and optimizers (bnb.nn.Linear8bitLt, Linear4bit, "
     "bnb.optim.AdamW8bit, ...) are CUDA C++ kernels; use torch.nn.Linear and torch.optim.AdamW (fused/foreach), or "
     "the vendor's quantization tools", {}),
    ("pynvml", TRANSLATED, "transfer's pynvml",
     "NVML's queries answered for {dev}: nvmlInit, device count, handles, names, memory info (mem_get_info), "
     "utilization where the target measures it, CPU affinity; other nvml* calls raise NVMLError_NotSupported "
     "naming the call (transfer/dropins/pynvml.py)", {}),
    ("cupy", UNSUPPORTED, "",
     "not provided by transfer: CuPy arrays and RawKernels live in CUDA memory; use torch tensors on '{dev}' "
     "(torch covers most numpy/cupy array operations)", {}),
    ("pycuda", UNSUPPORTED, "",
     "not provided by transfer: raw CUDA driver calls and kernels; port the kernels to the vendor's kernel language", {}),
    ("triton", UNSUPPORTED, "",
     "not provided by transfer: Triton compiles its kernels for NVIDIA (and AMD) GPUs only; write the kernel as "
     "torch ops (torch.compile fuses them where the target supports it)",
     {"npu": (UNSUPPORTED, "", "Triton-Ascend (pip install triton-ascend, Atlas A2/A3, replaces the triton package) "
                               "compiles @triton.jit kernels for npu; kernels tuned for NVIDIA block sizes need "
                               "retuning; transfer itself provides nothing")}),
    ("triton.jit", UNSUPPORTED, "",
     "a Triton kernel (@triton.jit / @triton.autotune): compiled for NVIDIA GPUs only; write it as torch ops",
     {"npu": (UNSUPPORTED, "", "a Triton kernel: runs on npu only under Triton-Ascend (pip install triton-ascend, "
                               "Atlas A2/A3), usually after retuning its block sizes")}),
    ("transformer_engine", UNSUPPORTED, "",
     "not provided: FP8 kernels and fused modules exist only for NVIDIA GPUs; `import transformer_engine` raises "
     "ModuleNotFoundError saying so (find_spec answers None, so availability checks are False); use torch.nn "
     "layers and torch.autocast (bf16)", {}),
)

#: Top-level names of the third-party packages the rows above cover.
THIRDPARTY_MODULES = frozenset(row[0].split(".")[0] for row in THIRDPARTY_APIS)
THIRDPARTY_ROWS = frozenset(row[0] for row in THIRDPARTY_APIS)

_OTHER: Dict[str, _Row] = {row[0]: row for row in OTHER_APIS + THIRDPARTY_APIS}


#: Package rows that cover only themselves and their dunders: their modules are judged one by one.
_PACKAGE_ROWS = frozenset({"flash_attn", "flash_attn.ops", "flash_attn.layers", "xformers", "transformer_engine",
                           "apex", "apex.amp", "apex.contrib", "apex.optimizers", "apex.normalization", "apex.parallel",
                           "amp_C"})


def thirdparty_api(qualified: str) -> Optional[str]:
    """The third-party row a dotted name in code refers to, or None (see the rules above)."""
    top = qualified.partition(".")[0]
    if top not in THIRDPARTY_MODULES:
        return None
    name = qualified
    while True:
        if name in _OTHER and (name == qualified or name not in _PACKAGE_ROWS
                               or qualified[len(name) + 1:].startswith("__")):
            return name
        if "." not in name:
            return f"{top}.*" if f"{top}.*" in _OTHER else top
        name = name.rsplit(".", 1)[0]


def _other_support(profile: str, row: _Row) -> Support:
    api, cls, to, reason, overrides = row
    if profile in overrides:
        cls, to, reason = overrides[profile]
    p = PROFILES[profile]
    fill = dict(dev=p.device_type, backend=p.backend, pkg=p.package or "torch", vendor=p.vendor, fa=FLASH_ATTN_VERSION,
                key=p.dispatch_key)
    return Support(cls, to.format(**fill), reason.format(**fill))


def lookup(profile: str, api: str, torch_version: Optional[str] = None) -> Support:
    """How `profile` handles `api` ("torch.cuda.synchronize", "Tensor.cuda", ...).

    A torch.cuda name the table does not list (a newer torch) follows the
    torch.cuda contract above; a torch API of the target's operator data (`op_support`) is judged for
    `torch_version` (default: the newest the data has); any other unknown API raises KeyError.
    """
    if profile not in PROFILES:
        raise KeyError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if api in _OTHER:
        return _other_support(profile, _OTHER[api])
    if api.startswith("torch.cuda."):
        return _cuda_support(profile, api[len("torch.cuda."):])
    found = op_support(profile, api, torch_version)
    if found is not None:
        return found
    raise KeyError(f"{api!r} is not in the support table")


# ------------------------------------------------------------------ operators (transfer/opsupport.py)

def op_support(profile: str, api: str, torch_version: Optional[str] = None) -> Optional[Support]:
    """The row of a torch API the target computes otherwise (``torch.lgamma``: its plug-in's CPU fallback for
    `torch_version`; ``Tensor.double``: float32), None when the target's data does not name `api`."""
    from . import opsupport

    p = PROFILES[profile]
    if api in opsupport.FLOAT64_ROWS:
        if not p.float64_cast:
            return Support(TRANSLATED, "float64", "a float64 cast, as on CUDA")
        return Support(FLOAT32, "", f"{p.float64_cast.partition(' (')[2].rstrip(')')}; a device argument keeps "
                       "float64 (x.to(device, torch.float64)), as does moving a float64 host tensor; transfer names "
                       "the first cast at run time (docs/limits.md)")
    if not (api.startswith("torch.") or api.startswith("Tensor.")):
        return None
    coverage = opsupport.coverage(profile, torch_version) if p.op_coverage else None
    uses = coverage.apis.get(api) if coverage is not None else None
    if uses is None:
        return None
    forward, backward = uses.get("forward", ()), uses.get("backward", ())
    ops = ", ".join(opsupport.aten_name(o) for o in forward or backward)
    when = "" if forward else "in backward: "
    extra = f" (in backward also {', '.join(opsupport.aten_name(o) for o in backward)})" if forward and backward else ""
    return Support(CPU_FALLBACK, f"{when}{ops} on the CPU",
                   f"{coverage.describe()} has no {p.device_type} kernel for {ops}{extra}: its CPU fallback copies "
                   "the tensors to the host and back, CUDA's result at host speed (transfer counts the calls: "
                   "transfer.status()['fallbacks'])")


def apis() -> List[str]:
    """Every API of the table, torch.cuda first, in table order."""
    return ([f"torch.cuda.{n}" for n in CUDA_NAMES if not n.startswith("_")] + [row[0] for row in OTHER_APIS]
            + [row[0] for row in THIRDPARTY_APIS])


def table(profiles: Optional[List[str]] = None) -> List[Tuple[str, Dict[str, Support]]]:
    """(api, {profile: Support}) for every API, for the docs and the tools."""
    names = list(profiles or PROFILES)
    return [(api, {p: lookup(p, api) for p in names}) for api in apis()]
