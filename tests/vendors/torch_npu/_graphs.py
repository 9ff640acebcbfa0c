"""torch_npu's graph API (torch_npu/npu/graphs.py of the 2.13.0 wheel), simulated.

``NPUGraph``, ``graph``, ``graph_pool_handle``, ``make_graphed_callables``,
``is_current_stream_capturing`` with the real package's signatures and its
observable contract (the CUDA graph semantics torch_npu documents):

* capture (``capture_begin`` .. ``capture_end``, on a non-default stream)
  records the npu work of the capturing thread and does NOT run it: tensors the
  captured ops create hold undefined memory until the first ``replay``, and
  writes into existing tensors (in-place ops, an optimizer step) happen only at
  replay. Host-side work (CPU tensors, Python control flow) runs at capture
  time only. Reading an npu tensor on the host (``.item()``) or synchronizing
  during capture raises, as the ACL capture does;
* ``replay()`` re-runs the recorded work on the same tensors (the graph's
  static memory), in order;
* the error messages are the wheel's (strings of libtorch_npu.so):
  "NPU graphs must be captured on a non-default stream. ...", "This NPUGraph
  instance already owns a captured graph.", "Called NPUGraph::replay without a
  preceding successful capture.", "Capture must end on the same stream it began on.".

Recording is a TorchDispatchMode (below autograd and autocast): output
shapes come from the op's meta kernel, so nothing is computed at capture.
Not simulated (tests/vendors/README.md): memory pools (a pool token is
accepted; each graph holds its own tensors), ``auto_dispatch_capture`` /
``update``, ``capture_error_mode`` differences, super kernels, graph task groups.
"""

from __future__ import annotations

import itertools
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_tls = threading.local()
_pool_ids = itertools.count(1)
_NAME = "npu"
_HOST_READS = ("_local_scalar_dense", "item", "equal", "is_nonzero")
_METADATA = ("resize_", "resize_as_", "set_", "detach_", "requires_grad_", "sym_size", "sym_stride", "sym_numel",
             "sym_storage_offset", "is_same_size")
_CAPTURE_ERROR = ("operation not permitted when stream is capturing: {what} of an npu tensor needs the device to "
                  "finish its work, which a graph capture does not run (ACL error 107027)")


def is_current_stream_capturing() -> bool:
    return getattr(_tls, "capturing", None) is not None


def assert_not_capturing(what: str) -> None:
    if is_current_stream_capturing():
        raise RuntimeError(_CAPTURE_ERROR.format(what=what))


def graph_pool_handle():
    return (0, next(_pool_ids))


def _flat(value):
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flat(item)]
    return [value]


