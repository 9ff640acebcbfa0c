"""The per-call-site runtime log: ``TRANSFER_LOG=<dir>`` (``transfer-run --log DIR``).

Every CUDA-facing call the shim intercepted, once per call site (the user's
frame: the first outside torch and transfer): time, file:line, the source
line, the class from the support table (`support.lookup`), the original call
and what it became. ``torch.cuda.<name>`` calls torch makes on itself
(SyncBatchNorm's forward asking ``is_available()``, ``torch.manual_seed``
seeding CUDA, torch 2.0's autocast) are not the user's code and differ between
torch versions: they are left out, so one script logs the same sites on every
torch. JSON lines in ``<dir>/transfer-log-rank<R>.jsonl``, each process under
its real rank (from RANK, or from init_process_group for mp.spawn workers; the
main process of an mp.spawn job writes ``transfer-log-main.jsonl``: see
`transfer.logfiles`); the process that started the job prints one summary at exit. The
same records feed `transfer.status()['call_sites']` and `transfer.report()`.

Free when off: `attach` runs only when TRANSFER_LOG is set, and it wraps the
already installed replacements; with it unset nothing is wrapped (``Tensor.is_cuda``
stays the target's own C getter). With it on:

* functions get a logging layer named and pickled as the original (presentation.py);
* wrapt wrappers (DDP, DataParallel, DataLoader, amp, distributed, torch.load)
  get a new wrapper around the patch's own: the patch's call to torch's original
  is observed, so "became" is what the patch really passed on
  (``device_ids=[0] dropped``, ``backend='nccl' -> 'gloo'``);
* classes (``torch.cuda.Stream``/``Event``/..., ``torch.Generator``) get a
  subclass whose metaclass logs construction; isinstance/issubclass answer as
  for the class it stands for;
* ``Tensor.is_cuda`` becomes a Python property answering the target's getter,
  logging reads made by user code (torch's own reads are not the user's call);
* SyncBatchNorm construction, which no patch changes, is watched by one wrapper
  registered as ``sync_batchnorm.log`` (so TRANSFER_DISABLE=sync_batchnorm skips it).

Left unlogged, each for one reason (see `_LEFT`): per-step internals whose
construction is logged (DataParallel.forward, SyncBatchNorm.forward), torch's
own hooks (DDP's SyncBatchNorm check, dynamo's is_cuda), torch.accelerator
(device-generic, not a CUDA spelling), torch.cuda.nvtx (a namespace), and
torch.jit.script (its translation is inside the compiled graph, not in the call).

The hot path (a call from a site already decided) is one frame lookup, one
tuple (code object, instruction offset) and one set lookup; a call torch makes
for itself is decided from its arguments before any stack walk. Keys use
``f_lasti``, not ``f_lineno``: Python 3.11 computes a line number by scanning
the code's line table, ~1 us in a long function such as autograd's _make_grads.
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import torch

from . import frames, support
from .devices import parse_cuda
from .logfiles import Sink
from .presentation import PathWrapper, alias_meta, present
from .registry import MISSING

# Areas not listed decide nothing a user's CUDA call asks: environment (variables set once at
# install, shown by status()), accelerator (torch.accelerator is device-generic), dynamo (torch.compile's
# own is_cuda), shutdown (exit-time housekeeping), torchscript (torch.jit.script's translation is in the
# compiled graph's device constants, not in the call; `transfer scan` reports the call), device_mesh / fsdp /
# checkpoint (engine constructors and DCP's staging, called through the engines; the devices they translate are
# in transfer.report()).
_AREAS = ("cuda_namespace", "tensor", "module", "factories", "distributed", "amp", "serialization", "data",
          "ddp", "data_parallel", "sync_batchnorm")
#: Records of those areas left unlogged, and why.
_LEFT = {
    "cuda_namespace.nvtx": "a namespace of no-op markers, not a call",
    "ddp.sync_batchnorm_check": "torch's own hook inside DDP construction, which is logged",
    **{f"data_parallel.{step}": "torch's own steps inside DataParallel / data_parallel, whose calls are logged"
       for step in ("scatter", "gather", "replicate", "parallel_apply", "parallel_apply_public",
                    "parallel_apply_module")},
    "sync_batchnorm.forward": "per step; SyncBatchNorm construction is logged",
    "amp.autocast_state": "entering an autocast region, whose construction is logged",
    "amp.autocast_state_exit": "leaving an autocast region, whose construction is logged",
    "distributed.flight_recorder": "torch's own hook inside init_process_group (torch >= 2.15), which is logged",
}
_DEVICE_KEYS = ("device", "map_location", "device_type", "device_id", "pin_memory_device")

#: The support-table row (`support.OTHER_APIS`) of each logged API that is not ``torch.cuda.<name>``.
_ROWS = {
    "Tensor.cuda": "Tensor.cuda", "Tensor.to": "Tensor.to", "Module.to": "Module.to",
    "Tensor.is_cuda": "Tensor.is_cuda", "Tensor.pin_memory": "Tensor.pin_memory",
    "autocast": "torch.autocast", "GradScaler": "torch.amp.GradScaler",
    "torch.amp.custom_fwd": "torch.cuda.amp.custom_fwd", "torch.amp.custom_bwd": "torch.cuda.amp.custom_bwd",
    "torch.distributed.init_process_group": "torch.distributed.init_process_group",
    "torch.distributed.new_group": "torch.distributed.new_group",
    "torch.distributed.is_nccl_available": "torch.distributed.is_nccl_available",
    "DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "DataParallel": "torch.nn.DataParallel", "SyncBatchNorm": "torch.nn.SyncBatchNorm",
    "torch.nn.parallel.data_parallel": "torch.nn.parallel.data_parallel",
    "torch.nn.parallel.data_parallel.data_parallel": "torch.nn.parallel.data_parallel",
    "DataLoader": "DataLoader(pin_memory=True)", "torch.Generator": "torch.Generator('cuda')",
    "torch.set_default_device": "torch.set_default_device('cuda')",
    "with torch.device": "torch.set_default_device('cuda')",
    "torch.version.cuda": "torch.version.cuda",  # replaced on CUDA builds of torch (patches/cuda_namespace.py)
}
_ALWAYS_ROWS = ("torch.distributed.is_nccl_available", "torch.nn.SyncBatchNorm", "torch.nn.DataParallel",
                "torch.nn.parallel.data_parallel")


class CallLog:
    """The records of one install (status()['call_sites']); they go to this process's `Sink`."""

    def __init__(self, directory: str, ctx, plan=None):
        self.ctx = ctx
        # `plan` (TRANSFER_PLAN, transfer-run --plan: `transfer.plan.planned`): classes and "became" are the
        # planned target's, from the support table, whatever runs the job now (real CUDA; the cpu target; a vendor)
        self.plan = None if plan is None else plan.profile
        self.profile = self.plan or ctx.profile
        self.target = ctx.target if self.plan in (None, ctx.profile) else plan.target
        self.sink = Sink.of_process(directory)
        self.records: List[Dict[str, Any]] = []
        self._sites: set = set()  # (api, file, line): one record per site even for two code objects on a line
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return self.sink.path()

    def add(self, api: str, frame, args: Optional[tuple], kwargs: dict, cls: str, became: str,
            reason: Optional[str] = None) -> None:
        """Record `api` called at `frame` (args None: an attribute read, shown without parentheses); `reason`:
        why, for what the support table has no row of (patches/vendor_ops.py: CPU fallbacks, float64 casts)."""
        filename, line = frame.f_code.co_filename, frame.f_lineno
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rank": None, "pid": os.getpid(),
                  "site": f"{filename}:{line}", "source": linecache.getline(filename, line).strip(),
                  "class": cls, "call": api if args is None else f"{api}({_args(args, kwargs)})", "became": became}
        if self.plan is not None:  # the rehearsal's answer: what the planned target does, and why
            record.update(plan=self.plan.name, reason=reason if reason is not None else _support(self, api).reason)
        elif reason is not None:
            record["reason"] = reason
        with self._lock:
            if (api, filename, line) in self._sites:
                return
            if _is_launcher():  # checked late: `python -m` names __main__ after torch's import
                return
            self._sites.add((api, filename, line))
            self.records.append(record)
            self.sink.write(record)

    def close(self) -> None:
        """The end of the install (`transfer.uninstall`): this process's log ends with it (`Sink.finish`)."""
        self.sink.finish()


