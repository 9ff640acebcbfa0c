"""``torch.cuda.*`` -> the target's device module.

Each public name of torch.cuda is pointed at the same name on
``torch.<vendor>`` (or `transfer.cpu.runtime`): the very same function object
where it takes no device argument, so ``torch.cuda.is_available()`` costs what
``torch.npu.is_available()`` costs. Functions and classes that take a device
get a thin layer translating ``'cuda:1'`` to the target's device. A name the
target lacks gets a defined behaviour: a harmless no-op with one warning, a
safe default for the CUDA-only helpers torch itself calls once
``is_available()`` is True, or a clear `UnsupportedCudaAPI` error on use.
"""

from __future__ import annotations

import inspect
import sys
import types
import warnings
from typing import Any, Callable, Optional

import torch

from .. import fastcalls, frames, support
from ..errors import UnsupportedCudaAPI
from ..selection import asking_for
from ..presentation import alias_class, copy_function

# Submodules and legacy typed-tensor classes are left as they are; torch.cuda.amp
# works through the torch.amp patches, nvtx is handled below.
_SKIP_SUFFIXES = ("Storage", "Tensor")
_SUBMODULES = {"amp", "nvtx", "memory", "random", "streams", "graphs", "jiterator", "sparse", "tunable",
               "profiler", "nccl", "cudart", "cudaStatus", "CudaError", "DeferredCudaCallError",
               "graph_annotations"}  # torch 2.15

# The support table decides: CUDA-only helpers torch calls on itself once
# torch.cuda.is_available() is True get a silent answer; names missing on the
# target but safe to skip get a no-op or placeholder value with one warning.
_INTERNAL_DEFAULTS = {name: (lambda v: lambda: v)(value) for name, value in support.INTERNAL_DEFAULTS.items()}
_HARMLESS = support.HARMLESS


def apply(ctx) -> None:
    cuda = torch.cuda
    target_name = f"torch.{ctx.profile.device_type}" if ctx.cpu is None else ctx.cpu.NAME
    names = [n for n in cuda.__all__ if n not in _SUBMODULES and not n.endswith(_SKIP_SUFFIXES)]
    names += [n for n in _INTERNAL_DEFAULTS if n not in names]
    placeholders = ctx.profile.placeholders
    for name in names:
        if name in support.GRAPH_NAMES and ctx.registry.enabled(f"graphs.{name}"):
            continue  # the graphs area (patches/graphs.py) installs these
        original = getattr(cuda, name, None)
        if inspect.isclass(original) and issubclass(original, BaseException):
            continue  # torch 2.0-2.x list OutOfMemoryError here: torch's own exception, or `except` breaks
        impl = getattr(ctx.runtime, name, None)
        if name == "get_device_capability":
            impl = _capability(ctx, original, impl, target_name, placeholder=name in placeholders)
        elif name == "get_device_properties" and impl is not None and ctx.cpu is None:  # the cpu runtime's are CUDA's
            impl = _cuda_style_properties(ctx, _translating(ctx, name, original, impl))
        elif impl is not None:
            impl = _translating(ctx, name, original, impl)
            if name == "current_device" and ctx.cpu is not None:
                impl = _c_getter(ctx, impl)
            if name in placeholders:
                impl = _warning(ctx, name, impl, f"torch.cuda.{name} has no real value on the cpu target; "
                                                  "it returns a placeholder")
        elif name in _INTERNAL_DEFAULTS:
            impl = _INTERNAL_DEFAULTS[name]
        elif name in _HARMLESS:
            impl = _noop(ctx, name, _HARMLESS[name], target_name)
        elif inspect.isclass(original):  # also what torch 2.14's dynamo needs: isinstance(v, torch.cuda.MemPool)
            impl = _unsupported_class(ctx, name, target_name)
        elif callable(original):
            impl = _unsupported(ctx, name, target_name)
        else:
            continue  # constants such as has_half stay as they are
        if name == "set_device":
            impl = _noting_selection(ctx, impl)
        if name in ("Event", "Stream") and inspect.isclass(impl):
            _register_stream_base(name, impl)
        ctx.registry.replace(f"cuda_namespace.{name}", cuda, name, impl)
    _patch_nvtx(ctx)
    _hide_cuda_toolkit(ctx)


