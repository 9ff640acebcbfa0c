"""torch.accelerator: none on the cpu target (as a CPU-only build); CUDA to the user's script on a vendor.

A CUDA build of torch names CUDA as its accelerator even on a machine without
a GPU; ``torch.accelerator.is_available()`` then asks ``torch.cuda.is_available()``,
which the cpu target answers True, and torch goes on into CUDA's C++ runtime
(Adam's ``step``, dynamo's stream tracking, ``torch.load``): "CUDA driver
version is insufficient". On the cpu target torch.accelerator answers what a
CPU-only build answers: no accelerator (``current_accelerator()`` is None, so
``is_available()`` is False and ``device_count()`` 0).

On a vendor target the plug-in's PrivateUse1 backend is torch's accelerator,
and torch and the libraries keep being answered so (``npu``): DataParallel,
the DDP/DeviceMesh defaults, ``torch.load``, the optimizers, accelerate,
transformers and Lightning all compare that type with the type of real tensors
and device modules. The user's script alone (`frames.is_script`: not torch,
not transfer, not a library under site-packages) is a CUDA script, to which
transfer presents CUDA as the machine's accelerator: there
``current_accelerator()`` answers ``torch.device('cuda')`` (item
``accelerator.current_accelerator``), so pytorch/examples' imagenet/main.py
takes its ``device.type == 'cuda'`` branches (``set_device``, ``model.cuda``,
DDP with ``device_ids``) as on CUDA, and the ``cuda`` device it then uses is
translated where used, like every other. ``is_available``, ``device_count``,
``current_device_index`` answer the same for both names and are torch's own.
Each ``torch.accelerator`` call taking a device (``synchronize``,
``set_device_index``, ``current_stream``, the ``memory``
functions) reads it through torch's ``_get_device_index``, which refuses a
device of another type than the accelerator's: there a CUDA device is
translated first (item ``accelerator.device_arguments``). The cost is one
frame lookup and one dict lookup per ``current_accelerator()`` call (~0.3 us;
torch asks it a few times a step at most). Under torch.compile, dynamo
constant-folds the call (guarded on its value, which its guard code, torch's,
reads as torch's answer); a call traced in the user's script is answered
``cuda`` as in eager (item ``accelerator.traced``, `_traceable`).

``torch.device(N)``: torch >= 2.6 resolves an int device to the accelerator,
where a CUDA build answers ``cuda:N`` (transformers' ``device_map="auto"``
resolves to ``{"": 0}``; ``torch.device(local_rank)``). A CPU-only build of
torch has none ("Cannot access accelerator device when none is available"),
and a vendor's plug-in is the accelerator (``npu:N``). transfer answers
``cuda:N`` (item ``accelerator.int_device``: torch.device's C constructor,
swapped by transfer/_fastcalls.c; every other call goes to torch's own): on the
cpu target to every caller, on a vendor target to the user's script alone
(`frames.is_script`, as ``current_accelerator()``; torch and the libraries keep
the plug-in's ``npu:N``), so ``torch.device(0) == torch.device("cuda", 0)`` there
as on CUDA, and the ``cuda:N`` is translated where used. The cost: a lone int
argument pays one frame lookup and one dict lookup on a vendor target; other
arguments one type test (benchmarks/calls.py). Traced by torch.compile in the
script, dynamo's constant folding answers the same (item
``accelerator.int_device_traced``). Where that extension is not built, a warning
says what ``torch.device(N)`` still is.
"""

from __future__ import annotations

import logging
import sys

import torch

from .. import frames

logger = logging.getLogger("transfer")


def _int_device(ctx) -> None:
    try:
        answer = torch.device(0).type
    except RuntimeError:  # torch >= 2.6 without an accelerator: a CPU-only build
        answer = None
    if answer == "cuda":
        return  # a CUDA build, or torch < 2.6 (an int is CUDA's ordinal there)
    from .. import fastcalls

    native = fastcalls._fastcalls
    if native is None or not hasattr(native, "int_device"):
        now = "raises on this CPU-only build of torch (no accelerator)" if answer is None else f"is {answer}:N"
        logger.warning(f"transfer: torch.device(N) {now}, and transfer's C extension, which makes it cuda:N as "
                       "on CUDA, is not built: write torch.device('cuda', N)")
        return
    script_only = () if ctx.cpu is not None else (frames.SCRIPT_VERDICTS, frames.is_script)
    if native.int_device(torch.device, True, *script_only):
        ctx.registry.on_revert("accelerator.int_device", lambda: native.int_device(torch.device, False))
        if script_only:
            ctx.registry.replace_when_imported("accelerator.int_device_traced", "torch._dynamo.variables.user_defined",
                                               "UserDefinedClassVariable", "call_function", _int_device_traced)


def _constant(tx, value):
    """A dynamo variable for the constant `value` (a torch.device), in the torch at hand."""
    from torch._dynamo.variables import base, constant

    if hasattr(base.VariableTracker, "build"):
        return base.VariableTracker.build(tx, value)
    return constant.ConstantVariable.create(value)


