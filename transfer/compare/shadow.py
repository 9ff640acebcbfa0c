"""Shadow check: every operation recomputed on the CPU from the same inputs, and compared.

Before the operation runs, its tensor arguments are copied to the CPU (in-place operations change them);
after it ran, the copies compute it twice on the CPU: in float64 (every floating-point tensor upcast),
the reference, and in the operation's own dtypes, the CPU's own error. An output diverges when

* its inf/NaN positions differ from the CPU's in its own dtype (an overflow the CPU also has is no
  divergence), or
* its largest error from float64 exceeds ``ratio`` times the CPU's own largest error plus ``ulp`` units
  in the last place of the output's largest value (defaults 2, and 1 ULP for fp16/bf16, 32 for fp32:
  msprobe's error-ratio and ULP rules with the CPU standing in for the GPU), or
* its cosine similarity with float64 is below ``cosine`` (0.99) while its error exceeds that ULP floor
  and the CPU's own output reaches that cosine (an output that is rounding noise on the CPU too, such as
  a gradient that is zero in exact arithmetic, has no direction to agree on).

Each operation is recomputed from the target's own inputs, so an error is blamed on the operation that
makes it, not on those it propagates to: the first divergent operation is the report's finding. The
checking goes on to the end of that step (the per-module picture of the step), then stops.

Not recomputed, and said so in the report: random operations (``nondeterministic_seeded``: dropout,
``rand``; the run's generators are never touched, their outputs are taken as they are and the operations
consuming them are checked), views (they compute nothing), uninitialised allocations, collectives, and
operations the CPU refuses (counted by name). Integer and boolean outputs are compared exactly where
every input is an integer.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch

from .nonfinite import floats
from .watch import FAST_NONE, SLOW

_DTYPE = {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_EPS = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}
_SKIP = {"aten::detach", "aten::_local_scalar_dense", "aten::empty_like", "aten::empty", "aten::empty_strided",
         "aten::new_empty", "aten::new_empty_strided", "aten::set_", "aten::resize_", "aten::record_stream",
         "aten::lift_fresh", "aten::alias", "aten::_amp_foreach_non_finite_check_and_unscale_",
         "aten::_amp_update_scale_", "aten::_fused_sdp_choice", "aten::is_pinned", "aten::_pin_memory",
         "aten::_has_compatible_shallow_copy_type", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::zero_", "aten::fill_", "aten::zeros_like",
         "aten::ones_like", "aten::full_like", "aten::scalar_tensor", "aten::_foreach_zero_"}
_RANDOM_NAMES = ("aten::native_dropout", "aten::bernoulli", "aten::rand", "aten::normal", "aten::uniform",
                 "aten::randperm", "aten::multinomial", "aten::random", "aten::exponential")
_SEEDED = getattr(getattr(torch, "Tag", None), "nondeterministic_seeded", None)


def _eligible(func) -> Optional[str]:
    """None when the operation is recomputed, else why not."""
    schema = func._schema
    name = schema.name
    if not name.startswith(("aten::", "prims::")):
        return "collective or custom operation"
    if name in _SKIP:
        return "no computation to check"
    if (_SEEDED is not None and _SEEDED in getattr(func, "tags", ())) or name.startswith(_RANDOM_NAMES):
        return "random"
    returns = schema.returns
    if returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns):
        return "view"
    return None


def _written(func, args, kwargs) -> List[torch.Tensor]:
    found = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            found.extend(_tensors(value))
    return found


def _tensors(value) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


_CPU = torch.device("cpu")


def _copy(value, upcast: bool, fresh: bool = True):
    """`value` with its tensors on the CPU (float64 when `upcast`); `fresh`: always a copy (the operation
    writes its arguments), else a tensor already on the CPU is read where it is (never written)."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.device.type == "meta":
            raise _NotCopyable()
        if upcast and value.is_floating_point():  # one conversion (a copy whenever the dtype changes)
            return value.detach().to(_CPU, torch.float64, copy=fresh)
        return value.detach().to(_CPU, copy=fresh)
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v, upcast, fresh) for v in value)
    if isinstance(value, torch.device):
        return _CPU
    return value


class _NotCopyable(Exception):
    pass


def _absmax(t: torch.Tensor) -> float:
    """The largest magnitude in `t` (NaN if it holds one): one min/max pass (aminmax is several times
    faster than the infinity norm or abs().max() on the CPU)."""
    low, high = torch.aminmax(t)
    low, high = -float(low), float(high)
    if low != low or high != high:
        return float("nan")
    return max(low, high)