def _hide_cuda_toolkit(ctx) -> None:
    """``torch.version.cuda`` is None on every target, whatever torch build runs.

    It names the CUDA toolkit torch was built with: None on a CPU build and on the builds vendor
    plug-ins sit on, ``'13.0'`` on pip's default (CUDA) torch. Code reads it to decide whether CUDA
    binaries may be built or loaded, and `UnsupportedCudaAPI` advises guarding a CUDA-only call
    with ``if torch.version.cuda:``; both hold only if it is None wherever the target is not CUDA,
    so a CUDA build answers as a CPU build does. Asked on every build (the name is valid in
    TRANSFER_DISABLE everywhere); replaced only where torch has a value; uninstall puts it back.
    """
    name = "cuda_namespace.version_cuda"
    if ctx.registry.enabled(name) and torch.version.cuda is not None:
        ctx.registry.replace(name, torch.version, "cuda", None)


def _register_stream_base(name: str, cls: type) -> None:
    """Make `cls` count as a subclass of torch._streambase's ABC for `name`, where torch has it."""
    try:
        import torch._streambase as streambase
    except ImportError:
        return
    base = getattr(streambase, f"_{name}Base", None)
    if isinstance(base, type) and hasattr(base, "register") and not issubclass(cls, base):
        # torch 2.4's dynamo (device_interface.py) asserts torch.cuda.Event/Stream subclass these ABCs.
        base.register(cls)


def _noting_selection(ctx, set_device: Callable) -> Callable:
    """set_device that remembers a device was chosen (for tccl's ordering rule)."""

    def noting(device):
        set_device(device)
        ctx.device_selected = True

    noting.__name__ = "set_device"
    noting.__wrapped__ = set_device
    return noting