def _args(args: tuple, kwargs: dict) -> str:
    shown = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return ", ".join(shown)


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"<tensor on {value.device}>"
    if isinstance(value, torch.nn.Module):
        return f"<{type(value).__name__}>"
    if isinstance(value, torch.device):
        return str(value)  # npu:0
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.device) for v in value):
        return "[" + ", ".join(map(str, value)) + "]"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_launcher() -> bool:
    """torchrun's own process: it runs no user code, and has no rank of its own."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", "") == "torch.distributed.run" or os.path.basename(sys.argv[0] or "") == "torchrun"


# ----------------------------------------------------------------------- attach
def attach(ctx, directory: str, plan=None) -> CallLog:
    """Wrap the installed replacements of the CUDA-facing areas so each call site is logged once.

    Each wrapped record's replacement becomes the logging layer (`Registry.layer`);
    `Registry.revert_all` restores the originals as for any record. `plan`: the
    rehearsal's planned target (`transfer.plan.planned`), None to log for the running one.
    """
    log = CallLog(directory, ctx, plan)
    if ctx.registry.enabled("sync_batchnorm"):  # no patch changes SyncBatchNorm's constructor: watch it
        ctx.registry.wrap("sync_batchnorm.log", torch.nn.SyncBatchNorm, "__init__",
                          lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    for record in ctx.registry.records():
        if record.name.split(".", 1)[0] not in _AREAS or record.name in _LEFT:
            continue
        replacement, api = record.replacement, _api(record)
        if record.name == "tensor.is_cuda":
            wrapped = _logging_getter(log, replacement)
        elif isinstance(replacement, PathWrapper):
            wrapped = _logging_wrapper(log, api, replacement)
        elif inspect.isclass(replacement):
            wrapped = _logging_class(log, api, replacement)
        elif callable(replacement) and not isinstance(replacement, property):
            original = None if record.original is MISSING else record.original
            logged = _logging(log, api, replacement, method=api.startswith(("Tensor.", "Module."))
                              or record.attribute == "__init__")
            wrapped = present(record.owner, record.attribute, original, logged)
        else:
            continue
        ctx.registry.layer(record, wrapped)
    ctx.registry.on_revert("calllog.close", log.close)
    return log


def _api(record) -> str:
    owner = record.owner
    if record.name == "data.device_context":
        return "with torch.device"
    if owner is torch.cuda:
        return f"torch.cuda.{record.attribute}"
    if owner is torch.Tensor:
        return f"Tensor.{record.attribute}"
    if owner is torch.nn.Module:
        return f"Module.{record.attribute}"
    if record.attribute == "__init__":
        return f"{owner.__name__}"
    if owner is torch and record.attribute == "Generator":
        return "torch.Generator"
    module = getattr(owner, "__name__", None)
    if isinstance(module, str) and module.startswith("torch.distributed"):
        return f"torch.distributed.{record.attribute}"
    if module == "torch.amp":
        return f"torch.amp.{record.attribute}"
    return f"{getattr(owner, '__name__', owner)}.{record.attribute}"


def _support(log: CallLog, api: str) -> support.Support:
    """The table's entry for `api`: its own row, else the ``device='cuda'`` row (factories, new_*, load, ...)."""
    if api.startswith("torch.cuda."):
        return support.lookup(log.profile.name, api)
    return support.lookup(log.profile.name, _ROWS.get(api, "device='cuda'"))


