"""How a replacement presents itself: names, docs, pickling, copying.

The contract: once `Registry.replace` installs ``owner.attribute =
replacement``, the replacement

* pickles by reference to ``owner.attribute`` (a C stand-in of fastcalls.py too): in a process without transfer the
  reference loads torch's original, in one with transfer the replacement;
  ``copy.copy``/``copy.deepcopy`` return it unchanged, as for any function;
* answers ``__name__``, ``__doc__`` and ``__wrapped__`` as the original does
  (``__wrapped__`` is the original's own, else the original, so
  ``inspect.signature`` reports the original's signature, or raises where the
  original has none), and ``__module__``/``__qualname__`` as the original does
  wherever the original's own reference names ``owner.attribute``;
* where the original's reference names another place (torch's C builtins say
  ``_VariableFunctionsClass.zeros``, ``TensorBase.to``; ``torch.cuda.Event``
  lives in ``torch.cuda.streams``), ``__module__``/``__qualname__`` name
  ``owner.attribute`` instead, because pickle finds a Python function or class
  by exactly these two names and the other place still holds the original.

Not covered, each for one reason: data descriptors (``Tensor.is_cuda`` is the
target's own ``is_cpu``/``is_<vendor>`` getter; a Python property would double
the cost of each read, and a getter never pickled natively), namespaces
standing for modules (``torch.cuda.nvtx``; modules never pickled) and
constants. Instances pickle as the native class's do; a vendor generator
pickles only if the vendor's does (the stand-ins' do not, natively either).

Nothing here runs per call: a function is renamed (or, when it belongs to a
vendor module or the cpu runtime, copied, which shares its code and closure),
a foreign class gets a same-behaving subclass, a wrapt wrapper is a subclass
that knows its path.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
from typing import Any, Optional, Tuple

import wrapt

from . import fastcalls

_NO_VALUE = object()


def resolve(module: Optional[str], qualname: Optional[str]) -> Any:
    """The object pickle would find for ``module.qualname``, or _NO_VALUE."""
    if not isinstance(module, str) or not isinstance(qualname, str):
        return _NO_VALUE
    try:
        return functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
    except Exception:  # any import or attribute failure: not a reference
        return _NO_VALUE


def installed_path(owner: Any, attribute: str) -> Optional[Tuple[str, str]]:
    """(module, qualname) naming ``owner.attribute``, or None when the owner has no reference."""
    if isinstance(owner, types.ModuleType):
        return owner.__name__, attribute
    if inspect.isclass(owner) and resolve(owner.__module__, owner.__qualname__) is owner:
        return owner.__module__, f"{owner.__qualname__}.{attribute}"
    return None


def present(owner: Any, attribute: str, original: Any, replacement: Any) -> Any:
    """The object to install: `replacement`, named and made picklable as above.

    Called before installing; `original` is _MISSING-like (anything without
    names) when the attribute did not exist.
    """
    path = installed_path(owner, attribute)
    if path is None:
        return replacement
    if isinstance(replacement, PathWrapper) or isinstance(replacement, types.ModuleType):
        return replacement
    if fastcalls.is_fast(replacement):  # a C stand-in for a closure: both named alike
        _name(fastcalls.python_of(replacement), path, original, owner)
        _name(replacement, path, original, owner)
        return replacement
    if isinstance(replacement, staticmethod) and isinstance(replacement.__func__, types.FunctionType):
        _name(replacement.__func__, path, original, owner)  # read through the class: the function itself
        return replacement
    if isinstance(replacement, types.FunctionType):
        if resolve(replacement.__module__, replacement.__qualname__) is replacement:
            replacement = copy_function(replacement)  # the cpu runtime's or a vendor's own function
        _name(replacement, path, original, owner)
        return replacement
    if inspect.isclass(replacement):
        if resolve(replacement.__module__, replacement.__qualname__) is replacement:
            replacement = alias_class(replacement, *path, doc=getattr(original, "__doc__", None))
        else:
            _name(replacement, path, original, owner, wrapped=False)
        return replacement
    if isinstance(owner, types.ModuleType) and isinstance(replacement, types.BuiltinFunctionType):
        return _function_over(replacement, path, original, owner)  # a C function of a vendor module
    return replacement  # data descriptors (Tensor.is_cuda), namespaces, constants


def _name(obj: Any, path: Tuple[str, str], original: Any, owner: Any, wrapped: bool = True) -> None:
    """Give `obj` the original's names where its reference fits, else `path`'s."""
    module, qualname = path
    own = getattr(original, "__module__", None), getattr(original, "__qualname__", None)
    if _fits(own, owner, qualname.rsplit(".", 1)[-1]):
        module, qualname = own
    obj.__module__, obj.__qualname__ = module, qualname
    name = getattr(original, "__name__", None)
    obj.__name__ = name if isinstance(name, str) else qualname.rsplit(".", 1)[-1]
    doc = getattr(original, "__doc__", None)
    if doc is not None:
        obj.__doc__ = doc
    if wrapped and callable(original):
        # torch 2.14's dynamo reads torch.cuda.use_mem_pool.__wrapped__ at import: every replacement has it.
        obj.__wrapped__ = getattr(original, "__wrapped__", original)


def _fits(own: Tuple[Any, Any], owner: Any, attribute: str) -> bool:
    """True when the reference ``own`` = (module, qualname) names ``owner.attribute``."""
    module, qualname = own
    if not isinstance(module, str) or not isinstance(qualname, str):
        return False
    parent, _, last = qualname.rpartition(".")
    if last != attribute:
        return False
    holder = resolve(module, parent) if parent else _module(module)
    return holder is owner


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:
        return _NO_VALUE


def copy_function(fn: types.FunctionType) -> types.FunctionType:
    """A second function object with the same code, globals, defaults and closure."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__dict__.update(fn.__dict__)
    copy.__annotations__ = dict(getattr(fn, "__annotations__", {}) or {})
    return copy


