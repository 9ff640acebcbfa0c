"""apex.amp.amp: the O1 function registries (half_function, float_function, promote_function, register_*).

Decorated / registered functions cast their floating tensor arguments (half:
apex's half dtype under the target's policy; float: float32; promote: the
widest floating type among them) when O1 is active (the casts of autocast
are off inside float functions, as apex's float functions run in float32).
``register_*_function(module, name)`` must be called before
``amp.initialize``, as in apex.
"""

import functools

import torch

_registrations = []  # (module, name, kind): applied by amp.initialize at O1
_state = {"device_type": None, "half": None}  # set when O1 is active


def _cast_args(args, kwargs, dtype):
    def cast(value):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(cast(v) for v in value)
        return value

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


def _widest(args, kwargs):
    order = {torch.float16: 0, torch.bfloat16: 0, torch.float32: 1, torch.float64: 2}
    found = [v.dtype for v in list(args) + list(kwargs.values())
             if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return max(found, key=lambda d: order.get(d, 1)) if found else None


def _wrap(fn, kind):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        device_type = _state["device_type"]
        if device_type is None:  # O1 not active: apex's wrappers are then pass-through
            return fn(*args, **kwargs)
        if kind == "half":
            args, kwargs = _cast_args(args, kwargs, _state["half"])
            return fn(*args, **kwargs)
        if kind == "float":
            args, kwargs = _cast_args(args, kwargs, torch.float32)
            with torch.autocast(device_type=device_type, enabled=False):
                return fn(*args, **kwargs)
        dtype = _widest(args, kwargs)
        if dtype is not None:
            args, kwargs = _cast_args(args, kwargs, dtype)
        return fn(*args, **kwargs)

    return wrapper


def half_function(fn):
    return _wrap(fn, "half")


def float_function(fn):
    return _wrap(fn, "float")


def promote_function(fn):
    return _wrap(fn, "promote")


def register_half_function(module, name):
    if not hasattr(module, name):
        raise ValueError("No function named {} in module {}.".format(name, module))
    _registrations.append((module, name, "half"))


def register_float_function(module, name):
    if not hasattr(module, name):
        raise ValueError("No function named {} in module {}.".format(name, module))
    _registrations.append((module, name, "float"))


def register_promote_function(module, name):
    if not hasattr(module, name):
        raise ValueError("No function named {} in module {}.".format(name, module))
    _registrations.append((module, name, "promote"))


def _apply_registrations(device_type, half):
    """Called by amp.initialize at O1: activate the wrappers and wrap the registered functions."""
    _state["device_type"], _state["half"] = device_type, half
    for module, name, kind in _registrations:
        setattr(module, name, _wrap(getattr(module, name), kind))
    del _registrations[:]



def init(enabled=True, loss_scale="dynamic", enable_caching=True, verbose=False, allow_banned=False):
    """apex's old handle API: O1's casts for the whole process (``handle._deactivate()`` ends them) and a
    handle whose ``scale_loss(loss, optimizer)`` scales the loss (`AmpHandle`); ``enabled=False``: `NoOpHandle`."""
    from .handle import AmpHandle, NoOpHandle

    if not enabled:
        return NoOpHandle()
    return AmpHandle(loss_scale, enable_caching, verbose)
