"""Non-finite watch: the first operation whose output holds inf or NaN.

Every floating-point output on a device gets its sum (one reduction pass: NaN and inf propagate into
it; fp16 and bf16 outputs are summed in float32, so no sum of finite values of theirs overflows; a
float32 output whose finite values sum beyond 3.4e38 would read as non-finite), a one-element tensor on
the output's own device, kept with the operation; the flags are read once per step (at its end), so no
host synchronisation is added per operation: on an asynchronous device the operations queue as before,
and one read per step waits for them. On the stand-ins, whose operations complete synchronously, the
read costs nothing more. An output in host memory (the cpu target) is read at once, where it lies: the C
watch scans it for inf/NaN in place (`watch.py`), the Python one asks torch (its sum, and where that is
not finite, `isfinite`); only an output that holds inf/NaN is kept, its verdict given in order with the
device's flags at the step's end. Collectives (``c10d::*``) complete later than they return: their
outputs are checked at the step's end.

The first operation, in the order they ran, whose output is not finite is the one whose inputs were
finite (every input was an earlier operation's output, or came from outside: data, parameters). Values
made non-finite on purpose are not findings: an operation given an infinite or NaN number
(``masked_fill(mask, float("-inf"))``, ``full(..., -inf)``, ``scalar_tensor(-inf)``: attention masks) marks
its outputs as intended, and so does every operation that reads such an output (views of a mask, the
scores a mask is added to). In a
step where a GradScaler unscaled the gradients, non-finite values in the backward pass are the overflow
it exists to catch (it skips that optimizer step): a note, not a finding.

Two levels (`sentinels.py`): unless ``exact``, the operations inside modules, the backward pass and the
optimizer's step are not watched one by one; their results are (`look`: each module call's outputs, the
gradients after a backward pass, the parameters and the optimizer's state after its step; in host memory
scanned at once, on a device one infinity norm per tensor, read when the region ends: `settle`). A
non-finite value there is localised by replaying what made it under the per-operation watch (`replay.py`),
which names the operation as the watch would have in the first place; a replay that finds only values
made non-finite on purpose marks what it read as intended (`intend`); one that cannot run names the point
(`unlocalised`).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Dict, List, Optional, Tuple  # noqa: F401

import torch

from .watch import FAST_NONFINITE, SKIP, SLOW

_FLUSH_EVERY = 4096  # flags kept before a read in the middle of a step (bounds the memory of a long step)
_UNSCALE = "aten::_amp_foreach_non_finite_check_and_unscale_"
#: Allocations whose memory is not initialised: whatever they hold is no operation's result.
UNINITIALISED = frozenset(("aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                           "aten::new_empty_strided", "aten::resize_", "aten::set_", "aten::empty_permuted"))


def floats(out) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() and out.layout == torch.strided and out.numel() else []
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in floats(item)]
    return []


_LOW = (torch.float16, torch.bfloat16)


def _total(t: torch.Tensor) -> torch.Tensor:
    """The flag: the sum of `t`, non-finite when `t` holds inf or NaN (float32 accumulation at least)."""
    return t.sum(dtype=torch.float32) if t.dtype in _LOW else t.sum()


def holds_nonfinite(t: torch.Tensor) -> bool:
    """True when host tensor `t` holds inf or NaN (read now: no finite values' sum overflow counts)."""
    if math.isfinite(_total(t).item()):
        return False
    return not bool(torch.isfinite(t).all())


_COLLECTIVES = ("c10d::", "_c10d_functional::", "c10d_functional::")


def _is_view(func) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _tensor_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


def _infinity_norms(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """One number per tensor, non-finite exactly when the tensor holds inf/NaN (its largest magnitude:
    no sum of finite values overflows), unread: one foreach operation where torch has it."""
    try:
        return list(torch._foreach_norm(tensors, float("inf")))
    except (AttributeError, RuntimeError, TypeError):
        return [torch.linalg.vector_norm(t, float("inf")) for t in tensors]


class NonFinite:
    fast = FAST_NONFINITE  # the C watch scans host outputs itself
    replays = True  # the cheap level's finding is localised by a replay (`replay.py`)

    def __init__(self, report):
        self.report = report
        self.session = None
        # (flag, op, producers of its inputs, given a non-finite number); op an `Op`, or from the C watch
        # (index, info, backward, where), made an `Op` when needed. The list and `producer` are the C
        # watch's too (`sink`, `producers`): changed in place only.
        self.flags: List[Tuple[Optional[torch.Tensor], Any, list, bool]] = []
        self.collectives: List[Tuple[torch.Tensor, Any]] = []
        self.candidate: Optional[Any] = None
        self.scaler_step = False
        self.producer: Dict[int, Tuple[Any, int]] = {}  # id(tensor) -> (weak reference, operation index)
        self.intended: set = set()  # operations whose non-finite outputs are on purpose
        self.views: Dict[Any, bool] = {}
        self.seen: list = []  # the cheap level's points found holding inf/NaN (`look`)
        self.queued: List[Tuple[torch.Tensor, Any]] = []  # (infinity norms of a point's device tensors, point)

    # ------------------------------------------------------------------ the cheap level (sentinels.py)
    def look(self, point, tensors, index: int) -> None:
        """The floating tensors of a point: in host memory scanned now, on a device their infinity norms
        queued (read by `settle`)."""
        device = []
        scan = self.session.mode.scan
        for t in tensors:
            bad = scan(t)  # the C watch: host memory read in place (None: not read there)
            if bad is None:
                if not t.is_floating_point() or t.layout != torch.strided or not t.numel():
                    continue
                if not t.is_cpu:
                    device.append(t.detach())
                    continue
                bad = holds_nonfinite(t)
            if bad:
                self.seen.append(point)
                return
        if device:
            self.queued.append((torch.stack(_infinity_norms(device)) if len(device) > 1 else
                                _infinity_norms(device)[0].reshape(1), point))

    def settle(self) -> list:
        """The points looked at since the last call that hold inf/NaN, in order (one read of the device's
        numbers)."""
        seen, self.seen = self.seen, []
        queued, self.queued = self.queued, []
        if queued:
            try:
                finite = torch.isfinite(torch.cat([q[0] for q in queued])).cpu().tolist()
            except RuntimeError:  # several devices
                finite = [x for q in queued for x in torch.isfinite(q[0]).cpu().tolist()]
            answers = iter(finite)
            for norms, point in queued:
                if not all([next(answers) for _ in range(norms.numel())]):
                    seen.append(point)
        return seen

    def intend(self, tensors) -> None:
        """The run's `tensors` hold inf/NaN that a replay found intended: what reads them is too."""
        index = -len(self.intended) - 1  # no operation's index
        self.intended.add(index)
        for t in tensors:
            self.producer[id(t)] = (weakref.ref(t), index)

    def unlocalised(self, op, why: str) -> None:
        """A point held inf/NaN and no replay could name the operation: the point is the candidate."""
        if self.candidate is None or op.index < self.candidate.index:
            op.note = why
            self.candidate = op

    def classify(self, func, name: str) -> int:
        """The watch's flags for an operation (`watch.py`)."""
        if name in UNINITIALISED or _is_view(func):
            return SKIP
        if name == _UNSCALE or name.startswith(_COLLECTIVES):
            return SLOW
        return 0

    def before(self, func, args, kwargs, op):
        return None

    def after(self, func, args, kwargs, out, op, state):
        name = op.name
        if name == _UNSCALE:
            self.scaler_step = True
            return
        if name in UNINITIALISED:
            return
        view = self.views.get(func)
        if view is None:
            view = self.views[func] = _is_view(func)
        if view:  # computes nothing: its values are its base's (a view of an uninitialised buffer is no finding)
            return
        tensors = floats(out)
        if not tensors and func._schema.is_mutable:
            tensors = floats(args[0]) if args else []
        collective = name.startswith(_COLLECTIVES)
        device = [t for t in tensors if not t.is_cpu] if not collective else tensors
        bad = not collective and any(holds_nonfinite(t) for t in tensors if t.is_cpu)
        if not device and not bad:  # in host memory and finite: nothing to remember
            self.report.checked += 1
            return
        producer = self.producer
        sources = []
        given = False  # an inf/NaN number among the arguments
        for value in (*args, *kwargs.values()) if kwargs else args:  # one pass over the arguments
            if isinstance(value, torch.Tensor):
                known = producer.get(id(value))
                if known is not None and known[0]() is value:
                    sources.append(known[1])
            elif isinstance(value, float):
                if not given and not math.isfinite(value):
                    given = True
            elif isinstance(value, (list, tuple)):
                for v in value:
                    if isinstance(v, torch.Tensor):
                        known = producer.get(id(v))
                        if known is not None and known[0]() is v:
                            sources.append(known[1])
        for t in (tensors or _tensor_outputs(out)):
            producer[id(t)] = (weakref.ref(t), op.index)
        if len(producer) > _FLUSH_EVERY * 8:
            self._forget()
        if collective:
            self.collectives.extend((t, op) for t in tensors)
            return
        if bad:  # judged at the step's end, in order with the device's flags
            self.flags.append((None, op, sources, given))
        for t in device:
            self.flags.append((_total(t), op, sources, given))
        self.report.checked += 1
        if len(self.flags) > _FLUSH_EVERY:
            self._read()

    def _forget(self) -> None:
        """Forget the producers of tensors that are gone."""
        producer = self.producer
        for key in [k for k, v in producer.items() if v[0]() is None]:
            del producer[key]

    def flush(self) -> None:
        """Read the flags kept so far (the C watch, past `_FLUSH_EVERY`)."""
        self._read()
        if len(self.producer) > _FLUSH_EVERY * 8:
            self._forget()

    def _op(self, op):
        if isinstance(op, tuple):  # from the C watch: (index, info, backward, where)
            return self.session.op(op[1], op[0], op[2], op[3])
        return op

    def _read(self) -> None:
        flags = self.flags[:]
        self.flags.clear()
        for t, op in self.collectives:
            flags.append((_total(t), op, (), False))
        self.collectives = []
        if not flags:
            return
        read = [f[0] for f in flags if f[0] is not None]  # None: a host output known to hold inf/NaN
        try:
            known = torch.isfinite(torch.stack(read)).tolist() if read else []
        except RuntimeError:  # flags on several devices
            known = [bool(torch.isfinite(f).item()) for f in read]
        answers = iter(known)
        values = [False if f[0] is None else next(answers) for f in flags]
        intended = self.intended
        for ok, (_, op, sources, given) in zip(values, flags):
            if ok:
                continue
            op = self._op(op)
            if given or any(s in intended for s in sources):
                intended.add(op.index)
            elif self.candidate is None or op.index < self.candidate.index:
                self.candidate = op
    def end_step(self, step: int) -> None:
        self._read()
        op, self.candidate = self.candidate, None
        if op is not None:
            if self.scaler_step and op.phase == "backward":
                self.report.note("gradient overflow caught by the GradScaler (its optimizer step skipped) "
                                 f"at step {op.step}, first in {op.name}", step=op.step, op=op.name)
            else:
                metrics = {"nonfinite": "inf/NaN in the output, inputs finite"}
                why = op.note
                if why:
                    metrics = {"nonfinite": f"inf/NaN here; the operation was not found: {why} (nonfinite:exact "
                                            "watches every operation)"}
                self.report.found(op, metrics, what="nonfinite")
                if self.session is not None:
                    self.session.halt()
        self.scaler_step = False

    def finish(self) -> None:
        pass