def _device_position(original: Any) -> Optional[int]:
    """Index of a parameter called 'device' in `original`'s signature, if any.

    For a class, its ``__init__``'s, else its ``__new__``'s (``torch.cuda.Stream(device=None, priority=0)``
    and ``ExternalStream(stream_ptr, device=None)`` take their device in ``__new__``)."""
    targets = (original.__init__, original.__new__) if inspect.isclass(original) else (original,)
    for target in targets:
        try:
            params = list(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            continue
        if inspect.isclass(original) and params and params[0] in ("self", "cls"):
            params = params[1:]
        if "device" in params:
            return params.index("device")
    return None


def _c_getter(ctx, current_device: Callable) -> Callable:
    """The cpu runtime's current_device as a C stand-in (fastcalls.py) over its ContextVar's own getter:
    ``torch.cuda.current_device()`` costs one C call, not a Python frame; any argument goes
    to (a copy of) the Python function, which raises TypeError as torch's does."""
    return fastcalls.stand_in(fastcalls.NOARGS, copy_function(current_device), ctx.runtime.index_getter)


def _translating(ctx, name: str, original: Any, impl: Any) -> Any:
    """`impl` itself, or a layer over it translating its device argument."""
    if ctx.cpu is not None:
        return impl  # the cpu runtime reads 'cuda:N' itself: its virtual devices keep their index
    pos = _device_position(original) if original is not None else None
    if pos is None:
        return impl
    translate = ctx.target.translator(f"torch.cuda.{name}")
    if name in ("set_device", "device"):
        translate = _negative_selects_nothing(translate)

    if inspect.isclass(impl):
        # Keep it a class (isinstance, subclassing) whose constructor translates, in __new__ and __init__
        # alike: the vendors' Stream takes its device in __new__, as CUDA's does.
        def translated(args, kwargs):
            if len(args) > pos:
                args = args[:pos] + (translate(args[pos]),) + args[pos + 1:]
            elif "device" in kwargs:
                kwargs = dict(kwargs, device=translate(kwargs["device"]))
            return args, kwargs

        def __new__(cls, *args, **kwargs):
            args, kwargs = translated(args, kwargs)
            return impl.__new__(cls, *args, **kwargs)

        def __init__(self, *args, **kwargs):
            args, kwargs = translated(args, kwargs)
            impl.__init__(self, *args, **kwargs)

        # object's own __new__ / __init__ take no arguments: those stay the inherited ones
        attrs = {name: f for name, f in (("__new__", __new__), ("__init__", __init__))
                 if getattr(impl, name) is not getattr(object, name)}
        # alias_class: the vendor's own instances (torch.<vendor>.current_stream()) stay instances
        return alias_class(impl, impl.__module__, impl.__qualname__, **attrs)

    def with_device(*args, **kwargs):
        if len(args) > pos:
            args = args[:pos] + (translate(args[pos]),) + args[pos + 1:]
        elif "device" in kwargs:
            kwargs["device"] = translate(kwargs["device"])
        return impl(*args, **kwargs)

    with_device.__wrapped__ = impl
    return with_device


def _negative_selects_nothing(translate: Callable) -> Callable:
    """CUDA's set_device(-1) and device(-1) do nothing (torch.cuda._get_device_index)."""
    def keep_negative(spec):
        return spec if type(spec) is int and spec < 0 else translate(spec)

    return keep_negative


def _called_by_torch() -> bool:
    """True when the caller of the patched function is torch's own code (`frames.called_by_torch`)."""
    return frames.called_by_torch(sys._getframe(2))


def _warning(ctx, name: str, impl: Callable, message: str) -> Callable:
    def warned(*args, **kwargs):
        if not _called_by_torch():  # torch asking for itself is not the user's call to warn about
            ctx.warn_once(name, message)
        return impl(*args, **kwargs)

    warned.__name__ = name
    warned.__wrapped__ = impl
    return warned


def _capability(ctx, original: Any, impl: Any, target_name: str, placeholder: bool) -> Callable:
    """torch.cuda.get_device_capability: always a CUDA-style (major, minor) tuple.

    The policy (`support.capability_policy`, docs/features.md, "Capability checks"): the
    target's own answer where it is a CUDA-style value chosen for this purpose
    (torch_npu with TORCH_NPU_DEVICE_CAPABILITY set), else the CUDA-equivalent
    of what the hardware computes: (8, 0) where bf16 is supported (Ascend 910B,
    the cpu target), (7, 0) where it is not (Ascend 910A: fp16 only). So
    ``get_device_capability() >= (8, 0)`` picks bf16 exactly where the device
    has it and never raises; ``>= (9, 0)`` gates (fp8, FA3) stay closed.
    torch calls it on itself for every tensor whose ``is_cuda`` is True
    (``dist.broadcast`` checks ``[0] >= 9`` for its fp8 path): silent for torch,
    one notice for the user's first call when the answer is derived.
    """
    native = None if impl is None else _translating(ctx, "get_device_capability", original, impl)
    native_is_cuda_style = ctx.profile.native_capability_env is not None
    check = ctx.target.translator("torch.cuda.get_device_capability")

    def value_of(device=None):
        """(capability, derived?) without any notice."""
        if native is None or placeholder or not native_is_cuda_style:
            if device is not None:
                check(device)  # a bad ordinal raises as on CUDA
            value = None
        else:
            with warnings.catch_warnings():  # torch_npu warns on every call that its value is not real
                warnings.simplefilter("ignore")
                value = native(device)  # None unless its variable is set
        if value is None:
            return cuda_equivalent_capability(ctx), True
        return tuple(value), False

    def get_device_capability(device=None):
        value, derived = value_of(device)
        if derived and not _called_by_torch():
            ctx.warn_once("get_device_capability", support.capability_notice(ctx.profile.name, value))
        return value

    ctx.capability_of = lambda: value_of()[0]
    get_device_capability.__wrapped__ = impl
    return get_device_capability


def cuda_equivalent_capability(ctx) -> tuple:
    """(8, 0) where the target computes in bf16, else (7, 0); asked once per process."""
    cached = getattr(ctx, "_capability", None)
    if cached is None:
        cached = ctx._capability = (8, 0) if target_has_bf16(ctx) else (7, 0)
    return cached


def target_has_bf16(ctx) -> bool:
    """The target's own ``is_bf16_supported()`` (torch_npu asks the SoC); False where it has none."""
    ask = getattr(ctx.runtime, "is_bf16_supported", None)
    if ask is None:
        return False
    try:
        return bool(ask())
    except Exception:  # a vendor that cannot answer yet: no bf16 claim
        return False


class CudaStyleProperties:
    """A vendor's device-properties object, answering the CUDA fields it lacks too.

    torch reads CUDA fields from ``torch.cuda.get_device_properties()`` once
    ``is_available()`` is True: inductor's cache key reads ``gcnArchName``
    whenever ``torch.version.cuda`` is None, which torch_npu's properties lack
    (an AttributeError inside torch.compile). Missing fields get the cpu
    runtime's neutral defaults; ``gcnArchName`` gets the device name.
    """

    __slots__ = ("_vendor", "_capability")

    def __init__(self, vendor: Any, capability: tuple):
        object.__setattr__(self, "_vendor", vendor)
        object.__setattr__(self, "_capability", capability)

    def __getattr__(self, name: str) -> Any:
        if name in ("major", "minor"):  # CUDA's invariant: (props.major, props.minor) == get_device_capability()
            return self._capability[name == "minor"]
        try:
            return getattr(self._vendor, name)
        except AttributeError:
            from ..cpu.runtime import DeviceProperties

            if name == "gcnArchName":
                return str(getattr(self._vendor, "name", ""))
            if name in DeviceProperties._field_defaults:
                return DeviceProperties._field_defaults[name]
            raise

    def __repr__(self) -> str:
        return repr(self._vendor)


def _cuda_style_properties(ctx, get_device_properties: Callable) -> Callable:
    def cuda_style(*args, **kwargs):
        capability = getattr(ctx, "capability_of", lambda: cuda_equivalent_capability(ctx))()
        return CudaStyleProperties(get_device_properties(*args, **kwargs), capability)

    cuda_style.__name__ = "get_device_properties"
    cuda_style.__wrapped__ = get_device_properties
    return cuda_style


def _noop(ctx, name: str, value: Any, target_name: str) -> Callable:
    message = f"torch.cuda.{name} is not available on {target_name}; the call does nothing"

    def noop(*args, **kwargs):
        ctx.warn_once(name, message)
        return value.copy() if isinstance(value, dict) else value

    noop.__name__ = name
    return noop


def _unsupported_message(ctx, name: str, target_name: str) -> str:
    package = ctx.profile.package or "torch"
    return (f"torch.cuda.{name} is not supported on {target_name}: {package} has no "
            f"equivalent. Remove the call, or guard it with `if torch.version.cuda:` (None under transfer, "
            f"as on a CPU build of torch); "
            f"{asking_for('off')} runs the script without translation.")


def _unsupported(ctx, name: str, target_name: str) -> Callable:
    message = _unsupported_message(ctx, name, target_name)

    def unsupported(*args, **kwargs):
        raise UnsupportedCudaAPI(message)

    unsupported.__name__ = name
    return unsupported


def _unsupported_class(ctx, name: str, target_name: str) -> type:
    """A class standing for a CUDA class the target lacks (MemPool, ExternalStream, ...).

    It stays a class, so code that only names it works: ``torch.cuda.MemPool | None``
    annotations evaluated at import (transformers), subclasses, ``isinstance`` checks
    (always False: no instance exists). Constructing it, or a subclass, raises
    `UnsupportedCudaAPI`.
    """
    message = _unsupported_message(ctx, name, target_name)

    def __new__(cls, *args, **kwargs):
        raise UnsupportedCudaAPI(message)

    return type(name, (), {"__new__": __new__, "__module__": "torch.cuda", "__qualname__": name,
                           "__doc__": message})


def _patch_nvtx(ctx) -> None:
    native = getattr(ctx.runtime, "nvtx", None)
    if native is None:
        native = types.SimpleNamespace()
        message = "torch.cuda.nvtx ranges are not recorded on this target; the calls do nothing"

        def marker(*args, **kwargs):
            ctx.warn_once("nvtx", message)
            return 0

        class _Range:
            def __init__(self, *args, **kwargs):
                ctx.warn_once("nvtx", message)

            def __enter__(self):
                return None

            def __exit__(self, *exc):
                return False

            def __call__(self, fn):
                return fn

        for fn in ("range_push", "range_pop", "range_start", "range_end", "mark"):
            setattr(native, fn, marker)
        native.range = _Range
    ctx.registry.replace("cuda_namespace.nvtx", torch.cuda, "nvtx", native)