def _cuda_value(value: Any) -> bool:
    if isinstance(value, (str, torch.device)):
        return parse_cuda(value) is not None
    if isinstance(value, dict):  # torch.load(map_location={'cuda:0': ...})
        return any(isinstance(v, (str, torch.device)) and parse_cuda(v) is not None for v in (*value, *value.values()))
    return False


_SPEC_TYPES = (str, torch.device, dict)


def _names_a_device(args: tuple, kwargs: dict) -> bool:
    """A cheap test: could an argument be a CUDA device spec? (`_device_verdict` decides.)"""
    for value in args:
        if isinstance(value, _SPEC_TYPES):
            return True
    if kwargs:
        for key in _DEVICE_KEYS:
            if key in kwargs:
                return True
    return False


def _device_verdict(log: CallLog, api: str, args: tuple, kwargs: dict):
    """(class, became) when an argument names a CUDA device, else None."""
    target = log.target
    for value in (*args, *(kwargs[k] for k in _DEVICE_KEYS if k in kwargs)):
        if _cuda_value(value):
            entry = _support(log, api)
            if isinstance(value, dict):
                return entry.cls, "map_location " + repr({k: str(target.translate(v, False)) for k, v in value.items()})
            return entry.cls, f"{_short(value)} -> {target.translate(value, False)}"
    return None


