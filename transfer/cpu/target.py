"""The cpu target: where it departs from a vendor target, in one place.

A vendor target has a device: transfer translates each CUDA argument to it and
the vendor's plug-in does the rest. The cpu target has none: host memory is
the virtual devices' memory, ``torch.cuda`` is answered by
`transfer.cpu.runtime`, torch's CPU kernels compute and gloo carries the
collectives. Patch areas get this module as ``ctx.cpu`` (None on a vendor
target) and ask it where the cpu target does something else; what it does is
implemented here, or, for an area that exists only for the cpu target, in that
area's module:

==============  ===========================================================  ==========================
area            on the cpu target                                            where
==============  ===========================================================  ==========================
cuda_namespace  the runtime reads ``'cuda:N'`` itself (virtual indices) and    patches/cuda_namespace.py,
                has CUDA's device properties; messages say "the cpu target"  `NAME`
tensor          a move naming CUDA copies (``.to``, ``.cuda``), as CUDA      ``copy_moves`` in
                copies host memory to the device; ``pin_memory()`` copies    patches/_calls.py,
                without pinning; ``is_cuda`` is ``is_cpu``;                  `pin_memory`,
                ``record_stream(torch.cuda stream)`` does nothing             `record_stream`
legacy_types    ``x.type()`` of a host tensor is ``'torch.cuda.FloatTensor'``  patches/legacy_types.py
                (as ``is_cuda`` is True); torch._C's private CUDA entry
                points (``_cuda_setStream``, ...) exist, answered here
module          Module.to keeps the CUDA device for Tensor.to, which copies  `module_to`
factories       ``as_tensor`` / ``asarray`` with a CUDA device copy; random  `copying_factory`,
                factories with one draw from the device's generator          patches/rng.py
rng             per-device generators for dropout and SDPA's dropout,        patches/rng.py (cpu only)
                activation checkpointing; a notice for other device draws
amp             CUDA's float16 autocast runs as bfloat16 (unless             patches/amp.py
                TRANSFER_CPU_AMP_DTYPE=float16); GradScaler's kernels on    (`cpu_amp_dtype`)
                torch < 2.3
optim           ``Adam/AdamW(fused=True)`` on torch < 2.4: CUDA's fused       patches/optim.py
                kernel for the CPU, and the constructors accept CPU params
data            ``DataLoader(pin_memory=True)``: nothing to pin for          `loader_kwargs`
ddp             no ``device_ids`` for a CPU module; SyncBatchNorm allowed    patches/ddp.py
distributed     one gloo backend for every device type; no ``device_id``    `backend`, `device_id`
sync_batchnorm  CPU kernels for the batch_norm_stats family, the forward    patches/sync_batchnorm.py
accelerator     ``torch.accelerator`` answers "none", as a CPU-only build;   patches/accelerator.py
                ``torch.device(N)`` is ``cuda:N`` as on a CUDA build
device_mesh     ``DeviceMesh('cuda')`` is torch's CPU mesh (gloo): FSDP2,    patches/device_mesh.py
                DTensor, tensor parallelism (vendors: the vendor's type)
fsdp            FSDP1's CUDA ``device_id`` is the CPU (torch's CPU FSDP);    patches/fsdp.py
                ``sync_module_states`` broadcasts host memory over gloo
==============  ===========================================================  ==========================
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch

from .. import fastcalls
from ..devices import DEVICE_SPEC_TYPES, TensorBase, parse_cuda
from ..fastcalls import finish


#: How messages name the target.
NAME = "the cpu target"

#: Factories that return their input (or share its memory) when it already is on the device.
SHARING = ("as_tensor", "asarray")


def pin_memory(native: Callable) -> Callable:
    """Tensor.pin_memory: a copy, as on CUDA, but not pinned (``is_pinned()`` is False).

    Pinned host memory only speeds up copies to an accelerator; there is none,
    and stock torch raises without one.
    """
    clone = TensorBase.clone

    def pin_memory(self, device=None):
        return clone(self)

    return finish(pin_memory, native, "pin_memory")


def record_stream(native: Callable) -> Callable:
    """Tensor.record_stream with a ``torch.cuda`` stream: nothing to do, as CUDA's caching allocator
    only holds the block until the stream's queued work is done, and the cpu target's work is done
    when it is queued. Any other stream goes to torch (which refuses a CUDA stream for a host tensor)."""
    from .runtime import Stream

    def record_stream(self, stream):
        if isinstance(stream, Stream):
            return None
        return native(self, stream)

    return finish(record_stream, native, "record_stream")


def module_to(ctx, original: Callable) -> Callable:
    """Module.to: the device stays a CUDA device for Tensor.to.

    Each tensor's ``t.to(device)`` then copies (patches/_calls.py,
    ``copy_moves``), as a host-to-device move does on CUDA: ``param.data``
    becomes a copy, the Parameter objects stay. The argument is still checked
    (a bad ordinal raises) and recorded; an int ordinal becomes
    ``torch.device('cuda', N)``, which torch's own argument parser accepts on
    every build.
    """
    translate = ctx.target.translator("Module.to")
    as_cuda: Dict[Any, Any] = {}  # argument -> what is passed on

    def cuda_form(spec):
        if type(spec) not in DEVICE_SPEC_TYPES:
            return spec
        device = as_cuda.get(spec)
        if device is None:
            translate(spec)  # checks the ordinal, records the translation
            parsed = parse_cuda(spec)
            if parsed is None:
                return spec  # not a CUDA device: 'cpu', 'meta', ...
            device = torch.device("cuda") if parsed[0] is None else torch.device("cuda", parsed[0])
            if len(as_cuda) < 512:
                as_cuda[spec] = device
        return device

    spec_types = DEVICE_SPEC_TYPES

    def to(self, *args, **kwargs):
        if args and type(args[0]) in spec_types:
            args = (cuda_form(args[0]),) + args[1:]
        if kwargs:
            if kwargs.get("device") is not None:
                kwargs["device"] = cuda_form(kwargs["device"])
            return original(self, *args, **kwargs)
        if len(args) == 1:  # model.to(torch.bfloat16), model.to('cuda'): a plain call (~100 ns on Python 3.8)
            return original(self, args[0])
        return original(self, *args)

    return finish(fastcalls.stand_in(fastcalls.METHOD, to, original, spec_types=spec_types), original, "to")


def copying_factory(translated: Callable, name: str) -> Callable:
    """``torch.as_tensor(x, device='cuda')`` / ``torch.asarray(x, device='cuda')`` copy, as on
    CUDA where the data (a host tensor, a NumPy array) is in host memory and the result in device
    memory. Without a CUDA device they share memory as natively. `translated` is the factories
    area's device-translating wrapper."""
    to, asarray = TensorBase.to, torch.asarray

    def factory(*args, **kwargs):
        device = kwargs.get("device") if kwargs else None
        if device is None or parse_cuda(device) is None:
            return translated(*args, **kwargs)
        if name == "asarray":
            if kwargs.get("copy") is None:
                kwargs["copy"] = True
            return translated(*args, **kwargs)
        data = args[0] if args else kwargs.get("data")
        if isinstance(data, (list, tuple, int, float, bool, complex)):
            return translated(*args, **kwargs)  # a new tensor already
        result = translated(*args, **kwargs)  # translates and checks the device
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
        if isinstance(data, torch.Tensor):  # as_tensor(t, dtype, device) is t.to(device, dtype)
            return to(data, result.device, dtype, False, True)
        return asarray(data, dtype=dtype, device=result.device, copy=True)  # NumPy and other array-likes

    return finish(factory, translated, name)


def loader_kwargs(kwargs: Dict[str, Any]) -> None:
    """DataLoader(pin_memory=True): nothing to pin for on the CPU, and stock torch warns on every
    loader; the flag (and a pin_memory_device) is dropped."""
    kwargs["pin_memory"] = False
    kwargs.pop("pin_memory_device", None)


def backend(pairs: list, target: str) -> str:
    """A 'device:backend,...' spelling on the cpu target: every device type is the CPU, so one
    backend name, or 'cpu:<target>' when the pairs named several."""
    names = {p.split(":", 1)[1] for p in pairs}
    if len(names) == 1:
        return names.pop()
    return f"cpu:{target}"


def device_id(translated: Any) -> Any:
    """init_process_group/new_group ``device_id``: torch rejects a cpu device there and gloo binds
    none, so a translated CUDA device is dropped."""
    if isinstance(translated, torch.device) and translated.type == "cpu":
        return None
    return translated
