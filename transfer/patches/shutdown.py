"""Clean interpreter exit after a distributed job.

The symptom: a DDP job finishes training, then a rank dies at interpreter exit
with "terminate called without an active exception" (rc 134, SIGABRT), or,
more rarely, hangs while Python tears its objects down. Stock torch 2.13 does
this with plain CPU DDP over gloo (a few runs in a hundred here, more under
load), and so does every target that runs backward off the main thread.

The cause (gdb on the core of an aborted rank):

    gloo worker  ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork -> ~AsyncWork
                 -> ~at::ThreadLocalState -> SafePyObject dispose
                 -> ConcretePyInterpreterVTable::decref -> gil_scoped_acquire
                 -> take_gil -> PyThread_exit_thread -> pthread_exit
                 -> forced unwind through a noexcept destructor -> std::terminate
    main thread  Py_FinalizeEx -> PyGC_Collect

1. torch 2.13's ``torch.autograd.graph._engine_run_backward`` stashes
   ``contextvars.copy_context()`` in the thread-local Python-object map for
   the whole backward pass.
2. Everything that snapshots ``at::ThreadLocalState`` during backward keeps a
   reference to that Context: each gloo ``AsyncWork`` that DDP's reducer
   launches from its gradient hooks (the work stores ``tls_``), and the
   GraphTask that an autograd device thread (any non-CPU device) holds until
   the end of its loop iteration.
3. Whoever drops the last reference must take the GIL to decref the Context.
   When that is a C++ thread (gloo worker, autograd device thread) and the
   main thread got back into Python first, the C++ thread waits for the GIL.
   If the script ends before the main thread lets go of the GIL (no blocking
   call between the last backward and the end), the waiting thread wakes up
   in a finalizing interpreter, where ``take_gil`` calls ``pthread_exit``;
   its unwinding hits the noexcept destructor and the C++ runtime aborts. If
   the main thread instead blocks holding the GIL while joining that thread
   (tearing down DDP/gloo objects), the job hangs.

The fix: before finalization, wait until no C++ thread still holds such a
Context, with the GIL released so that a thread waiting for it gets it. To
know when that is, `apply` wraps ``_engine_run_backward`` (``shutdown.backward``): while a backward
pass runs, a ContextVar holds a weak-referenceable sentinel, so the Context
that the backward copies, and every snapshot of it a collective or device
thread keeps, refers to the sentinel; nothing else does (an asyncio task, a
thread started with a copied context, a pending callback: none is waited
for). The atexit hook sleeps in 1 ms steps (each one releases the GIL) until
the sentinel is freed, for at most ``DRAIN_TIMEOUT_S``; when it gives up (a
collective that can never complete, e.g. its peer died, keeps its Context) it
says so at WARNING level and the exit proceeds. Normal exits wait about a
millisecond.

Armed only where the abort can happen: a backward pass that runs while a
process group exists (its collectives run on backend threads) or on a vendor
device (autograd device threads). A cpu-target backward with no process group
runs on the calling thread and sets nothing. The hook is registered at
install time, so it runs after the atexit hooks of user code (which may still
train) and before those registered earlier; uninstall unregisters it and puts
the original ``_engine_run_backward`` back. No ``os._exit``: the exit code,
later atexit hooks and stream flushing behave as usual.

Destroyed groups (``shutdown.groups``): a second hang, seen on torch 2.0 and 2.1 with gdb on a hung rank.
The main thread, holding the GIL, frees DDP's Reducer with the script's frame after
``destroy_process_group()``; the Reducer holds the last reference to the group, so ``~ProcessGroupGloo``
joins its worker threads. One worker is freeing the last work of the group, which holds a tensor whose
Python object only that work kept, so it waits for the GIL: each thread waits for the other. transfer
wraps ``destroy_process_group`` (both homes) to keep the Python objects of the groups it destroys, so the
Reducer never drops the last reference. The next ``init_process_group`` (its rendezvous) lets them go (on
torch 2.0 a kept store holds its address: a second job on it would hang). At exit, on torch >= 2.13 (whose binding
destroys a group with the GIL released) they are dropped after the drain; before 2.13 they are kept past
the interpreter's teardown, and the process ends without joining the backends' threads. Not covered: a
script that drops the last reference to a group it never destroyed.

Torch 2.0-2.3 have no ``_engine_run_backward`` (their backward copies no
Context), and nothing shows a thread that will want the GIL: while a process
group lives at exit, the drain releases the GIL for ``OLD_TORCH_SETTLE_S``
(50 ms) in 1 ms steps, so a gloo worker dropping the last reference to a
tensor a finished collective held takes it then. Not covered: such a worker
not scheduled within that time, a collective still running at exit; Python
objects other than the Context (torch function modes, saved-tensor hooks)
captured by collectives.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import time
import weakref

logger = logging.getLogger("transfer")

#: Longest wait at exit for C++ threads to release the Python objects they hold. Normal exits wait about a
# millisecond; the wait only runs to its end when a backward's collective never completes. 3 s once let a spawn
# worker abort at exit in a CI-like run on a loaded machine (its peer's last collective was that late); 5 s is
# the cap, and giving up is said at WARNING level.
DRAIN_TIMEOUT_S = 5.0

#: Before torch 2.4 (no ``_engine_run_backward``), how long the exit releases the GIL while a process group lives:
# a gloo worker that completed a collective and drops the last reference to a tensor whose Python object
# outlived its script (a temporary SyncBatchNorm or DDP gathered) needs the GIL; on a loaded machine it may not
# have been scheduled yet when the script ends, and taking the GIL in a finalizing interpreter aborts
# ("terminate called without an active exception": seed 000's 4-rank SyncBatchNorm demo on torch 2.0.1, once
# in a CI-like run). Nothing shows such a thread, so the exit waits this long, a few scheduler periods.
OLD_TORCH_SETTLE_S = 0.05

_SENTINEL = contextvars.ContextVar("transfer_exit_sentinel", default=None)


class _Sentinel:
    """Referenced by every Context a backward pass copied while armed."""

    __slots__ = ("__weakref__",)


class _Armed:
    """The weak reference to the current sentinel (None before the first armed backward)."""

    def __init__(self):
        self.ref = None

    def sentinel(self) -> _Sentinel:
        """The live sentinel, or a new one: backward passes share it while any of their copies lives."""
        sentinel = self.ref() if self.ref is not None else None
        if sentinel is None:
            sentinel = _Sentinel()
            self.ref = weakref.ref(sentinel)
        return sentinel


def apply(ctx) -> None:
    if ctx.registry.enabled("shutdown.groups"):
        _keep_groups(ctx)  # its exit hook registered first: it runs after the drain's
    if ctx.registry.enabled("shutdown.drain"):
        _drain_at_exit(ctx)


def _drain_at_exit(ctx) -> None:
    import torch
    import torch.autograd

    state = _Armed()
    original = getattr(torch.autograd, "_engine_run_backward", None)
    if original is not None:  # torch >= 2.4; before it, backward copies no Context
        needs = _armed_when(ctx, torch)

        def _engine_run_backward(*args, **kwargs):
            if not needs():
                return original(*args, **kwargs)
            token = _SENTINEL.set(state.sentinel())
            try:
                return original(*args, **kwargs)
            finally:
                _SENTINEL.reset(token)

        # torch.autograd.backward and grad call the name torch/autograd/__init__.py imported from .graph.
        ctx.registry.replace("shutdown.backward", torch.autograd, "_engine_run_backward", _engine_run_backward)

    def at_exit() -> None:
        drain(state.ref, settle=OLD_TORCH_SETTLE_S if original is None and _has_groups(torch) else 0.001)

    atexit.register(at_exit)
    ctx.registry.on_revert("shutdown.drain", lambda: atexit.unregister(at_exit))


def _keep_groups(ctx) -> None:
    """Keep the Python objects of the groups ``destroy_process_group`` destroys (both homes), so that freeing
    DistributedDataParallel (its Reducer) never drops a group's last reference (see "Destroyed groups" in the
    module docstring). The next rendezvous (``init_process_group``'s) lets them go; at exit, on torch >= 2.13,
    after the drain; before 2.13 they outlive the interpreter's teardown."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    import torch.distributed.distributed_c10d as c10d

    kept = []

    def destroy_process_group(wrapped, instance, args, kwargs):
        group = args[0] if args else kwargs.get("group")
        kept.extend(_destroyed(c10d, group))
        return wrapped(*args, **kwargs)

    reg = ctx.registry
    for owner in (c10d, dist):  # both homes: libraries call either
        if hasattr(owner, "destroy_process_group"):
            suffix = "" if owner is dist else ".c10d"
            reg.wrap("shutdown.groups" + suffix, owner, "destroy_process_group", destroy_process_group)
    if callable(getattr(c10d, "rendezvous", None)):  # init_process_group's rendezvous (all torch 2.x)

        def rendezvous(wrapped, instance, args, kwargs):
            del kept[:]  # the kept store may hold the address the new job rendezvouses on
            return wrapped(*args, **kwargs)

        reg.wrap("shutdown.groups.rendezvous", c10d, "rendezvous", rendezvous)

    from . import torch_release

    release = torch_release()

    def at_exit() -> None:
        if release >= (2, 13):  # ~ProcessGroup runs with the GIL released: dropping them is safe
            del kept[:]
        elif kept:  # never freed: the process ends without joining the backends' threads
            import ctypes

            ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))

    atexit.register(at_exit)
    ctx.registry.on_revert("shutdown.groups.exit", lambda: atexit.unregister(at_exit))


