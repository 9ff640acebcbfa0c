"""The rehearsal: ``transfer-run --plan npu --log DIR`` on the cluster a team already has.

With ``TRANSFER_PLAN=<profile>`` and ``TRANSFER_LOG=<dir>``, every CUDA-facing
call site of the job is logged (`transfer.calllog`) with what the *planned*
target will do with it, from the support table: its class (translated, no-op,
placeholder, unsupported), what the call becomes there ("became": ``cuda:1 ->
npu:1``) and why ("reason"). Each record names the plan (``"plan": "npu"``).

* Where transfer runs the job (a vendor, the cpu target), the shim translates
  as always and the log classifies for the plan (`planned` reads TRANSFER_PLAN;
  transfer.install passes the plan to `calllog.attach`).
* On real CUDA, where ``auto`` installs nothing, `observe` installs nothing
  that changes a result: each CUDA-facing entry point (the ``torch.cuda``
  functions, ``Tensor.cuda``/``to``, ``Module.cuda``/``to``, the factories, the
  process-group, DDP, SyncBatchNorm, DataParallel, amp and ``torch.load``
  calls) is recorded in the registry as its own replacement, and calllog puts
  its logging layer over it: the job runs natively, at full speed but for the
  log's cost (one frame lookup and one set lookup per call from a known site),
  and `transfer.uninstall()` takes the layers off.

What the planned target computes otherwise is watched too (`patches/vendor_ops.py`, from the same data
as there): each call that would reach its CPU fallback (an operator its plug-in has no kernel for),
counted per operator with the first line, and the float64 casts it would return in float32; both are
log records (classes ``cpu fallback``, ``float32``) and ``transfer.status()['fallbacks']``.

Not seen on CUDA: ``Tensor.is_cuda`` reads (a C getter; a Python property would
tax every read) and imports of CUDA-only packages (``transfer scan`` names
those).
"""

from __future__ import annotations

import os
import sys
from typing import Any, List, NamedTuple, Optional

import torch

from . import settings, support
from .devices import parse_cuda


class Plan(NamedTuple):
    """The rehearsal's planned target: its profile, and its device translation as text (`calllog.attach` takes it)."""

    profile: Any  # transfer.profiles.Profile
    target: "PlanTarget"


def planned() -> Optional[Plan]:
    """The plan TRANSFER_PLAN names (None when unset); a bad name raises TransferError naming the choices."""
    profile = planned_profile()
    return None if profile is None else Plan(profile, PlanTarget(profile.device_type))


def planned_profile():
    """The profile TRANSFER_PLAN names (None when unset); a bad name raises TransferError naming the choices."""
    from .profiles import PROFILES

    name = settings.plan_name()
    if not name:
        return None
    if name not in PROFILES:
        from .errors import TransferError

        raise TransferError(f"TRANSFER_PLAN={name!r}: not a target.{settings.did_you_mean(name, PROFILES)} Choose one "
                            f"of {', '.join(PROFILES)}")
    return PROFILES[name]


class PlanTarget:
    """The planned target's device translation, as text ("cuda:1" -> "npu:1"): its plug-in is not loaded here."""

    def __init__(self, device_type: str):
        self.device_type = device_type

    def translate(self, value: Any, check: bool = False) -> Any:
        parsed = parse_cuda(value)
        if parsed is None:
            return value
        return self.device_type if parsed[0] is None else f"{self.device_type}:{parsed[0]}"


def _functions() -> List[tuple]:
    """(registry name, owner, attribute) of each function observed on CUDA (calllog's layer goes over it)."""
    found = []
    for name in support.CUDA_NAMES:
        value = getattr(torch.cuda, name, None)
        if callable(value) and not isinstance(value, type) and not name.startswith("_"):
            found.append((f"cuda_namespace.{name}", torch.cuda, name))
    found += [("tensor.cuda", torch.Tensor, "cuda"), ("tensor.to", torch.Tensor, "to"),
              ("module.cuda", torch.nn.Module, "cuda"), ("module.to", torch.nn.Module, "to")]
    try:
        from torch.utils._device import _device_constructors

        for fn in _device_constructors():
            name = getattr(fn, "__name__", "")
            if name and getattr(torch, name, None) is fn:
                found.append((f"factories.{name}", torch, name))
    except ImportError:  # pragma: no cover - torch without the constructor list
        pass
    return found


