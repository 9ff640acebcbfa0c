"""Non-finite watch: the first operation whose output holds inf or NaN.

Every floating-point output gets its sum (one reduction pass: NaN and inf propagate into it; fp16 and
bf16 outputs are summed in float32, so no sum of finite values of theirs overflows; a float32 output whose
finite values sum beyond 3.4e38 would read as non-finite), a one-element tensor on the output's own
device, kept with the operation; the flags are read once per step (at its end), so no host
synchronisation is added per operation: on an asynchronous device the operations queue as before, and
one read per step waits for them. On targets whose operations complete synchronously (the cpu target,
the stand-ins) the read costs nothing more. Collectives (``c10d::*``) complete later than they return:
their outputs are checked at the step's end.

The first operation, in the order they ran, whose output is not finite is the one whose inputs were
finite (every input was an earlier operation's output, or came from outside: data, parameters). Values
made non-finite on purpose are not findings: an operation given an infinite or NaN number
(``masked_fill(mask, float("-inf"))``, ``full(..., -inf)``, ``scalar_tensor(-inf)``: attention masks) marks
its outputs as intended, and so does every operation that reads such an output (views of a mask, the
scores a mask is added to). In a
step where a GradScaler unscaled the gradients, non-finite values in the backward pass are the overflow
it exists to catch (it skips that optimizer step): a note, not a finding.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch

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


def _tensor_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


class NonFinite:
    def __init__(self, report):
        self.report = report
        self.session = None
        # (flag, op, producers of its inputs, given a non-finite number)
        self.flags: List[Tuple[torch.Tensor, Any, tuple, bool]] = []
        self.collectives: List[Tuple[torch.Tensor, Any]] = []
        self.candidate: Optional[Any] = None
        self.scaler_step = False
        self.producer: Dict[int, Tuple[Any, int]] = {}  # id(tensor) -> (weak reference, operation index)
        self.intended: set = set()  # operations whose non-finite outputs are on purpose
        self.views: Dict[Any, bool] = {}

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
            returns = func._schema.returns
            view = self.views[func] = bool(returns) and all(
                r.alias_info is not None and not r.alias_info.is_write for r in returns)
        if view:  # computes nothing: its values are its base's (a view of an uninitialised buffer is no finding)
            return
        tensors = floats(out)
        if not tensors and func._schema.is_mutable:
            tensors = floats(args[0]) if args else []
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
        if len(producer) > _FLUSH_EVERY * 8:  # forget the tensors that are gone
            self.producer = {k: v for k, v in producer.items() if v[0]() is not None}
        if name.startswith(("c10d::", "_c10d_functional::", "c10d_functional::")):
            self.collectives.extend((t, op) for t in tensors)
            return
        for t in tensors:
            self.flags.append((_total(t), op, sources, given))
        self.report.checked += 1
        if len(self.flags) > _FLUSH_EVERY:
            self._read()

    def _read(self) -> None:
        flags, self.flags = self.flags, []
        for t, op in self.collectives:
            flags.append((_total(t), op, (), False))
        self.collectives = []
        if not flags:
            return
        try:
            values = torch.isfinite(torch.stack([f[0] for f in flags])).tolist()
        except RuntimeError:  # flags on several devices
            values = [bool(torch.isfinite(f[0]).item()) for f in flags]
        intended = self.intended
        for ok, (_, op, sources, given) in zip(values, flags):
            if ok:
                continue
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
                self.report.found(op, {"nonfinite": "inf/NaN in the output, inputs finite"}, what="nonfinite")
                if self.session is not None:
                    self.session.stopped = True
                    self.session.checking = False
        self.scaler_step = False

    def finish(self) -> None:
        pass
