"""Non-finite watch: the first operation whose output holds inf or NaN.

Every floating-point output gets ``torch.isfinite(out).all()``, a one-element tensor on the output's own
device, kept with the operation; the flags are read once per step (at its end), so no host
synchronisation is added per operation: on an asynchronous device the operations queue as before, and
one read per step waits for them. On targets whose operations complete synchronously (the cpu target,
the stand-ins) the read costs nothing more. Collectives (``c10d::*``) complete later than they return:
their outputs are checked at the step's end.

The first operation, in the order they ran, whose output is not finite is the one whose inputs were
finite (every input was an earlier operation's output, or came from outside: data, parameters). In a
step where a GradScaler unscaled the gradients, non-finite values in the backward pass are the overflow
it exists to catch (it skips that optimizer step): a note, not a finding.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

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


class NonFinite:
    def __init__(self, report):
        self.report = report
        self.session = None
        self.flags: List[Tuple[torch.Tensor, Any]] = []
        self.collectives: List[Tuple[torch.Tensor, Any]] = []
        self.candidate: Optional[Any] = None
        self.scaler_step = False

    def before(self, func, args, kwargs, op):
        return None

    def after(self, func, args, kwargs, out, op, state):
        name = op.name
        if name == _UNSCALE:
            self.scaler_step = True
            return
        if name in UNINITIALISED:
            return
        tensors = floats(out)
        if not tensors and func._schema.is_mutable:
            tensors = floats(args[0]) if args else []
        if name.startswith(("c10d::", "_c10d_functional::", "c10d_functional::")):
            self.collectives.extend((t, op) for t in tensors)
            return
        for t in tensors:
            self.flags.append((torch.isfinite(t).all(), op))
        self.report.checked += 1
        if len(self.flags) > _FLUSH_EVERY:
            self._read()

    def _read(self) -> None:
        flags, self.flags = self.flags, []
        for t, op in self.collectives:
            flags.append((torch.isfinite(t).all(), op))
        self.collectives = []
        if not flags or self.candidate is not None:
            return
        try:
            values = torch.stack([f for f, _ in flags]).tolist()
        except RuntimeError:  # flags on several devices
            values = [bool(f.item()) for f, _ in flags]
        for ok, (_, op) in zip(values, flags):
            if not ok:
                if self.candidate is None or op.index < self.candidate.index:
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
