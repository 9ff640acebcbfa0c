"""Statistics file and clean process exit for the simulated vendors.

Why a process that ran backward on the device could abort at exit
-----------------------------------------------------------------
torch 2.13's ``torch.autograd.graph._engine_run_backward`` stashes
``contextvars.copy_context()`` in the thread-local Python-object map before
calling the C++ engine; the engine copies that map into the GraphTask's
``at::ThreadLocalState``. When a backward's nodes run on an autograd
*device* thread (``pt_autograd_<i>``, one per device index), that thread
holds a ``shared_ptr`` to the GraphTask until the end of its loop iteration.
If the main thread returns from ``backward()`` first, the device thread drops
the last reference, and ``~ThreadLocalState`` decrefs the Context, which
takes the GIL. When the script ends right after the backward, the main
thread is already in ``Py_FinalizeEx``; ``take_gil`` in a non-main thread of a
finalizing interpreter calls ``pthread_exit``, whose forced unwind passes
through that noexcept destructor, so ``std::terminate`` runs: "terminate
called without an active exception", rc 134 (gdb: pt_autograd_N in
PyEval_AcquireThread <- ConcretePyInterpreterVTable::decref <-
~ThreadLocalState <- GraphTask dispose <- Engine::thread_main).

The fix: an ``atexit`` hook (registered at import, so it runs after the
hooks user code registers later, while the interpreter is fully alive)
drains every device thread that may hold a GraphTask. For each device index
that ever held storage it runs a tiny backward whose nodes execute on that
device's thread. A device thread processes its queue in order and drops
each iteration's GraphTask before taking the next task, so once the probe's
own GraphTask is gone, no device thread holds a Python object any more. The
probe's GraphTask carries a copy of a context in which a ContextVar holds a
weak-referenceable token; the hook waits (sleeping, i.e. with the GIL
released) until that token is freed. No ``os._exit``: exit codes, later
atexit hooks and stream flushing behave normally.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import os
import sys
import time
import weakref

_state: dict = {}
_PROBE = contextvars.ContextVar("sim_accel_exit_probe", default=None)


class _Token:
    __slots__ = ("__weakref__",)


def write_stats() -> str | None:
    """Write ``$SIM_ACCEL_STATS_DIR/<vendor>-<pid>.json``; return its path."""
    directory = os.environ.get("SIM_ACCEL_STATS_DIR")
    if not directory or "spec" not in _state:
        return None
    from . import _distributed

    spec, C = _state["spec"], _state["C"]
    payload = {
        "vendor": spec.name,
        "backend": spec.backend,
        "collectives": dict(sorted(_distributed.COUNTS.items())),
        "device_indices": sorted(C.used_devices()),
        "process_groups": list(_distributed.GROUPS),
        # graphs each of the vendor's own dynamo backends compiled (torch_npu/_dynamo.py)
        "compiled_graphs": dict(getattr(sys.modules.get(f"{spec.package}._dynamo"), "COMPILED", {})),
    }
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{spec.name}-{os.getpid()}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)
    return path


def drain_autograd_device_threads(timeout: float = 10.0) -> bool:
    """Make every autograd device thread release its last GraphTask now.

    Returns True when all probes were released within ``timeout``.
    """
    import torch

    spec, C = _state["spec"], _state["C"]
    ok = True
    for index in C.used_devices():
        token = _Token()
        ref = weakref.ref(token)
        reset = _PROBE.set(token)
        try:
            with torch.enable_grad(), torch.inference_mode(False):
                x = torch.ones((), device=torch.device(spec.name, index), requires_grad=True)
                (x * 2.0).backward()
        finally:
            _PROBE.reset(reset)
        del token, x
        deadline = time.monotonic() + timeout
        while ref() is not None:
            if time.monotonic() > deadline:
                ok = False
                break
            time.sleep(0.0005)  # releases the GIL for the device thread
    return ok


def _at_exit() -> None:
    try:
        write_stats()
    finally:
        try:
            drain_autograd_device_threads()
        except Exception:
            pass


def install(spec, C) -> None:
    _state["spec"] = spec
    _state["C"] = C
    atexit.register(_at_exit)
