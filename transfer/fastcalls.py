"""The C hot frames of the call wrappers (transfer/_fastcalls.c), when built.

A Python wrapper (patches/_calls.py) pays for its frame on every call: ~1,000
instructions on Python 3.8 for the least wrapper there is, 1.11x of torch 2.0's
``x.to(torch.float16)`` on its own (docs/performance.md, "Per-call cost on each torch").
`stand_in` returns, for such a wrapper (its *twin*), a ``FastCall`` object
that answers the calls the twin's hot frame answers, in C:

* ``to`` (Tensor.to, a vendor's Module.to, ``torch.device`` as a context):
  the first argument is the last one that named
  no device (``x.to(torch.float16)``, ``t.to(None, dtype, non_blocking)``), or
  is the memo of the last device argument (``x.to('cuda')``, with
  ``non_blocking=`` too);
* ``factory``: no keyword, no ``device=``, a device that is no spec type, or
  one whose translation is cached (``torch.zeros(4, device='cuda')``);
* ``method`` (the cpu target's Module.to): no keyword and no device spec
  first (``model.to(torch.bfloat16)``);
* ``drawing`` (random factories, cpu target): no keyword (when the twin runs
  no check before such calls), or ``device=`` alone and the memo's;
* ``noargs`` (the cpu target's ``torch.cuda.current_device()``): a call without
  arguments calls `original` (a C getter) at once.

Every other call goes to the twin unchanged, so translation misses, reports
and errors stay the twin's. The memos are the twin's own closure cells: its
slow path writes them, the C frame reads them; nothing else is shared. Which
cells, by name, is declared beside the twins (`patches._calls.TWIN_CELLS`) and
passed to `stand_in`; each stand-in shows the cells it holds as
``__transfer_cells__`` (tests/test_twin_cells.py checks the two agree).

The object behaves as the twin does where users look (presentation.py's contract):
it binds as a method (``x.to``), carries ``__name__``, ``__qualname__``,
``__module__``, ``__doc__``, ``__wrapped__`` (set by `finish` and
`presentation.present`), pickles by reference, is returned by copy/deepcopy, and
torch.compile traces the twin in its place (patches/dynamo.py).

One abi3 build serves Python 3.8-3.12 (vectorcall on 3.9+, one argument
tuple per call on 3.8); the C source says which non-limited symbols it uses.
Instructions per call: docs/performance.md, "Per-call cost on each torch".

Absent (no compiler when installed, or a platform without the build) or
``TRANSFER_NO_FASTCALLS=1`` at install: `stand_in` returns the twin itself.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple

from . import settings

try:
    from . import _fastcalls
except ImportError:  # built without the extension: the Python wrappers
    _fastcalls = None

#: The type of the C stand-ins, or None when the extension is absent.
TYPE: Optional[type] = getattr(_fastcalls, "FastCall", None)
TO, TO_COPY, FACTORY, DRAWING, METHOD, NOARGS = "to", "to_copy", "factory", "drawing", "method", "noargs"


def enabled() -> bool:
    """True when the extension is built and TRANSFER_NO_FASTCALLS is off (read at each install)."""
    return _fastcalls is not None and not settings.flag("TRANSFER_NO_FASTCALLS")


def is_fast(obj: Any) -> bool:
    return TYPE is not None and type(obj) is TYPE


def python_of(obj: Any) -> Any:
    """The Python wrapper a C stand-in answers for; `obj` itself otherwise."""
    return obj.__transfer_python__ if is_fast(obj) else obj


def finish(wrapper: Callable, original: Callable, name: str) -> Callable:
    """Give `wrapper` (a twin or its C stand-in, and the twin behind it) `original`'s metadata,
    ``__name__`` `name` and ``__wrapped__`` `original`, so it reads as the function it replaces."""
    if is_fast(wrapper):  # the C stand-in and its Python twin answer alike
        finish(python_of(wrapper), original, name)
    try:
        functools.update_wrapper(wrapper, original)
    except (AttributeError, TypeError):
        pass
    wrapper.__name__ = name
    wrapper.__wrapped__ = original
    return wrapper


def _cell(function: Callable, name: str) -> Any:
    try:
        return function.__closure__[function.__code__.co_freevars.index(name)]
    except ValueError:
        raise ValueError(f"{function.__qualname__} has no free variable {name!r}: the C frame reads it "
                         "(patches/_calls.py TWIN_CELLS names each twin's cells)") from None


def stand_in(kind: str, twin: Callable, original: Callable, cache: Any = None, spec_types: Any = None,
             current: Any = None, flag: bool = False, cells: Tuple[str, ...] = ()) -> Callable:
    """A C stand-in for `twin` (a closure of patches/_calls.py), or `twin` when not `enabled`.

    `flag` is `to_signature` for TO, ``undirected is not None`` for DRAWING. `cells`: the names of
    the twin's free variables the C frame reads, (last, plain) for TO / TO_COPY, (last,) for
    DRAWING: declared beside the twins (`patches._calls.TWIN_CELLS`).
    """
    if not enabled():
        return twin
    if kind in (TO, TO_COPY):
        code = {TO: _fastcalls.TO, TO_COPY: _fastcalls.TO_COPY}[kind]
        last, plain = cells
        return _fastcalls.make(code, twin, original, _cell(twin, last), _cell(twin, plain), None, None,
                               None, flag)
    if kind == FACTORY:
        return _fastcalls.make(_fastcalls.FACTORY, twin, original, None, None, cache, spec_types, None, False)
    if kind == DRAWING:
        (last,) = cells
        return _fastcalls.make(_fastcalls.DRAWING, twin, original, _cell(twin, last), None, None, None,
                               current, flag)
    if kind == METHOD:
        return _fastcalls.make(_fastcalls.METHOD, twin, original, None, None, None, spec_types, None, False)
    if kind == NOARGS:
        return _fastcalls.make(_fastcalls.NOARGS, twin, original, None, None, None, None, None, False)
    raise ValueError(f"unknown kind {kind!r}")
