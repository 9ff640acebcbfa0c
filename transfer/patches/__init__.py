"""The patch areas, one module each, applied in this order by `transfer.install`.

Every module exposes ``apply(ctx)``; it changes torch only through
``ctx.registry`` (which records the original and reverts it on uninstall) and
names each change ``"<area>.<item>"`` so TRANSFER_DISABLE can skip it.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable, Dict, List, Set

from ..cpu import target as cpu_target
from ..devices import Target
from ..errors import UnsupportedCudaAPI
from ..profiles import Profile
from ..registry import Registry

logger = logging.getLogger("transfer")

AREAS = (
    "environment",  # CUDA_VISIBLE_DEVICES / NCCL_* -> the vendor's variables
    "cuda_namespace",  # torch.cuda.* -> torch.<vendor>.* (or the cpu runtime)
    "graphs",  # torch.cuda.CUDAGraph / graph / make_graphed_callables -> the vendor's graphs, or op replay
    "accelerator",  # torch.accelerator on the cpu target: none, as on a CPU-only build
    "tensor",  # Tensor.to / .cuda / .new_* / .pin_memory / .is_cuda
    "dynamo",  # torch.compile answers x.is_cuda as eager does
    "optim",  # cpu target, torch < 2.4: fused Adam/AdamW CPU kernels (before torch_is_cuda, which asks for them)
    "torch_is_cuda",  # torch's own is_cuda reads that must see the real answer (patches/torch_sites.py)
    "module",  # nn.Module.to / .to_empty
    "share_memory",  # vendors: share_memory() leaves device tensors; they travel by the plug-in's IPC, or a clear error
    "rng",  # cpu target: device draws (dropout, device factories) off the CPU stream, as on CUDA
    "factories",  # torch.zeros(..., device='cuda') and every other factory
    "serialization",  # torch.load map_location and CUDA checkpoints
    "amp",  # torch.autocast / GradScaler device types
    "data",  # DataLoader pin_memory, torch.Generator, default device
    "cuda_libraries",  # ctypes.CDLL('libcudart.so') -> the CUDA runtime's answers for the target
    "legacy_types",  # torch.cuda.FloatTensor & co., Tensor.type(), set_default_tensor_type; cpu: torch._C._cuda_*
    "distributed",  # init_process_group / new_group: nccl -> vendor backend
    "collectives",  # what the vendor backend refuses and NCCL computes (hccl: float64 reductions), computed so
    "device_mesh",  # DeviceMesh("cuda") / init_device_mesh("cuda"): the target's device type (FSDP2, DTensor)
    "fsdp",  # cpu target: FullyShardedDataParallel(device_id=cuda ordinal) -> torch's CPU FSDP; sync_module_states over gloo
    "checkpoint",  # vendor targets: DCP's writer stages from the target's device type, not 'cuda'
    "ddp",  # DistributedDataParallel device validation
    "sync_batchnorm",  # SyncBatchNorm device check (and CPU kernels)
    "data_parallel",  # nn.DataParallel
    "custom_ops",  # torch.library kernels for CUDA keys -> the target's; CUDA C++ builds refused clearly
    "deepspeed",  # DeepSpeed: its vendor accelerator, else its CUDA one under the target's names; FusedAdam op served
    "mmengine",  # MMEngine's collectives on the target's device where it does not know the backend (tccl, eccl)
    "shutdown",  # clean interpreter exit after distributed jobs
    "torchscript",  # TorchScript maps the replacements to torch's builtins
    "vendor_ops",  # what the plug-in computes otherwise: CPU fallbacks counted and named, float64 casts named
    "copies",  # last, after TRANSFER_LOG: `from torch.cuda import X` bound before install -> the replacement
)

#: Areas `apply_all` leaves to its caller: transfer.install applies them with `apply_area` once
#: TRANSFER_LOG has wrapped the replacements.
DEFERRED = ("copies",)


class PatchContext:
    """What a patch area needs: the target, the registry, the device runtime."""

    def __init__(self, profile: Profile, registry: Registry, target: Target, runtime: Any, strict: bool = False):
        self.profile = profile
        self.registry = registry
        self.target = target
        self.runtime = runtime  # torch.<vendor> module, or transfer.cpu.runtime
        # The cpu target's departures from a vendor target (transfer/cpu/target.py), None on a vendor.
        self.cpu = cpu_target if profile.is_cpu else None
        self.strict = strict
        self.device_selected = False  # the script (or transfer) has chosen a device
        self.env_changes: Dict[str, Any] = {}
        # What runs otherwise than on CUDA, said once (banner) and listed by status(): {what: what instead}
        self.substitutions: Dict[str, str] = {}
        # patches/vendor_ops.py: the CPU fallbacks watched (None: none known for the target), the float64 casts
        self.fallbacks: Any = None
        self.float64: Any = None
        # Called with every DistributedDataParallel once built (patches/ddp.py calls them; collectives adds one)
        self.ddp_built: List[Callable[[Any], None]] = []
        self._warned: Set[str] = set()

    def warn_once(self, api: str, message: str) -> None:
        """Warn about `api` once per process; raise instead under TRANSFER_STRICT=1."""
        if self.strict:
            raise UnsupportedCudaAPI(f"{message} (TRANSFER_STRICT=1 makes this an error)")
        if api not in self._warned:
            self._warned.add(api)
            logger.warning("%s", message)


def torch_release() -> tuple:
    """The running torch's (major, minor): what a patch decides by (2.12.0a0 counts as 2.12)."""
    import torch

    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def apply_all(ctx: PatchContext) -> None:
    for area in AREAS:
        if area not in DEFERRED:
            apply_area(ctx, area)


def apply_area(ctx: PatchContext, area: str) -> None:
    if ctx.registry.enabled(area):
        importlib.import_module(f"{__name__}.{area}").apply(ctx)
