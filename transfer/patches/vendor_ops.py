"""What the plug-in computes otherwise than CUDA, operator by operator: CPU fallbacks, float64 casts.

**CPU fallbacks** (`Fallbacks`). torch_npu runs an aten operator it has no kernel for through a boxed
PrivateUse1 fallback (torch_npu/csrc/aten/VariableFallbackKernel.cpp): the tensors go to the host, the CPU
kernel runs, the results come back, and one line per operator goes to stderr on rank 0, without the line
of the script that called it. CUDA's result, at host speed. At install transfer asks the dispatcher which
aten overloads reach that fallback (no PrivateUse1 kernel, no composite kernel, and the PrivateUse1 entry
of the dispatch table filled: the plug-in's fallback) and keeps those the plug-in's own list for this
torch does not name (`transfer.opsupport`; on torch_npu the two agree, as the list is what it registers;
a plug-in whose boxed fallback also serves listed operators is then read right too), less the ``out=``
overloads nothing else reaches on the device (`Coverage.counted`: only a script's own ``out=`` call does on
torch_npu; a plug-in serving the functional form through torch's composite kernel would call one on every
functional call, and those are no fallbacks of torch_npu's). Each gets a Python
kernel at the BackendSelect key: torch includes BackendSelect in every dispatch, nested calls from
composite and structured kernels too (``torch.lgamma`` reaches ``aten::lgamma.out`` through one), but not
the CPU calls the fallback makes itself (it redispatches to the CPU key alone). The kernel counts the calls
whose tensors are on the device (the dispatch key set holds the device's key), records the first one's
line of user code (in backward, where no Python frame is on the stack, the autograd node), says it once
(rank 0), and redispatches past BackendSelect: the plug-in's fallback then runs exactly as without transfer,
its warning, ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` error and sparse refusal included. Operators with a
kernel are not touched and cost nothing. Needs ``Library.impl(with_keyset=True)`` and
``OpOverload.redispatch`` (torch >= 2.4); on older torch the fallbacks are not counted (status says so).

The rehearsal (TRANSFER_PLAN with a target that has such data, on CUDA or the cpu target) watches, with the
same kernels, the overloads whose call reaches a fallback on the planned target (the data's entries: on
CUDA a structured operator's functional variant has a kernel of its own, on the npu it calls the ``out``
overload that falls back), counting the outermost one of a nested call.

**float64 casts** (`Float64`). torch_npu's ``_to_copy`` turns a dtype-only float64 conversion of an npu
tensor (``x.double()``, ``x.to(torch.float64)``, ``model.double()``, ``model.to(torch.float64)``) into
float32 (ToKernelNpu.cpp), warning once without a line. It is left so (docs/limits.md says why) and named:
the banner (`ctx.substitutions`), and at the first such cast the user's line in status()['substitutions'],
one warning, the call-site log and the accuracy mode's report. ``Tensor.double`` gets a small wrapper
(this target only); ``Tensor.to`` / ``Module.to`` are checked on their wrapper's slow path
(`patches/_calls.device_first`, which keeps float64 out of its memo until the first cast is named): the
hot path is unchanged. Once the first cast is named, ``Tensor.double`` is torch's own again.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Dict, List, Optional

import torch

from .. import frames, opsupport, settings
from ._calls import NO_ARG

logger = logging.getLogger("transfer")

#: `ctx.substitutions`' key for the float64 casts (the banner says "<key> runs as float32").
FLOAT64 = "x.double()"
#: The log's class of a CPU fallback and of a float64 cast turned float32 (`transfer.calllog`).
FALLBACK_CLASS, FLOAT32_CLASS = "cpu fallback", "float32"
_COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
_has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key


def apply(ctx) -> None:
    watch = float64_for(ctx)
    if watch is not None:
        if watch.plan is None:
            ctx.substitutions[FLOAT64] = ctx.profile.float64_cast
        ctx.registry.replace("vendor_ops.double", torch.Tensor, "double", watch.wrap(torch.Tensor.double))
    if ctx.profile.op_coverage:
        watch_fallbacks(ctx, ctx.profile.name, ctx.profile.device_type, planned=False)
    else:
        plan = _planned(ctx)
        if plan is not None and plan.op_coverage:
            watch_fallbacks(ctx, plan.name, "cpu", planned=True)


def _planned(ctx):
    """The rehearsal's planned profile on the cpu target (TRANSFER_PLAN: transfer/plan.py), else None."""
    if ctx.cpu is None:
        return None
    from ..plan import planned_profile

    return planned_profile()