def _function_over(target: Any, path: Tuple[str, str], original: Any, owner: Any) -> types.FunctionType:
    def call(*args, **kwargs):
        return target(*args, **kwargs)

    _name(call, path, original, owner)
    return call


def alias_class(base: type, module: str, qualname: str, doc: Optional[str] = None, **attrs: Any) -> type:
    """A subclass of `base` referenced as ``module.qualname``, for which every
    instance of `base` is an instance and every subclass of `base` a subclass
    (``isinstance(torch.cuda.current_stream(), torch.cuda.Stream)`` stays True
    when the vendor's own function made the stream)."""
    meta = alias_meta(type(base))
    attrs.update(__module__=module, __qualname__=qualname, __doc__=doc if doc is not None else base.__doc__,
                 _transfer_alias_of=base)
    return meta(base.__name__, (base,), attrs)


@functools.lru_cache(maxsize=None)
def alias_meta(meta: type) -> type:
    """A subclass of metaclass `meta` whose classes answer isinstance/issubclass for the class in
    their ``_transfer_alias_of`` (a class without one answers as `meta` does)."""
    class AliasMeta(meta):
        def __instancecheck__(cls, instance):
            base = cls.__dict__.get("_transfer_alias_of")
            return isinstance(instance, base) if base is not None else meta.__instancecheck__(cls, instance)

        def __subclasscheck__(cls, subclass):
            base = cls.__dict__.get("_transfer_alias_of")
            return issubclass(subclass, base) if base is not None else meta.__subclasscheck__(cls, subclass)

    AliasMeta.__name__ = AliasMeta.__qualname__ = f"Alias{meta.__name__.capitalize()}"
    return AliasMeta


# --- wrapt wrappers (off the hot path) -------------------------------------

class _ModuleRef:
    """Pickles as ``importlib.import_module(name)``: only stdlib names reach the stream."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self):
        return importlib.import_module, (self.name,)


def _owner_ref(owner: Any) -> Any:
    return _ModuleRef(owner.__name__) if isinstance(owner, types.ModuleType) else owner


class _BoundPathWrapper(wrapt.BoundFunctionWrapper):
    def __reduce_ex__(self, protocol):
        parent = self._self_parent
        holder = self._self_instance if self._self_instance is not None else _owner_ref(parent._self_home_owner)
        return getattr, (holder, parent._self_home_attribute)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class PathWrapper(wrapt.FunctionWrapper):
    """A wrapt FunctionWrapper that pickles as ``getattr(<owner>, attribute)``.

    wrapt's own wrappers refuse to pickle (NotImplementedError); the owner is
    written as ``importlib.import_module('torch')`` or as its class, so the
    stream names only torch and the standard library. copy/deepcopy return the
    wrapper itself, as for a function.
    """

    __bound_function_wrapper__ = _BoundPathWrapper

    def __init__(self, wrapped: Any, wrapper: Any, owner: Any, attribute: str):
        super().__init__(wrapped, wrapper)
        self._self_home_owner = owner
        self._self_home_attribute = attribute

    def __reduce_ex__(self, protocol):
        return getattr, (_owner_ref(self._self_home_owner), self._self_home_attribute)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self
