"""Family 7: the CUDA-only packages' replacements against calling their backend directly, side by side in one process.

``python -m benchmarks.thirdparty [--target cpu] [--quick]`` prints one line per case; the suite
(``python -m benchmarks``, family "thirdparty") runs it per target with ``--json``.

Each case pairs transfer's replacement with what it runs on, called directly (the goal: the
replacement within 1.1x):

* flash_attn_func flash_attn_func(q, k, v, causal=True), fwd+bwd, [4, 256, 8, 64] float32 with 2 key/value
                  heads (GQA) vs F.scaled_dot_product_attention on the same tensors transposed by hand
                  (is_causal=True, GQA heads as the call needs them)
* memory_efficient_attention  xformers.ops.memory_efficient_attention(q, k, v, LowerTriangularMask()) vs
                  the same SDPA call

* fused_adam      apex FusedAdam.step()           vs torch.optim.AdamW(fused=True where the target has
                                                     the kernel, else foreach=True).step()
* fused_sgd       apex FusedSGD.step()            vs torch.optim.SGD(momentum=0.9, foreach=True).step()
* layer_norm      apex FusedLayerNorm fwd+bwd     vs F.layer_norm fwd+bwd
* rms_norm        apex FusedRMSNorm fwd+bwd       vs F.rms_norm fwd+bwd (torch >= 2.4; else not measured)
* l2norm          amp_C.multi_tensor_l2norm via multi_tensor_applier vs torch._foreach_norm + vector_norm
* scale           amp_C.multi_tensor_scale (in place) vs GradScaler's _amp_foreach_non_finite_check_and_unscale_
* custom_op       an op registered for "CUDA" (run through transfer's registration for the target key)
                                                  vs the same function registered for the target key natively
* graph_replay    torch.cuda.CUDAGraph replay of an MLP training step vs the same step run eagerly
                  (the replay path of targets without a graph API; on npu torch_npu's NPUGraph)

Blocks of calls alternate between the two arms, each arm taking each position in turn; the ratio
is taken per repeat (replacement / backend) and the median and q1-q3 reported. Time is process CPU
time (on a shared machine wall time wanders with other processes).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict

if __package__ in (None, ""):  # python benchmarks/thirdparty.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "benchmarks"

from benchmarks import _common as C  # noqa: E402

TARGET = 1.1  # the bar: a replacement costs at most 1.1x its backend called directly
# Workload sizes of a small transformer layer stack: 12 weight matrices of 1024 x 1024 and 12 vectors
# (12.6M parameters) for the optimizers and amp_C, activations of 2048 tokens x 1024 for the norms.
# The per-call overhead (python, apex's checks and noop flag) is reported as "added" microseconds.
SHAPES = [(1024, 1024)] * 12 + [(1024,)] * 12
ROWS, HIDDEN = 2048, 1024
QUICK_SHAPES = [(64, 64)] * 4 + [(64,)] * 4
ATTENTION_SHAPE = (4, 256, 8, 64)
FULL = {"repeats": 15, "block_s": 0.05, "min_calls": 3, "max_calls": 500}
QUICK = {"repeats": 3, "block_s": 0.005, "min_calls": 1, "max_calls": 5}


_KEEP = []


def _compare(ours: Callable[[], Any], theirs: Callable[[], Any], cfg: Dict[str, Any]) -> Dict[str, Any]:
    for fn in (ours, theirs):
        fn()
    per_call = max(1e-7, C.per_call(theirs, 3))
    calls = int(min(cfg["max_calls"], max(cfg["min_calls"], cfg["block_s"] / per_call)))
    shim, native, ratios = C.interleaved(ours, theirs, cfg["repeats"], calls)
    record = C.ratio_record(shim, native, ratios, TARGET, unit_scale=1e6)
    record.update(status="ok", unit="us per call", calls_per_block=calls)
    return record


def _cases(torch, device: str):
    """name -> (ours, theirs, what the backend is), built under the active target."""
    import amp_C
    import torch.nn.functional as F
    from apex.multi_tensor_apply import multi_tensor_applier
    from apex.normalization import FusedLayerNorm, FusedRMSNorm
    from apex.optimizers import FusedAdam, FusedSGD

    gen = torch.Generator().manual_seed(0)
    shapes = SHAPES

    def params():
        return [torch.nn.Parameter(torch.randn(s, generator=gen).to(device)) for s in shapes]

    def with_grads(ps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        return ps

    cases = {}
    _attention_cases(torch, device, cases)
    a, b = with_grads(params()), with_grads(params())
    fused_kernel = FusedAdam(a)._fused
    torch_adam = torch.optim.AdamW(b, lr=1e-3, weight_decay=0.01, **({"fused": True} if fused_kernel else
                                                                     {"foreach": True}))
    ours_adam = FusedAdam(a, lr=1e-3, weight_decay=0.01)
    cases["fused_adam"] = (ours_adam.step, torch_adam.step,
                           f"torch.optim.AdamW({'fused' if fused_kernel else 'foreach'}=True)")
    a, b = with_grads(params()), with_grads(params())
    ours_sgd = FusedSGD(a, lr=0.01, momentum=0.9)
    torch_sgd = torch.optim.SGD(b, lr=0.01, momentum=0.9, foreach=True)
    cases["fused_sgd"] = (ours_sgd.step, torch_sgd.step, "torch.optim.SGD(foreach=True)")

    x = torch.randn(ROWS, HIDDEN, generator=gen).to(device).requires_grad_()
    ln = FusedLayerNorm(HIDDEN).to(device)
    w, bias = ln.weight, ln.bias
    cases["layer_norm"] = (lambda: ln(x).sum().backward(),
                           lambda: F.layer_norm(x, (HIDDEN,), w, bias, 1e-5).sum().backward(), "F.layer_norm")
    if hasattr(F, "rms_norm"):
        rms = FusedRMSNorm(HIDDEN).to(device)
        cases["rms_norm"] = (lambda: rms(x).sum().backward(),
                             lambda: F.rms_norm(x, [HIDDEN], rms.weight, 1e-5).sum().backward(), "F.rms_norm")
    tensors = [torch.randn(s, generator=gen).to(device) for s in shapes]
    flag = torch.zeros(1, dtype=torch.int, device=device)

    def direct_norm():
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors)))

    cases["l2norm"] = (lambda: multi_tensor_applier(amp_C.multi_tensor_l2norm, flag, [tensors], False), direct_norm,
                       "torch._foreach_norm + vector_norm")
    found = torch.zeros(1, device=device)
    inv = torch.ones(1, device=device)
    cases["scale"] = (lambda: multi_tensor_applier(amp_C.multi_tensor_scale, flag, [tensors, tensors], 1.0),
                      lambda: torch._amp_foreach_non_finite_check_and_unscale_(tensors, found, inv),
                      "torch._amp_foreach_non_finite_check_and_unscale_")

    ns = f"bench{os.getpid()}"
    lib = torch.library.Library(ns, "DEF")
    lib.define("scale_add(Tensor x, Tensor y) -> Tensor")
    lib.define("scale_add_native(Tensor x, Tensor y) -> Tensor")
    key = "CPU" if device == "cpu" else "PrivateUse1"

    def kernel(x, y):
        return x * 2 + y

    lib.impl("scale_add", kernel, "CUDA")
    lib.impl("scale_add_native", kernel, key)
    ops = getattr(torch.ops, ns)
    u, v = torch.randn(64, generator=gen).to(device), torch.randn(64, generator=gen).to(device)
    cases["custom_op"] = (lambda: ops.scale_add(u, v), lambda: ops.scale_add_native(u, v),
                          f"the function registered for {key} natively")
    _KEEP.append(lib)  # the library (and its op definitions) must outlive the measurement

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    static_x = torch.randn(32, 64, generator=gen).to(device)
    static_y = torch.randint(0, 10, (32,), generator=gen).to(device)

    def eager_step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(static_x), static_y).backward()
        opt.step()

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            eager_step()
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        F.cross_entropy(model(static_x), static_y).backward()
        opt.step()
    cases["graph_replay"] = (graph.replay, eager_step, "the same step run eagerly")
    return cases


def _attention_cases(torch, device: str, cases) -> None:
    import torch.nn.functional as F
    from flash_attn import flash_attn_func
    from xformers.ops import LowerTriangularMask, memory_efficient_attention

    b, s, h, d = ATTENTION_SHAPE
    torch.manual_seed(0)
    q = torch.randn(b, s, h, d, device=device, requires_grad=True)
    k = torch.randn(b, s, h // 4, d, device=device, requires_grad=True)
    v = torch.randn(b, s, h // 4, d, device=device, requires_grad=True)
    kx = torch.randn(b, s, h, d, device=device, requires_grad=True)
    vx = torch.randn(b, s, h, d, device=device, requires_grad=True)
    gqa = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")

    def hand_flash():
        kk, vv = k.transpose(1, 2), v.transpose(1, 2)
        extra = {"enable_gqa": True} if gqa else {}
        if not gqa:
            kk, vv = kk.repeat_interleave(4, 1), vv.repeat_interleave(4, 1)
        return F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, is_causal=True, **extra).transpose(1, 2)

    def hand_xformers():
        return F.scaled_dot_product_attention(q.transpose(1, 2), kx.transpose(1, 2), vx.transpose(1, 2),
                                              is_causal=True).transpose(1, 2)

    def provided_flash():
        return flash_attn_func(q, k, v, causal=True)

    def provided_xformers():
        return memory_efficient_attention(q, kx, vx, attn_bias=LowerTriangularMask())

    for name, provided, hand in (("flash_attn_func", provided_flash, hand_flash),
                                 ("memory_efficient_attention", provided_xformers, hand_xformers)):
        torch.testing.assert_close(provided(), hand())  # the same computation
        cases[name] = ((lambda f=provided: f().sum().backward()), (lambda f=hand: f().sum().backward()),
                       "F.scaled_dot_product_attention by hand")


def child(target: str, quick: bool) -> Dict[str, Any]:
    unavailable = C.enter_child(target)
    if unavailable:
        return unavailable
    import torch

    import transfer

    transfer.install(target)
    cfg = dict(QUICK if quick else FULL)
    device = "cpu" if target == "cpu" else f"{target}:0"
    if quick:
        global SHAPES, ROWS, HIDDEN, ATTENTION_SHAPE
        SHAPES, ROWS, HIDDEN, ATTENTION_SHAPE = QUICK_SHAPES, 64, 64, (2, 64, 4, 32)
    cases = _cases(torch, device)
    rows = {}
    for name, (ours, theirs, backend) in cases.items():
        record = _compare(ours, theirs, cfg)
        record["backend"] = backend
        if quick:
            record["meets_target"] = None
        rows[name] = record
    return {"status": "ok", "cases": rows}


def line(target: str, rec: Dict[str, Any]) -> str:
    if rec.get("status") != "ok":
        return f"  [{target}] {rec.get('status')}"
    parts = []
    for name, r in rec["cases"].items():
        mark = {True: "ok", False: "MISS"}.get(r.get("meets_target"), "not judged")
        parts.append(f"    {name:26s} {r['ratio']:.3f} [{r['ratio_q1']:.3f}-{r['ratio_q3']:.3f}] {mark}  "
                     f"({r['shim']:.0f} vs {r['native']:.0f} us, {r['added']:+.0f} us; backend: {r['backend']})")
    return f"  [{target}]\n" + "\n".join(parts)


def measure(targets, quick: bool, log=print) -> Dict[str, Any]:
    return {"targets": C.per_target("thirdparty", targets, quick, log, line),
            "method": "one process per target; blocks of calls alternate replacement / backend; "
            "ratio = replacement / backend per repeat (process CPU time)"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.thirdparty", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cpu", choices=C.TARGETS)
    parser.add_argument("--quick", action="store_true", help="few repeats: checks it works, not the numbers")
    parser.add_argument("--json", help="write the result here and exit (the suite's child mode)")
    args = parser.parse_args(argv)
    if args.json:
        C.finish_child(args.json, lambda: child(args.target, args.quick))
    result = child(args.target, args.quick)
    print(line(args.target, result))
    return 0 if result.get("status") == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
