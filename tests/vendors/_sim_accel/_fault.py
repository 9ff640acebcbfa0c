"""Fault injection (tests only): make one of the stand-in's kernels compute a wrong value.

The real vendor kernels are where a run stops computing what CUDA computes; the stand-ins compute exactly
what the CPU computes. ``SIM_ACCEL_FAULT`` (read at import; `apply` changes it in a running process)
makes one aten operation's device kernel wrong, leaving the CPU's kernels exact::

    SIM_ACCEL_FAULT="OP[:KIND][,phase=forward|backward][,after=N]"

* OP: an aten operation (``gelu``, ``native_layer_norm``, ``mm``; every overload but the ``out=`` ones);
* KIND: ``ulp=K`` (default ``ulp=64``): the first output multiplied by ``1 + K * eps`` of its dtype
  (about K units in the last place); ``scale=F``: by F; ``nan``: its first element becomes NaN;
  ``eps=V``: the operation's ``eps`` argument replaced by V (a wrong epsilon); ``drop``: the first
  argument's term dropped (``add``, ``addmm``, ``baddbmm``, ``addcmul``: the result minus that argument);
* ``phase``: only while autograd runs a backward node (``backward``) or outside one (``forward``);
* ``after=N``: the first N calls (of that phase) compute correctly.

The faulty kernel is a Python kernel for the PrivateUse1 key (``torch.library``): the arguments are
copied to the CPU, the CPU kernel computes, the fault is applied, the result is copied to the device, as
the C++ fallback does for every other operation. Operations with C++ kernels of their own here
(convolution, batch norm, dropout) cannot be chosen.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

_state = {"library": None, "spec": None, "calls": 0}


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu() if value.device.type != "cpu" else value
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, torch.device):
        return torch.device("cpu")
    return value


def parse(spec: str) -> dict:
    op, _, rest = spec.partition(":")
    fault = {"op": op.strip().split("::")[-1], "kind": "ulp", "value": 64.0, "phase": None, "after": 0}
    for i, part in enumerate(p.strip() for p in rest.split(",") if p.strip()):
        key, _, value = part.partition("=")
        if key == "phase":
            fault["phase"] = value
        elif key == "after":
            fault["after"] = int(value)
        elif key in ("ulp", "scale", "eps"):
            fault["kind"], fault["value"] = key, float(value)
        elif key in ("nan", "drop"):
            fault["kind"] = key
        else:
            raise ValueError(f"SIM_ACCEL_FAULT: unknown part {part!r}")
    return fault


def _perturb(fault, func, args, kwargs, out):
    first = out[0] if isinstance(out, (tuple, list)) else out
    kind = fault["kind"]
    if kind == "ulp":
        first.mul_(1 + fault["value"] * torch.finfo(first.dtype).eps)
    elif kind == "scale":
        first.mul_(fault["value"])
    elif kind == "nan":
        first.view(-1)[0] = float("nan")
    elif kind == "drop":
        first.sub_(args[0].to(first.dtype))
    return out


def apply(spec: Optional[str]) -> None:
    """Make `spec`'s operation faulty (module docstring); None or "" removes the fault."""
    library = _state["library"]
    if library is not None:
        _state["library"] = None
        destroy = getattr(library, "_destroy", None)
        if destroy is not None:
            destroy()
        else:
            del library
    _state["spec"], _state["calls"] = None, 0
    if not spec:
        return
    fault = parse(spec)
    packet = getattr(torch.ops.aten, fault["op"])
    library = torch.library.Library("aten", "IMPL")
    for overload in packet.overloads():
        func = getattr(packet, overload)
        if func._schema.is_mutable and not fault["op"].endswith("_"):
            continue  # out= variants: the functional overloads are what models call
        library.impl(f"{fault['op']}.{overload}" if overload != "default" else fault["op"],
                     _kernel(fault, func), "PrivateUse1")
    _state["library"], _state["spec"] = library, fault


def _kernel(fault, func):
    names = [a.name for a in func._schema.arguments]

    def kernel(*args, **kwargs):
        phase = "backward" if torch._C._current_autograd_node() is not None else "forward"
        applies = fault["phase"] in (None, phase)
        if applies:
            _state["calls"] += 1
            applies = _state["calls"] > fault["after"]
        cpu_args, cpu_kwargs = _to_cpu(args), {k: _to_cpu(v) for k, v in kwargs.items()}
        if applies and fault["kind"] == "eps":
            at = names.index("eps")
            if at < len(cpu_args):
                cpu_args = (*cpu_args[:at], fault["value"], *cpu_args[at + 1:])
            else:
                cpu_kwargs["eps"] = fault["value"]
        out = func(*cpu_args, **cpu_kwargs)
        if applies and fault["kind"] != "eps":
            out = _perturb(fault, func, cpu_args, cpu_kwargs, out)
        device = kwargs.get("device")  # a copy to the device (_to_copy) names it
        if device is None or torch.device(device).type == "cpu":
            device = next(a.device for a in _flat(args) if isinstance(a, torch.Tensor) and a.device.type != "cpu")
        if isinstance(out, (tuple, list)):
            return type(out)(o.to(device) if isinstance(o, torch.Tensor) else o for o in out)
        return out.to(device)

    return kernel


def _flat(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def from_environment() -> None:
    apply(os.environ.get("SIM_ACCEL_FAULT", "").strip() or None)
