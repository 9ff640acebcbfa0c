"""The table of targets: one frozen `Profile` per accelerator family.

Adding a vendor that plugs into PyTorch the usual way (PrivateUse1 device, a
`torch.<name>` module, a registered collective backend) is one entry here plus
its tests; no other module names a vendor.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional

# NamedTuples, not frozen dataclasses: as immutable, and ~2 ms cheaper to
# import (dataclasses generate their methods with exec), which counts toward
# `import transfer.auto`.


class EnvRename(NamedTuple):
    """A CUDA/NCCL variable's counterpart on a target: its name there and how the value converts.

    `transfer.envvars` classifies every NCCL_*, TORCH_NCCL_* and CUDA_* variable; what is
    per target lives here, in each profile's `env`.
    """

    target: Optional[str]  # the target's variable; None: the target behaves so with no variable (`note`)
    scale: float = 1.0  # value * scale, for numeric variables whose unit differs
    interfaces: bool = False  # NCCL's interface selection ('eth', '=eth0', '^docker,lo') -> one plain name
    note: str = ""  # why, where it is not a plain rename

    def convert(self, value: str) -> str:
        """The value for `target`; raises ValueError (naming the problem) where there is none."""
        if self.interfaces:
            from .envvars import plain_interface

            return plain_interface(value)
        if self.scale == 1.0:
            return value
        return str(max(1, int(float(value) * self.scale)))


class CompilePolicy(NamedTuple):
    """What torch.compile's CUDA compilers (inductor, CUDA graphs) become on a target, per graph
    (`transfer/patches/compile_policy.py`): inductor where it generates code for the graph's devices (CPU
    tensors; a plug-in that registered a code generator for its device), else the plug-in's own dynamo
    backend named here if it is registered, else `fallback`. Names are what the real plug-in registers
    (read in its wheel), never guessed: None where it is not known to register one."""

    inductor: str  # whether and how inductor generates code for the device, for messages and docs
    backend: Optional[str] = None  # the plug-in's own dynamo backend, where inductor has no code for the device
    graphs_backend: Optional[str] = None  # mode="reduce-overhead" / backend="cudagraphs": the plug-in's graphs
    fallback: str = "eager"  # registered with every torch: dynamo's graphs run as traced, what eager computes
    tf32: str = ""  # what CUDA's TF32 switches (allow_tf32, set_float32_matmul_precision) do on the target


#: What NCCL reduces (torch's ncclDataType map; complex as its real view), by torch's names: what
#: transfer/patches/collectives.py computes where the target's backend refuses it or computes it otherwise.
#: Others (int16, the unsigned types) NCCL refuses too: left to the backend.
NCCL_REDUCES = frozenset({"float64", "float32", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool",
                          "complex64", "complex128"})


class CollectiveLimits(NamedTuple):
    """What a target's collective backend refuses that NCCL computes, read in the plug-in's source
    (transfer/patches/collectives.py computes those collectives as NCCL does). Dtypes by torch's name."""

    reduce_dtypes: frozenset  # what its all_reduce / reduce reduce (after the plug-in's own casts)
    reduce_scatter_dtypes: frozenset  # what its reduce_scatter reduces
    integer_avg: bool  # whether ReduceOp.AVG averages integer tensors (NCCL: sum, then truncating division)
    source: str  # where it was read, for messages