def _site(frame) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _say(ctx, text: str) -> None:
    """One line on rank 0 (as torch_npu's own warnings), and a note in the accuracy mode's report."""
    if settings.is_rank_zero():
        logger.warning("%s", text)
    compare = sys.modules.get("transfer.compare")
    session = compare.active() if compare is not None else None
    if session is not None:
        session.report.note(text)


# ------------------------------------------------------------------------------------------- float64
def float64_watch(ctx, plan=None) -> "Float64":
    """The context's one `Float64` (made on first use: the tensor and module areas take it too)."""
    watch = getattr(ctx, "float64", None)
    if watch is None:
        watch = ctx.float64 = Float64(ctx, plan)
    return watch


def float64_for(ctx) -> Optional["Float64"]:
    """The watch `patches/_calls.device_first` checks on its slow path: None where casts keep float64."""
    if ctx.profile.float64_cast:
        return float64_watch(ctx)
    plan = _planned(ctx)
    if plan is not None and plan.float64_cast:
        return float64_watch(ctx, plan)
    return None


class Float64:
    """Names the first dtype-only float64 cast of a device tensor (module docstring)."""

    def __init__(self, ctx, plan=None, device_type: Optional[str] = None):
        self.ctx = ctx
        self.plan = plan  # the rehearsal's planned profile: the cast would be float32 there, here it is not
        self.profile = plan or ctx.profile
        # where this run's device tensors live: the target's (cpu in a rehearsal there; cuda on real CUDA)
        self.device_type = device_type or ctx.profile.device_type
        self.done = False  # the first cast is named: nothing more to look at
        # a host tensor is no device tensor (on a vendor, on CUDA): the callers skip it at the C getter `is_cpu`
        self.host_skips = self.device_type != "cpu"
        self._lock = threading.Lock()

    def wrap(self, double):
        """``Tensor.double`` with the check in front (until the first cast is named: one test after)."""
        watch = self

        f64, host_skips = torch.float64, self.host_skips

        def wrapper(self, *args, **kwargs):
            if not watch.done and not (host_skips and self.is_cpu):
                watch.check(self, f64, (), {}, "double")
            return double(self, *args, **kwargs)

        wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = "double", "Tensor.double", double.__doc__
        wrapper.__wrapped__ = double
        return wrapper

    def wrap_to(self, to):
        """``Tensor.to`` / ``Module.to`` with the check in front: the rehearsal's on real CUDA, where no
        wrapper of transfer's is there to check on its slow path (one identity test a call after)."""
        watch, f64 = self, torch.float64

        def wrapper(self, *args, **kwargs):
            if not watch.done and (args and (args[0] is f64 or args[0] is None) or "dtype" in kwargs):
                watch.check(self, args[0] if args else NO_ARG, args[1:], kwargs)
            return to(self, *args, **kwargs)

        wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = "to", getattr(to, "__qualname__", "to"), to.__doc__
        wrapper.__wrapped__ = to
        return wrapper

    def check(self, obj: Any, first: Any, args: tuple, kwargs: dict, method: str = "to") -> None:
        """Name the call if ``obj.to(first, *args, **kwargs)`` (`method` "double": ``obj.double()``) is a dtype-only
        float64 cast of a tensor (a module's floating parameters) on the device that is not float64 already."""
        tensor = obj if isinstance(obj, torch.Tensor) else _first_floating(obj)
        if tensor is None or tensor.dtype is torch.float64:
            return
        if self.device_type == "cpu":  # a rehearsal on the cpu target: every tensor is a device one
            if not tensor.is_cpu:
                return
        elif tensor.is_cpu or tensor.device.type != self.device_type:  # a host tensor: the C getter answers
            return
        if not _dtype_only_float64(first, args, kwargs):
            return
        frame = frames.user_frame(sys._getframe(1))
        with self._lock:
            if self.done:
                return
            self.done = True
        self.named(frame, "Module" if isinstance(obj, torch.nn.Module) else "Tensor", method)

    def named(self, frame, owner: str, method: str) -> None:
        site = "<unknown>" if frame is None else _site(frame)
        call = f"{owner}.{method}"
        spelled = "x.double()" if method == "double" else "x.to(torch.float64)"
        dev = self.profile.device_type
        why = self.profile.float64_cast.partition(" (")[2].rstrip(")")
        what = (f"{call} of an {dev} {'model' if owner == 'Module' else 'tensor'} returns float32 on {dev}, not "
                f"float64 as on CUDA ({why})")
        ctx = self.ctx
        if self.plan is None:
            ctx.substitutions[FLOAT64] = f"{self.profile.float64_cast}; first at {site}"
            _say(ctx, f"transfer: {site}: {what}; what follows computes in float32 (details: transfer.report())")
        log = getattr(ctx, "log", None)
        if log is not None and frame is not None:
            log.add(call, frame, None, {}, FLOAT32_CLASS, f"float32 on {dev} ({spelled})", reason=what)
        ctx.registry.revert_one(torch.Tensor, "double")  # named: Tensor.double is torch's own again


