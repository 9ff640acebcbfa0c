"""Per-call cost of the hot calls: the CUDA spelling under the shim vs. the hand port.

One child process per target (the cpu target, then each vendor stand-in: one
PrivateUse1 backend per process). Inside it every row is timed as a pair of
timeit samples, the hand port with `transfer` uninstalled and the CUDA spelling
with it installed, alternating which goes first; `transfer.install` /
`transfer.uninstall` run between samples, outside the timed loops. A sample is
``number`` calls of the statement in timeit's inner loop (the statement's
names are locals of the timing function, as in a training loop); the cost of
the empty loop, measured alongside, is subtracted from both before the ratio
is taken. The result is the median of the per-repeat ratios and their spread.

Hand ports (what the "native" column runs):

============================  ======================================  ===============================
CUDA call (shim)              vendor hand port                        cpu hand port (a copy, as CUDA
                                                                      makes for a host tensor)
============================  ======================================  ===============================
x.cuda()                      x.to('<v>:0')                           x.to('cpu', copy=True)  (x.clone()
                                                                      is also shown)
x.to('cuda', non_blocking=1)  x.to('<v>', non_blocking=True)          x.to('cpu', non_blocking=True,
                                                                      copy=True)
x.to(cuda0)                   x.to(torch.device('<v>', 0))            x.to(torch.device('cpu'),
                                                                      copy=True)
torch.zeros(4, device='cuda') torch.zeros(4, device='<v>')            device='cpu'
torch.randn(4,4,device=cuda)  device='<v>'                            device='cpu'
x.is_cuda                     x.is_<v>                                x.is_cpu
torch.cuda.is_available()     torch.<v>.is_available()                torch.cpu.is_available()
torch.cuda.current_device()   torch.<v>.current_device()              torch.cpu.current_device()
                                                                      (torch 2.0: constants; info rows)
torch.device(0)               torch.device(0) (the plug-in's <v>:0)   torch.device('cpu')
  (from the script's file)
torch.device('cuda', 0)       the same call                           the same call
untouched calls               the same call                           the same call
dist.all_reduce(t), float32   the same call (a 1-rank group of the target's backend, made natively)
============================  ======================================  ===========================

On a vendor x lives on the target device, so `.to`-style calls are the no-op
move that shows the wrapper's cost most plainly; the vendor rows add
``h.cuda()`` for a host tensor `h`, the copy a training loop makes for each
batch. On the cpu target host memory is device memory and a move to CUDA is a
copy (as CUDA makes one from host memory), so its hand port copies too. Two
"info" rows carry no target: ``x.cuda()`` against ``x.clone()``
(the other cpu hand port), and the floor: a one-line Python function calling
the C ``Tensor.to`` against ``x.to(dev)``, i.e. what any Python-level wrapper
costs on the machine at hand. On npu an info row times a float64 all_reduce, which
hccl refuses and transfer computes (an all_gather and the sum on the host), against
the float32 one.

``torch.device(N)`` is answered ``cuda:N`` by torch.device's own constructor,
swapped in C (patches/accelerator.py): on a vendor only for the user's script,
decided from the calling file, so that row calls it from a function of this
file (`device_of`), as a script does; ``torch.device('cuda', 0)`` shows what the
swapped constructor costs every other construction.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import timeit
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from . import _common as C

#: Samples per row and seconds per sample.
FULL = {"repeats": 41, "sample_s": 0.010}
QUICK = {"repeats": 5, "sample_s": 0.0015}


@dataclass
class Row:
    call: str  # the CUDA spelling, as the report shows it
    kind: str  # translated | getter | untouched | info
    shim: str  # statement run with transfer installed
    native: str  # hand port, run with transfer uninstalled

    @property
    def target(self) -> Optional[float]:
        return {"translated": C.TARGET_TRANSLATED, "getter": C.TARGET_GETTER,
                "untouched": C.TARGET_UNTOUCHED}.get(self.kind)


def rows_for(target: str) -> List[Row]:
    import torch

    cpu = target == "cpu"
    v = target
    available, current = f"torch.{v}.is_available()", f"torch.{v}.current_device()"
    device_module = "translated"
    if cpu and not hasattr(torch.cpu, "current_device"):  # torch 2.0's torch.cpu has neither: a port writes constants
        available, current = "True", "0"
        device_module = "info"  # no ratio to a constant: the row shows the ns added
    copy = ", copy=True" if cpu else ""  # the cpu target's moves copy, as CUDA's from host memory do
    rows = [
        Row("x.cuda()", "translated", "x.cuda()", "x.to('cpu', copy=True)" if cpu else f"x.to('{v}:0')"),
        Row("x.to('cuda', non_blocking=True)", "translated", "x.to('cuda', non_blocking=True)",
            f"x.to('{v}', non_blocking=True{copy})"),
        Row("x.to(device) [torch.device('cuda',0)]", "translated", "x.to(cuda0)", f"x.to(dev0{copy})"),
        Row("torch.zeros(4, device='cuda')", "translated", "torch.zeros(4, device='cuda')",
            f"torch.zeros(4, device='{v}')"),
        Row("torch.randn(4, 4, device='cuda')", "translated", "torch.randn(4, 4, device='cuda')",
            f"torch.randn(4, 4, device='{v}')"),
        Row("x.is_cuda", "getter", "x.is_cuda", f"x.is_{v}"),
        Row("torch.cuda.is_available()", device_module, "torch.cuda.is_available()", available),
        Row("torch.cuda.current_device()", device_module, "torch.cuda.current_device()", current),
        Row("x.to(torch.float16)", "untouched", "x.to(torch.float16)", "x.to(torch.float16)"),
        Row("torch.zeros(4)", "untouched", "torch.zeros(4)", "torch.zeros(4)"),
        Row("model.to(torch.bfloat16)", "untouched", "model.to(torch.bfloat16)", "model.to(torch.bfloat16)"),
        Row("torch.device(0) (the script's)", "translated", "device_of(0)", "device_of('cpu')" if cpu else "device_of(0)"),
        Row("torch.device('cuda', 0)", "untouched", "torch.device('cuda', 0)", "torch.device('cuda', 0)"),
        # float64 casts: on npu transfer names the first one that torch_npu turns into float32 (vendor_ops.py)
        Row("x.double()", "untouched", "x.double()", "x.double()"),
        Row("x.to(torch.float64)", "untouched", "x.to(torch.float64)", "x.to(torch.float64)"),
    ]
    if cpu:
        rows.append(Row("x.cuda() vs x.clone()", "info", "x.cuda()", "x.clone()"))
    else:
        rows.append(Row("h.cuda() (host tensor)", "translated", "h.cuda()", f"h.to('{v}:0')"))
        # npu: Tensor.double is watched until the first cast of a device tensor (the row above: torch's own after)
        rows.append(Row("h.double() (host tensor)", "untouched", "h.double()", "h.double()"))
    # A collective the backend reduces itself: the cost of transfer's check (patches/collectives.py) on top of
    # the backend's call (a 1-rank group; the collective's own cost is what a rank pays at any size).
    rows.append(Row("dist.all_reduce(t) [float32]", "untouched", "dist.all_reduce(t32)", "dist.all_reduce(t32)"))
    if target == "npu":  # hccl has no float64 reduction: transfer computes it (all_gather + host sum)
        rows.append(Row("dist.all_reduce(float64) vs float32", "info", "dist.all_reduce(t64)", "dist.all_reduce(t32)"))
    # The cost of any Python layer: the least a wrapper around x.to(device) can add.
    rows.append(Row("floor: Python wrapper of x.to(dev)", "info", "floor(x, dev0)", "x.to(dev0)"))
    return rows


def _namespace(target: str) -> Dict[str, Any]:
    import torch

    dev0 = torch.device("cpu") if target == "cpu" else torch.device(target, 0)
    h = torch.randn(4)
    x = h.to(dev0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(dev0)
    model.to(torch.bfloat16)
    tensor_base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase  # torch 2.0 names it _TensorBase
    native_to = tensor_base.to

    def floor(tensor, device):
        return native_to(tensor, device)

    def device_of(spec):
        return torch.device(spec)  # called from this file: the user's code to transfer (frames.is_script)

    import torch.distributed as dist

    if not dist.is_initialized():  # a 1-rank group of the target's backend, made natively (transfer is off here)
        from transfer.profiles import PROFILES

        if target != "cpu":
            getattr(torch, target).set_device(0)  # tccl wants the device set first
        dist.init_process_group(PROFILES[target].backend, store=dist.HashStore(), rank=0, world_size=1)
    return {"torch": torch, "dist": dist, "_x": x, "_h": h, "_model": model, "_dev0": dev0,
            "_cuda0": torch.device("cuda", 0), "floor": floor, "_t32": torch.ones(256, device=dev0),
            "_t64": torch.ones(256, dtype=torch.float64, device=dev0), "device_of": device_of}


SETUP = "x = _x; h = _h; model = _model; dev0 = _dev0; cuda0 = _cuda0; t32 = _t32; t64 = _t64"


class Toggle:
    """transfer on/off for `target`, switching only when asked for the other state."""

    def __init__(self, target: str):
        import transfer

        self.transfer, self.target, self.on = transfer, target, False

    def set(self, on: bool) -> None:
        if on and not self.on:
            self.transfer.install(self.target)
        elif not on and self.on:
            self.transfer.uninstall()
        self.on = on


def _calibrate(timer: timeit.Timer, sample_s: float) -> int:
    number = 50
    while True:
        took = timer.timeit(number)
        if took >= sample_s / 4 or number >= 200000:
            break
        number *= 4
    per_call = took / number
    return int(min(200000, max(1000, sample_s / max(per_call, 1e-9))))


def measure_target(target: str, quick: bool) -> Dict[str, Any]:
    """Run in the target's own process: every row, interleaved."""
    cfg = QUICK if quick else FULL
    unavailable = C.enter_child(target)
    if unavailable:
        return unavailable
    import torch

    import transfer

    toggle = Toggle(target)
    # Sanity: the shim really translates, and uninstall really restores.
    toggle.set(True)
    translated = torch.zeros(1, device="cuda").device.type
    toggle.set(False)
    if translated != target:
        return {"status": f"error: torch.zeros(device='cuda') went to {translated}, not {target}"}
    ns = _namespace(target)
    rows = rows_for(target)
    timers = [(timeit.Timer(r.native, SETUP, globals=ns), timeit.Timer(r.shim, SETUP, globals=ns)) for r in rows]
    empty = timeit.Timer("pass", SETUP, globals=ns)
    numbers = []
    for i, (native_timer, shim_timer) in enumerate(timers):
        toggle.set(False)
        numbers.append(_calibrate(native_timer, cfg["sample_s"]))
    samples: List[Dict[str, List[float]]] = [{"native": [], "shim": []} for _ in rows]
    loop: List[float] = []
    gc.collect()
    started = time.perf_counter()
    for rep in range(cfg["repeats"]):
        loop.append(empty.timeit(100000) / 100000)
        for i, (native_timer, shim_timer) in enumerate(timers):
            order = (("native", False, native_timer), ("shim", True, shim_timer))
            if (rep + i) % 2:
                order = order[::-1]
            for side, on, timer in order:
                toggle.set(on)
                timer.timeit(max(20, numbers[i] // 20))  # warm: translation caches, allocator
                samples[i][side].append(timer.timeit(numbers[i]) / numbers[i])
    toggle.set(False)
    elapsed = time.perf_counter() - started
    loop_s = statistics.median(loop)
    out_rows = []
    for row, number, sample in zip(rows, numbers, samples):
        native = [max(t - loop_s, 1e-12) for t in sample["native"]]
        shim = [max(t - loop_s, 1e-12) for t in sample["shim"]]
        ratios = [s / n for s, n in zip(shim, native)]
        record = C.ratio_record(shim, native, ratios, row.target, unit_scale=1e9)
        record.update(call=row.call, kind=row.kind, shim_stmt=row.shim, native_stmt=row.native, number=number,
                      unit="ns")
        out_rows.append(record)
    transfer.install(target)
    patches = len(transfer.status().get("patches", []))
    transfer.uninstall()
    return {"status": "ok", "target": target, "rows": out_rows, "loop_ns": loop_s * 1e9, "patches": patches,
            "repeats": cfg["repeats"], "measure_s": elapsed, "torch": torch.__version__}


def measure(targets, quick: bool, log=print) -> Dict[str, Any]:
    """Parent side: one child per target."""
    results = {}
    for target in targets:
        log(f"  calls: {target} ...")
        results[target] = C.run_child("calls", ["--target", target] + (["--quick"] if quick else []),
                                      timeout=600 if quick else 1800)
    return {"targets": results, "method": "timeit inner loops, native/shim samples alternated per row, "
            "empty-loop cost subtracted; ratio = shim / native per repeat"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calls")
    parser.add_argument("--target", required=True, choices=C.TARGETS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    C.finish_child(args.json, lambda: measure_target(args.target, args.quick))


if __name__ == "__main__":
    sys.exit(main())