# -------------------------------------------------------------------- functions
def _logging(log: CallLog, api: str, fn: Callable, method: bool) -> Callable:
    """A layer over the function `fn` logging each CUDA-facing call site once (`method`: args[0] is self)."""
    target = log.target
    always = api.startswith("torch.cuda.") or api == "Tensor.cuda" or _ROWS.get(api) in _ALWAYS_ROWS

    def classify(args, kwargs):
        """(class, became) if the call is CUDA-facing, else None."""
        if api == "Tensor.cuda":
            device = args[1] if len(args) > 1 else kwargs.get("device")
            return _support(log, api).cls, f"Tensor.to({target.translate('cuda' if device is None else device, False)})"
        if always:
            entry = _support(log, api)
            return entry.cls, entry.to or entry.cls
        return _device_verdict(log, api, args[1:] if method else args, kwargs)

    seen: set = set()  # (code, f_lasti) of the user sites logged, and of torch's own calls of torch.cuda.*
    namespace = api.startswith("torch.cuda.") and "." not in api[len("torch.cuda."):]

    def slow(frame, args, kwargs):
        if namespace and frames.called_by_torch(frame):
            seen.add((frame.f_code, frame.f_lasti))
            return
        frame = frames.user_frame(frame)
        if frame is None:
            return
        key = (frame.f_code, frame.f_lasti)
        if key in seen:
            return
        verdict = classify(args, kwargs)
        if verdict is not None:
            seen.add(key)
            log.add(api, frame, args[1:] if method else args, kwargs, *verdict)

    def logged(*args, **kwargs):
        # The arguments first: most calls torch makes for itself name no device at all,
        # and they are decided without looking at the stack (backward's ones_like, every step).
        if always or _names_a_device(args, kwargs):
            frame = sys._getframe(1)
            if (frame.f_code, frame.f_lasti) not in seen:
                slow(frame, args, kwargs)
        return fn(*args, **kwargs)

    logged.__name__ = getattr(fn, "__name__", api.rsplit(".", 1)[-1])
    logged.__qualname__ = getattr(fn, "__qualname__", logged.__name__)
    logged.__doc__ = getattr(fn, "__doc__", None)
    logged.__wrapped__ = fn
    return logged


# ---------------------------------------------------------------- wrapt wrappers
def _logging_wrapper(log: CallLog, api: str, replacement: PathWrapper) -> PathWrapper:
    """A PathWrapper over the same original whose wrapper runs the patch's own and
    observes what the patch passes on to torch."""
    inner = replacement._self_wrapper
    original = replacement.__wrapped__
    seen: set = set()

    def wrapper(wrapped, instance, args, kwargs):
        frame = frames.user_frame(sys._getframe(1))
        if frame is None or (frame.f_code, frame.f_lasti) in seen:
            return inner(wrapped, instance, args, kwargs)
        passed = []
        asked = dict(kwargs)  # the patch may change `kwargs` in place

        def spy(*a, **k):
            passed.append((a, dict(k)))
            return wrapped(*a, **k)

        try:
            return inner(spy, instance, args, kwargs)
        finally:
            verdict = _wrapper_verdict(log, api, wrapped, instance, args, asked, passed)
            if verdict is not None:
                seen.add((frame.f_code, frame.f_lasti))
                log.add(api, frame, args, asked, *verdict)

    return PathWrapper(original, wrapper, replacement._self_home_owner, replacement._self_home_attribute)