def _dtype_only_float64(first: Any, args: tuple, kwargs: dict) -> bool:
    """``to(torch.float64, ...)``, ``to(None, torch.float64, ...)``, ``to(dtype=torch.float64)``: torch's
    ``to`` overloads that convert the dtype alone (a device given keeps float64 on torch_npu)."""
    f64 = torch.float64
    if kwargs.get("device") is not None:
        return False
    if first is f64:
        return True
    if first is None or first is NO_ARG:
        return (args[:1] == (f64,) if args else False) or kwargs.get("dtype") is f64
    return False


def _first_floating(module) -> Optional[torch.Tensor]:
    if not isinstance(module, torch.nn.Module):
        return None
    for tensor in module.parameters():
        if tensor.is_floating_point():
            return tensor
    for tensor in module.buffers():
        if tensor.is_floating_point():
            return tensor
    return None


# ------------------------------------------------------------------------------------------ fallbacks
def watch_fallbacks(ctx, profile_name: str, device_type: str, planned: bool) -> Optional["Fallbacks"]:
    """Count the calls that reach (or, `planned`, would reach) `profile_name`'s CPU fallback; None when this
    torch cannot (torch < 2.4) or the profile has no data. The result is ``ctx.fallbacks``."""
    coverage = opsupport.coverage(profile_name, torch.__version__)
    if coverage is None or not ctx.registry.enabled("vendor_ops.fallbacks"):
        return None
    watch = Fallbacks(ctx, coverage, device_type, planned)
    ctx.fallbacks = watch
    if not watch.supported():
        return watch
    if planned:
        targets = {name: x for name, x in coverage.entries().items() if coverage.counted(x)}
    else:
        targets = {name: name for name in dispatcher_fallbacks(coverage) if coverage.counted(name)}
    watch.install(targets)
    return watch


def dispatcher_fallbacks(coverage: opsupport.Coverage) -> List[str]:
    """The aten overloads the dispatcher sends to the PrivateUse1 fallback and the plug-in's list lacks.

    Set arithmetic over the dispatcher's registrations (one call per key, ~5 ms): every aten overload,
    less those with a PrivateUse1 kernel, a composite kernel or a BackendSelect kernel of their own (a
    factory's), less the plug-in's list; kept are those with a CPU kernel, which the fallback runs (one
    without fails there as it would without transfer: cudnn_*, mkldnn_*, quantized ones). Empty when the
    plug-in registered no PrivateUse1 fallback (the dispatch table's entry is empty)."""
    registered = torch._C._dispatch_get_registrations_for_dispatch_key
    skip = set(registered("PrivateUse1")) | set(registered("BackendSelect"))
    for key in _COMPOSITE:
        skip.update(registered(key))
    cpu = set(registered("CPU"))
    found = []
    for full in cpu - skip:
        if full.startswith("aten::"):
            name = full[len("aten::"):]
            if name not in coverage.supported:
                found.append(name)
    computed = getattr(torch._C, "_dispatch_has_computed_kernel_for_dispatch_key", None)
    if found and computed is not None and not computed(opsupport.aten_name(found[0]), "PrivateUse1"):
        return []  # no fallback at PrivateUse1: such a call fails as without transfer
    return sorted(found)


