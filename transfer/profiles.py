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

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"


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
                deepspeed_accelerator=True,
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
                notes="builds from 2020-21 showed devices as xla:N",
            ),
            Profile(
                name="cpu",
                vendor="any CPU",
                package=None,
                install_hint="",
                device_type="cpu",
                backend="gloo",
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
            ),
        )
    }
)

#: Values TRANSFER_DEVICE accepts besides the profile names.
AUTO, OFF = "auto", "off"
CHOICES = (AUTO, *PROFILES, OFF)
