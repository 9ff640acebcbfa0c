"""Family 7: the CUDA-only packages transfer provides (issue 15), against their backend called by hand.

``flash_attn_func(q, k, v, causal=True)`` vs. ``F.scaled_dot_product_attention`` on the same
tensors transposed by hand (``is_causal=True``, GQA heads as the call needs them), and
``xformers.ops.memory_efficient_attention(q, k, v, LowerTriangularMask())`` vs. the same SDPA call;
forward + backward, [4, 256, 8, 64] float32 (GQA: 2 key/value heads), one process per target,
arms alternating per repeat; ratio = provided / hand call per repeat, median. Bar: 1.1x.

    python -m benchmarks.thirdparty [--target cpu] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict

from benchmarks import _common as C

BAR = 1.1
FULL = {"repeats": 21, "shape": (4, 256, 8, 64)}
QUICK = {"repeats": 3, "shape": (2, 64, 4, 32)}


def child(target: str, quick: bool) -> Dict[str, Any]:
    bad = C.enter_child(target)
    if bad:
        return bad
    import torch
    import torch.nn.functional as F

    import transfer

    transfer.install(target)
    from flash_attn import flash_attn_func
    from xformers.ops import LowerTriangularMask, memory_efficient_attention

    cfg = QUICK if quick else FULL
    b, s, h, d = cfg["shape"]
    device = "cpu" if target == "cpu" else f"{target}:0"
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

    arms = {
        "flash_attn_func": (lambda: flash_attn_func(q, k, v, causal=True), hand_flash),
        "memory_efficient_attention": (lambda: memory_efficient_attention(q, kx, vx, attn_bias=LowerTriangularMask()),
                                       hand_xformers),
    }

    def timed(fn, n):
        t0 = time.perf_counter()
        for _ in range(n):
            fn().sum().backward()
        return (time.perf_counter() - t0) / n

    result: Dict[str, Any] = {"status": "ok", "shape": [b, s, h, d], "bar": BAR}
    for name, (provided, hand) in arms.items():
        torch.testing.assert_close(provided(), hand())  # the same computation
        timed(provided, 2), timed(hand, 2)  # warm-up
        inner = 1 if quick else 3
        shim, native, ratios = [], [], []
        for r in range(cfg["repeats"]):
            order = (provided, hand) if r % 2 == 0 else (hand, provided)
            t = {fn: timed(fn, inner) for fn in order}
            shim.append(t[provided])
            native.append(t[hand])
            ratios.append(t[provided] / t[hand])
        result[name] = C.ratio_record(shim, native, ratios, BAR, unit_scale=1e3)
    transfer.uninstall()
    return result


def line(target: str, rec: Dict[str, Any]) -> str:
    if not C.is_ok(rec):
        return f"  [{target}] {rec.get('status')}"
    parts = []
    for name in ("flash_attn_func", "memory_efficient_attention"):
        r = rec[name]
        mark = "ok" if r["meets_target"] else "MISS"
        parts.append(f"{name} / SDPA by hand: median {r['ratio']:.3f} [q1 {r['ratio_q1']:.3f} - q3 {r['ratio_q3']:.3f}] "
                     f"{mark} (bar {BAR}); {r['native']:.2f} ms by hand")
    return f"  [{target}] " + "; ".join(parts)


def measure(targets, quick: bool, log=print) -> Dict[str, Any]:
    results: Dict[str, Any] = {}
    for target in targets:
        if quick and target != "cpu":
            results[target] = {"status": "not measured with --quick: measured in full runs"}
            continue
        log(f"  thirdparty: {target} ...")
        results[target] = C.run_child("thirdparty", ["--target", target] + (["--quick"] if quick else []),
                                      timeout=600 if quick else 1800)
        log(line(target, results[target]))
    return {"targets": results, "method": "one process per target; provided call and hand SDPA call alternate per "
            "repeat (forward + backward); ratio = provided / hand per repeat, median"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.thirdparty", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cpu", choices=C.TARGETS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="write the result here and exit (the suite's child mode)")
    args = parser.parse_args(argv)
    if args.json:
        C.finish_child(args.json, lambda: child(args.target, args.quick))
    result = child(args.target, args.quick)
    print(line(args.target, result).strip())
    return 0 if C.is_ok(result) else 1


if __name__ == "__main__":
    sys.exit(main())
