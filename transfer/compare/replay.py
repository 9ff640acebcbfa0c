"""Re-running what made a non-finite value under the per-operation watch: how the cheap level names the
operation (`sentinels.py`; ``nonfinite`` only).

The cheap level sees results, not operations: a module call's outputs, the gradients of a backward pass,
the parameters after the optimizer's step. When one holds inf/NaN, the computation that made it runs once
more, on the same inputs and the same random numbers, with the watch (`watch.py`) on; the watch then sees
every operation as it would have the first time, and the checker names the first operation whose output
is not finite, with its line, module, phase and step:

* `forward`: at the outermost module call's end, that call again (`torch.func.functional_call`, on copies
  of the module's buffers, so that BatchNorm's running statistics are not updated twice), with the random
  states it started with (the CPU's, the device's; on the cpu target the virtual devices' too), in the
  call's own grad mode and autocast (the replay runs where the call ran);
* `backward`: after the backward pass, the outermost call's forward again, in the grad mode and autocast
  recorded when it started, on aliases of the parameters (``detach``: no copy, no hook of the script's
  fires, nothing accumulates into ``.grad``), then ``torch.autograd.grad`` from its outputs with the
  gradients that reached them in the run (captured by hooks) to its parameters and inputs: the backward
  operations the run computed, in the engine's order;
* `optimizer`: after the step, the step again on copies of the parameters and the optimizer's state taken
  before it (`snapshot`: made when the step starts, when its tensors fit in `SNAPSHOT_LIMIT`; else the
  step is watched operation by operation), by the optimizer class's own ``step`` without the hooks around
  it.

What the replay cannot reproduce it says: a replay whose outputs' inf/NaN pattern differs from the run's
adds a note (the operation named is the replay's); a computation that cannot run again (a collective in
it: the other ranks would wait; arguments the call wrote; a closure given to the optimizer) is `Refused`,
and the point itself is the finding (the checker's `unlocalised`). The run is untouched: its tensors are
read, its random states put back as they were, its buffers and optimizer state never written.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections import defaultdict
from typing import Any, Dict, List, Optional

import torch

from ..dropins import _mixed

#: The largest optimizer (parameters and state, in bytes) copied before each step to replay it: above it
#: the step is watched operation by operation (fused and foreach optimizers run few operations).
SNAPSHOT_LIMIT = 1 << 30

try:
    from torch.func import functional_call
except ImportError:  # torch < 2.0
    from torch.nn.utils.stateless import functional_call  # type: ignore


class Refused(Exception):
    """The computation cannot run again; the message says why."""


# ---------------------------------------------------------------------------------------------- state
def rng_state(device_type: str):
    """Every random state an operation may draw from: the CPU generator's, the target's devices' (the cpu
    target: its virtual devices')."""
    states: List[Any] = [torch.default_generator.get_state()]
    module = _rng_module(device_type)
    if module is not None:
        states.append(module.get_rng_state_all())
    return states


def set_rng_state(device_type: str, states) -> None:
    torch.default_generator.set_state(states[0])
    module = _rng_module(device_type)
    if module is not None and len(states) > 1:
        module.set_rng_state_all(states[1])


def _rng_module(device_type: str):
    if device_type == "cpu":
        runtime = sys.modules.get("transfer.cpu.runtime")
        return runtime if runtime is not None and runtime.is_initialized() else None
    module = getattr(torch, device_type, None)
    return module if module is not None and hasattr(module, "get_rng_state_all") else None


def autocast_state(device_type: str):
    """Autocast on the CPU and the target's device: [(device type, enabled, dtype)]."""
    state = []
    for kind in dict.fromkeys(("cpu", device_type)):
        try:
            state.append((kind, bool(_mixed.autocast_enabled(kind)), _mixed.autocast_dtype(kind)))
        except (AttributeError, RuntimeError, TypeError):
            pass
    return state