def _ulp_unit(dtype, scale: float) -> float:
    """One unit in the last place of `dtype` at the magnitude `scale`."""
    return _EPS[dtype] * (2.0 ** math.floor(math.log2(scale)) if scale > 0 else 2.0 ** -126)


def _cpu_kwargs(kwargs: Dict[str, Any], upcast: bool, fresh: bool = True) -> Dict[str, Any]:
    out = {k: _copy(v, upcast, fresh) for k, v in kwargs.items()}
    if "device" in out and out["device"] is not None:
        out["device"] = _CPU
    if out.get("pin_memory"):
        out["pin_memory"] = False
    return out


class Shadow:
    fast = FAST_NONE  # every operation through the session: copies before it runs

    def __init__(self, report, settings):
        self.report, self.settings = report, settings
        self.session = None
        self.why: Dict[Any, Optional[str]] = {}
        self.rows: Dict[tuple, float] = {}
        self.diverged_step: Optional[int] = None

    def classify(self, func, name: str) -> int:
        """The watch's flags for an operation (`watch.py`): all the session's (`before` copies)."""
        return SLOW

    def before(self, func, args, kwargs, op):
        why = self.why.get(func, 0)
        if why == 0:
            why = self.why[func] = _eligible(func)
        if why is not None:
            if why in ("random", "collective or custom operation"):
                self.report.note(f"not recomputed ({why}; its outputs are taken as they are): {op.name}",
                                 summary=False, op=op.name)
            return None
        fresh = func._schema.is_mutable  # it writes an argument: copy them before it runs
        try:
            own = tuple(_copy(a, False, fresh) for a in args), _cpu_kwargs(kwargs, False, fresh)
        except _NotCopyable:
            return None
        return own

    def after(self, func, args, kwargs, out, op, state):
        if state is None:
            return
        own_args, own_kwargs = state
        fresh = func._schema.is_mutable
        upcast = (tuple(_copy(a, True, fresh) for a in own_args), _cpu_kwargs(own_kwargs, True, fresh))
        try:
            ref_out = func(*upcast[0], **upcast[1])
        except Exception:
            ref_out = None  # no float64 kernel: the CPU in the op's dtype is the reference
        targets = _tensors(out) or _written(func, args, kwargs)
        float_inputs = any(t.is_floating_point() for t in _tensors(args) + _tensors(list(kwargs.values())))
        if ref_out is not None:
            refs = _tensors(ref_out) or _written(func, *upcast)
            scores = self._agree(op, targets, refs, float_inputs) if len(targets) == len(refs) else None
            if scores is not None:  # within the ULP floor of float64 everywhere: no divergence whatever the
                self.report.checked += 1  # CPU's own error (the rule's allowance only grows with it)
                if scores:
                    key = (op.module, op.phase)
                    self.rows[key] = max(self.rows.get(key, 0.0), max(scores))
                return
        try:
            cpu_out = func(*own_args, **own_kwargs)
        except Exception as exc:  # the CPU has no kernel for it (dtype, device-only operation)
            self._unchecked(op, exc)
            return
        cpus = _tensors(cpu_out) or _written(func, own_args, own_kwargs)
        refs = (_tensors(ref_out) or _written(func, *upcast)) if ref_out is not None else [None] * len(cpus)
        if not (len(targets) == len(cpus) == len(refs)):
            self._unchecked(op, "outputs do not pair")
            return
        self.report.checked += 1
        worst: Optional[Dict[str, Any]] = None
        for t, c, r in zip(targets, cpus, refs):
            if t.layout != torch.strided or t.shape != c.shape:
                continue
            if t.is_floating_point():
                metrics = self._compare(op, t, c, r)
            elif not float_inputs:
                metrics = self._exact(t, c)
            else:
                continue
            if metrics is not None and (worst is None or metrics["score"] > worst["score"]):
                worst = metrics
        if worst is None:
            return
        key = (op.module, op.phase)
        self.rows[key] = max(self.rows.get(key, 0.0), worst["score"])
        if worst["diverged"] and self.report.finding is None:
            self.diverged_step = op.step
            self.report.found(op, {k: v for k, v in worst.items() if k not in ("score", "diverged")})

    def _agree(self, op, targets, refs, float_inputs) -> Optional[List[float]]:
        """The quick test, against float64 alone: each output's score (error / ULP floor, at most 1) when
        every output is finite and within ``ulp`` units of float64 (it agrees then, whatever the CPU's own
        error: the rule's allowance only grows with it), else None (the full comparison decides, with the
        CPU's own computation). One subtraction and two maximum passes per output."""
        scores = []
        for t, r in zip(targets, refs):
            if t.layout != torch.strided or t.shape != r.shape:
                continue
            if not t.is_floating_point():
                if float_inputs:
                    continue
                if not torch.equal(t.detach().to(_CPU), r):  # integers only: the upcast changed nothing
                    return None
                scores.append(0.0)
                continue
            dtype = t.dtype
            if dtype not in _DTYPE or t.numel() == 0:
                continue
            error = t.detach().to(_CPU, torch.float64, copy=True)
            max_err = _absmax(error.sub_(r))  # NaN and inf propagate
            scale = _absmax(r)
            if not (math.isfinite(max_err) and math.isfinite(scale)):
                return None
            floor = self.settings.threshold("ulp", op.short, _DTYPE[dtype]) * _ulp_unit(dtype, scale)
            if max_err > floor:
                return None
            scores.append(max_err / floor if floor > 0 else 0.0)
        return scores

    def _unchecked(self, op, why) -> None:
        self.report.note(f"not recomputed on the CPU: {op.name} ({str(why).splitlines()[0][:120]})", op=op.name)

    def _exact(self, t, c) -> Optional[Dict[str, Any]]:
        differs = int((t.detach().to(_CPU) != c).sum())
        return {"diverged": differs > 0, "score": float(differs > 0) * 10.0, "differs": differs}

    def _compare(self, op, t, c, r) -> Optional[Dict[str, Any]]:
        dtype = t.dtype
        name = _DTYPE.get(dtype)
        if name is None or t.numel() == 0:
            return None
        s = self.settings
        target = t.detach().to(_CPU, torch.float64)
        own = c.to(torch.float64)
        ref = own if r is None else r.to(torch.float64)
        norm = torch.linalg.vector_norm
        if bool(torch.isfinite(target.sum() + own.sum() + ref.sum())):  # the usual case: one pass each
            tv, cv, rv = target.reshape(-1), own.reshape(-1), ref.reshape(-1)
        else:
            t_ok, c_ok = torch.isfinite(target), torch.isfinite(own)
            mismatched = int((t_ok != c_ok).sum())
            if mismatched:
                return {"diverged": True, "score": 1e6, "nonfinite": f"{mismatched} positions differ from the CPU's",
                        "dtype": name}
            mask = t_ok & torch.isfinite(ref)
            if not bool(mask.any()):
                return None
            tv, cv, rv = target[mask], own[mask], ref[mask]
        max_err = _absmax(tv - rv)
        own_err = _absmax(cv - rv)
        scale = _absmax(rv)
        ulp_unit = _ulp_unit(dtype, scale)
        short = op.short
        allowed = s.threshold("ratio", short, name) * own_err + s.threshold("ulp", short, name) * ulp_unit
        cosine = own_cosine = None
        t_norm, r_norm, c_norm = float(norm(tv)), float(norm(rv)), float(norm(cv))
        if tv.numel() > 1 and t_norm > 0 and r_norm > 0:
            cosine = float((tv @ rv) / (t_norm * r_norm))
            own_cosine = float((cv @ rv) / (c_norm * r_norm)) if c_norm > 0 else 0.0
        least = s.threshold("cosine", short, name)
        # the cosine rule only where the CPU itself reaches it: an output that is float noise on the CPU
        # too (a gradient that is zero in exact arithmetic) has no direction to agree on
        diverged = max_err > allowed or (cosine is not None and cosine < least and own_cosine >= least
                                         and max_err > s.threshold("ulp", short, name) * ulp_unit)
        metrics = {"diverged": diverged,
                   "score": max_err / allowed if allowed > 0 else (0.0 if max_err == 0 else 1e6),
                   "max_abs_err": max_err, "cosine": cosine, "ulp": max_err / ulp_unit, "reference_error": own_err,
                   "dtype": name}
        if diverged:
            metrics["max_rel_err"] = float(((tv - rv).abs() / rv.abs().clamp_min(ulp_unit)).max())
        return metrics

    def end_step(self, step: int) -> None:
        if self.diverged_step is not None and self.diverged_step == step:
            rows = [{"module": m, "phase": p, "error": e} for (m, p), e in self.rows.items()]
            self.report.modules(step, rows, "error / allowed error")
            if self.session is not None:
                self.session.halt()
        self.rows = {}

    def finish(self) -> None:
        pass