class Fallbacks:
    """Per operator: calls, the first call's line; `rows` for status() (module docstring)."""

    def __init__(self, ctx, coverage: opsupport.Coverage, device_type: str, planned: bool):
        self.ctx = ctx
        self.coverage = coverage
        self.planned = planned
        self.key = getattr(torch._C.DispatchKey, "CPU" if device_type == "cpu" else
                           ("CUDA" if device_type == "cuda" else "PrivateUse1"))
        self.seen: Dict[str, list] = {}  # fallback -> [calls, first site, phase]
        self.watched = 0
        self.library = None
        self._lock = threading.Lock()
        self._local = threading.local()  # planned: inside a watched call (count the outermost one)

    @staticmethod
    def supported() -> bool:
        import inspect

        try:
            keyset = "with_keyset" in inspect.signature(torch.library.Library.impl).parameters
        except (TypeError, ValueError):
            keyset = False
        return keyset and hasattr(torch._ops.OpOverload, "redispatch")

    def install(self, targets: Dict[str, str]) -> None:
        """A BackendSelect kernel for each overload of `targets` (overload -> the fallback it stands for).

        Registered with torch's own ``Library.impl`` (patches/custom_ops.py wraps it for scripts' kernels)."""
        library = torch.library.Library("aten", "IMPL")
        impl = self.ctx.registry.get_original(torch.library.Library, "impl")
        known = set(torch._C._dispatch_get_all_op_names()) if self.planned else None  # else: the dispatcher's own
        for name, fallback in sorted(targets.items()):
            full = opsupport.aten_name(name)
            if known is not None:
                if full not in known:
                    continue  # not an operator of this torch
                if _has_kernel(full, "BackendSelect") or _has_kernel(full, _COMPOSITE[0]):
                    continue  # a factory's own BackendSelect kernel; a decomposition never reaches BackendSelect
            impl(library, name, self._kernel(name, fallback), "BackendSelect", with_keyset=True)
            self.watched += 1
        self.library = library
        from ..cpu.kernels import destroy

        self.ctx.registry.on_revert("vendor_ops.fallbacks", lambda: destroy(library))

    def _kernel(self, name: str, fallback: str):
        """The BackendSelect kernel of overload `name` (its OpOverload is looked up at its first call: resolving
        ~220 at install cost ~0.3 s on a loaded 2-core machine)."""
        select = torch._C.DispatchKey.BackendSelect
        python = torch._C.DispatchKey.Python
        key, seen, local = self.key, self.seen, self._local
        ops: list = []

        def redispatch(keyset, args, kwargs):
            if not ops:
                base, _, overload = name.partition(".")
                ops.append(getattr(getattr(torch.ops.aten, base), overload or "default"))
            return ops[0].redispatch(keyset.remove(select), *args, **kwargs)

        if not self.planned:
            def kernel(keyset, *args, **kwargs):
                if keyset.has(key) and not keyset.has(python):  # on the device, not a fake/traced tensor
                    entry = seen.get(fallback)
                    if entry is None:
                        self.first(fallback)
                    else:
                        entry[0] += 1
                return redispatch(keyset, args, kwargs)
            return kernel

        def planned(keyset, *args, **kwargs):
            if not keyset.has(key) or keyset.has(python) or getattr(local, "inside", False):
                return redispatch(keyset, args, kwargs)
            entry = seen.get(fallback)
            if entry is None:
                self.first(fallback)
            else:
                entry[0] += 1
            local.inside = True
            try:
                return redispatch(keyset, args, kwargs)
            finally:
                local.inside = False
        return planned

    def first(self, fallback: str) -> None:
        """The first call of `fallback`: its site, said once, logged."""
        frame = frames.user_frame(sys._getframe(1))
        node = torch._C._current_autograd_node()
        phase = "forward" if node is None else "backward"
        if frame is not None:
            site = _site(frame)
        else:
            site = f"<backward of {node.name()}>" if node is not None else "<unknown>"
        with self._lock:
            entry = self.seen.get(fallback)
            if entry is not None:
                entry[0] += 1
                return
            self.seen[fallback] = [1, site, phase]
        cov = self.coverage
        op = opsupport.aten_name(fallback)
        apis = cov.apis_of(fallback)
        via = f" ({', '.join(apis[:2])})" if apis else ""
        why = (f"{cov.describe()} has no kernel for {op}: its CPU fallback copies the tensors to the host and "
               "back (CUDA's result, at host speed)")
        if not self.planned:
            _say(self.ctx, f"transfer: {site}: {op}{via} runs on the CPU: {cov.describe()} has no "
                           f"{self.ctx.profile.device_type} kernel for it (CUDA's result, at host speed); calls are "
                           "counted in transfer.status()['fallbacks']")
        log = getattr(self.ctx, "log", None)
        if log is not None and frame is not None:
            became = f"runs on the CPU on {cov.profile}" if self.planned else "runs on the CPU"
            log.add(op, frame, None, {}, FALLBACK_CLASS, became, reason=why)

    def rows(self) -> List[Dict[str, Any]]:
        """status()['fallbacks']: one row per operator, in the order first seen."""
        cov = self.coverage
        rows = []
        for fallback, (calls, site, phase) in list(self.seen.items()):
            row = {"op": opsupport.aten_name(fallback), "calls": calls, "first_site": site, "phase": phase,
                   "apis": cov.apis_of(fallback), "why": f"{cov.describe()} has no kernel for it: it runs on the CPU"}
            if self.planned:
                row["plan"] = cov.profile
            rows.append(row)
        return rows

    def status(self) -> Optional[str]:
        """Why nothing is counted, when nothing can be (None when the watch runs)."""
        if self.library is None:
            return (f"CPU fallbacks are not counted on torch {torch.__version__}: it needs torch >= 2.4 "
                    "(Library.impl with_keyset, OpOverload.redispatch)")
        return None