def _on_device(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == _NAME
    if isinstance(value, torch.device):
        return value.type == _NAME
    if isinstance(value, (list, tuple)):
        return any(_on_device(v) for v in value)
    return False


def _meta(value, metas):
    if isinstance(value, torch.Tensor) and value.device.type == _NAME:
        m = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        metas[id(m)] = value
        return m
    if isinstance(value, torch.device) and value.type == _NAME:
        return torch.device("meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_meta(v, metas) for v in value)
    return value


def _device_of(args, kwargs):
    for v in _flat(list(args)) + _flat(list(kwargs.values())):
        if isinstance(v, torch.Tensor) and v.device.type == _NAME:
            return v.device
        if isinstance(v, torch.device) and v.type == _NAME:
            return v if v.index is not None else torch.device(_NAME, torch.npu.current_device())
    return torch.device(_NAME, torch.npu.current_device())


class _Record:
    __slots__ = ("func", "args", "kwargs", "outs")

    def __init__(self, func, args, kwargs, outs):
        self.func, self.args, self.kwargs, self.outs = func, args, kwargs, outs


class _Capture(TorchDispatchMode):
    def __init__(self, graph):
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not (_on_device(args) or _on_device(list(kwargs.values()))):
            return func(*args, **kwargs)  # host work runs now and is not part of the graph
        name = func.__name__.split(".")[0]
        if name in _HOST_READS:
            raise RuntimeError(_CAPTURE_ERROR.format(what=f"aten::{name}"))
        if name in _METADATA or torch.Tag.inplace_view in func.tags:
            return func(*args, **kwargs)
        schema = func._schema
        if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            return func(*args, **kwargs)  # a view: metadata only; it aliases the static memory
        metas = {}
        try:
            meta_result = func(*_meta(args, metas), **{k: _meta(v, metas) for k, v in kwargs.items()})
        except (NotImplementedError, RuntimeError) as exc:
            raise RuntimeError(f"{func} cannot be captured into an NPU graph: it has no shape function "
                               f"(meta kernel) ({exc})") from None
        device = _device_of(args, kwargs)
        outs = []

        def real(value):
            if isinstance(value, torch.Tensor):
                original = metas.get(id(value))
                if original is not None:  # an argument the op writes and returns
                    outs.append(None)
                    return original
                out = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)
                outs.append(out)
                return out
            if isinstance(value, (list, tuple)):
                return type(value)(real(v) for v in value)
            outs.append(None)
            return value

        result = real(meta_result)
        self.graph._records.append(_Record(func, args, kwargs, outs))
        return result


class NPUGraph:
    r"""Wrapper around a NPU graph (simulated; see the module docstring)."""

    def __init__(self):
        self.auto_dispatch_capture = False
        self._records = []
        self._state = "empty"  # empty | capturing | captured
        self._pool = None
        self._stream = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        if self._state != "empty":
            raise RuntimeError("This NPUGraph instance already owns a captured graph.")
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise RuntimeError(f"Unknown capture_error_mode {capture_error_mode}")
        stream = torch.npu.current_stream()
        if stream.stream_id == 0:
            raise RuntimeError("NPU graphs must be captured on a non-default stream. (However, after capture, "
                               "it's ok to replay them on the default stream.)")
        if is_current_stream_capturing():
            raise RuntimeError("Cannot begin a capture while another capture is underway on this thread.")
        self._stream = stream
        self._pool = pool if pool is not None else graph_pool_handle()
        self._mode = _Capture(self)
        self._mode.__enter__()
        _tls.capturing = self
        self._state = "capturing"

    def capture_end(self):
        if self._state != "capturing":
            raise RuntimeError("The current NPU stream is not currently capturing.")
        if torch.npu.current_stream() != self._stream:
            raise RuntimeError("Capture must end on the same stream it began on.")
        _tls.capturing = None
        self._mode.__exit__(None, None, None)
        self._mode = None
        self._state = "captured"

    def replay(self):
        if self._state != "captured":
            raise RuntimeError("Called NPUGraph::replay without a preceding successful capture.")
        with torch.no_grad(), torch._C._DisableAutocast():
            for record in self._records:
                result = record.func(*record.args, **record.kwargs)
                for captured, new in zip(record.outs, _flat(result)):
                    if captured is not None and isinstance(new, torch.Tensor):
                        captured.copy_(new)

    def reset(self):
        if self._state == "capturing":
            raise RuntimeError("Cannot reset an NPUGraph while it is capturing.")
        self._records = []
        self._state = "empty"

    def pool(self):
        return self._pool

    def update(self, cpu_update_input):
        raise RuntimeError("The current graph configuration does not support update,Try to capture by setting "
                           "auto_dispatch_capture=True during capture")

    def debug_dump(self, debug_path):
        with open(debug_path, "w") as fh:
            fh.writelines(f"{r.func}\n" for r in self._records)


class graph:
    r"""Context-manager that captures NPU work into a :class:`torch.npu.NPUGraph` object for later replay."""

    default_capture_stream = None

    def __init__(self, npu_graph, pool=None, stream=None, auto_dispatch_capture=False, capture_error_mode="global"):
        if self.__class__.default_capture_stream is None:
            self.__class__.default_capture_stream = torch.npu.Stream()
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream if stream is not None else self.__class__.default_capture_stream
        if self.capture_stream is None:
            raise RuntimeError("capture stream is None")
        self.stream_ctx = torch.npu.stream(self.capture_stream)
        self.npu_graph = npu_graph
        self.capture_error_mode = capture_error_mode
        self.npu_graph.auto_dispatch_capture = auto_dispatch_capture

    def __enter__(self):
        torch.npu.synchronize()
        torch.npu.empty_cache()
        self.stream_ctx.__enter__()
        self.npu_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type, exc_value, traceback):
        self.npu_graph.capture_end()
        self.stream_ctx.__exit__(exc_type, exc_value, traceback)


