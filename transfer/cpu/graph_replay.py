"""CUDA graphs on targets without a graph API: capture records, replay re-runs the ops.

``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` on the cpu target (and on a
vendor whose package has no graph API) keep CUDA's semantics:

* capture records every ATen op the captured code runs (a
  ``TorchDispatchMode``, below autograd and autocast, so backward passes and
  autocast's casts are recorded as they ran); the tensors created during
  capture are the graph's static memory, held by the graph;
* during capture, ops that write into existing tensors (in-place ops,
  ``out=``, optimizer ``_foreach_*_`` / fused steps, BatchNorm's running
  statistics) are recorded but not applied, as a CUDA capture does not
  execute its kernels: an ``optimizer.step()`` inside the capture changes no
  parameter until the first replay. Ops that only create tensors run (their
  values then are what CUDA leaves undefined); metadata changes (``t_``,
  ``resize_``) happen at capture only, as on CUDA; a host read (``.item()``,
  e.g. a non-capturable optimizer's step count) raises, as CUDA's capture does;
* ``replay()`` re-runs the recorded ops in order on the same tensors: new
  results are copied into the captured output tensors, in-place ops write into
  their tensors, view ops are skipped (their views alias the static memory), so
  every tensor the script holds from the capture updates in place, as after
  CUDA's replay; without grad mode or autocast (the ops are the ones recorded);
* host Python control flow is frozen at capture, as on CUDA.

Same results as CUDA, no launch savings: each replayed op is a dispatcher call.
``make_graphed_callables`` returns the callables running eagerly (same
results; outputs are fresh tensors instead of static ones).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_state = threading.local()  # .capturing: the graph capturing on this thread
_pool_ids = itertools.count(1)
_schema_cache: Dict[Any, Tuple[Tuple[int, ...], bool]] = {}
_HOST_READS = ("_local_scalar_dense", "item", "equal", "is_nonzero")
_METADATA_OPS = ("resize_", "resize_as_", "set_", "detach_", "requires_grad_", "is_same_size", "sym_size",
                 "sym_stride", "sym_numel", "sym_storage_offset")
_HOST_READ_ERROR = ("operation not permitted when stream is capturing: aten::{name} reads a tensor on the host "
                    "during CUDA graph capture, where the captured work has not run (CUDA raises the same; move "
                    "the read out of the capture, or use an optimizer with capturable=True)")
_VIEW, _PURE, _MUTATING = 0, 1, 2


def is_current_stream_capturing() -> bool:
    """True while a graph is being captured on this thread."""
    return getattr(_state, "capturing", None) is not None


def graph_pool_handle() -> Tuple[int, int]:
    """An opaque memory-pool token (the recorded graph holds its own tensors)."""
    return (0, next(_pool_ids))


def _kind(func) -> Tuple[Tuple[int, ...], int]:
    """(positions of written arguments, kind) from the op's schema, cached."""
    cached = _schema_cache.get(func)
    if cached is None:
        schema = func._schema
        written = tuple(i for i, a in enumerate(schema.arguments)
                        if a.alias_info is not None and a.alias_info.is_write)
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        cached = _schema_cache[func] = (written, _MUTATING if written else (_VIEW if view else _PURE))
    return cached


def _flat(value) -> List[Any]:
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flat(item)]
    return [value]


class _Record:
    __slots__ = ("func", "args", "kwargs", "kind", "outs")

    def __init__(self, func, args, kwargs, kind, outs):
        self.func, self.args, self.kwargs, self.kind, self.outs = func, args, kwargs, kind, outs


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: "CUDAGraph"):
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        if name in _HOST_READS:
            raise RuntimeError(_HOST_READ_ERROR.format(name=name))
        if name in _METADATA_OPS or (hasattr(torch, "Tag") and torch.Tag.inplace_view in func.tags):
            return func(*args, **kwargs)  # metadata: at capture only, as on CUDA
        written, kind = _kind(func)
        if kind != _MUTATING:
            result = func(*args, **kwargs)
            outs = [t if isinstance(t, torch.Tensor) else None for t in _flat(result)]
            self.graph._records.append(_Record(func, args, kwargs, kind, outs))
            return result
        # A write: recorded, not applied (run on copies of what it writes, for its other outputs).
        originals = {}
        call_args = list(args)
        for i in written:
            if i < len(call_args):
                call_args[i] = _copies(call_args[i], originals)
        call_kwargs = dict(kwargs)
        schema_args = func._schema.arguments
        for i in written:
            name_i = schema_args[i].name
            if name_i in call_kwargs:
                call_kwargs[name_i] = _copies(call_kwargs[name_i], originals)
        result = func(*call_args, **call_kwargs)
        result = _restore(result, originals)
        written_ids = {id(t) for t in originals.values()}
        outs = [t if isinstance(t, torch.Tensor) and id(t) not in written_ids else None for t in _flat(result)]
        self.graph._records.append(_Record(func, args, kwargs, kind, outs))
        return result