def autocast_as(state) -> contextlib.ExitStack:
    """Contexts that set autocast as `state` recorded it."""
    stack = contextlib.ExitStack()
    for kind, enabled, dtype in state:
        stack.enter_context(torch.amp.autocast_mode.autocast(kind, dtype=dtype, enabled=enabled))
    return stack


def call_kwargs(module) -> Optional[Dict[str, Any]]:
    """The keyword arguments of the module call whose global forward pre-hook runs now (global hooks get
    only the positional ones): read from torch's ``_call_impl`` frame; None where it is not found."""
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return None
        if frame.f_code.co_name == "_call_impl":
            local = frame.f_locals
            if local.get("self") is module:
                return dict(local.get("kwargs") or {})
        frame = frame.f_back
    return None


def tensors(value, depth: int = 0) -> List[torch.Tensor]:
    """The tensors in a module's output or arguments (tuples, lists, dicts, three levels), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 3:
        return []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v, depth + 1)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v, depth + 1)]
    return []


def _same_nonfinite(replayed, original) -> bool:
    """Whether the replay's tensors hold inf/NaN exactly where the run's do."""
    a, b = tensors(replayed), tensors(original)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return False
        if x.is_floating_point() and y.is_floating_point() and not torch.equal(torch.isfinite(x), torch.isfinite(y)):
            return False
    return True


def _unwrapped(module):
    """The module a data-parallel wrapper runs (its forward synchronises buffers across ranks)."""
    parallel = (torch.nn.DataParallel, getattr(torch.nn.parallel, "DistributedDataParallel", ()))
    return module.module if isinstance(module, parallel) else module


def _detached(value, grad: bool):
    """`value` with every tensor detached (a new leaf that requires grad when `grad` and it did)."""
    if isinstance(value, torch.Tensor):
        leaf = value.detach()
        return leaf.requires_grad_() if grad and value.requires_grad and value.is_floating_point() else leaf
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_detached(v, grad) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v, grad) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _detached(v, grad)) for k, v in value.items())
    return value


# ---------------------------------------------------------------------------------------------- replays
def forward(session, region, output) -> bool:
    """Run the outermost call `region` again with the watch on; True when the checker has its operation.
    Called at the call's end, where its grad mode and autocast still hold."""
    module = _unwrapped(region.module)
    buffers = {name: b.clone() for name, b in module.named_buffers()}
    now = rng_state(session.device)
    try:
        with session.watching():
            set_rng_state(session.device, region.rng)
            replayed = functional_call(module, buffers, tuple(region.args), region.kwargs or {})
    finally:
        set_rng_state(session.device, now)
    found = session.found()
    if not _same_nonfinite(replayed, output):
        session.report.note(f"the replay of {region.name}'s forward at step {session.step} held inf/NaN elsewhere than "
                            "the run (random numbers it draws from its own generator, or state it changes): the "
                            "operation named is the replay's (nonfinite:exact watches the run itself)")
    return found


def backward(session, region, grad, autocast) -> bool:
    """The backward pass of the outermost call `region` again with the watch on (module docstring); True
    when the checker has its operation. `grad`: torch.autograd.grad as torch has it; `autocast`: the
    state the backward pass started in."""
    module = _unwrapped(region.module)
    params = {name: _detached(p, True) for name, p in module.named_parameters()}
    buffers = {name: b.clone() for name, b in module.named_buffers()}
    args, kwargs = _detached(tuple(region.args), True), _detached(region.kwargs or {}, True)
    now = rng_state(session.device)
    try:
        with session.watching(region.backward_index):
            set_rng_state(session.device, region.rng)
            with torch.enable_grad():
                with autocast_as(region.autocast):
                    replayed = functional_call(module, {**params, **buffers}, args, kwargs)
                outputs = tensors(replayed)
                pairs = [(outputs[i], g) for i, g in sorted(region.output_grads.items())
                         if i < len(outputs) and outputs[i].requires_grad]
                leaves = [p for p in params.values() if p.requires_grad] + \
                         [t for t in tensors((args, kwargs)) if t.requires_grad]
                if pairs and leaves:
                    with autocast_as(autocast):
                        grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
    finally:
        set_rng_state(session.device, now)
    return session.found()


