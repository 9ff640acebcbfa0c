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

The checker (one per mode: `nonfinite`, `shadow`, `digest`) is called before and after the operation
runs. The operation itself runs exactly as without the mode, on the caller's tensors; the checkers read
them, copy them, and never write them or draw random numbers.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Dict, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import frames

KEY = "transfer.compare"  # autograd node metadata: (site, module) of the forward operation
_current_node = torch._C._current_autograd_node


class Op:
    __slots__ = ("index", "step", "name", "short", "phase", "module", "site")

    def __init__(self, index, step, name, short, phase, module, site):
        self.index, self.step, self.name, self.short = index, step, name, short
        self.phase, self.module, self.site = phase, module, site

    def where(self) -> Dict[str, Any]:
        return {"op": self.name, "site": self.site, "module": self.module, "phase": self.phase,
                "step": self.step, "index": self.index}


def _site() -> str:
    frame = frames.user_frame(sys._getframe(2))
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Session:
    """One run of the mode: the dispatch mode, the hooks, the step, the checker and the report."""

    def __init__(self, settings, checker, report):
        self.settings, self.checker, self.report = settings, checker, report
        self.step = 0
        self.ended = False  # an optimizer step or GradScaler update happened; the next forward starts a step
        self.index = 0
        self.checking = settings.step_checked(0)
        self.stopped = False  # the checker has its answer: operations run unobserved
        self.modules: List[str] = []
        self.names: Dict[int, str] = {}
        self.schemas: Dict[Any, tuple] = {}  # operation -> (aten::name, name)
        self.pending: Optional[tuple] = None
        self.handles: List[Any] = []
        self.mode: Optional[Watcher] = None
        self.busy = False
        self.restore = None  # undoes what the mode changed for torch.compile

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer

        self.handles.append(nn_module.register_module_forward_pre_hook(self._enter))
        self.handles.append(nn_module.register_module_forward_hook(self._leave))
        self.handles.append(optimizer.register_optimizer_step_post_hook(self._optimizer_stepped))
        self.mode = Watcher(self)
        self.mode.__enter__()

    def stop(self) -> None:
        if self.mode is not None:
            mode, self.mode = self.mode, None
            try:
                mode.__exit__(None, None, None)
            except (AssertionError, IndexError, RuntimeError):
                pass  # not the innermost mode any more (a script's own mode left open): it stays harmless
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.checker.end_step(self.step)
        self.checker.finish()

    # ------------------------------------------------------------------ hooks
    def _enter(self, module, args):
        if not self.report.eager:  # a torch.compile'd module (dynamo imported by the script) runs eagerly: said
            eval_frame = sys.modules.get("torch._dynamo.eval_frame")
            if eval_frame is not None and isinstance(module, getattr(eval_frame, "OptimizedModule", ())):
                self.report.ran_eagerly()
        if self.ended:
            self.ended = False
            self.busy = True  # the checker's own operations are not the run's
            try:
                self.checker.end_step(self.step)
            finally:
                self.busy = False
            self.step += 1
            self.checking = self.settings.step_checked(self.step) and not self.stopped
        name = self.names.get(id(module))
        if name is None:
            if not self.modules:  # an outermost module: name its tree
                self.names = {id(m): (n or type(module).__name__) for n, m in module.named_modules()}
                name = self.names[id(module)]
            else:
                name = f"{self.modules[-1]}.<{type(module).__name__}>"
        self.modules.append(name)

    def _leave(self, module, args, output):
        if self.modules:
            self.modules.pop()

    def _optimizer_stepped(self, optimizer, args, kwargs):
        self.ended = True

    # ------------------------------------------------------------------ operations
    def describe(self, func) -> Op:
        node = _current_node()
        self.index += 1
        names = self.schemas.get(func)
        if names is None:
            schema = func._schema.name
            names = self.schemas[func] = (schema, schema.split("::")[-1])
        if node is None:
            return Op(self.index, self.step, names[0], names[1], "forward",
                      self.modules[-1] if self.modules else "", _site())
        site, module = node.metadata.get(KEY, ("<autograd engine>", ""))
        return Op(self.index, self.step, names[0], names[1], "backward", module, site)

    def selected(self, op: Op) -> bool:
        s = self.settings
        if s.ops and op.short not in s.ops:
            return False
        if s.modules and not any(op.module == m or op.module.startswith(m + ".") for m in s.modules):
            return False
        return True

    def resolve_pending(self) -> None:
        ref, site, module = self.pending
        self.pending = None
        tensor = ref()
        if tensor is not None:
            node = tensor.grad_fn
            if node is not None and KEY not in node.metadata:
                node.metadata[KEY] = (site, module)


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, torch.Tensor):
                return item
    return None


class Watcher(TorchDispatchMode):
    """The dispatch mode: describe the operation, let the checker look, run it as it is."""

    def __init__(self, session: Session):
        super().__init__()
        self.session = session

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch >= 2.10 wraps a mode's __torch_dispatch__ in a dynamo-disabling function (two Python frames
        # per operation, a tenth of the mode's own cost on small operations); not needed here: the mode
        # disables dynamo while it is on (`compare._run_compiled_regions_eagerly`)
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        s = self.session
        if s.pending is not None:
            s.resolve_pending()
        if not s.checking or s.busy:
            out = func(*args, **kwargs)
            if func is _UPDATE_SCALE:
                s.ended = True
            return out
        op = s.describe(func)
        chosen = s.selected(op)
        state = s.checker.before(func, args, kwargs, op) if chosen else None
        out = func(*args, **kwargs)
        if chosen:
            s.checker.after(func, args, kwargs, out, op, state)
        if op.phase == "forward" and torch.is_grad_enabled():
            tensor = _first_tensor(out)
            if tensor is not None:
                s.pending = (weakref.ref(tensor), op.site, op.module)
        if func is _UPDATE_SCALE:
            s.ended = True
        return out


_UPDATE_SCALE = getattr(getattr(torch.ops.aten, "_amp_update_scale_", None), "default", None)
