"""The legacy CUDA tensor types (``torch.cuda.FloatTensor`` & co., ``Tensor.type()``,
``torch.set_default_tensor_type``) and, on the cpu target, torch._C's private CUDA entry points.

On CUDA each ``torch.cuda.<Scalar>Tensor`` is a ``torch.tensortype``: calling
it makes a tensor on the current CUDA device (``FloatTensor(2, 3)``: sizes,
uninitialized; ``IntTensor([0])``: data; ``FloatTensor()``: empty; a
``device=`` keyword picks the device), ``isinstance(x, torch.cuda.FloatTensor)``
is True for a float32 CUDA tensor, ``x.type()`` names ``'torch.cuda.FloatTensor'``
and ``x.type('torch.cuda.HalfTensor')`` converts onto the current device (the
tensor itself when it already is of that type), and
``torch.set_default_tensor_type(torch.cuda.FloatTensor)`` makes factories
create float32 CUDA tensors. On a build without CUDA every one of those raises
("type torch.cuda.FloatTensor not available"). Here:

* the ten classes become `_TensorType` instances of the same names and
  attributes (``dtype``, ``is_cuda``, ``is_sparse``, ``__module__`` ``torch.cuda``)
  that create on the target's current device and answer ``isinstance`` for
  tensors of that dtype on the target's device type;
* ``Tensor.type()`` names the target's tensors ``torch.cuda.*`` (on the cpu target
  every host tensor, as ``is_cuda`` answers True for them) and converts to a
  ``torch.cuda`` type (a string or a class) on the target; other types go to torch;
* ``torch.set_default_tensor_type`` with a ``torch.cuda`` floating type sets the
  default dtype and makes the target's device the default device (torch's
  ``set_default_device``); a host type afterwards undoes the device, as on CUDA.

On the cpu target, ``torch._C._cuda_setStream`` and the other private entry points torch's own CUDA
test harness calls (`transfer.cpu_runtime.PRIVATE_ENTRY_POINTS`) are installed on torch._C, which a
CPU build lacks; never ``_cuda_getDeviceCount``, whose presence tells torch it is a CUDA build.

``torch.cuda.DoubleTensor`` creates float64 where the target computes it (the
cpu target, the stand-ins); a vendor whose device has no float64 raises its own
error on the first such tensor.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..fastcalls import finish as _finish


#: The legacy types torch.cuda has, and their dtypes (torch's python_tensor.cpp).
TYPES = {
    "BoolTensor": torch.bool, "ByteTensor": torch.uint8, "CharTensor": torch.int8, "ShortTensor": torch.int16,
    "IntTensor": torch.int32, "LongTensor": torch.int64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "FloatTensor": torch.float32, "DoubleTensor": torch.float64,
}
_BY_DTYPE = {dtype: name for name, dtype in TYPES.items()}
_HOST_TYPES = {f"torch.{name}": dtype for name, dtype in TYPES.items()}
_CUDA_TYPES = {f"torch.cuda.{name}": dtype for name, dtype in TYPES.items()}


class _TensorTypeMeta(type):
    """The metaclass of `_TensorType`: calling a type constructs, ``isinstance`` checks dtype and device."""

    def __call__(cls, *args: Any, device: Any = None) -> torch.Tensor:
        return cls._construct(args, device)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype and obj.device.type == cls._device_type

    def __subclasscheck__(cls, subclass: Any) -> bool:
        return isinstance(subclass, type) and issubclass(subclass, _TensorType) and subclass.dtype == cls.dtype

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


class _TensorType(metaclass=_TensorTypeMeta):
    dtype: torch.dtype
    _device_type: str
    _device: Any  # (index or None) -> the target device
    is_cuda = True
    is_sparse = False

    @classmethod
    def _construct(cls, args: tuple, device: Any) -> torch.Tensor:
        target = cls._device(device)
        dtype = cls.dtype
        if not args:
            return torch.empty(0, dtype=dtype, device=target)
        if len(args) == 1 and isinstance(args[0], torch.Size):
            args = tuple(args[0])
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return torch.empty(args, dtype=dtype, device=target)
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            other = args[0]
            if not isinstance(other, cls):
                raise TypeError(f"expected {cls.__name__[:-len('Tensor')]} on the CUDA device (got "
                                f"{other.dtype} on {other.device}): torch.cuda.{cls.__name__}(tensor) "
                                f"aliases a tensor of its own type only; use tensor.to(...) to convert")
            return torch.ops.aten.alias(other)
        if len(args) == 1 and not isinstance(args[0], (str, bytes)):
            return torch.tensor(args[0], dtype=dtype, device=target)
        raise TypeError(f"torch.cuda.{cls.__name__}(): takes sizes (ints or a torch.Size), a sequence "
                        f"of data or a tensor, and a device= keyword; got {args!r}")


def _types(ctx) -> dict:
    device_type = ctx.profile.device_type
    translate = ctx.target.translate

    def device(spec: Any) -> torch.device:
        if spec is None:
            return ctx.target.device(None)
        result = translate(spec)
        if isinstance(result, torch.device) and result.type == device_type:
            return result
        raise RuntimeError(f"legacy constructor expects a CUDA device, but got: {spec!r}")

    return {name: _TensorTypeMeta(name, (_TensorType,), {
        "__module__": "torch.cuda", "__qualname__": name, "dtype": dtype,
        "_device_type": device_type, "_device": staticmethod(device)}) for name, dtype in TYPES.items()}


def apply(ctx) -> None:
    reg = ctx.registry
    types = _types(ctx)
    for name, cls in types.items():
        reg.replace(f"legacy_types.{name}", torch.cuda, name, cls)
    reg.replace("legacy_types.type", torch.Tensor, "type", _type(ctx, torch.Tensor.type))
    reg.replace("legacy_types.set_default_tensor_type", torch, "set_default_tensor_type",
                _set_default_tensor_type(ctx, torch.set_default_tensor_type))
    if ctx.cpu is not None:
        for name, impl in ctx.runtime.PRIVATE_ENTRY_POINTS.items():
            reg.replace(f"legacy_types._C.{name}", torch._C, name, impl)


def _cuda_dtype(spec: Any) -> Optional[torch.dtype]:
    """The dtype of a torch.cuda legacy type named by `spec` (a string or a class), else None."""
    if isinstance(spec, str):
        return _CUDA_TYPES.get(spec)
    if isinstance(spec, _TensorTypeMeta):
        return spec.dtype
    return None


def _type(ctx, native):
    """Tensor.type: the target's tensors are ``torch.cuda`` types; ``torch.cuda`` types convert onto the target."""
    device_type = ctx.profile.device_type
    on_host = ctx.cpu is not None

    def type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            if self.device.type != device_type:
                return native(self)
            name = _BY_DTYPE.get(self.dtype)
            if name is None:  # a dtype without a legacy type: torch's own answer
                return native(self)
            return f"torch.cuda.sparse.{name}" if self.is_sparse else f"torch.cuda.{name}"
        wanted = _cuda_dtype(dtype)
        if wanted is None:
            if isinstance(dtype, str) and dtype.startswith("torch.cuda."):
                raise ValueError(f"invalid type: {dtype!r}")  # torch's message for a name it does not know
            return native(self, dtype, non_blocking, **kwargs)
        non_blocking = kwargs.pop("async", non_blocking)  # torch's old spelling
        if self.dtype == wanted and self.device.type == device_type:
            return self
        if on_host:
            return self.to(dtype=wanted, non_blocking=non_blocking)
        return self.to(device=ctx.target.device(None), dtype=wanted, non_blocking=non_blocking)

    return _finish(type, native, "type")


def _set_default_tensor_type(ctx, native):
    """torch.set_default_tensor_type: a ``torch.cuda`` floating type -> its dtype and the target's default device."""
    device_type = ctx.profile.device_type
    set_device = getattr(torch, "set_default_device", None)
    state = {"device": False}  # a torch.cuda type set the default device

    def set_default_tensor_type(t):
        dtype = _cuda_dtype(t)
        if dtype is None:
            native(t)
            if state["device"] and set_device is not None:
                set_device(None)
                state["device"] = False
            return
        if not dtype.is_floating_point:
            raise TypeError("invalid type object: only floating-point types are supported as the default type")
        native(f"torch.{_BY_DTYPE[dtype]}")  # the dtype, and torch's deprecation warning as on CUDA
        if set_device is not None and device_type != "cpu":
            set_device(torch.device(device_type))
            state["device"] = True

    return _finish(set_default_tensor_type, native, "set_default_tensor_type")
