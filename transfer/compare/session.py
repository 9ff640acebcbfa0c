"""The accuracy mode's eyes: every aten operation of the run, with where it comes from.

A `torch.utils._python_dispatch.TorchDispatchMode` (torch 2.0 to 2.14) entered when the mode starts sees
every operation below autograd, forward and backward (the autograd engine carries the mode into its
device threads with the rest of the thread-local state). Each operation becomes an `Op`:

* ``name``: the aten operation (``aten::gelu``);
* ``phase``: ``backward`` while the autograd engine runs a node (``torch._C._current_autograd_node``),
  else ``forward`` (the optimizer's operations count as forward);
* ``site`` and ``module``: forward, the user's line (`transfer.frames.user_frame`: the nearest frame that
  is neither torch's nor transfer's) and the innermost module whose forward runs (global forward pre/post
  hooks; paths as the outermost module's ``named_modules`` spells them). Backward, those of the forward
  operation that made the autograd node: after each forward operation the node of its output gets them
  in its ``metadata`` (the next operation looks, when autograd has attached the node);
* ``step``: the number of optimizer steps taken (a global optimizer step post-hook, or a GradScaler
  update, ends a step; the next module forward starts the next one).

What runs per operation is the watch (`watch.py`: in C where the extension is built, else its Python
twin); it hands the session what it does not answer itself: `Session.slow` (the checker's before and
after around the operation: shadow, filters, GradScaler and collective operations) and `Session.after`
(the checker's look at outputs the C watch does not read in place). The checker (one per mode:
`nonfinite`, `shadow`, `digest`) sees an `Op`. The operation itself runs exactly as without the mode, on
the caller's tensors; the checkers read them, copy them, and never write them or draw random numbers.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Dict, List, Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_mode

from . import watch as _watch
from .watch import KEY, NO_WHERE  # noqa: F401  (KEY: the node metadata's key, also read by tests)


class Op:
    __slots__ = ("index", "step", "name", "short", "phase", "module", "site", "note")

    def __init__(self, index, step, name, short, phase, module, site):
        self.index, self.step, self.name, self.short = index, step, name, short
        self.phase, self.module, self.site = phase, module, site
        self.note = None  # the cheap level's point that no replay localised: why

    def where(self) -> Dict[str, Any]:
        return {"op": self.name, "site": self.site, "module": self.module, "phase": self.phase,
                "step": self.step, "index": self.index}


class Session:
    """One run of the mode: the watch, the hooks, the step, the checker and the report; in the steps not
    watched operation by operation, the cheap level (`sentinels.Sentinels`)."""

    def __init__(self, settings, checker, report, python: bool = False, device: str = "cpu"):
        self.settings, self.checker, self.report = settings, checker, report
        self.device = device
        self.step = 0
        self.stopped = False  # the checker has its answer: operations run unobserved
        self.names: Dict[int, str] = {}
        self.handles: List[Any] = []
        self.restore = None  # undoes what the mode changed for torch.compile
        self.mode = _watch.watcher(self, checker.fast if not settings.modules else _watch.FAST_NONE, python)
        # the checker's lists the C watch appends to (`watch.py`)
        if checker.fast == _watch.FAST_DIGEST:
            self.mode.sink = checker.pending
        elif checker.fast == _watch.FAST_NONFINITE:
            self.mode.sink, self.mode.producers = checker.flags, checker.producer
        #: the steps watched operation by operation (`options.Settings.exact_steps`; against: its record's)
        self.exact = getattr(checker, "exact", None) or settings.exact_steps() or "none"
        self.thread = threading.get_ident()
        self.pushed = False  # the watch is on this thread's dispatch stack
        self.replaying = False
        self.cheap = None  # the cheap level (`sentinels.py`), made at `start` unless every step is exact
        self._begin_step()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer

        if self.exact != "all":
            from .sentinels import Sentinels

            self.cheap = Sentinels(self)
            self._begin_step()
        self.handles.append(nn_module.register_module_forward_pre_hook(self._enter))
        try:  # also when the forward raises (torch >= 2.1): the module stack stays right
            self.handles.append(nn_module.register_module_forward_hook(self._leave, always_call=True))
        except TypeError:
            self.handles.append(nn_module.register_module_forward_hook(self._leave))
        self.handles.append(optimizer.register_optimizer_step_pre_hook(self._optimizer_starts))
        self.handles.append(optimizer.register_optimizer_step_post_hook(self._optimizer_stepped))
        self.sync()

    def stop(self) -> None:
        mode = self.mode
        if mode is not None:
            mode.pending_tensor = mode.pending_where = None
            self.stopped = True
            self.sync()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        if self.cheap is not None:
            self.cheap.close()
        self._count()
        self.checker.end_step(self.step)
        self.checker.finish()

    @property
    def index(self) -> int:
        return self.mode.index

    def halt(self) -> None:
        """The checker has its answer: the operations from here on run unobserved."""
        self.stopped = True
        self.mode.checking = False
        self.mode.node_hook = None
        self.sync()

    def _count(self) -> None:
        self.report.checked += self.mode.checked
        self.mode.checked = 0

    # ------------------------------------------------------------------ levels
    def _begin_step(self) -> None:
        """What this step runs: nothing (not sampled), the watch everywhere (exact), or the cheap level."""
        from .options import in_steps

        self.checking = self.settings.step_checked(self.step) and not self.stopped
        self.exact_step = self.cheap is None or in_steps(self.exact, self.step)
        self.mode.checking = self.checking
        self.mode.node_hook = self.cheap.hook_node if self.cheap_step() else None

    def cheap_step(self) -> bool:
        """The cheap level watches this step."""
        return self.cheap is not None and self.checking and not self.exact_step and not self.stopped

    def wanted(self) -> bool:
        """Whether the watch belongs on the dispatch stack now."""
        if self.replaying:
            return True
        if self.stopped or not self.checking:
            return False
        if self.exact_step:
            return True
        return not self.mode.modules and not self.cheap.inside()

    def sync(self) -> None:
        """Put the watch on the dispatch stack, or take it off, as `wanted` says (this session's thread only;
        a mode the script entered above it is left alone, and the watch with it)."""
        if threading.get_ident() != self.thread:
            return
        wanted = self.wanted()
        if wanted and not self.pushed:
            self.mode.__enter__()
            self.pushed = True
        elif not wanted and self.pushed and _current_mode() is self.mode:
            self.mode.__exit__(None, None, None)
            self.pushed = False

    @contextlib.contextmanager
    def watching(self, index: Optional[int] = None):
        """The watch on for a replay (`replay.py`), the module stack set aside; `index`: the operation numbers
        start there (a backward replay's, reserved when the region's backward started)."""
        mode = self.mode
        if mode.pending_tensor is not None:
            mode.resolve()
        saved = (list(mode.modules), mode.checking, mode.node_hook, mode.index)
        del mode.modules[:]
        self.replaying = True
        mode.checking, mode.node_hook = True, None
        if index is not None:
            mode.index = index - 1
        self.sync()
        try:
            yield
        finally:
            mode.pending_tensor = mode.pending_where = None
            self.replaying = False
            mode.modules[:] = saved[0]
            mode.checking, mode.node_hook = saved[1], saved[2]
            if index is not None:
                mode.index = saved[3]
            self.sync()

    def found(self) -> bool:
        """After a replay: whether the checker has its operation (its flags read)."""
        self.checker.flush()
        return self.checker.candidate is not None

    # ------------------------------------------------------------------ hooks
    def _enter(self, module, args):
        if not self.report.eager:  # a torch.compile'd module (dynamo imported by the script) runs eagerly: said
            eval_frame = sys.modules.get("torch._dynamo.eval_frame")
            if eval_frame is not None and isinstance(module, getattr(eval_frame, "OptimizedModule", ())):
                self.report.ran_eagerly()
        mode = self.mode
        cheap = self.cheap
        if mode.ended and not self.replaying:
            mode.ended = False
            mode.pending_tensor = mode.pending_where = None
            mode.busy = True  # the checker's own operations are not the run's
            try:
                self._count()
                self.checker.end_step(self.step)
                if cheap is not None:
                    cheap.end_step()
            finally:
                mode.busy = False
            self.step += 1
            self._begin_step()
            if cheap is None:
                self.sync()  # a step not sampled runs without the watch
        modules = mode.modules
        name = self.names.get(id(module))
        if name is None:
            if not modules:  # an outermost module: name its tree
                self.names = {id(m): (n or type(module).__name__) for n, m in module.named_modules()}
                name = self.names[id(module)]
            else:
                name = f"{modules[-1]}.<{type(module).__name__}>"
        modules.append(name)
        if cheap is not None and len(modules) == 1 and not self.replaying:
            self.sync()  # off the dispatch stack first: what the cheap level does is not the run's
            if self.cheap_step() and not cheap.inside() and _current_node() is None:
                cheap.enter(module, name, args)

    def _leave(self, module, args, output):
        modules = self.mode.modules
        if not modules:
            return
        name = modules.pop()
        cheap = self.cheap
        if cheap is not None and cheap.region is not None and not self.replaying:
            cheap.output(module, name, output)
            if not modules:
                cheap.leave(output)
        if not modules and cheap is not None:
            self.sync()

    def _optimizer_starts(self, optimizer, args, kwargs):
        if self.cheap_step() and not self.replaying:
            self.cheap.optimizer_pre(optimizer, args, kwargs)
            self.sync()

    def _optimizer_stepped(self, optimizer, args, kwargs):
        if self.replaying:
            return
        if self.cheap is not None and self.cheap.optimizing:
            self.cheap.optimizer_post(optimizer)
            self.sync()
        self.mode.ended = True

    # ------------------------------------------------------------------ operations
    def learn(self, func) -> tuple:
        """What the watch needs to know of an operation, once: (callable, flags, aten name, short name)."""
        schema = func._schema
        name = schema.name
        short = name.split("::")[-1]
        call = func._op if type(func) is torch._ops.OpOverload else func
        flags = self.checker.classify(func, name)
        ops = self.settings.ops
        if ops and short not in ops:
            flags = _watch.SKIP
        elif self.settings.modules:
            flags |= _watch.SLOW  # chosen by module, operation by operation
        if schema.is_mutable:
            flags |= _watch.MUTABLE
        if func is _UPDATE_SCALE:
            flags |= _watch.ENDS_STEP
        info = self.mode.infos[func] = (call, flags, name, short)
        return info

    def op(self, info, index: int, backward: bool, where) -> Op:
        site, module = where
        return Op(index, self.step, info[2], info[3], "backward" if backward else "forward", module, site)

    def slow(self, func, args, kwargs, info, index, backward, where):
        """Run the operation with the checker's before and after (the watch's `SLOW` operations)."""
        if self.replaying and info[2].startswith(_COLLECTIVES):
            from .replay import Refused

            raise Refused(f"a replay would run the collective {info[2]} (the other ranks would wait for it)")
        op = self.op(info, index, backward, where)
        chosen = self.selected(op)
        state = self.checker.before(func, args, kwargs, op) if chosen else None
        out = info[0](*args, **kwargs)
        if chosen:
            self.checker.after(func, args, kwargs, out, op, state)
        return out

    def after(self, func, args, kwargs, out, info, index, backward, where) -> None:
        """The checker's look at an operation's outputs (what the watch did not answer itself)."""
        self.checker.after(func, args, kwargs, out, self.op(info, index, backward, where), None)

    def flush(self) -> None:
        """The C watch's checker holds many flags: read them now (`nonfinite.NonFinite.flush`)."""
        self.checker.flush()

    def selected(self, op: Op) -> bool:
        s = self.settings
        if s.ops and op.short not in s.ops:
            return False
        if s.modules and not any(op.module == m or op.module.startswith(m + ".") for m in s.modules):
            return False
        return True


_current_node = torch._C._current_autograd_node
_COLLECTIVES = ("c10d::", "_c10d_functional::", "c10d_functional::")
_UPDATE_SCALE = getattr(getattr(torch.ops.aten, "_amp_update_scale_", None), "default", None)