class Profile(NamedTuple):
    """Everything `transfer` needs to know about one target."""

    name: str  # what TRANSFER_DEVICE says
    vendor: str  # who makes it, for messages
    package: Optional[str]  # the Python package that plugs the device into torch
    install_hint: str  # how a user gets that package ({torch}, {release}: see selection.install_hint)
    device_type: str  # torch.device(<device_type>, N)
    backend: str  # torch.distributed backend replacing nccl
    visible_devices_env: Optional[str]  # CUDA_VISIBLE_DEVICES equivalent
    # NCCL_* / TORCH_NCCL_* / CUDA_* variables with a counterpart on this target (transfer.envvars
    # classifies the rest: informational, not needed, unsupported).
    env: Mapping[str, EnvRename] = MappingProxyType({})
    # tccl: the device must be set before init_process_group (seed 000).
    set_device_before_init: bool = False
    # tccl: one process per device; several ranks may not share a card.
    one_process_per_device: bool = False
    notes: str = ""
    # What the target offers instead of a CUDA C++ extension (.cu sources), for the
    # error a CUDAExtension / cpp_extension.load of CUDA sources raises.
    custom_kernels: str = ""
    # torch.compile(...) on the target (transfer/patches/compile_policy.py).
    compile: CompilePolicy = CompilePolicy(inductor="no code generator for the device is known")
    # torch.cuda names the target's own module has (a vendor's: read in its published sources, and
    # tests/vendors' stand-ins publish the same; the cpu target's: transfer.cpu.runtime answers them).
    cuda_api: frozenset = frozenset()
    # Those of `cuda_api` the target answers with a fixed value rather than a measurement.
    placeholders: frozenset = frozenset()
    # CUDA graph names -> the vendor's graph API (patches/graphs.py); empty: transfer's op replay.
    graphs: Mapping[str, str] = MappingProxyType({})
    # The variable under which the target's own get_device_capability answers a CUDA-style value
    # (transfer.support.capability_policy); None: transfer derives the answer.
    native_capability_env: Optional[str] = None
    # Why the target's own get_device_capability is no native spelling of CUDA's (`transfer port`'s advice).
    own_capability: str = ""
    # DeepSpeed has its own accelerator for the target (deepspeed/accelerator/*_accelerator.py), which its probe
    # finds; else patches/deepspeed.py gives it one (DeepSpeed's CUDA accelerator under the target's names).
    deepspeed_accelerator: bool = False
    # The plug-in's operator coverage per version (transfer/opsupport.py): a file of transfer/data/, "" none known.
    op_coverage: str = ""
    # What a dtype-only float64 cast of a device tensor (x.double(), x.to(torch.float64)) returns there, with
    # where that was read; "" where it is float64, as on CUDA (patches/vendor_ops.py names it at run time).
    float64_cast: str = ""
    # Where the plug-in sends its tensors to other processes through device IPC (its own reductions), with where
    # that was read; "" where that is not known (patches/share_memory.py checks at run time either way).
    device_ipc: str = ""
    # What the collective backend refuses that NCCL computes; None: nothing known (tccl, eccl) or gloo.
    collectives: Optional[CollectiveLimits] = None
    # The dispatch key of the target's device kernels, where patches/custom_ops.py registers kernels written for
    # CUDA: PrivateUse1 for an out-of-tree plug-in, the key of a device built into torch (XPU), CPU on the cpu target.
    dispatch_key: str = "PrivateUse1"
    # The vendor's own CUDA migration modules (each patches torch for good while imported) -> how a user turns it
    # off: transfer/conflicts.py refuses to share a process with any of them.
    migration_shims: Mapping[str, str] = MappingProxyType({})

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"

    @property
    def builtin(self) -> bool:
        """The device is built into torch (torch.xpu): no package to import; present when torch reports devices."""
        return self.package is None and not self.is_cpu


# torch.cuda names, grouped as the targets' modules provide them (`Profile.cuda_api`).
_DEVICE = ("is_available", "device_count", "is_initialized", "init", "set_device", "current_device",
           "device", "device_of", "synchronize")
_STREAMS = ("Stream", "Event", "StreamContext", "stream", "set_stream", "current_stream", "default_stream")
_RNG = ("default_generators", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
        "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all")
