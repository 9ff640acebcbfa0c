"""What the npu stand-in's strict mode costs (issue 32: within 10% of the permissive stand-in).

    python -m benchmarks.standin_strict [--quick] [--repeats R] [--out FILE]

Needs the stand-ins on the path (``PYTHONPATH=tests/vendors``) and runs without ``transfer``: it measures
the stand-in itself. Two figures, each the median over repeats of strict / permissive with quartiles:

* **per op**, in one process, one intra-op thread: blocks of timeit loops rotate between strict mode on and
  off (``torch.ops.sim_accel_strict.set_enabled``, outside the timed region: off removes every registration
  strict mode adds, so the off arm is the permissive stand-in), the order flipped every repeat. The ops: a
  listed op through the CPU fallback (``add``), one torch implements as a composite (``matmul``; strict mode
  wraps those), a cheap composite (``x * 2``), a view (``unsqueeze``), a dtype cast (``x.half()``) and a
  small MLP's training step (Linear, GELU, LayerNorm, cross entropy, AdamW: forward, backward, step);
* **start-up**: ``import torch; import torch_npu`` in fresh processes, strict and ``SIM_ACCEL_PERMISSIVE=1``
  alternating (the extension already built): CPU time of the import of torch_npu alone, and of the whole
  process.

Times are the process's CPU time (``time.process_time``), so other work on a shared machine does not count.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import timeit

BAR = 1.10


def _quartiles(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "n": len(values)}


def _per_op(repeats: int, budget: float) -> dict:
    import torch
    import torch_npu  # noqa: F401

    torch.set_num_threads(1)
    if not torch_npu.STRICT:
        raise SystemExit("strict mode is off (SIM_ACCEL_PERMISSIVE=1?): nothing to compare")
    x = torch.randn(64, 64, device="npu")
    y = torch.randn(64, 64, device="npu")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 10)).to("npu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    target = torch.randint(0, 10, (64,), device="npu")

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), target).backward()
        opt.step()

    cases = {
        "add (CPU fallback, listed)": lambda: torch.add(x, y),
        "matmul (composite, wrapped)": lambda: torch.matmul(x, y),
        "x * 2 (mul.Tensor)": lambda: x * 2,
        "unsqueeze (view)": lambda: x.unsqueeze(0),
        "x.half() (_to_copy)": lambda: x.half(),
        "MLP training step": step,
    }
    for fn in cases.values():  # warm up both arms (decision caches, allocator)
        for on in (True, False):
            torch.ops.sim_accel_strict.set_enabled(on)
            fn()
    per_call = {name: {"strict": [], "permissive": [], "ratio": []} for name in cases}
    for r in range(repeats):
        for name, fn in cases.items():
            timer = timeit.Timer(fn, timer=time.process_time)  # CPU time: the machine's other work stays out
            number = max(1, int(budget / max(timer.timeit(1), 1e-7)))
            times = {}
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                torch.ops.sim_accel_strict.set_enabled(on)
                times[on] = timer.timeit(number) / number
            per_call[name]["strict"].append(times[True])
            per_call[name]["permissive"].append(times[False])
            per_call[name]["ratio"].append(times[True] / times[False])
    torch.ops.sim_accel_strict.set_enabled(True)
    return {name: {"strict_us": statistics.median(v["strict"]) * 1e6,
                   "permissive_us": statistics.median(v["permissive"]) * 1e6, "ratio": _quartiles(v["ratio"])}
            for name, v in per_call.items()}


STARTUP = ("import time, torch; t = time.process_time(); import torch_npu; "
           "print('T', time.process_time() - t, torch_npu.STRICT)")


def _startup(repeats: int) -> dict:
    """``import torch_npu`` alone (CPU time inside the child) and the whole process (its CPU time, from
    getrusage of the children)."""
    times = {k: {"strict": [], "permissive": []} for k in ("import", "process")}
    ratios = {"import": [], "process": []}
    for r in range(repeats):
        sample = {"import": {}, "process": {}}
        for arm in (("strict", "permissive") if r % 2 == 0 else ("permissive", "strict")):
            env = dict(os.environ, OMP_NUM_THREADS="1")
            env.pop("SIM_ACCEL_PERMISSIVE", None)
            if arm == "permissive":
                env["SIM_ACCEL_PERMISSIVE"] = "1"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([sys.executable, "-c", STARTUP], env=env, capture_output=True, text=True, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            line = next(l for l in out.stdout.splitlines() if l.startswith("T "))
            _, seconds, strict = line.split()
            assert strict == str(arm == "strict"), line
            sample["import"][arm] = float(seconds)
            sample["process"][arm] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        for k in sample:
            times[k]["strict"].append(sample[k]["strict"])
            times[k]["permissive"].append(sample[k]["permissive"])
            ratios[k].append(sample[k]["strict"] / sample[k]["permissive"])
    return {k: {"strict_s": statistics.median(times[k]["strict"]),
                "permissive_s": statistics.median(times[k]["permissive"]), "ratio": _quartiles(ratios[k])}
            for k in times}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few repeats: shows that it works, not a figure")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 15)
    budget = 0.005 if args.quick else 0.03
    started = time.time()
    result = {"per_op": _per_op(repeats, budget), "startup": _startup(max(3, repeats // 2)),
              "load_average": os.getloadavg(), "bar": BAR, "seconds": time.time() - started}
    print(f"{'case':32} {'strict us':>10} {'permissive us':>14} {'ratio (q1-q3)':>22}")
    for name, row in result["per_op"].items():
        r = row["ratio"]
        print(f"{name:32} {row['strict_us']:10.1f} {row['permissive_us']:14.1f} "
              f"{r['median']:8.3f} ({r['q1']:.3f}-{r['q3']:.3f})")
    for key, label in (("import", "import torch_npu (s)"), ("process", "python: import torch, torch_npu (s)")):
        s = result["startup"][key]
        print(f"{label:32} {s['strict_s']:10.3f} {s['permissive_s']:14.3f} "
              f"{s['ratio']['median']:8.3f} ({s['ratio']['q1']:.3f}-{s['ratio']['q3']:.3f})")
    print(f"bar: {BAR}x; load average {result['load_average'][0]:.1f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