def _copies(value, originals: Dict[int, torch.Tensor]):
    """`value` with each tensor replaced by a copy; originals[id(copy)] = the tensor."""
    if isinstance(value, torch.Tensor):
        copy = value.clone()
        originals[id(copy)] = value
        return copy
    if isinstance(value, (list, tuple)):
        return type(value)(_copies(v, originals) for v in value)
    return value


def _restore(value, originals: Dict[int, torch.Tensor]):
    """Results that are copies (in-place returns) become the tensors they stand for."""
    if isinstance(value, torch.Tensor):
        return originals.get(id(value), value)
    if isinstance(value, (list, tuple)):
        return type(value)(_restore(v, originals) for v in value)
    return value


class CUDAGraph:
    """torch.cuda.CUDAGraph on a target without graphs: records at capture, re-runs at replay."""

    def __init__(self, keep_graph: bool = False):
        self._records: List[_Record] = []
        self._captured = False
        self._capturing = False
        self._pool = None
        self.keep_graph = keep_graph

    def capture_begin(self, pool=None, capture_error_mode: str = "global", **kwargs) -> None:
        if self._captured or self._capturing:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph. "
                               "To capture a new graph, create a new instance.")
        if is_current_stream_capturing():
            raise RuntimeError("Cannot capture a graph while another capture is underway on this thread.")
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise RuntimeError(f"Unknown capture_error_mode {capture_error_mode!r}: "
                               "expected 'global', 'thread_local' or 'relaxed'")
        self._pool = pool if pool is not None else graph_pool_handle()
        self._capturing = True
        self._mode = _Recorder(self)
        self._mode.__enter__()
        _state.capturing = self

    def capture_end(self) -> None:
        if not self._capturing:
            raise RuntimeError("capture_end() called without a preceding capture_begin()")
        _state.capturing = None
        self._capturing = False
        self._mode.__exit__(None, None, None)
        self._mode = None
        self._captured = True

    def instantiate(self) -> None:
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::instantiate without a preceding successful capture.")

    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        with torch.no_grad(), torch._C._DisableAutocast():
            for record in self._records:
                if record.kind == _VIEW:
                    continue
                result = record.func(*record.args, **record.kwargs)
                for captured, new in zip(record.outs, _flat(result)):
                    if captured is not None and isinstance(new, torch.Tensor) and new is not captured \
                            and not _same_memory(captured, new):
                        captured.copy_(new)

    def reset(self) -> None:
        if self._capturing:
            raise RuntimeError("Cannot reset a CUDAGraph while it is capturing.")
        self._records = []
        self._captured = False

    def pool(self):
        return self._pool

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        """Writes the recorded ops, one per line (CUDA writes a .dot of the CUDA graph)."""
        with open(debug_path, "w") as fh:
            for record in self._records:
                fh.write(f"{record.func}\n")

    def __repr__(self) -> str:
        return f"<CUDAGraph (transfer replay): {len(self._records)} recorded ops>"


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.stride() == b.stride() and a.shape == b.shape


class graph:
    """torch.cuda.graph: ``with graph(g, pool=None, stream=None, capture_error_mode="global"):`` captures into g."""

    default_capture_stream: Optional[Any] = None

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None, capture_error_mode: str = "global",
                 **kwargs):
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream
        self.cuda_graph = cuda_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *args: object) -> None:
        self.cuda_graph.capture_end()


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False,
                           pool=None):
    """The callables themselves (they run eagerly: same results), after torch's argument checks."""
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables = (callables,)
        sample_args = (sample_args,)
    for c, args in zip(callables, sample_args):
        if isinstance(c, torch.nn.Module):
            if len(c._backward_hooks) or len(c._forward_hooks) or len(c._forward_pre_hooks):
                raise AssertionError("Modules must not have hooks registered at the time they are passed. However, "
                                     "registering hooks on modules after passing them through "
                                     "make_graphed_callables is allowed.")
            if not all(b.requires_grad is False for b in c.buffers()):
                raise AssertionError("In any :class:`~torch.nn.Module` passed to :func:`~make_graphed_callables`, "
                                     "only parameters may be trainable. All buffers must have "
                                     "``requires_grad=False``.")
        if not all(isinstance(a, torch.Tensor) for a in torch.utils._pytree.tree_leaves(args)):
            raise AssertionError("In the beta API, sample_args for each callable must contain only Tensors. "
                                 "Other types are not allowed.")
    return callables[0] if just_one else callables
