"""CUDA graphs: torch.cuda.CUDAGraph / graph / make_graphed_callables / graph_pool_handle /
is_current_stream_capturing.

Where the target's package has a graph API (torch_npu: ``NPUGraph``,
``torch.npu.graph``, ``make_graphed_callables``, ``graph_pool_handle``,
``is_current_stream_capturing``; the profile's `graphs`) the CUDA names are
those (``CUDAGraph`` a subclass of the vendor's graph class accepting CUDA's
``keep_graph``; ``torch.cuda.graph(cuda_graph=...)`` passes the graph on).
Elsewhere (the cpu target; sdaa and gcu as far as known) they are
`transfer.cpu.graph_replay`'s: capture records the ops, replay re-runs them on the
same tensors (CUDA's results, no launch savings), with one notice at the
first capture. Never a stub that does nothing.
"""

from __future__ import annotations

import torch

from ..cpu import graph_replay


def apply(ctx) -> None:
    native = ctx.profile.graphs
    runtime = ctx.runtime
    if native and all(hasattr(runtime, name) for name in native.values()):
        _vendor(ctx, {cuda: getattr(runtime, name) for cuda, name in native.items()})
    else:
        _replay(ctx)


def _vendor(ctx, api) -> None:
    reg = ctx.registry
    vendor_graph = api["CUDAGraph"]

    class CUDAGraph(vendor_graph):
        def __new__(cls, keep_graph: bool = False):
            return vendor_graph.__new__(cls)

        def __init__(self, keep_graph: bool = False):
            vendor_graph.__init__(self)
            self.keep_graph = keep_graph

        def instantiate(self) -> None:
            """The vendor instantiates at capture_end."""

    CUDAGraph.__module__, CUDAGraph.__qualname__ = "torch.cuda", "CUDAGraph"
    vendor_context = api["graph"]

    class graph(vendor_context):
        def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode: str = "global", **kwargs):
            vendor_context.__init__(self, cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode)

    graph.__module__, graph.__qualname__ = "torch.cuda", "graph"
    reg.replace("graphs.CUDAGraph", torch.cuda, "CUDAGraph", CUDAGraph)
    reg.replace("graphs.graph", torch.cuda, "graph", graph)
    for name in ("make_graphed_callables", "graph_pool_handle", "is_current_stream_capturing"):
        reg.replace(f"graphs.{name}", torch.cuda, name, api[name])


def _replay(ctx) -> None:
    reg = ctx.registry
    target = "the cpu target" if ctx.profile.is_cpu else f"{ctx.profile.package or 'torch'} (no graph API)"
    notice = (f"torch.cuda graphs on {target}: capture records the ops and replay re-runs them one by one on "
              "the same tensors (CUDA's results, no launch savings)")

    class CUDAGraph(graph_replay.CUDAGraph):
        def capture_begin(self, pool=None, capture_error_mode: str = "global", **kwargs) -> None:
            ctx.warn_once("cuda_graphs", notice)
            super().capture_begin(pool, capture_error_mode, **kwargs)

    CUDAGraph.__module__, CUDAGraph.__qualname__ = "torch.cuda", "CUDAGraph"

    def make_graphed_callables(callables, sample_args, num_warmup_iters=3, allow_unused_input=False, pool=None):
        ctx.warn_once("make_graphed_callables", f"torch.cuda.make_graphed_callables on {target}: the callables "
                                                "run eagerly (same results)")
        return graph_replay.make_graphed_callables(callables, sample_args, num_warmup_iters, allow_unused_input,
                                                   pool)

    reg.replace("graphs.CUDAGraph", torch.cuda, "CUDAGraph", CUDAGraph)
    reg.replace("graphs.graph", torch.cuda, "graph", graph_replay.graph)
    reg.replace("graphs.make_graphed_callables", torch.cuda, "make_graphed_callables", make_graphed_callables)
    reg.replace("graphs.graph_pool_handle", torch.cuda, "graph_pool_handle", graph_replay.graph_pool_handle)
    reg.replace("graphs.is_current_stream_capturing", torch.cuda, "is_current_stream_capturing",
                graph_replay.is_current_stream_capturing)