_MEMORY = ("empty_cache", "memory_stats", "memory_stats_as_nested_dict", "reset_accumulated_memory_stats",
           "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
           "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "memory_cached", "max_memory_cached", "mem_get_info", "memory_summary")
_COMMON = _DEVICE + _STREAMS + _RNG + _MEMORY + ("get_device_name", "get_device_properties", "is_bf16_supported")
_GRAPHS = ("graph", "graph_pool_handle", "make_graphed_callables")


def _env(**renames: EnvRename) -> Mapping[str, EnvRename]:
    return MappingProxyType(dict(renames))


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        p.name: p
        for p in (
            Profile(
                name="npu",
                vendor="Huawei Ascend",
                package="torch_npu",
                # {release}, {torch}: the installed torch's X.Y.Z and version (selection.install_hint)
                install_hint="pip install \"torch_npu=={release}.*\" \"torch=={torch}\" (the torch_npu made for "
                "your torch; the pin keeps pip from replacing torch, and where there is none pip says so: "
                "pip index versions torch_npu) and Huawei's CANN toolkit (source "
                "/usr/local/Ascend/ascend-toolkit/set_env.sh)",
                device_type="npu",
                backend="hccl",
                # torch_npu 2.13.0 (read in the PyPI wheel): entry points torch_dynamo_backends npu (TorchAir;
                # returns the graph as is without torchair), npugraph_ex, npugraphs (graph trees); the device
                # interface for npu at torch._dynamo's import; register_backend_for_device("npu", ...) inside
                # its inductor wrapper only when Triton-Ascend is installed ("triton-ascend is not installed"
                # otherwise); inductor's cudagraphify becomes npugraphify.
                compile=CompilePolicy(
                    inductor="torch_npu registers inductor code generation for npu only with Triton-Ascend "
                    "installed", backend="npu", graphs_backend="npugraphs",
                    tf32="TF32 is CUDA's; the npu's counterpart, HF32 (torch.npu.matmul.allow_hf32, "
                    "torch.npu.conv.allow_hf32), is not switched: matmuls keep torch_npu's default"),
                visible_devices_env="ASCEND_RT_VISIBLE_DEVICES",
                cuda_api=frozenset(_COMMON + ("can_device_access_peer", "get_device_capability",
                                              "is_current_stream_capturing", "memory_snapshot", "get_allocator_backend",
                                              "_lazy_init", "_is_in_bad_fork", "utilization") + _GRAPHS),
                # torch_npu's NPUGraph family (read in the 2.13.0 wheel's torch_npu/npu/graphs.py)
                graphs=MappingProxyType({"CUDAGraph": "NPUGraph", "is_current_stream_capturing":
                                         "is_current_stream_capturing", **{n: n for n in _GRAPHS}}),
                native_capability_env="TORCH_NPU_DEVICE_CAPABILITY",
                # torch_npu's ProcessGroupHCCL.cpp (checkSupportedDataType; every release 2.1-2.14, Ascend/pytorch
                # master): int8/16/32/64, fp16, fp32, bf16 reduce; allreduce/reduce cast bool and uint8 to int32
                # first, reduce_scatter does not; AVG divides in place (an integer tensor fails); fp64 only on
                # Ascend950. NCCL also reduces float64 and complex128, uint8/bool in reduce_scatter, integer AVG.
                collectives=CollectiveLimits(
                    reduce_dtypes=frozenset({"int8", "int16", "int32", "int64", "float16", "float32", "bfloat16",
                                             "uint8", "bool", "complex64"}),  # complex64: torch's float32 view
                    reduce_scatter_dtypes=frozenset({"int8", "int16", "int32", "int64", "float16", "float32",
                                                     "bfloat16"}),
                    integer_avg=False,
                    source="torch_npu's ProcessGroupHCCL.cpp: checkSupportedDataType, getHcclReduceOp"),
                deepspeed_accelerator=True,
                migration_shims=MappingProxyType({
                    "torch_npu.contrib.transfer_to_npu": "remove `from torch_npu.contrib import transfer_to_npu`"}),
                op_coverage="npu_ops.json",
                device_ipc="torch_npu's reductions replace torch.multiprocessing's reduce_tensor (2.1.0.post*, 2.7.1 "
                "and later; none in 2.3.1-2.6.0)",
                # torch_npu/csrc/aten/common/ToKernelNpu.cpp (Ascend/pytorch master, the 2.14.0 wheel): _to_copy with
                # only a dtype turns Double into Float, warning once "Device do not support double dtype now, dtype
                # cast replace with float."; with a device (x.to('npu', torch.float64), a host tensor moved) it keeps it
                float64_cast="float32 (torch_npu's _to_copy casts a dtype-only float64 conversion of an npu tensor "
                "to float32: ToKernelNpu.cpp)",
                own_capability="torch_npu's own torch.npu.get_device_capability() returns None unless "
                "TORCH_NPU_DEVICE_CAPABILITY is set",
                custom_kernels="Ascend C custom operators (CANN's operator development kit, msopgen), called "
                "from PyTorch through torch_npu's custom-operator adaptation (OpPlugin) or a C++ extension "
                "registering the op for PrivateUse1",
                env=_env(
                    NCCL_SOCKET_IFNAME=EnvRename(
                        "HCCL_SOCKET_IFNAME", note="same syntax ('eth', '^eth', '=eth0', '^=eth0': CANN's "
                        "envref HCCL_SOCKET_IFNAME); HCCL uses the first interface it selects, NCCL may use several"),
                    NCCL_BUFFSIZE=EnvRename("HCCL_BUFFSIZE", scale=1 / (1024 * 1024),
                                            note="NCCL_BUFFSIZE is in bytes, HCCL_BUFFSIZE in MB"),
                    CUDA_LAUNCH_BLOCKING=EnvRename("ASCEND_LAUNCH_BLOCKING"),
                    # torch_npu 2.13's ProcessGroupHCCL reads torch's names with HCCL for NCCL
                    # (ProcessGroupHCCL.hpp, libtorch_npu.so), same values.
                    NCCL_ASYNC_ERROR_HANDLING=EnvRename("HCCL_ASYNC_ERROR_HANDLING"),
                    NCCL_BLOCKING_WAIT=EnvRename("HCCL_BLOCKING_WAIT"),
                    NCCL_DESYNC_DEBUG=EnvRename("HCCL_DESYNC_DEBUG"),
                    **{f"TORCH_NCCL_{n}": EnvRename(f"TORCH_HCCL_{n}") for n in (
                        "ASYNC_ERROR_HANDLING", "BLOCKING_WAIT", "DESYNC_DEBUG", "DUMP_ON_TIMEOUT", "ENABLE_MONITORING",
                        "HEARTBEAT_TIMEOUT_SEC", "TRACE_BUFFER_SIZE", "TRACE_CPP_STACK", "WAIT_TIMEOUT_DUMP_MILSEC",
                        "COORD_CHECK_MILSEC", "HIGH_PRIORITY", "RANKS_PER_ROOT", "DEBUG_INFO_TEMP_FILE",
                        "DEBUG_INFO_PIPE_FILE")},
                ),
            ),
            Profile(
                name="sdaa",
                vendor="Tecorigin",
                package="torch_sdaa",
                install_hint="install torch_sdaa from Tecorigin's TecoPyTorch release "
                "(it is not on PyPI), e.g. inside the teco training docker image",
                device_type="sdaa",
                backend="tccl",
                compile=CompilePolicy(
                    inductor="torch_sdaa is not known to register a dynamo backend or inductor code generation "
                    "for sdaa (tests/vendors/README.md)", tf32="TF32 is CUDA's; no sdaa counterpart is known"),
                visible_devices_env="SDAA_VISIBLE_DEVICES",
                cuda_api=frozenset(_COMMON + ("_lazy_init", "_is_in_bad_fork")),
                own_capability="torch_sdaa has no get_device_capability",
                deepspeed_accelerator=True,
                custom_kernels="kernels in Tecorigin's own device language from its SDK, registered for "
                "PrivateUse1 through torch_sdaa's extension mechanism",
                # tccl is NCCL-derived and keeps NCCL's variable names (and, assumed, the interface
                # syntax) under its prefix; its TORCH_NCCL_* counterparts are not known.
                env=_env(NCCL_SOCKET_IFNAME=EnvRename(
                    "TCCL_SOCKET_IFNAME", note="passed as written: tccl is NCCL-derived, NCCL's syntax assumed "
                    "(unverified, see tests/vendors/README.md)")),
                set_device_before_init=True,
                one_process_per_device=True,
                notes="tccl needs the device set before init_process_group; one process per card",
            ),
            Profile(
                name="gcu",
                vendor="Enflame",
                package="torch_gcu",
                install_hint="install torch_gcu from Enflame's TopsRider release (it is not on PyPI)",
                device_type="gcu",
                backend="eccl",
                compile=CompilePolicy(
                    inductor="torch_gcu is not known to register a dynamo backend or inductor code generation "
                    "for gcu (tests/vendors/README.md)", tf32="TF32 is CUDA's; no gcu counterpart is known"),
                visible_devices_env="TOPS_VISIBLE_DEVICES",
                cuda_api=frozenset(_COMMON + ("can_device_access_peer", "get_device_capability",
                                              "is_current_stream_capturing", "memory_snapshot", "get_allocator_backend",
                                              "_lazy_init", "_is_in_bad_fork")),
                own_capability="torch_gcu's own torch.gcu.get_device_capability() is Enflame's numbering (3.0), "
                "not CUDA's",
                custom_kernels="kernels in Enflame's own device language from its TopsRider SDK, registered "
                "for PrivateUse1 through torch_gcu's extension mechanism",
                # eccl is NCCL-derived and keeps NCCL's names under its prefix: Enflame's ECCL setup scripts
                # (ECCL 2.5) export ECCL_SOCKET_IFNAME and ECCL_IB_DISABLE=1, its multi-node vLLM guides
                # ECCL_IB_HCA (NCCL's syntax: '^=mlx5_10,mlx5_11', 'mlx5_bond_0,...') and ECCL_IB_GID_INDEX=3;
                # torch_gcu's process group reads TORCH_ECCL_* (Enflame's vLLM worker sets
                # TORCH_ECCL_AVOID_RECORD_STREAMS; guides set TORCH_ECCL_ASYNC_ERROR_HANDLING). Seed 004's
                # NCCL_IB_* settings used to be dropped on gcu.
                env=_env(
                    NCCL_SOCKET_IFNAME=EnvRename(
                        "ECCL_SOCKET_IFNAME", note="passed as written: eccl is NCCL-derived, NCCL's syntax assumed "
                        "(unverified, see tests/vendors/README.md)"),
                    NCCL_IB_DISABLE=EnvRename("ECCL_IB_DISABLE"),
                    NCCL_IB_HCA=EnvRename("ECCL_IB_HCA", note="passed as written: Enflame's guides write NCCL's "
                                          "syntax ('^=mlx5_10,mlx5_11')"),
                    NCCL_IB_GID_INDEX=EnvRename("ECCL_IB_GID_INDEX"),
                    TORCH_NCCL_ASYNC_ERROR_HANDLING=EnvRename("TORCH_ECCL_ASYNC_ERROR_HANDLING"),
                    TORCH_NCCL_AVOID_RECORD_STREAMS=EnvRename("TORCH_ECCL_AVOID_RECORD_STREAMS"),
                ),
                # torch_gcu v2.10.0's ProcessGroupECCL.cpp / ECCLUtils.hpp (the only public source, quoted in
                # tests/vendors/eccl_excerpts.txt): ecclDataType reduces float64 as float32 and int64 as int32 ("GCU
                # do not support 64-bit"), without a word; complex128 reaches it as its float64 view; int16 and
                # the unsigned types are refused (as NCCL refuses them); AVG is ecclAvg (integers truncate, as NCCL).
                collectives=CollectiveLimits(
                    reduce_dtypes=frozenset({"int8", "uint8", "int32", "float16", "float32", "bfloat16", "bool",
                                             "complex64"}),  # complex64: torch's float32 view
                    reduce_scatter_dtypes=frozenset({"int8", "uint8", "int32", "float16", "float32", "bfloat16",
                                                     "bool", "complex64"}),
                    integer_avg=True,
                    source="torch_gcu 2.10's ProcessGroupECCL.cpp: ecclDataType reduces 64-bit types as 32-bit"),
                notes="builds from 2020-21 showed devices as xla:N",
            ),
            # Cambricon. Facts read in Cambricon/torch_mlu (github; branches r1.22_pt2.1.0 ... r2.4_develop, the
            # newest public, 2025-02) and DeepSpeed 0.19.8's accelerator/mlu_accelerator.py; tests/vendors/README.md
            # ("mlu") names each file. Not known: anything of torch_mlu for torch >= 2.5 (not public).
            Profile(
                name="mlu",
                vendor="Cambricon",
                package="torch_mlu",
                install_hint="install torch_mlu from Cambricon's release for your torch (not on PyPI; Cambricon's "
                "PyTorch container ships it; it needs CNToolkit, CNNL and CNCL under NEUWARE_HOME, and for torch "
                "2.1 / 2.3 Cambricon's own torch wheel)",
                device_type="mlu",
                # torch_mlu/mlu/cncl.py: register_backend("cncl", lambda store, group_rank, group_size, timeout:
                # ProcessGroupCNCL(...), devices=["mlu"])
                backend="cncl",
                visible_devices_env="MLU_VISIBLE_DEVICES",
                # No inductor registration or dynamo backend in any public torch_mlu (up to r2.4_develop).
                compile=CompilePolicy(
                    inductor="torch_mlu's public source (up to its torch 2.4 branch) registers no inductor code "
                    "generation or dynamo backend for mlu",
                    tf32="TF32 is CUDA's; torch_mlu's own switch (torch.backends.mlu.matmul.allow_tf32) is not set"),
                # torch_mlu/mlu/__init__.py __all__ (r2.4_develop) has these and more (caching_allocator_*,
                # ipc_collect, set_per_process_memory_fraction, ExternalStream, check_error: not mirrored here).
                cuda_api=frozenset(_COMMON + ("can_device_access_peer", "get_device_capability",
                                              "is_current_stream_capturing", "memory_snapshot", "_lazy_init",
                                              "_is_in_bad_fork")),
                graphs=MappingProxyType({"CUDAGraph": "MLUGraph", "is_current_stream_capturing":
                                         "is_current_stream_capturing", **{n: n for n in _GRAPHS}}),
                own_capability="torch_mlu's own torch.mlu.get_device_capability() is Cambricon's numbering "
                "(bf16 from major 5: torch_mlu/mlu/__init__.py is_bf16_supported), not CUDA's",
                deepspeed_accelerator=True,
                custom_kernels="BANG C kernels built with torch_mlu's own cpp_extension (torch_mlu.utils."
                "cpp_extension: load / load_inline of .mlu sources) against Cambricon's Neuware SDK",
                # process_group_cncl.cpp (r2.4_develop): int8, uint8, int32, int64, fp16, fp32, bf16, bool (as uint8)
                # and float64 mapped to cnclFloat (torch_mlu keeps 64-bit data as 32-bit on the device, so the
                # precision is gone before any collective); AVG of floats divides first, of integers floor-divides
                # after the sum (NCCL truncates); BAND/BOR/BXOR refused. Older branches (r1.22_*) refuse AVG.
                collectives=CollectiveLimits(
                    reduce_dtypes=frozenset({"int8", "uint8", "int32", "int64", "float16", "float32", "bfloat16",
                                             "float64", "bool", "complex64", "complex128"}),
                    reduce_scatter_dtypes=frozenset({"int8", "uint8", "int32", "int64", "float16", "float32",
                                                     "bfloat16", "float64", "bool"}),
                    integer_avg=False,
                    source="torch_mlu's process_group_cncl.cpp: cncl_data_type, getCnclReduceOp, procReduceOutput"),
                migration_shims=MappingProxyType({
                    "torch_mlu.utils.gpu_migration": "remove `import torch_mlu.utils.gpu_migration`"}),
                # torch_mlu's own NCCL -> CNCL table (torch_mlu/utils/gpu_migration/env_migration.py, r2.4_develop);
                # CUDA_LAUNCH_BLOCKING has none there ("" in that table).
                env=_env(
                    **{f"TORCH_NCCL_{n}": EnvRename(f"TORCH_CNCL_{n}") for n in (
                        "ASYNC_ERROR_HANDLING", "AVOID_RECORD_STREAMS", "BLOCKING_WAIT", "COORD_CHECK_MILSEC",
                        "DEBUG_INFO_PIPE_FILE", "DEBUG_INFO_TEMP_FILE", "DESYNC_DEBUG", "DUMP_ON_TIMEOUT",
                        "ENABLE_MONITORING", "ENABLE_TIMING", "HEARTBEAT_TIMEOUT_SEC", "TRACE_BUFFER_SIZE",
                        "TRACE_CPP_STACK", "WAIT_TIMEOUT_DUMP_MILSEC")},
                    **{f"NCCL_{n}": EnvRename(f"TORCH_CNCL_{n}") for n in (
                        "ASYNC_ERROR_HANDLING", "BLOCKING_WAIT", "DESYNC_DEBUG", "ENABLE_TIMING")},
                ),
            ),
            # Moore Threads. Facts read in MooreThreads/torch_musa (github main, 2026-01; built for torch 2.7.1,
            # which it patches) and torchada 0.1.103 (PyPI); DeepSpeed 0.19.8 ships no musa accelerator.
            Profile(
                name="musa",
                vendor="Moore Threads",
                package="torch_musa",
                install_hint="install torch_musa from Moore Threads' release (not on PyPI; each build requires "
                "the torch it was made for, 2.7.1 for torch_musa's main branch, and the MUSA toolkit under MUSA_HOME)",
                device_type="musa",
                # torch_musa/csrc/distributed/Register.cpp: register_backend("mccl", MCCLcreator(store, rank,
                # world_size, timeout), False, "musa"), a c10d Backend (ProcessGroupMCCL, NCCL's port).
                backend="mccl",
                visible_devices_env="MUSA_VISIBLE_DEVICES",
                # torch_musa/_inductor: register_backend_for_device("musa", MUSATritonScheduling, ...) through its
                # patched torch; torch_musa/_dynamo/backend/musagraphs.py: the dynamo backend "musagraphs".
                compile=CompilePolicy(
                    inductor="torch_musa registers inductor's Triton code generation for musa (MUSATritonScheduling, "
                    "through the torch build it patches)", graphs_backend="musagraphs",
                    tf32="TF32 is CUDA's; torch_musa's own switch (torch.backends.mudnn.allow_tf32) is not set"),
                # torch_musa/__init__.py's names (torch.musa is the torch_musa module itself): no init,
                # memory_cached or max_memory_cached there.
                cuda_api=frozenset(tuple(n for n in _COMMON if n not in ("init", "memory_cached", "max_memory_cached"))
                                   + ("can_device_access_peer", "get_device_capability", "is_current_stream_capturing",
                                      "memory_snapshot", "get_allocator_backend", "_lazy_init", "_is_in_bad_fork")),
                graphs=MappingProxyType({"CUDAGraph": "MUSAGraph", "is_current_stream_capturing":
                                         "is_current_stream_capturing", **{n: n for n in _GRAPHS}}),
                own_capability="torch_musa's own torch.musa.get_device_capability() is Moore Threads' numbering "
                "(bf16 from 2.2: torch_musa/core/device.py is_bf16_supported), not CUDA's",
                custom_kernels="MUSA C++ kernels built with torch_musa's MUSAExtension (torch_musa.utils."
                "musa_extension) against the MUSA toolkit",
                migration_shims=MappingProxyType({"torchada": "remove `import torchada`"}),
                # ProcessGroupMCCL.h reads TORCH_MCCL_* (and MCCL_BLOCKING_WAIT, MCCL_ASYNC_ERROR_HANDLING,
                # MCCL_DESYNC_DEBUG, MCCL_ENABLE_TIMING); MUSA_LAUNCH_BLOCKING: torch_musa's quick start.
                env=_env(
                    CUDA_LAUNCH_BLOCKING=EnvRename("MUSA_LAUNCH_BLOCKING"),
                    NCCL_SOCKET_IFNAME=EnvRename(
                        "MCCL_SOCKET_IFNAME", note="passed as written: mccl is NCCL-derived, NCCL's syntax assumed; "
                        "the name is from RLinf's MUSA accelerator manager, not Moore Threads' documentation "
                        "(unverified, see tests/vendors/README.md)"),
                    **{f"TORCH_NCCL_{n}": EnvRename(f"TORCH_MCCL_{n}") for n in (
                        "ASYNC_ERROR_HANDLING", "AVOID_RECORD_STREAMS", "BLOCKING_WAIT", "COORD_CHECK_MILSEC",
                        "DEBUG_INFO_PIPE_FILE", "DEBUG_INFO_TEMP_FILE", "DESYNC_DEBUG", "DUMP_ON_TIMEOUT",
                        "ENABLE_MONITORING", "ENABLE_TIMING", "HEARTBEAT_TIMEOUT_SEC", "HIGH_PRIORITY",
                        "LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "NAN_CHECK", "PROPAGATE_ERROR", "RANKS_PER_ROOT",
                        "TRACE_BUFFER_SIZE", "TRACE_CPP_STACK", "WAIT_TIMEOUT_DUMP_MILSEC")},
                    TORCH_NCCL_RETHROW_CUDA_ERRORS=EnvRename("TORCH_MCCL_RETHROW_MUSA_ERRORS"),
                    TORCH_NCCL_CUDA_EVENT_CACHE=EnvRename("TORCH_MCCL_MUSA_EVENT_CACHE"),
                    **{f"NCCL_{n}": EnvRename(f"MCCL_{n}") for n in (
                        "ASYNC_ERROR_HANDLING", "BLOCKING_WAIT", "DESYNC_DEBUG", "ENABLE_TIMING")},
                ),
            ),
            # Biren. Facts read in BIRENSUPA/torch-supa (github, torch_supa 2026) and DeepSpeed 0.19.8's
            # accelerator/supa_accelerator.py (device supa, backend bccl, SUPA_VISIBLE_DEVICES).
            Profile(
                name="supa",
                vendor="Biren",
                package="torch_supa",
                install_hint="install torch_supa from Biren's BIRENSUPA release (not on PyPI; each build requires the "
                "torch it was made for, and Biren's driver and SUPA runtime under /usr/local/birensupa)",
                device_type="supa",
                # torch_supa/distributed/distributed_c10d.py: register_backend("bccl", create_fn, extended_api=True,
                # devices=["supa"]), the creator returning ProcessGroupBCCL (ProcessGroupNCCL's port).
                backend="bccl",
                visible_devices_env="SUPA_VISIBLE_DEVICES",
                # torch_supa/_inductor/__init__.py: register_backend_for_device('supa', CUDACombinedScheduling,
                # SUPAWrapperCodeGen, ...) with its Triton; no dynamo backend of its own was found.
                compile=CompilePolicy(
                    inductor="torch_supa registers inductor's Triton code generation for supa (CUDACombinedScheduling "
                    "with its SUPAWrapperCodeGen, torch_supa/_inductor)",
                    tf32="TF32 is CUDA's; torch_supa's transfer_to_supa maps torch.backends.cuda to torch.backends.supa, "
                    "transfer leaves it unset"),
                # torch_supa/supa/__init__.py __all__: no device_of; get_device_capability is imported there but its
                # numbering is not documented (not listed).
                cuda_api=frozenset(tuple(n for n in _COMMON if n != "device_of")
                                   + ("can_device_access_peer", "is_current_stream_capturing", "memory_snapshot",
                                      "get_allocator_backend", "_lazy_init", "_is_in_bad_fork")),
                graphs=MappingProxyType({"CUDAGraph": "SUPAGraph", "is_current_stream_capturing":
                                         "is_current_stream_capturing", **{n: n for n in _GRAPHS}}),
                own_capability="what torch_supa's torch.supa.get_device_capability() answers is not documented",
                deepspeed_accelerator=True,
                custom_kernels="SUPA C++ kernels (.su sources) built with torch_supa's cpp_extension against Biren's "
                "SUPA SDK",
                # torch_supa's torch.backends entry point (_autoload) imports transfer_to_supa at every `import torch`.
                migration_shims=MappingProxyType({
                    "torch_supa.contrib.transfer_to_supa": "set TORCH_DEVICE_BACKEND_AUTOLOAD=0 (torch_supa's "
                    "torch.backends entry point imports transfer_to_supa at every `import torch`; transfer then imports "
                    "torch_supa itself), or remove `from torch_supa.contrib import transfer_to_supa`"}),
                # ProcessGroupBCCL.hpp reads BCCL_* and, after them, torch's own TORCH_NCCL_* names (and the old
                # NCCL_BLOCKING_WAIT, NCCL_ASYNC_ERROR_HANDLING, NCCL_DESYNC_DEBUG, NCCL_ENABLE_TIMING) as they are.
                env=_env(
                    NCCL_SOCKET_IFNAME=EnvRename(
                        "BCCL_SOCKET_IFNAME", note="passed as written: bccl is NCCL-derived, NCCL's syntax assumed; "
                        "the name is from third-party Ray integrations, not Biren's documentation (unverified, see "
                        "tests/vendors/README.md)"),
                    **{name: EnvRename(None, note="ProcessGroupBCCL reads it as it is (after BCCL_*)") for name in (
                        *(f"TORCH_NCCL_{n}" for n in (
                            "ASYNC_ERROR_HANDLING", "AVOID_RECORD_STREAMS", "BCAST_UNIQUEID", "BLOCKING_WAIT",
                            "COORD_CHECK_MILSEC", "CUDA_EVENT_CACHE", "DEBUG_INFO_PIPE_FILE", "DESYNC_DEBUG",
                            "DUMP_ON_TIMEOUT", "ENABLE_MONITORING", "ENABLE_TIMING", "HEARTBEAT_TIMEOUT_SEC",
                            "HIGH_PRIORITY", "LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "NAN_CHECK",
                            "RETHROW_CUDA_ERRORS", "TRACE_BUFFER_SIZE", "USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
                            "WAIT_TIMEOUT_DUMP_MILSEC")),
                        "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_DESYNC_DEBUG", "NCCL_ENABLE_TIMING")},
                ),
            ),
            # Intel GPUs: torch's own xpu device (torch >= 2.4; xccl in torch from 2.8). Facts read in torch 2.13 and
            # 2.15 (torch/xpu/__init__.py, torch/distributed/distributed_c10d.py), intel/torch-xpu-ops
            # (ProcessGroupXCCL.hpp) and DeepSpeed 0.19.8's accelerator/xpu_accelerator.py (ZE_AFFINITY_MASK).
            Profile(
                name="xpu",
                vendor="Intel",
                package=None,  # built into torch: present where torch.xpu reports devices
                install_hint="install a torch built for Intel GPUs: pip install torch --index-url "
                "https://download.pytorch.org/whl/xpu (and Intel's GPU driver on the host)",
                device_type="xpu",
                backend="xccl",
                visible_devices_env="ZE_AFFINITY_MASK",
                dispatch_key="XPU",
                # torch registers inductor's Triton code generation for xpu itself (Intel's Triton: pytorch-triton-xpu).
                compile=CompilePolicy(
                    inductor="torch's inductor generates Triton code for xpu (Intel's Triton, pytorch-triton-xpu, "
                    "installed with torch's XPU wheels)",
                    tf32="TF32 is CUDA's; what xpu does with torch's float32 matmul precision is not checked here"),
                # torch 2.13's torch.xpu.__all__ (2.15 adds list_gpu_processes, which needs Intel's pyzes: transfer
                # forwards it where torch has it) with torch.cuda's names: no memory_cached /
                # max_memory_cached, reset_max_memory_*, memory_summary or get_allocator_backend; it has
                # get_device_capability, which returns a dict (own_capability, below).
                cuda_api=frozenset(tuple(n for n in _COMMON if n not in (
                    "memory_cached", "max_memory_cached", "reset_max_memory_allocated", "reset_max_memory_cached",
                    "memory_summary")) + ("can_device_access_peer", "get_device_capability",
                                          "is_current_stream_capturing", "memory_snapshot",
                                          "_lazy_init", "_is_in_bad_fork", "MemPool", "use_mem_pool",
                                          "change_current_allocator", "get_arch_list", "get_gencode_flags",
                                          "get_per_process_memory_fraction", "set_per_process_memory_fraction",
                                          "get_stream_from_external", "is_tf32_supported", "memory_usage",
                                          "utilization", "temperature", "power_draw", "clock_rate",
                                          "device_memory_used")),
                graphs=MappingProxyType({"CUDAGraph": "XPUGraph", "is_current_stream_capturing":
                                         "is_current_stream_capturing", **{n: n for n in _GRAPHS}}),
                own_capability="torch.xpu.get_device_capability() returns a dict of the device's properties, not "
                "CUDA's (major, minor)",
                deepspeed_accelerator=True,
                custom_kernels="SYCL kernels built with torch.utils.cpp_extension.SyclExtension (torch >= 2.7) and "
                "Intel's oneAPI DPC++ compiler",
                # ProcessGroupXCCL.hpp: TORCH_XCCL_BLOCKING_WAIT (and the old XCCL_BLOCKING_WAIT); oneCCL's own
                # CCL_* variables have no NCCL counterpart known here.
                env=_env(
                    TORCH_NCCL_BLOCKING_WAIT=EnvRename("TORCH_XCCL_BLOCKING_WAIT"),
                    NCCL_BLOCKING_WAIT=EnvRename("TORCH_XCCL_BLOCKING_WAIT"),
                ),
            ),
            Profile(
                name="cpu",
                vendor="any CPU",
                package=None,
                install_hint="",
                device_type="cpu",
                backend="gloo",
                dispatch_key="CPU",
                compile=CompilePolicy(
                    inductor="inductor generates C++ for CPU tensors",
                    tf32="float32 matmul precision 'high' / 'medium' selects oneDNN's TF32 / BF16 matmuls on the "
                    "CPU, as on CUDA; allow_tf32 = True sets 'high'"),
                visible_devices_env=None,
                cuda_api=frozenset(
                    _DEVICE + _STREAMS + _RNG + tuple(n for n in _MEMORY if n != "memory_stats_as_nested_dict")
                    + ("get_device_name", "get_device_properties", "is_bf16_supported", "get_device_capability",
                       "is_current_stream_capturing", "ipc_collect", "get_sync_debug_mode", "set_sync_debug_mode",
                       "is_tf32_supported", "set_per_process_memory_fraction")),
                placeholders=frozenset({"memory_allocated", "max_memory_allocated", "memory_reserved",
                                        "max_memory_reserved", "memory_cached", "max_memory_cached", "memory_stats",
                                        "memory_summary"}),
                custom_kernels="a C++ CPU implementation built with CppExtension / cpp_extension.load of the "
                ".cpp sources alone",
                env=_env(
                    # torch's gloo takes a comma-separated list of exact interface names, each of which
                    # must exist: NCCL's selection becomes the first interface of this host it selects.
                    NCCL_SOCKET_IFNAME=EnvRename(
                        "GLOO_SOCKET_IFNAME", interfaces=True, note="gloo takes exact interface names: NCCL's "
                        "selection ('eth', '=eth0', '^docker,lo') becomes the first interface of the host it selects"),
                    CUDA_LAUNCH_BLOCKING=EnvRename(None, note="the CPU runs every op synchronously"),
                    **{name: EnvRename(None, note="gloo raises in the waiting call when a collective fails or "
                                                  "times out (init_process_group's timeout)")
                       for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
                                    "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT")},
                ),
                notes="runs CUDA scripts on the CPU; collectives over gloo",
                # gloo reduces every dtype NCCL does, but its AVG is a SUM divided in place, which torch refuses
                # for integer tensors (seen on torch 2.13 and 2.15); NCCL sums and divides, truncating.
                collectives=CollectiveLimits(
                    reduce_dtypes=frozenset({"int8", "uint8", "int32", "int64", "float16", "float32", "bfloat16",
                                             "float64", "bool", "complex64", "complex128"}),
                    reduce_scatter_dtypes=frozenset({"int8", "uint8", "int32", "int64", "float16", "float32",
                                                     "bfloat16", "float64", "bool"}),
                    integer_avg=False,
                    source="torch's gloo backend: AVG is a SUM, then an in-place division"),
            ),
        )
    }
)

#: Values TRANSFER_DEVICE accepts besides the profile names.
AUTO, OFF = "auto", "off"
CHOICES = (AUTO, *PROFILES, OFF)