def _signature(fn: Callable) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _bind(signature: Optional[inspect.Signature], args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
    if signature is None:
        return None
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        return None
    named = dict(bound.arguments)
    for key in list(named):  # **kwargs parameters: their items by name
        if signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(named.pop(key))
    return named


def _default(signature: Optional[inspect.Signature], key: str) -> Any:
    parameter = signature.parameters.get(key) if signature is not None else None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return _UNSET
    return parameter.default


def _changes(fn: Callable, args: tuple, kwargs: dict, passed: list, where: str) -> List[str]:
    """What the patch changed in the call it passed on: ``name=old -> new`` / ``name=old dropped``."""
    if not passed:
        return []
    signature = _signature(fn)  # one for both bindings and the defaults
    before, after = _bind(signature, args, kwargs), _bind(signature, *passed[0])
    if before is None or after is None:
        return [] if (args, kwargs) == passed[0] else [f"({_args(args, kwargs)}) -> ({_args(*passed[0])})"]
    out = []
    for key in [*before, *(k for k in after if k not in before)]:
        old, new = before.get(key, _UNSET), after.get(key, _UNSET)
        if old is new or (type(old) is type(new) and _same(old, new)):
            continue
        if old is _UNSET:
            if not _same(new, _default(signature, key)):  # an explicit default is no change
                out.append(f"{key}={_short(new)} added")
        elif new is None or new is _UNSET:
            out.append(f"{key}={_short(old)} dropped on {where}")
        else:
            out.append(f"{key}={_short(old)} -> {_short(new)}")
    return out


_UNSET = object()


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # tensors, odd objects
        return False


def _wrapper_verdict(log: CallLog, api: str, wrapped, instance, args, kwargs, passed):
    profile = log.profile
    if api == "DataParallel":
        ids = getattr(instance, "device_ids", None)
        asked = _bind(_signature(wrapped), args, kwargs) or {}
        if not ids:
            became = "runs the bare module (no device)"
        else:
            became = (f"device_ids {_short(asked.get('device_ids'))} -> one {profile.device_type} device "
                      f"({instance.src_device_obj})")
        return _support(log, api).cls, became
    if log.plan is not None and log.plan is not log.ctx.profile:  # a rehearsal: the planned target's answer
        entry = _support(log, _ROWS.get(api, api))
        return entry.cls, entry.to or entry.cls
    changes = _changes(wrapped, args, kwargs, passed, profile.device_type)
    if api == "SyncBatchNorm":
        entry = _support(log, api)
        return entry.cls, entry.to
    if api == "DistributedDataParallel":
        entry = _support(log, api)
        return entry.cls, ", ".join(changes) or f"{entry.to}: device_ids as given"
    if api == "torch.load":
        return _device_verdict(log, api, args[1:], kwargs)
    if not changes:
        return None
    return _support(log, api).cls, ", ".join(changes)


# ----------------------------------------------------------------------- classes
def _logging_class(log: CallLog, api: str, replacement: type) -> type:
    """A subclass of `replacement` whose metaclass logs construction once per site.

    isinstance/issubclass against it answer as against `replacement` (the
    vendor's own Stream instances, every torch generator).
    """
    base_meta = type(replacement)
    device_only = not api.startswith("torch.cuda.")  # torch.Generator: CUDA-facing only with a CUDA device
    seen: set = set()

    def log_call(args, kwargs):
        frame = frames.user_frame(sys._getframe(2))
        if frame is None or (frame.f_code, frame.f_lasti) in seen:
            return
        if device_only:
            verdict = _device_verdict(log, api, args, kwargs)
        else:
            entry = _support(log, api)
            verdict = entry.cls, entry.to or entry.cls
        if verdict is not None:
            seen.add((frame.f_code, frame.f_lasti))
            log.add(api, frame, args, kwargs, *verdict)

    alias = alias_meta(base_meta)  # isinstance/issubclass answer for `replacement`

    class LoggingMeta(alias):
        def __call__(cls, *args, **kwargs):
            log_call(args, kwargs)
            return alias.__call__(cls, *args, **kwargs)

    LoggingMeta.__name__ = LoggingMeta.__qualname__ = f"Logging{base_meta.__name__}"
    attrs = {"__module__": replacement.__module__, "__qualname__": replacement.__qualname__,
             "__doc__": replacement.__doc__, "_transfer_alias_of": replacement}
    return LoggingMeta(replacement.__name__, (replacement,), attrs)


# --------------------------------------------------------------- Tensor.is_cuda
def _logging_getter(log: CallLog, getter: Any) -> property:
    """``Tensor.is_cuda`` as a property answering `getter` (the target's own), logging user reads."""
    get = getter.__get__
    entry = _support(log, "Tensor.is_cuda")
    done: set = set()  # (code, line) of every read site decided: logged, or torch's own

    def first_read(frame, tensor):
        done.add((frame.f_code, frame.f_lasti))
        if not frames.is_internal(frame.f_code):  # torch reading is_cuda for itself is not the user's call
            log.add("Tensor.is_cuda", frame, None, {}, entry.cls, f"{entry.to} ({get(tensor)})")

    def is_cuda(self):
        frame = sys._getframe(1)
        if (frame.f_code, frame.f_lasti) not in done:
            first_read(frame, self)
        return get(self)

    return property(is_cuda, doc=getattr(getter, "__doc__", None) or "True on the target device")
