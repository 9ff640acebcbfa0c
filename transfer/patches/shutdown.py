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
know when that is, `apply` sets a ContextVar in the installing (main)
thread's context to a weak-referenceable sentinel; every Context that
``_engine_run_backward`` copies from that context refers to it. The atexit
hook clears the variable in the main context, so the sentinel lives exactly as
long as some copy made by a backward pass does, then sleeps in 1 ms steps
(each one releases the GIL) until the sentinel is freed, for at most
``DRAIN_TIMEOUT_S`` (a collective that can never complete, e.g. its peer
died, keeps its Context: the exit then proceeds after the timeout). Normal
exits wait about a millisecond. The hook is registered at install time, so it
runs after the atexit hooks of user code (which may still train) and before
those registered earlier; uninstall unregisters it. No ``os._exit``: the exit
code, later atexit hooks and stream flushing behave as usual.

Not covered: on torch 2.0, whose backward copies no Context, the drain only
releases the GIL once (a thread already waiting for it gets it; a collective
still running at exit is not waited for); backward passes run from other
Python threads (their contexts do not start from the main one) and Python
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

#: Longest wait at exit for C++ threads to release the Python objects they hold.
# 10 s, not 3: a rank whose peer is slow (a loaded machine) waits for its last collective to complete
# before the Context is released. With 3 s, one spawn worker aborted at exit in a CI-like run on a loaded
# machine (not reproduced in 6 quiet runs); the wait ends as soon as the Context is freed.
DRAIN_TIMEOUT_S = 10.0

_SENTINEL = contextvars.ContextVar("transfer_exit_sentinel", default=None)


class _Sentinel:
    """Referenced by every Context copied from the main one while installed."""

    __slots__ = ("__weakref__",)


def apply(ctx) -> None:
    if not ctx.registry.enabled("shutdown.drain"):
        return
    sentinel = _Sentinel()
    token = _SENTINEL.set(sentinel)
    ref = weakref.ref(sentinel)
    del sentinel  # only the ContextVar (and copies of its context) keep it alive

    def at_exit() -> None:
        drain(ref)

    atexit.register(at_exit)

    def undo() -> None:
        atexit.unregister(at_exit)
        try:
            _SENTINEL.reset(token)
        except ValueError:  # uninstalled from another context
            _SENTINEL.set(None)

    ctx.registry.on_revert("shutdown.drain", undo)


def drain(ref, timeout: float = DRAIN_TIMEOUT_S) -> bool:
    """Release the GIL until every Context copy holding the sentinel is gone.

    Returns True when the sentinel was freed within `timeout` seconds.
    """
    _SENTINEL.set(None)  # from now on only copies made by backward passes hold it
    # torch 2.0 copies no Context in backward: nothing shows a thread waiting for the GIL, so yield it once.
    time.sleep(0.001)
    if ref() is None:
        return True
    start = time.monotonic()
    while ref() is not None:
        if time.monotonic() - start > timeout:
            logger.debug("transfer: a C++ thread still holds a backward pass's context after %.1fs; "
                         "exiting anyway", timeout)
            return False
        time.sleep(0.001)  # releases the GIL: a thread waiting for it to drop a Context gets it
    logger.debug("transfer: exit drain took %.1f ms", (time.monotonic() - start) * 1000)
    return True
