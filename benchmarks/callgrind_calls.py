"""Instructions per call of the hot calls under callgrind: native, Python wrappers, C stand-ins.

Run under valgrind (one process per torch; instruction counts are not disturbed by load):

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=starmap_next \
        --dump-before=math_factorial --callgrind-out-file=OUT.%p python -m benchmarks.callgrind_calls

Each measurement is ``N`` calls of a lambda through ``itertools.starmap``: only the
instructions inside starmap's ``next`` (the lambda's call and what it runs) are
collected, and ``math.factorial`` (called by nothing else here) dumps them, one dump per
measurement in the order this script prints. The empty lambda's count is subtracted.
`summarize` (``python -m benchmarks.callgrind_calls --summarize OUT.pid``) reads the dumps.
Cpu target; the hand ports are those of benchmarks/calls.py.
"""

from __future__ import annotations

import glob
import itertools
import math
import os
import sys

N = 2000
ROWS = [  # (label, CUDA spelling under the shim, hand port)
    ("x.to(torch.float16)", "x.to(torch.float16)", "x.to(torch.float16)"),
    ("torch.zeros(4)", "torch.zeros(4)", "torch.zeros(4)"),
    ("model.to(torch.bfloat16)", "model.to(torch.bfloat16)", "model.to(torch.bfloat16)"),
    ("x.to('cuda')", "x.to('cuda')", "x.to('cpu', copy=True)"),
    ("torch.zeros(4, device='cuda')", "torch.zeros(4, device='cuda')", "torch.zeros(4, device='cpu')"),
    ("torch.randn(4, 4, device='cuda')", "torch.randn(4, 4, device='cuda')", "torch.randn(4, 4, device='cpu')"),
]


def measure() -> None:
    import torch

    import transfer

    x = torch.randn(4)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model.to(torch.bfloat16)
    ns = {"torch": torch, "x": x, "model": model}
    order = []

    def run(label, statement):
        fn = eval("lambda: " + statement, ns)
        for _ in range(200):  # warm: memos, caches, allocator
            fn()
        for _ in itertools.starmap(fn, itertools.repeat((), N)):
            pass
        math.factorial(1)  # dump
        order.append(label)

    math.factorial(1)  # dump whatever came before
    order.append("(start)")
    run("empty", "None")
    for label, _, port in ROWS:
        run(f"native|{label}", port)
    for variant, off in (("python", "1"), ("c", "0")):
        os.environ["TRANSFER_NO_FASTCALLS"] = off
        transfer.install("cpu")
        kind = type(torch.zeros).__name__
        for label, shim, _ in ROWS:
            run(f"{variant}|{label}", shim)
        transfer.uninstall()
        order.append(f"# {variant}: torch.zeros is {kind}")
    run("empty", "None")
    print("ORDER", [o for o in order if not o.startswith("#")])
    print("\n".join(o for o in order if o.startswith("#")))
    from transfer import fastcalls

    vectorcall = fastcalls.TYPE is not None and bool(fastcalls.TYPE.__flags__ & (1 << 11))
    print("torch", torch.__version__, "python", sys.version.split()[0], "vectorcall", vectorcall)


def summarize(prefix: str) -> None:
    import ast
    import re

    files = sorted((f for f in glob.glob(prefix + ".*") if f[len(prefix) + 1:].isdigit()),
                   key=lambda f: int(f[len(prefix) + 1:]))
    totals = []
    for f in files:
        with open(f) as fh:
            text = fh.read()
        m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        totals.append(int(m.group(1)) if m else 0)
    log = open(prefix + ".log").read()
    order = ast.literal_eval(re.search(r"ORDER (\[.*\])", log).group(1))
    # callgrind writes the dumps as OUT.<n> (one per measurement, in order), then the final OUT (empty)
    counts = dict()
    dumps = totals[: len(order)]
    empties = [t for label, t in zip(order, dumps) if label == "empty"]
    base = min(empties)
    for label, t in zip(order, dumps):
        if "|" in label:
            counts[label] = (t - base) / N
    print(re.search(r"torch .*", log).group(0))
    print(f"{'call':36s} {'native':>8s} {'python':>8s} {'C':>8s} {'py/nat':>7s} {'C/nat':>7s}")
    for label, _, _ in ROWS:
        n, p, c = (counts[f"{v}|{label}"] for v in ("native", "python", "c"))
        print(f"{label:36s} {n:8.0f} {p:8.0f} {c:8.0f} {p / n:7.3f} {c / n:7.3f}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--summarize":
        summarize(sys.argv[2])
    else:
        measure()