def _int_device_traced(original):
    """Dynamo constant-folds ``torch.device(N)`` by calling it from its own code (so the plug-in's ``npu:N``):
    traced in the user's script it answers ``cuda:N``, as in eager."""

    def call_function(self, tx, args, kwargs):
        if self.value is torch.device and len(args) == 1 and not kwargs and args[0].is_python_constant():
            index = args[0].as_python_constant()
            if type(index) is int and index >= 0 and frames.script_verdict(tx.f_code):
                return _constant(tx, torch.device("cuda", index))
        return original(self, tx, args, kwargs)

    call_function.__wrapped__ = original
    return call_function


def _traceable(replacement, cuda):
    """Dynamo constant-folds ``current_accelerator()`` (guarded on its value), calling it from its own code:
    torch's answer, the same in the guard. A call traced in the user's script answers ``cuda``, as in eager."""

    def make_replacement(original):
        # Dynamo's tables hold whichever function torch.accelerator had when dynamo was imported: both fold alike,
        # so a compile after uninstall (or after an install that follows dynamo's import) folds the call too.
        from torch._dynamo.variables import torch as variables

        native = replacement.__wrapped__
        for name in ("constant_fold_functions_need_guards", "constant_fold_functions"):
            table = getattr(variables, name, None)
            if isinstance(table, dict) and (native in table or replacement in table):
                table.setdefault(native, None)
                table.setdefault(replacement, None)

        def call_function(self, tx, args, kwargs):
            result = original(self, tx, args, kwargs)
            if self.value is not replacement or not frames.script_verdict(tx.f_code):
                return result
            if not result.is_python_constant() or result.as_python_constant() is None:
                return result
            return _constant(tx, cuda)

        call_function.__wrapped__ = original
        return call_function

    return make_replacement


def _cuda_for_the_script(ctx, accelerator) -> None:
    """A vendor target: ``current_accelerator()`` is ``cuda`` to the user's script, devices are translated."""
    original = accelerator.current_accelerator
    cuda = torch.device("cuda")
    script, getframe, verdicts = frames.is_script, sys._getframe, frames.SCRIPT_VERDICTS
    # What current_accelerator() without arguments returns in every torch that has it (~120 ns less a call).
    get = getattr(torch._C, "_accelerator_getAccelerator", original)

    def current_accelerator(*args, **kwargs):
        """torch's answer; ``cuda`` where the caller is the user's CUDA script (patches/accelerator.py)."""
        acc = original(*args, **kwargs) if args or kwargs else get()
        if acc is not None:
            caller = getframe(1)
            known = verdicts.get(caller.f_code.co_filename)  # the hot path: one dict lookup
            if known == 1 or (known != 0 and script(caller)):
                return cuda
        return acc

    current_accelerator.__wrapped__ = original
    current_accelerator.__doc__ = original.__doc__
    record = ctx.registry.replace("accelerator.current_accelerator", accelerator, "current_accelerator",
                                  current_accelerator)
    if record is not None:
        ctx.registry.replace_when_imported("accelerator.traced", "torch._dynamo.variables.torch",
                                           "TorchInGraphFunctionVariable", "call_function",
                                           _traceable(accelerator.current_accelerator, cuda))
    if not ctx.registry.enabled("accelerator.device_arguments"):
        return
    # torch.accelerator's functions taking a device read it through _get_device_index, imported by name.
    from torch.accelerator import _utils

    get_index = getattr(_utils, "_get_device_index", None)
    if get_index is None:
        return
    translate = ctx.target.translator("torch.accelerator")

    def _get_device_index(device, optional=False):
        return get_index(device if type(device) is int else translate(device), optional)

    _get_device_index.__wrapped__ = get_index
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.accelerator") and getattr(module, "_get_device_index", None) is get_index:
            ctx.registry.replace("accelerator.device_arguments", module, "_get_device_index", _get_device_index)


def apply(ctx) -> None:
    if ctx.registry.enabled("accelerator.int_device"):
        _int_device(ctx)
    accelerator = getattr(torch, "accelerator", None)
    if ctx.cpu is None and accelerator is not None and hasattr(accelerator, "current_accelerator"):
        _cuda_for_the_script(ctx, accelerator)
        return
    # torch >= 2.7 on a CUDA build: torch.accelerator.is_available() asks the patched torch.cuda.is_available().
    if ctx.cpu is None or accelerator is None or not hasattr(accelerator, "current_accelerator"):
        return
    try:
        native = torch._C._accelerator_getAccelerator()
    except RuntimeError:  # torch 2.6 raises "Cannot access accelerator device when none is available"
        return  # and never asks torch.cuda.is_available(): it already answers no accelerator
    if native is None:
        return

    def current_accelerator(check_available: bool = False):
        """None: the cpu target runs on the CPU, which torch does not count as an accelerator."""
        return None

    answers = {"current_accelerator": current_accelerator, "is_available": lambda: False, "device_count": lambda: 0}
    for name, replacement in answers.items():
        if hasattr(accelerator, name):  # each asks the C++ runtime directly in some torch version
            replacement.__name__ = name
            ctx.registry.replace(f"accelerator.{name}", accelerator, name, replacement)