#: Constructors and calls whose record calllog's wrapper path makes (it sees what they are given).
#: (SyncBatchNorm's constructor: calllog.attach watches it itself.)
_WRAPPED = (("ddp.init", "torch.nn.parallel", "DistributedDataParallel"),
            ("data_parallel.init", "torch.nn", "DataParallel"), ("data_parallel.function", "torch.nn.parallel", "data_parallel"),
            ("serialization.load", "torch", "load"))


def _backend_call(log, name: str, fn):
    """init_process_group / new_group logged with the planned backend ('nccl' or None -> hccl)."""
    import functools

    from . import frames

    profile, seen = log.profile, set()
    entry = support.lookup(profile.name, f"torch.distributed.{name}")

    @functools.wraps(fn)
    def logged(*args, **kwargs):
        frame = frames.user_frame(sys._getframe(1))
        if frame is not None and (frame.f_code, frame.f_lasti) not in seen:
            seen.add((frame.f_code, frame.f_lasti))
            backend = kwargs.get("backend", args[0] if args and name == "init_process_group" else None)
            if backend is None or "nccl" in str(backend).lower():
                log.add(f"torch.distributed.{name}", frame, args, kwargs, entry.cls,
                        f"backend {backend!r} -> {profile.backend!r}")
        return fn(*args, **kwargs)

    return logged


def _watch_ops(ctx, profile) -> None:
    """What the planned target computes otherwise, watched on CUDA (patches/vendor_ops.py): the operators
    that would reach its CPU fallback, and the float64 casts it would turn into float32."""
    from .patches import vendor_ops

    if profile.op_coverage:
        vendor_ops.watch_fallbacks(ctx, profile.name, "cuda", planned=True)
    if profile.float64_cast:
        watch = vendor_ops.Float64(ctx, profile, device_type="cuda")
        ctx.float64 = watch
        registry = ctx.registry
        for name, owner, attribute in (("vendor_ops.double", torch.Tensor, "double"),
                                       ("vendor_ops.tensor_to", torch.Tensor, "to"),
                                       ("vendor_ops.module_to", torch.nn.Module, "to")):
            record = registry.record_for(owner, attribute)
            current = getattr(owner, attribute)
            wrapped = watch.wrap(current) if attribute == "double" else watch.wrap_to(current)
            if record is None:
                registry.replace(name, owner, attribute, wrapped)
            else:  # observed already (the log's layer goes over it): the check goes under that layer
                registry.layer(record, wrapped)


def observe(directory: str, profile_name: Optional[str] = None) -> Any:
    """Log every CUDA-facing call site of this process for the planned target, changing nothing.

    Returns the context; ``ctx.registry.revert_all()`` takes the layers off.
    """
    import importlib

    from . import calllog
    from .patches import PatchContext
    from .registry import Registry

    if profile_name is not None:
        os.environ["TRANSFER_PLAN"] = profile_name
    plan = planned()
    if plan is None:
        raise ValueError("observe() needs a planned target: TRANSFER_PLAN=<profile> or profile_name")
    profile = plan.profile
    registry = Registry(disabled=settings.disabled())
    for name, owner, attribute in _functions():
        registry.replace(name, owner, attribute, getattr(owner, attribute))
    for name, module, attribute in _WRAPPED:
        owner = importlib.import_module(module)
        target = getattr(owner, attribute)
        if isinstance(target, type):
            registry.wrap(name, target, "__init__", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
        else:
            registry.wrap(name, owner, attribute, lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    ctx = PatchContext(profile=profile, registry=registry, target=plan.target, runtime=None)
    _watch_ops(ctx, profile)
    ctx.log = calllog.attach(ctx, directory, plan)
    if torch.distributed.is_available():
        import torch.distributed as dist

        for name in ("init_process_group", "new_group"):
            registry.replace(f"distributed.plan_{name}", dist, name, _backend_call(ctx.log, name, getattr(dist, name)))
    return ctx
