"""Hot-path wrappers that translate a device argument, shared by the areas.

These are plain closures, not wrapt.FunctionWrapper: a FunctionWrapper costs
~450 ns a call against ~80 ns for a closure (timeit, measured on a 2-core x86 build machine), fails to pickle, and is
opaque to torch.compile, which traces straight through a closure. Calls with
no device argument pay one type test and one ``if kwargs``.

Where the C extension is built (transfer/fastcalls.py), each wrapper returned
here is a C stand-in for the closure: it answers the hot frame's cases in C and
hands every other call to the closure, which stays the one definition of what
the wrapper does.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .. import fastcalls
from ..fastcalls import finish
from ..devices import DEVICE_SPEC_TYPES

_MISS = object()
#: Types of a first argument that names no device: ``x.to(torch.float16)`` (AMP casts) and
#: ``t.to(None, dtype, non_blocking)`` (Module._apply, for every parameter).
_NO_DEVICE_TYPES = frozenset({torch.dtype, type(None)})
_NO_ARG = NO_ARG = object()  # no positional argument given (`first` of a call without one)
NOTHING_SEEN = (object(), None)  # an initial memo no argument can match

#: The contract with the C frames (transfer/_fastcalls.c): the free variables of each twin below
#: that its C stand-in reads, by kind, in the order `fastcalls.stand_in` takes them. The twin's
#: slow path writes them, the C frame reads them: ``last`` is the memo of the last device argument,
#: ``(argument, translation)`` (`device_first`), ``(argument, translation, moved)`` (`_copying_to`),
#: ``(device argument, translation, generator)`` (`device_keyword`'s drawing); ``plain`` the last
#: first argument naming no device. Renaming one here or in its twin alone fails at install;
#: tests/test_twin_cells.py checks each twin and its stand-in against this table.
TWIN_CELLS = {
    fastcalls.TO: ("last", "plain"),
    fastcalls.TO_COPY: ("last", "plain"),
    fastcalls.DRAWING: ("last",),
}


def device_first(ctx, api: str, original: Callable, to_signature: bool = False, copy_moves: bool = False,
                 float64=None) -> Callable:
    """Wrap a ``to``-style callable: device as first positional or `device=`.

    Measured choices (benchmarks/calls.py; the targets: 1.2x of the hand
    port translated, 1.1x of native untouched, on every torch):
    - two memos, each one identity test: the last device argument with its
      translation, kept as one tuple (so threads never see half an update), and
      the last first argument that names no device (a dtype or None: AMP's
      ``x.to(torch.float16)``, ``t.to(None, dtype, non_blocking)`` in
      Module._apply). A loop repeating a call pays one ``is``, not a type test
      plus a dict lookup;
    - the wrapper is small (few locals and free variables) and hands everything
      else to a second function: a frame costs ~1.8x as much on Python 3.8 and
      ~1.4x on 3.10 as on 3.11, growing with its size, and torch 2.0-2.1's
      ``x.to(torch.float16)`` (~9,000 instructions, against ~14,500 on torch
      2.13) leaves the least room;
    - arguments are forwarded with the arity they came with: a C method called
      as ``original(self, *args)`` costs ~250 ns more than ``original(self, a)``;
    - `to_signature` says `original` takes ``(device, dtype, non_blocking,
      copy, ...)`` positionally (Tensor.to, Module.to), so ``x.to('cuda',
      non_blocking=True)`` drops its keyword (~300 ns in torch's parser); with
      the memo it is answered in the hot frame (a second frame cost ~1,300
      instructions on Python 3.11: 1.23x of the vendor's hand port, now 1.00x);
    - not done, measured: parameters named like torch's instead of ``*args,
      **kwargs`` (CPython 3.11's specialised call of a simple function) save
      ~230 instructions a call on 3.11 and ~115 on 3.8, but CPython then rejects
      a misspelt keyword itself, before the wrapper could hand the call to torch
      for torch's own error, and cannot tell ``x.to(t, True)`` from ``x.to(t,
      dtype=True)``. The least any Python wrapper adds (``def to(self, a):
      return original(self, a)``) is ~1,000 instructions on Python 3.8: 1.11x of
      torch 2.0's ``x.to(torch.float16)`` on its own.

    `copy_moves` (Tensor.to on the cpu target, whose device memory is host
    memory): a call naming a CUDA device copies, as a host-to-device move does
    on CUDA, so ``x.to('cuda')`` never aliases ``x``; other calls are untouched.

    `float64` (`patches/vendor_ops.Float64`, where the target casts float64 to float32): the slow path
    shows it each call until it has named the first cast (``check``, then ``done``); until then
    ``torch.float64`` never enters the memo, so those calls take the slow path. Other calls, the hot
    path included, are as without it.
    """
    if copy_moves:
        return finish(fastcalls.stand_in(fastcalls.TO_COPY, _copying_to(ctx, api, original, float64), original,
                                         cells=TWIN_CELLS[fastcalls.TO_COPY]), original, api.rsplit(".", 1)[-1])
    translator = ctx.target.translator(api)
    lookup, miss, spec_types, no_device = translator.cache.get, translator.miss, DEVICE_SPEC_TYPES, _NO_DEVICE_TYPES
    f64 = torch.float64
    last = NOTHING_SEEN  # (argument, translation)
    plain = NOTHING_SEEN[0]  # the last first argument of a type in _NO_DEVICE_TYPES

    def to(self, first=_NO_ARG, /, *args, **kwargs):
        if first is plain:
            if not kwargs:
                if not args:
                    return original(self, first)
                if len(args) == 2:
                    return original(self, first, args[0], args[1])
        else:
            seen = last  # read once: another thread may replace it
            if first is seen[0] and not args:
                if not kwargs:
                    return original(self, seen[1])  # the training loop's call
                if to_signature and len(kwargs) == 1 and "non_blocking" in kwargs:
                    return original(self, seen[1], None, kwargs["non_blocking"])
        return general(self, first, args, kwargs)

    def general(self, first, args, kwargs):
        nonlocal last, plain
        if float64 is not None and not float64.done and not (float64.host_skips and getattr(self, "is_cpu", False)):
            float64.check(self, first, args, kwargs)
        seen = last
        if first is seen[0]:
            first = seen[1]
        elif type(first) in spec_types:
            result = lookup(first, _MISS)
            if result is _MISS:
                result = miss(first)
            last = (first, result)
            first = result
        elif first.__class__ in no_device:
            if first is not f64 or float64 is None or float64.done:
                plain = first
        if kwargs:
            if to_signature and not args and len(kwargs) == 1 and "non_blocking" in kwargs \
                    and type(first) in spec_types:
                return original(self, first, None, kwargs["non_blocking"])
            device = kwargs.get("device")
            if device is not None:
                kwargs["device"] = translator(device)
            if first is _NO_ARG:
                return original(self, *args, **kwargs)
            return original(self, first, *args, **kwargs)
        if args:
            return original(self, first, *args)
        if first is _NO_ARG:
            return original(self)
        return original(self, first)

    return finish(fastcalls.stand_in(fastcalls.TO, to, original, flag=to_signature,
                                     cells=TWIN_CELLS[fastcalls.TO]), original, api.rsplit(".", 1)[-1])


def _copying_to(ctx, api: str, original: Callable, float64=None) -> Callable:
    """`device_first`'s Tensor.to for `copy_moves`: the same memos (and `float64`), plus whether the argument moved.

    A move is a call whose device argument the target translated (a CUDA device);
    it runs as ``to(device, dtype, non_blocking, copy=True)``: one C call, the copy
    CUDA makes. Positional ``copy`` (the fourth argument) is forced True too.
    """
    translator = ctx.target.translator(api)
    lookup, miss, spec_types, no_device = translator.cache.get, translator.miss, DEVICE_SPEC_TYPES, _NO_DEVICE_TYPES
    f64 = torch.float64
    last = (NOTHING_SEEN[0], None, False)  # (argument, translation, moved)
    plain = NOTHING_SEEN[0]  # the last first argument of a type in _NO_DEVICE_TYPES: never a move

    def copying(self, device, args, kwargs):
        if len(args) >= 3:  # (dtype, non_blocking, copy, ...)
            return original(self, device, args[0], args[1], True, *args[3:], **kwargs)
        kwargs["copy"] = True
        return original(self, device, *args, **kwargs)

    def to(self, first=_NO_ARG, /, *args, **kwargs):
        if first is plain:
            if not kwargs:
                if not args:
                    return original(self, first)
                if len(args) == 2:
                    return original(self, first, args[0], args[1])
        else:
            seen = last
            if first is seen[0] and seen[2] and not args:
                if not kwargs:
                    return original(self, seen[1], None, False, True)  # the training loop's move
                if len(kwargs) == 1 and "non_blocking" in kwargs:
                    return original(self, seen[1], None, kwargs["non_blocking"], True)
        return general(self, first, args, kwargs)

    def general(self, first, args, kwargs):
        nonlocal last, plain
        if float64 is not None and not float64.done:
            float64.check(self, first, args, kwargs)
        seen = last
        if first is seen[0]:
            if seen[2]:
                return copying(self, seen[1], args, kwargs)
        elif type(first) in spec_types:
            result = lookup(first, _MISS)
            if result is _MISS:
                result = miss(first)
            moved = result is not first and result != first  # an equal cached object is no move
            last = (first, result, moved)
            if moved:
                return copying(self, result, args, kwargs)
        elif first.__class__ in no_device:
            if first is not f64 or float64 is None or float64.done:
                plain = first
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                translated = translator(device)
                if translated is not device and translated != device:
                    kwargs["device"] = translated
                    kwargs["copy"] = True
            if first is _NO_ARG:
                return original(self, *args, **kwargs)
            return original(self, first, *args, **kwargs)
        if args:
            return original(self, first, *args)
        if first is _NO_ARG:
            return original(self)
        return original(self, first)

    return to


def device_keyword(ctx, api: str, original: Callable, draws=None) -> Callable:
    """Wrap a callable whose device is the keyword argument `device=`.

    `draws` (random factories on the cpu target, see patches/rng.py): a pair
    ``(lookup, undirected)``, `lookup` being ``(memo_get, generator_of, current)``
    (`cpu_runtime.generator_lookup`) or None. A call naming a CUDA device and no
    generator gets ``generator=``, the device's own, as on CUDA: read from the
    memo without a Python frame (`current()` for ``'cuda'``, the current device's);
    `undirected`, when not None, runs before any other call. The last such device
    argument is remembered with its translation and its generator (or `current`,
    read again at each call) as one tuple, so the loop's ``torch.randn(...,
    device='cuda')`` (``device=`` its only keyword) is one identity test and one
    call: 2,450 -> 1,200 instructions added on Python 3.11, 4,200 -> 2,900 on 3.8 (callgrind).
    """
    translator = ctx.target.translator(api)
    lookup, miss, spec_types = translator.cache.get, translator.miss, DEVICE_SPEC_TYPES

    if draws is not None:
        lookup_generator, undirected = draws
        memo_get, generator_of, current = lookup_generator or (None, None, None)
        last = (NOTHING_SEEN[0], None, None)  # (device argument, translation, generator or `current`)

        def drawing(*args, **kwargs):
            if kwargs:
                device = kwargs.get("device")
                if device is not None:
                    seen = last  # read once: another thread may replace it
                    if device is seen[0] and len(kwargs) == 1:  # the loop's call: the memo's device, nothing else
                        generator = seen[2]
                        return original(*args, device=seen[1],
                                        generator=current() if generator is current else generator)
                    if type(device) in spec_types:
                        result = lookup(device, _MISS)
                        if result != device:  # a CUDA device, or not seen
                            return directed(args, device, result, kwargs)
                if undirected is not None:
                    undirected()
                return original(*args, **kwargs)
            if undirected is not None:
                undirected()
            return original(*args)

        def directed(args, device, result, kwargs):
            """`device` (a device spec type) is not the last one; `result` is its cached translation or _MISS."""
            nonlocal last
            if result is _MISS:
                result = miss(device)
            if result is not device and result != device:  # an equal cached object (x.device) is no CUDA device
                kwargs["device"] = result
                if generator_of is None or "generator" in kwargs and kwargs["generator"] is not None:
                    return original(*args, **kwargs)
                remembered = memo_get(device)  # a generator, `current` (read at each call), or None: not seen
                if remembered is None:
                    generator = generator_of(device)  # first seen, or None: not a CUDA device after all
                    remembered = memo_get(device)  # None when the memo is full
                else:
                    generator = current() if remembered is current else remembered
                if generator is not None:
                    kwargs["generator"] = generator
                    if len(kwargs) == 2 and remembered is not None:
                        last = (device, result, remembered)
                    return original(*args, **kwargs)
            if undirected is not None:
                undirected()
            return original(*args, **kwargs)

        return finish(fastcalls.stand_in(fastcalls.DRAWING, drawing, original, current=current,
                                         flag=undirected is not None, cells=TWIN_CELLS[fastcalls.DRAWING]),
                      original, api.rsplit(".", 1)[-1])

    def factory(*args, **kwargs):
        if kwargs:
            device = kwargs.get("device")
            if device is not None and type(device) in spec_types:
                result = lookup(device, _MISS)
                if result is _MISS:
                    result = miss(device)
                kwargs["device"] = result
            return original(*args, **kwargs)
        return original(*args)

    return finish(fastcalls.stand_in(fastcalls.FACTORY, factory, original, cache=translator.cache,
                                      spec_types=spec_types), original, api.rsplit(".", 1)[-1])
