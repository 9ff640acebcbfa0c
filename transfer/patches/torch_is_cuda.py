"""torch's own ``x.is_cuda`` reads: the tensor's real answer where `patches/torch_sites.py` says so.

The tensor area makes ``Tensor.is_cuda`` the target's getter, so that a script's
``if x.is_cuda:`` takes its CUDA branch at the cost of a native read (~40 ns;
a Python property would cost ~5x). torch's own code reads it too; for the
functions `torch_sites.SITES` marks NATIVE (their CUDA branch would
treat host or vendor memory as CUDA memory, or run CUDA-only code) this area
renames the attribute their bytecode loads, ``is_cuda`` ->
``_transfer_native_is_cuda``, installed on torch.Tensor as torch's own C
getter. Only those code objects change (a nested function or generator
expression named in the qualname: just that one); nothing runs per call, and
every other read, the script's included, is untouched. Modules torch imports
lazily (inductor, dynamo) are patched when imported. Uninstall puts the
original code objects back. On the cpu target a site of `torch_sites.CPU_KERNEL_SITES`
is left as it is while the CPU has the kernel its CUDA branch runs.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..devices import TensorBase
from .torch_sites import CPU_KERNEL_SITES, NATIVE, NATIVE_NAME, SITES


def apply(ctx) -> None:
    reg = ctx.registry
    if reg.replace("torch_is_cuda.getter", torch.Tensor, NATIVE_NAME, TensorBase.__dict__["is_cuda"]) is None:
        return
    per_module: Dict[str, List[str]] = {}
    for (path, qualname), (decision, _reason) in SITES.items():
        if decision == NATIVE and not (ctx.cpu is not None and _cpu_has_kernel(CPU_KERNEL_SITES.get((path, qualname)))):
            per_module.setdefault(_module_name(path), []).append(qualname)
    for module, qualnames in per_module.items():
        reg.when_imported(f"torch_is_cuda.{module}", module,
                          lambda loaded, qualnames=qualnames: _rename_in(reg, loaded, qualnames))


def _cpu_has_kernel(operator: Optional[str]) -> bool:
    """The CPU has a kernel for `operator` (torch's own or transfer's, registered by an earlier area)."""
    return operator is not None and torch._C._dispatch_has_kernel_for_dispatch_key(operator, "CPU")


def _module_name(path: str) -> str:
    dotted = path[:-3].replace("/", ".")
    return "torch." + (dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted)


def _rename_in(reg, module: Any, qualnames: List[str]) -> None:
    for qualname in qualnames:
        found = _function(module, qualname)
        if found is None:
            continue  # another torch version: the site is elsewhere or gone (torch_sites.scan finds it)
        function, inner = found
        original = function.__code__
        renamed = _renamed(original, inner)
        if renamed is original:
            continue
        function.__code__ = renamed

        def undo(function=function, original=original, renamed=renamed) -> None:
            if function.__code__ is renamed:  # still ours
                function.__code__ = original

        reg.on_revert(f"torch_is_cuda.{module.__name__}.{qualname}", undo)


def _function(module: Any, qualname: str) -> Optional[Tuple[types.FunctionType, List[str]]]:
    """The outermost Python function on `qualname`'s path and the names of the code nested in it."""
    obj, parts = module, qualname.split(".")
    for i, part in enumerate(parts):
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return None
        if isinstance(obj, property):
            obj = obj.fget
        elif isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, types.FunctionType):
            function = _reading(obj)
            return (function, parts[i + 1:]) if function is not None else None
    return None


def _reading(function: Any) -> Optional[types.FunctionType]:
    """`function`, or the one its decorators wrap, whose code reads is_cuda."""
    seen = 0
    while isinstance(function, types.FunctionType) and seen < 8:
        if _reads(function.__code__):
            return function
        function, seen = getattr(function, "__wrapped__", None), seen + 1
    return None


def _reads(code: types.CodeType) -> bool:
    return "is_cuda" in code.co_names or any(_reads(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _renamed(code: types.CodeType, inner: List[str]) -> types.CodeType:
    """`code` with its is_cuda loads renamed: in the nested code objects named by `inner` only."""
    if not inner:
        return _rename_all(code)
    consts = tuple(_renamed(c, inner[1:]) if isinstance(c, types.CodeType) and c.co_name == inner[0] else c
                   for c in code.co_consts)
    return code if consts == code.co_consts else code.replace(co_consts=consts)


def _rename_all(code: types.CodeType) -> types.CodeType:
    consts = tuple(_rename_all(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    names = tuple(NATIVE_NAME if n == "is_cuda" else n for n in code.co_names)
    if names == code.co_names and consts == code.co_consts:
        return code
    return code.replace(co_names=names, co_consts=consts)