def make_graphed_callables(callables, sample_args, num_warmup_iters=3, allow_unused_input=False, pool=None):
    r"""Graphed versions of the callables (torch_npu's implementation of torch's algorithm): the forward and
    the backward of each callable are captured once and replayed, inside one autograd node."""
    if torch.is_autocast_enabled() and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast caching. Please set "
                           "`cache_enabled=False`.")
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    flat_args = []
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
        leaves = tuple(torch.utils._pytree.tree_leaves(args))
        if not all(isinstance(a, torch.Tensor) for a in leaves):
            raise AssertionError("In the beta API, sample_args for each callable must contain only Tensors. "
                                 "Other types are not allowed.")
        flat_args.append(leaves)
    surfaces = [flat_args[i] + (tuple(c.parameters()) if isinstance(c, torch.nn.Module) else ())
                for i, c in enumerate(callables)]
    fwd_graphs = [NPUGraph() for _ in callables]
    bwd_graphs = [NPUGraph() for _ in callables]
    mempool = graph_pool_handle() if pool is None else pool
    torch.npu.synchronize()
    with torch.npu.stream(torch.npu.Stream()):
        for func, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                outputs = torch.utils._pytree.tree_leaves(func(*args))
                needed = tuple(o for o in outputs if o.requires_grad)
                if needed:
                    torch.autograd.grad(outputs=needed, inputs=tuple(i for i in surface if i.requires_grad),
                                        grad_outputs=tuple(torch.empty_like(o) for o in needed),
                                        only_inputs=True, allow_unused=allow_unused_input)
    torch.npu.synchronize()
    static_outputs, specs = [], []
    for func, args, fwd in zip(callables, sample_args, fwd_graphs):
        with graph(fwd, pool=mempool):
            outputs = func(*args)
        flat, spec = torch.utils._pytree.tree_flatten(outputs)
        static_outputs.append(tuple(flat))
        specs.append(spec)
    static_grad_outputs, static_grad_inputs = [], []
    for surface, outs, bwd in zip(reversed(surfaces), reversed(static_outputs), reversed(bwd_graphs)):
        grad_outs = tuple(torch.empty_like(o) if o.requires_grad else None for o in outs)
        needed = tuple(o for o in outs if o.requires_grad)
        grads = None
        if needed:
            with graph(bwd, pool=mempool):
                grads = torch.autograd.grad(outputs=needed, inputs=tuple(i for i in surface if i.requires_grad),
                                            grad_outputs=tuple(g for g in grad_outs if g is not None),
                                            only_inputs=True, allow_unused=allow_unused_input)
        padded, k = [], 0
        for arg in surface:
            if arg.requires_grad and grads is not None:
                padded.append(grads[k])
                k += 1
            else:
                padded.append(None)
        static_grad_outputs.append(grad_outs)
        static_grad_inputs.append(tuple(padded))
    static_grad_outputs.reverse()
    static_grad_inputs.reverse()

    def graphed(fwd, bwd, surface, outs, grad_outs, grad_ins, n_user, spec):
        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                for i in range(n_user):
                    if surface[i].data_ptr() != inputs[i].data_ptr():
                        surface[i].copy_(inputs[i])
                fwd.replay()
                return tuple(o.detach() for o in outs)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx, *grads):
                for g_static, g in zip(grad_outs, grads):
                    if g_static is not None and g is not None and g_static.data_ptr() != g.data_ptr():
                        g_static.copy_(g)
                bwd.replay()
                return tuple(b.detach() if b is not None else None for b in grad_ins)

        def functionalized(*user_args):
            flat = torch.utils._pytree.tree_leaves(user_args)
            out = Graphed.apply(*(tuple(flat) + surface[n_user:]))
            return torch.utils._pytree.tree_unflatten(out, spec)

        return functionalized

    result = []
    for i, func in enumerate(callables):
        fn = graphed(fwd_graphs[i], bwd_graphs[i], surfaces[i], static_outputs[i], static_grad_outputs[i],
                     static_grad_inputs[i], len(flat_args[i]), specs[i])
        if isinstance(func, torch.nn.Module):
            def make_forward(module, training, graphed_fn, orig_fwd):
                def new_fwd(*user_args, **user_kwargs):
                    if module.training == training:
                        return graphed_fn(*user_args, **user_kwargs)
                    return orig_fwd(*user_args, **user_kwargs)
                return new_fwd

            func.forward = make_forward(func, func.training, fn, func.forward)
            result.append(func)
        else:
            result.append(fn)
    return result[0] if just_one else tuple(result)


def extend(npu, package) -> None:
    """Publish the graph API on ``torch.npu`` (torch_npu/npu/__init__.py exports graphs' names)."""
    for obj in (NPUGraph, graph, graph_pool_handle, make_graphed_callables, is_current_stream_capturing):
        obj.__module__ = npu.__name__
        setattr(npu, obj.__name__, obj)
        if obj.__name__ not in npu.__all__:
            npu.__all__.append(obj.__name__)
    synchronize = npu.synchronize

    def synchronize_checked(device=None):
        assert_not_capturing("torch.npu.synchronize()")
        return synchronize(device)

    synchronize_checked.__name__ = "synchronize"
    npu.synchronize = synchronize_checked