def _destroyed(c10d, group) -> list:
    """The groups ``destroy_process_group(group)`` destroys: `group`, or every group (None, WORLD)."""
    try:
        if group is not None and group is not getattr(c10d.GroupMember, "WORLD", None):
            return [group]
        world = getattr(c10d, "_world", None)
        return list(world.pg_map if world is not None else c10d._pg_map)
    except (AttributeError, RuntimeError, TypeError):
        return [group] if group is not None else []


def _armed_when(ctx, torch):
    """When a backward pass can leave its Context with a C++ thread: a predicate, asked per backward."""
    if not ctx.profile.is_cpu:
        return lambda: True  # autograd device threads run the backward of every non-CPU device
    dist = torch.distributed
    if not dist.is_available():
        return lambda: False
    return dist.is_initialized  # collectives launched from backward hooks run on backend threads


def _has_groups(torch) -> bool:
    """Whether a process group lives at exit (its backend's threads may still drop what collectives held)."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()


def drain(ref, timeout: float = DRAIN_TIMEOUT_S, settle: float = 0.001) -> bool:
    """Release the GIL until every Context copy holding the sentinel is gone.

    `ref` is a weak reference to the sentinel, or None when no backward was
    armed. Returns True when the sentinel was freed within `timeout` seconds.
    First the GIL is released for `settle` seconds, in 1 ms steps, whatever `ref` says.
    """
    _SENTINEL.set(None)  # from now on only copies made by backward passes hold it
    # Before torch 2.4 backward copies no Context: nothing shows a thread waiting for the GIL, so it is yielded
    # for `settle` seconds (OLD_TORCH_SETTLE_S while a process group lives), in steps a waiting thread can take.
    end = time.monotonic() + settle
    time.sleep(0.001)
    while time.monotonic() < end:
        time.sleep(0.001)
    if ref is None or ref() is None:
        return True
    start = time.monotonic()
    while ref() is not None:
        if time.monotonic() - start > timeout:
            logger.warning("transfer: at exit, a C++ thread still holds the context of a backward pass after "
                           "%.1f s (a collective that never completed, e.g. its peer died?); exiting anyway. "
                           "The process may abort with \"terminate called without an active exception\". "
                           "TRANSFER_DISABLE=shutdown skips this wait.", timeout)
            return False
        time.sleep(0.001)  # releases the GIL: a thread waiting for it to drop a Context gets it
    logger.debug("transfer: exit drain took %.1f ms", (time.monotonic() - start) * 1000)
    return True