class Snapshot:
    """An optimizer's parameters and state before its step, copied: the tensors of each dtype and device in
    one flat buffer (torch's C++ ``flatten_dense_tensors``: one copy, bit for bit, NaN and -0 included); the
    per-parameter copies are made only for a replay (`restore`)."""

    def __init__(self, optimizer, params, originals, slots, extra, flats):
        self.optimizer, self._params, self._originals = optimizer, params, originals
        self._slots, self._extra, self._flats = slots, extra, flats  # flats: [(buffer, [position])]

    def restore(self):
        """(copies, state): id(parameter) -> its copy (its ``.grad`` the run's), id(parameter) -> its state;
        each copy with its original's shape and strides."""
        originals = self._originals
        twins: Dict[int, torch.Tensor] = {}
        for buffer, members in self._flats:
            views = torch._C._nn.unflatten_dense_tensors(buffer, [originals[m] for m in members])
            for m, view in zip(members, views):
                t = originals[m]
                if view.stride() != t.stride():
                    view = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(view)
                twins[m] = view
        params = self._params
        copies: Dict[int, torch.Tensor] = {}
        state: Dict[int, Dict[str, Any]] = {id(p): {} for p in params}
        for i, p in enumerate(params):
            twin = twins[i]
            twin.grad = p.grad
            copies[id(p)] = twin
        for (i, key), value in self._extra.items():
            state[id(params[i])][key] = value
        for position, (i, key) in enumerate(self._slots, len(params)):
            state[id(params[i])][key] = twins[position]
        return copies, state


def snapshot(optimizer, limit: int = SNAPSHOT_LIMIT) -> Optional[Snapshot]:
    """Copies of what `optimizer.step` changes, or None when they exceed `limit` bytes. Per tensor, Python
    does little: a model of many small tensors pays one copy per dtype and device, not one per tensor."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    originals = list(params)
    slots = []  # (parameter index, state key) of each state tensor, in `originals` after the parameters
    extra: Dict[tuple, Any] = {}  # (parameter index, state key) -> a copy of a state value not a tensor
    all_state = optimizer.state
    for i, p in enumerate(params):
        state = all_state.get(p)
        if state:
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    originals.append(value)
                    slots.append((i, key))
                else:
                    extra[(i, key)] = copy.deepcopy(value)
    if sum(t.nbytes for t in originals) > limit:
        return None
    groups: Dict[tuple, List[int]] = defaultdict(list)
    for position, t in enumerate(originals):
        groups[(t.dtype, t.device)].append(position)
    with torch.no_grad():
        flats = [(torch._C._nn.flatten_dense_tensors([originals[m] for m in members]), members)
                 for members in groups.values()]
    return Snapshot(optimizer, params, originals, slots, extra, flats)


def optimizer(session, snap: Snapshot) -> bool:
    """The optimizer's step again on `snap` with the watch on; True when the checker has its operation."""
    opt = snap.optimizer
    copies, saved = snap.restore()
    twin = object.__new__(type(opt))
    twin.__dict__.update(opt.__dict__)
    twin.param_groups = [dict(group, params=[copies.get(id(p), p) for p in group["params"]])
                         for group in opt.param_groups]
    state: Dict[Any, Any] = defaultdict(dict)
    for key, value in saved.items():
        state[copies[key]] = value
    twin.state = state
    step = type(opt).step
    if getattr(step, "hooked", False):  # torch's wrapper that runs the optimizer hooks
        step = getattr(step, "__wrapped__", step)
    with session.watching():
        step(twin)
    found = session.found()
    params = [p for group in opt.param_groups for p in group["params"] if id(p) in copies]
    if not _same_nonfinite([copies[id(p)] for p in params], params):
        session.report.note(f"the replay of the optimizer's step at step {session.step} held inf/NaN elsewhere than "
                            "the run: the operation named is the replay's (nonfinite:exact watches the run itself)")
    return found
