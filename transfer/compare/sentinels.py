"""The accuracy mode's cheap level: results watched at module boundaries, operations only where needed.

Per operation, torch's own hand-off to a dispatch mode costs more than a small operation (docs/accuracy.md:
the floor), so no per-operation watch is cheap on a model of small operations. In the steps not watched
operation by operation (`options.Settings.exact_steps`), the watch (`watch.py`) is on the dispatch stack
only where the script runs outside every module: its own lines between module calls (a loss, a metric, a
functional call), and the backward pass of what those lines computed (hooks on their autograd nodes put
the watch on for each node). Everywhere else no dispatch mode runs; the checker looks at results instead
(`look`, per `Point`):

* *regions*: each call of an outermost module (a module called while no other runs). Every module call
  inside it has its outputs looked at (``<Linear>``: the module's class); the call's arguments, random
  states, autocast and keyword arguments are kept (by reference) until the step ends, and hooks on its
  outputs (and on its arguments that require grad) catch the gradients that reach them;
* *backward*: ``torch.autograd.backward`` and ``torch.autograd.grad`` (so ``Tensor.backward``) run with
  the watch off; when the pass returns, the gradients of the parameters of every region it went through
  (``<grad>``, keyed by the parameter's name) and of their inputs;
* *the optimizer's step* (global step hooks): the parameters after it (``<param>``), with ``nonfinite``
  its state too (``<state>``).

``nonfinite``: a point holding inf/NaN is localised at once by `replay.py` (the region's forward at its
end, its backward after the pass, the optimizer's step after it), which names the operation the watch
would have named; it orders its operations where the run ran them (a backward replay takes the operation
numbers reserved when the region's backward started: `GAP`). A replay that finds only values made
non-finite on purpose (masks) teaches which modules' outputs hold them (not looked at again), and marks
the run's tensors as intended. ``record`` / ``against``: the points' digests are the record's lines for
those steps (`digest.py`).

What the cheap level does not see: an inf/NaN that no module output, gradient or parameter ever holds
(``torch.where(x > 0, torch.log(x), 0)`` inside a module: made and dropped there). ``nonfinite:exact``
watches every operation, at the per-operation cost.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Dict, List, NamedTuple, Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from . import replay
from .session import Op
from .watch import site

GAP = 1 << 20  # operation numbers reserved for a region's backward replay


class Point(NamedTuple):
    """Where the cheap level looks: `name` as the report says it, `short` as the record keys it."""

    name: str
    short: str
    phase: str
    module: str  # the module's path, or the parameter's name
    site: str


class Region:
    """One call of an outermost module in a step watched by the cheap level."""

    __slots__ = ("module", "name", "args", "kwargs", "versions", "rng", "autocast", "grad", "output_grads",
                 "input_grads", "backward_index")

    def __init__(self, module, name, args):
        self.module, self.name, self.args = module, name, args
        self.kwargs: Optional[Dict[str, Any]] = None
        self.versions: List[Any] = []
        self.rng = self.autocast = None
        self.grad = torch.is_grad_enabled()
        self.output_grads: Dict[int, torch.Tensor] = {}
        self.input_grads: Dict[int, torch.Tensor] = {}
        self.backward_index: Optional[int] = None


def _copy(value):
    if isinstance(value, torch.Tensor):
        twin = value.detach().clone()
        return twin.requires_grad_() if value.requires_grad and twin.is_floating_point() else twin
    return value


class Sentinels:
    """The cheap level of one session (module docstring); the session calls it from its hooks."""

    def __init__(self, session):
        self.session = session
        self.checker = session.checker
        self.mode = session.mode
        self.replays = bool(getattr(session.checker, "replays", False))
        self.region: Optional[Region] = None
        self.regions: List[Region] = []  # this step's, whose backward may come
        self.passing: List[Region] = []  # whose backward runs in the current pass
        self.backward_depth = 0
        self.backward_autocast: Any = []
        self.queued = False  # the end-of-pass callback (a backward pass not started through torch.autograd)
        self.optimizing = False
        self.snapshot = None
        self.intended: set = set()  # module paths whose outputs hold inf/NaN on purpose
        self.writes_args: set = set()  # id(module) of outermost modules whose forward writes its arguments
        self.params: Dict[int, list] = {}  # id(outermost module) -> named_parameters()
        self.names: Dict[int, str] = {}  # id(parameter) -> its name
        self.points: Dict[tuple, Point] = {}  # (module path, class), or a point's fields -> the point
        self.local = threading.local()
        self.big_optimizer = False
        import torch.autograd as autograd

        self.autograd = autograd
        self.originals = (autograd.backward, autograd.grad)
        autograd.backward = self._through(self.originals[0])
        autograd.grad = self._through(self.originals[1])

    def close(self) -> None:
        if self.autograd.backward is not self.originals[0]:
            self.autograd.backward, self.autograd.grad = self.originals
        self.regions, self.passing, self.region, self.snapshot = [], [], None, None

    def inside(self) -> bool:
        """In a backward pass or an optimizer step the cheap level watches (the watch off)."""
        return self.backward_depth > 0 or self.optimizing

    def end_step(self) -> None:
        self.regions = []

    def _point(self, *fields) -> Point:
        """The `Point` of these fields, made once (a record looks at every parameter every step)."""
        point = self.points.get(fields)
        if point is None:
            point = self.points[fields] = Point(*fields)
        return point

    def _look(self, point: Point, tensors) -> None:
        self.checker.look(point, tensors, self.mode.index)
        self.session.report.checked += 1

    # ------------------------------------------------------------------ regions
    def enter(self, module, name: str, args) -> None:
        """An outermost module call starts."""
        region = self.region = Region(module, name, args)
        if id(module) not in self.params:
            named = list(module.named_parameters())
            self.params[id(module)] = named
            for pname, p in named:
                self.names.setdefault(id(p), pname)
        if self.replays:
            region.kwargs = replay.call_kwargs(module)
            if id(module) in self.writes_args:  # kept as they were, the run's own written by its forward
                region.args = tuple(_copy(a) for a in args)
            else:
                region.versions = [(t, t._version) for t in replay.tensors((args, region.kwargs))]
            region.rng = replay.rng_state(self.session.device)
            region.autocast = replay.autocast_state(self.session.device)

    def output(self, module, name: str, out) -> None:
        """A module call inside the region ends: its outputs are looked at."""
        if name in self.intended:
            return
        found = [out] if type(out) is torch.Tensor else replay.tensors(out)
        if not found:
            return
        key = (name, type(module))
        point = self.points.get(key)
        if point is None:  # made once per module path and class
            kind = type(module).__name__
            code = getattr(type(module).forward, "__code__", None)
            where = f"{code.co_filename}:{code.co_firstlineno}" if code else ""
            point = self.points[key] = Point(f"output of {kind}", f"<{kind}>", "forward", name, where)
        self.checker.look(point, found, self.mode.index)
        self.session.report.checked += 1

    def leave(self, out) -> None:
        """The outermost call ends: settled (``nonfinite``: its replay when a point holds inf/NaN); hooks for
        the gradients that will reach it."""
        region, self.region = self.region, None
        if region is None:
            return
        if self.replays:
            points = self.checker.settle()
            written = any(t._version != v for t, v in region.versions)
            if written:
                self.writes_args.add(id(region.module))
            if points and not self.session.found():
                self._replay_forward(region, out, points, written)
        if region.grad:
            self._hook_gradients(region, out)

    def _replay_forward(self, region, out, points, written) -> None:
        why = None
        if written:
            why = f"{region.name}'s forward wrote its arguments (they are copied from the next call on)"
        elif region.kwargs is None:
            why = f"the keyword arguments of {region.name}'s call were not found"
        else:
            try:
                if replay.forward(self.session, region, out):
                    return
            except replay.Refused as refused:
                why = str(refused)
            else:  # nothing but intended inf/NaN: those modules' outputs hold them on purpose
                self.intended.update(p.module for p in points)
                self.checker.intend([t for t in replay.tensors(out) if t.is_floating_point()])
                return
        self.checker.unlocalised(self.op(points[0]), why)

    def op(self, point: Point, phase: Optional[str] = None) -> Op:
        self.mode.index += 1
        return Op(self.mode.index, self.session.step, point.name, point.short, phase or point.phase, point.module,
                  point.site)

    # ------------------------------------------------------------------ backward
    def _hook_gradients(self, region: Region, out) -> None:
        hooked = False
        for i, t in enumerate(replay.tensors(out)):
            if t.requires_grad:
                t.register_hook(functools.partial(self._at_output, region, i))
                hooked = True
        if not hooked:
            return
        for j, t in enumerate(replay.tensors((region.args, region.kwargs))):
            if t.requires_grad:
                t.register_hook(functools.partial(self._at_input, region, j))
        self.regions.append(region)

    def _at_output(self, region: Region, i: int, grad):
        if region.backward_index is None:  # its backward starts: operation numbers reserved for its replay
            region.backward_index = self.mode.index + 1
            self.mode.index += GAP
            self.passing.append(region)
            if not self.backward_depth and not self.queued:  # a pass not started through torch.autograd
                self.queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._pass_ended)
        region.output_grads[i] = grad

    def _at_input(self, region: Region, j: int, grad):
        region.input_grads[j] = grad

    def _pass_ended(self) -> None:
        self.queued = False
        self.after_backward()

    def _through(self, function):
        """torch.autograd.backward / grad with the watch off while the cheap level watches (module docstring)."""

        @functools.wraps(function)
        def run(*args, **kwargs):
            session = self.session
            if session.replaying or threading.get_ident() != session.thread or not session.cheap_step():
                return function(*args, **kwargs)
            if self.mode.pending_tensor is not None:
                self.mode.resolve()  # the last operation's node gets its where (and its hooks)
            if not self.backward_depth:
                self.backward_autocast = replay.autocast_state(session.device)
            self.backward_depth += 1
            session.sync()
            try:
                return function(*args, **kwargs)
            finally:
                self.backward_depth -= 1
                if not self.backward_depth:
                    self.after_backward()
                session.sync()

        return run

    def after_backward(self) -> None:
        """A backward pass ended: the gradients it made are looked at (``nonfinite``: replayed when one
        holds inf/NaN)."""
        passing, self.passing = self.passing, []
        if not passing or self.session.stopped:
            return
        seen = set()
        grads = []  # nonfinite: every gradient in one look (the replay names the operation)
        for region in passing:
            for name, p in self.params.get(id(region.module), ()):
                if p.grad is not None and id(p) not in seen:
                    seen.add(id(p))
                    if self.replays:
                        grads.append(p.grad)
                    else:
                        self._look(self._point("gradient", "<grad>", "backward", name, ""), [p.grad])
            inputs = [g for _, g in sorted(region.input_grads.items())]
            if inputs:
                self._look(Point("gradient of an input", "<input grad>", "backward", region.name, ""), inputs)
        if grads:
            self._look(Point("gradient", "<grad>", "backward", passing[0].name, ""), grads)
        if self.replays:
            points = self.checker.settle()
            if points and not self.session.found():
                self._replay_backward(passing, points)
        for region in passing:
            region.backward_index = None
            region.output_grads, region.input_grads = {}, {}

    def _replay_backward(self, passing, points) -> None:
        why = None
        for region in passing:
            if any(t._version != v for t, v in region.versions):
                why = f"{region.name}'s arguments were written after its forward"
                continue
            if region.kwargs is None:
                why = f"the keyword arguments of {region.name}'s call were not found"
                continue
            try:
                if replay.backward(self.session, region, self.originals[1], self.backward_autocast):
                    return
            except replay.Refused as refused:
                why = str(refused)
        if why is not None:
            self.checker.unlocalised(self.op(points[0]), why)
        # else: no operation of these regions made it (a collective's output, or on purpose): what reads it
        # later is watched or replayed in turn

    # ------------------------------------------------------------------ the optimizer
    def optimizer_pre(self, optimizer, args, kwargs) -> None:
        self.optimizing = True
        self.snapshot = None
        self.session.sync()  # off the dispatch stack first: the snapshot's copies are not the run's
        if self.replays:
            # the hook's args are the step's, the optimizer first
            if (len(args) > 1 and args[1] is not None) or kwargs.get("closure") is not None:
                self.optimizing = False  # the closure runs the model again: watched operation by operation
            else:
                self.snapshot = replay.snapshot(optimizer)
                if self.snapshot is None:
                    self.optimizing = False
                    if not self.big_optimizer:
                        self.big_optimizer = True
                        self.session.report.note(
                            "the optimizer's step is watched operation by operation (its parameters and state "
                            f"exceed {replay.SNAPSHOT_LIMIT >> 20} MiB, the copy its replay would need)", summary=False)

    def optimizer_post(self, optimizer) -> None:
        if not self.optimizing:
            return
        self.optimizing = False
        snap, self.snapshot = self.snapshot, None
        where = site(sys._getframe(1))
        if self.replays:  # nonfinite: the parameters and the state in one look (the replay names the operation)
            found = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            found += [v for p in found for v in optimizer.state.get(p, {}).values() if isinstance(v, torch.Tensor)]
            self._look(Point("parameters or state after the optimizer's step", "<param>", "forward", "", where), found)
        else:
            k = 0
            for group in optimizer.param_groups:
                for p in group["params"]:
                    k += 1
                    if p.grad is not None:
                        name = self.names.get(id(p)) or f"param{k - 1}"
                        self._look(self._point("parameter after the optimizer's step", "<param>", "forward", name, where),
                                   [p])
        if self.replays:
            points = self.checker.settle()
            if points and snap is not None and not self.session.found():
                try:
                    if replay.optimizer(self.session, snap):
                        return
                except replay.Refused as refused:
                    self.checker.unlocalised(self.op(points[0]), str(refused))
                    return
                self.checker.unlocalised(self.op(points[0]), "its replay held no inf/NaN")

    # ------------------------------------------------------------------ the backward of the script's own lines
    def hook_node(self, node) -> None:
        """An autograd node of an operation the watch saw (outside every module): the watch runs its backward."""
        try:
            node.register_prehook(self._node_starts)
            node.register_hook(self._node_ends)
        except (AttributeError, RuntimeError):
            pass

    def _node_starts(self, grad_outputs):
        if self.session.stopped or self.session.replaying or _get_current_dispatch_mode() is self.mode:
            return None
        self.mode.__enter__()
        self.local.depth = getattr(self.local, "depth", 0) + 1
        return None

    def _node_ends(self, grad_inputs, grad_outputs):
        if getattr(self.local, "depth", 0):
            self.local.depth -= 1
            self.mode.__exit__(None, None, None)
        return None
