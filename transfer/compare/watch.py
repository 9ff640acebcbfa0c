"""The accuracy mode's per-operation path: what runs for every operation while the mode is on.

Two implementations of one contract, twins as the call wrappers' are (`transfer.fastcalls`): the C one
(`transfer.compare._watch`, built with the wheel where a compiler is there) and the Python one here,
`PyWatch`. `watcher(session)` gives the C one when it is built, works on this torch and
``TRANSFER_NO_FASTCALLS`` is not 1, else the Python one. Both are a `TorchDispatchMode` whose
``__torch_dispatch__`` does, per operation:

1. the memo (``infos``): what this operation is, learnt once (`Session.learn`): the callable that runs it
   (the C++ operator under an ``OpOverload``: one Python frame less), its `flags`, ``aten::`` name and
   short name;
2. the node of the previous forward operation's output (``pending``) gets that operation's `where` in its
   metadata (backward operations are placed by it);
3. unwatched (``checking`` false, or ``busy``: the checker's own operations): the operation runs, nothing
   else;
4. watched: ``index`` counts it; its `where`, forward: ``(site, module)``, the user's ``file:line``
   (`transfer.frames`: the nearest frame that is neither torch's nor transfer's) and the innermost module
   (``modules``, kept by the session's module hooks); backward: the autograd node's;
5. flags `SLOW`: the session runs it (`Session.slow`: the checker's before/after, shadow's copies);
   flags `SKIP`: it runs, unchecked; else it runs and the checker's quick look follows (`Session.after`
   in Python; the C watch answers the common case itself: outputs in host memory, contiguous, read in
   place: `nonfinite` scans them for inf/NaN, `record`/`against` take the first one's digest; outputs on
   a device, `nonfinite`: what `NonFinite.after` does, in C (the inputs' producers, the flags appended to
   the checker's list ``sink``, the producers to ``producers``); an output holding inf/NaN, or anything
   else, it hands to `Session.after`);
6. flags `ENDS_STEP` (a GradScaler update): ``ended``.

Both also serve the cheap level (`sentinels.py`), which reads whole tensors at module boundaries: ``scan(t)``
(True/False: host tensor `t` holds inf/NaN; None: not read here, the caller asks torch) and ``digest(t)``
(the digest's values, `digest.py`; None: the caller asks torch): the C watch reads contiguous host tensors
in place, the Python one answers None. ``resolve()`` gives the pending node its where now (a backward pass
the watch does not see is about to start), and ``node_hook``, when set, is called with each node that gets
one (the cheap level watches the backward of the operations it saw).

The C watch counts the operations it checked itself in ``checked`` (the session adds them to the
report). What the C watch computes in place is what the Python one computes with torch: the same
first operation (tests/test_accuracy_watch.py runs both on the same faults).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import frames

KEY = "transfer.compare"  # autograd node metadata: the forward operation's where, (site, module)
NO_WHERE = ("<autograd engine>", "")
UNKNOWN = "<unknown>"

# flags of an operation (`Session.learn`)
SKIP = 1  # runs unchecked (a view, an allocation, not selected)
SLOW = 2  # the session runs it (`Session.slow`)
ENDS_STEP = 4  # a GradScaler's update: the step ends
MUTABLE = 8  # writes an argument: with no tensor output, its first argument is what it made

# fast paths of the C watch (``fast``)
FAST_NONE, FAST_NONFINITE, FAST_DIGEST = 0, 1, 2

#: The C watch's element kinds, in its order (`_watch.c`): what it reads in place.
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool)
_current_node = torch._C._current_autograd_node
_grad_enabled = torch.is_grad_enabled
_user_frame = frames.user_frame


def site(frame) -> str:
    """``file:line`` of the user's frame nearest to `frame` (`UNKNOWN` without one)."""
    frame = _user_frame(frame)
    return UNKNOWN if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, torch.Tensor):
                return item
    return None


class PyWatch(TorchDispatchMode):
    """The Python twin of the C watch (module docstring)."""

    def __init__(self, session, fast: int = FAST_NONE):
        super().__init__()
        self.session = session
        self.fast = fast
        self.infos = {}
        self.modules = []
        self.index = 0
        self.checked = 0
        self.checking = True
        self.busy = False
        self.ended = False
        self.pending_tensor = None
        self.pending_where = None
        self.node_hook = None

    def scan(self, t):
        return None  # torch reads it (`nonfinite.holds_nonfinite`)

    def digest(self, t):
        return None  # torch reads it (`digest.values_now`)

    def resolve(self) -> None:
        tensor, where = self.pending_tensor, self.pending_where
        if tensor is None:
            return
        self.pending_tensor = self.pending_where = None
        node = tensor.grad_fn
        if node is not None:
            metadata = node.metadata
            if KEY not in metadata:
                metadata[KEY] = where
                if self.node_hook is not None:
                    self.node_hook(node)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch >= 2.10 wraps a mode's __torch_dispatch__ in a dynamo-disabling function (two Python frames
        # per operation); not needed here: the mode disables dynamo while it is on
        # (`compare._run_compiled_regions_eagerly`)
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        info = self.infos.get(func)
        if info is None:
            info = self.session.learn(func)
        call, flags = info[0], info[1]
        if self.pending_tensor is not None:
            self.resolve()
        if not self.checking or self.busy:
            out = call(*args, **kwargs) if kwargs else call(*args)
            if flags & ENDS_STEP:
                self.ended = True
            return out
        self.index += 1
        index = self.index
        node = _current_node()
        if node is None:
            modules = self.modules
            where = (site(sys._getframe(1)), modules[-1] if modules else "")
        else:
            where = node.metadata.get(KEY, NO_WHERE)
        if flags & SLOW:
            out = self.session.slow(func, args, kwargs or {}, info, index, node is not None, where)
        else:
            out = call(*args, **kwargs) if kwargs else call(*args)
            if not flags & SKIP:
                self.session.after(func, args, kwargs or {}, out, info, index, node is not None, where)
        if node is None and _grad_enabled():
            tensor = first_tensor(out)
            if tensor is not None:
                self.pending_tensor, self.pending_where = tensor, where
        if flags & ENDS_STEP:
            self.ended = True
        return out


def _c_watch_type():
    """The C watch as a dispatch mode, or None (not built, or switched off)."""
    from .. import settings

    if settings.flag("TRANSFER_NO_FASTCALLS"):
        return None
    try:
        from . import _watch
    except ImportError:
        return None

    class CWatch(_watch.Watch, TorchDispatchMode):
        """The C watch (module docstring): its ``__torch_dispatch__`` and state are `_watch.Watch`'s."""

        def __init__(self, session, fast: int = FAST_NONE):
            _watch.Watch.__init__(self, session, fast, _current_node, _grad_enabled, frames.kind, frames.USER,
                                  torch.Tensor, _DTYPES)
            TorchDispatchMode.__init__(self)

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

    return CWatch


_C_TYPE: Any = False  # not looked up yet


def c_type():
    global _C_TYPE
    if _C_TYPE is False:
        _C_TYPE = _c_watch_type()
    return _C_TYPE


def watcher(session, fast: int, python: bool = False):
    """The watch for `session`: the C one where it is built and not `python`, else `PyWatch`."""
    kind = None if python else c_type()
    return PyWatch(session, fast) if kind is None else kind(session, fast)
