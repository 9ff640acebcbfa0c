"""npu memory between processes, as torch_npu has it for each torch: ``share_memory`` and npu IPC.

Read in the torch_npu wheels on PyPI (``pip download --no-deps torch_npu==<v>``, unzipped):
``torch_npu/utils/unsupport_api.py`` with ``npu_intercept.py`` (``_add_intercept_methods``), and
``torch_npu/multiprocessing/reductions.py`` (``_add_reductions_methods``, called at import):

=====================  ===========================================  ==========================
torch_npu (its torch)  refused for npu (RuntimeError, below)        npu tensors to a process
=====================  ===========================================  ==========================
2.1.0.post17           ``Module.share_memory``                      IPC (``_share_npu_``)
2.3.1 - 2.6.0          ``Module.share_memory``,                     none: torch's CPU path raises
                       ``Tensor.share_memory_``, ``Tensor.is_shared``  "_share_fd_: only available on CPU"
2.7.1 - 2.12.0         ``Module.share_memory``                      IPC
2.13.0, 2.14.0         nothing (master dropped the interception      IPC
                       on 2026-08-13, commit 0a0f799ed)
=====================  ===========================================  ==========================

A refused call raises ``RuntimeError(f"{str(func)} is not supported in npu." + pta_error(ErrCode.NOT_SUPPORT))``
when its tensor is on npu (``Module.share_memory``: any parameter on npu). torch 2.2 has no torch_npu; it
gets 2.1's behaviour here, torch >= 2.15 the 2.14 wheel's.

IPC as torch_npu's reductions do it (``reduce_tensor``/``reduce_storage`` in torch.multiprocessing.reductions,
then ``init_reductions()``): an npu tensor pickled for another process (``mp.Process`` arguments, queues)
travels as a handle to its device memory, and the receiving process maps that memory: both see every write,
as with CUDA IPC. Here the memory is a shared-memory segment (``_sim_accel`` ipc.cpp); the sender must keep
the tensor alive until the receiver has it, as with CUDA. An npu storage pickled alone raises torch_npu's
"Cannot pickle NPU storage; try pickling a NPU tensor instead". IPC events (``Event.ipc_handle``) are not
modelled.
"""

from __future__ import annotations

import functools
import threading

import torch
import torch.multiprocessing.reductions as _reductions

from . import _ascend

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def refused() -> dict:
    """The torch_npu interception for this torch: {owner: [method names]} refused for npu."""
    if TORCH >= (2, 13):
        return {}
    if (2, 3) <= TORCH < (2, 7):
        return {torch.nn.Module: ["share_memory"], torch.Tensor: ["is_shared", "share_memory_"]}
    return {torch.nn.Module: ["share_memory"]}


def has_ipc() -> bool:
    """Whether this torch's torch_npu registers npu IPC reductions."""
    return not (2, 3) <= TORCH < (2, 7)


def _on_npu(*args, **kwargs) -> bool:
    """torch_npu's _is_tensor_npu_supported / _is_module_parameters_supported: the call's tensor is on npu."""
    first = args[0]
    if isinstance(first, torch.nn.Module):
        return any(p.device is not None and p.device.type == "npu" for _, p in first.named_parameters())
    return torch.is_tensor(first) and first.device.type == "npu"


def _refusing(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if _on_npu(*args, **kwargs):
            raise RuntimeError(f"{str(func)} is not supported in npu." + _ascend._pta_error(7, "feature not supported"))
        return func(*args, **kwargs)

    return wrapper


# ------------------------------------------------------------------ IPC

_C = None
_lock = threading.Lock()
_torch_reduce_tensor = _reductions.reduce_tensor
_torch_reduce_storage = _reductions.reduce_storage


def rebuild_npu_tensor(tensor_cls, size, stride, offset, dtype, device, handle, nbytes, requires_grad):
    """The receiving side: the sender's npu memory mapped here (once per segment), viewed as the tensor."""
    with _lock:  # one mapping per segment in a process, cached as torch_npu caches it (torch's shared_cache)
        storage = _reductions.storage_from_cache(torch.UntypedStorage, handle)
        if storage is None:
            storage = _C.open_device_storage(handle, nbytes, device).untyped_storage()
            _reductions.shared_cache[handle] = _reductions.StorageWeakRef(storage)
    t = torch.empty(0, dtype=dtype, device=torch.device("npu", device))
    t.set_(storage, offset, size, stride)
    if tensor_cls == torch.nn.parameter.Parameter:
        return torch.nn.parameter.Parameter(t, requires_grad=requires_grad)
    t.requires_grad = requires_grad
    return t


def _npu_reduce_tensor(tensor):
    if tensor.device.type != "npu":
        return _torch_reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, "
            "since autograd does not support crossing process boundaries.  "
            "If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue).")
    torch.utils.hooks.warn_if_has_hooks(tensor)
    handle = _C.share_device_storage(tensor)
    return (rebuild_npu_tensor, (type(tensor), tuple(tensor.size()), tuple(tensor.stride()), tensor.storage_offset(),
                                 tensor.dtype, tensor.device.index, handle, tensor.untyped_storage().nbytes(),
                                 tensor.requires_grad))


def _npu_reduce_storage(storage):
    if storage.device.type == "npu":
        raise RuntimeError("Cannot pickle NPU storage; try pickling a NPU tensor instead")
    return _torch_reduce_storage(storage)


def install() -> None:
    """Apply this torch's torch_npu behaviour (module docstring)."""
    global _C
    for owner, names in refused().items():
        for name in names:
            setattr(owner, name, _refusing(getattr(owner, name)))
    if has_ipc():
        from _sim_accel import _build

        _C = _build.load_extension()
        _reductions.reduce_tensor = _npu_reduce_tensor
        _reductions.reduce_storage = _npu_reduce_storage
        _reductions.init_reductions()
