"""Peak RSS of a short training run: the CUDA script under the shim vs. its hand port.

Each run is its own process (peak RSS is a per-process high-water mark):
import torch (and the vendor stand-in), build the small CNN of
`workloads`, train `steps` steps, then read ``ru_maxrss``. The "shim" process
runs `CudaScript` after ``transfer.install(target)``; the "native" process
runs `HandPort` and never installs the shim (transfer's entry point is still
imported by ``import torch``, as for any user who has the package installed).
Runs alternate shim/native, flipping the order every repeat; the ratio is
taken per pair.
"""

from __future__ import annotations

import argparse
import resource
import sys
from typing import Any, Dict, List

from . import _common as C

FULL = {"repeats": 7, "repeats_vendor": 3, "steps": 30}
QUICK = {"repeats": 1, "repeats_vendor": 1, "steps": 5}


def _rss_mib() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def child(target: str, mode: str, steps: int) -> Dict[str, Any]:
    unavailable = C.enter_child(target)
    if unavailable:
        return unavailable
    import torch

    from .workloads import CudaScript, HandPort, batches

    before = _rss_mib()
    if mode == "shim":
        import transfer

        transfer.install(target)
        script = CudaScript("cnn")
    else:
        script = HandPort("cnn", target)
    data = batches("cnn")
    for i in range(steps):
        x, y = data[i % len(data)]
        script.step(x, y)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    return {"status": "ok", "peak_rss_mib": peak, "rss_before_mib": before, "rss_end_mib": _rss_mib(),
            "transfer_imported": "transfer" in sys.modules, "shim_active": mode == "shim"}


def measure(targets, quick: bool, log=print) -> Dict[str, Any]:
    cfg = QUICK if quick else FULL
    results: Dict[str, Any] = {}
    for target in targets:
        if quick and target != "cpu":
            results[target] = {"status": "not measured with --quick: measured in full runs"}
            continue
        log(f"  memory: {target} ...")
        peaks: Dict[str, List[float]] = {"shim": [], "native": []}
        growth: Dict[str, List[float]] = {"shim": [], "native": []}
        ratios: List[float] = []
        status = "ok"
        for rep in range(cfg["repeats"] if target == "cpu" else cfg["repeats_vendor"]):
            order = ("native", "shim") if rep % 2 == 0 else ("shim", "native")
            got = {}
            for side in order:
                got[side] = C.run_child("memory", ["--target", target, "--mode", "shim" if side == "shim" else "port",
                                                   "--steps", str(cfg["steps"])], timeout=600)
            bad = [g for g in got.values() if not C.is_ok(g)]
            if bad:
                status = bad[0].get("status", "error")
                break
            for side in order:
                peaks[side].append(got[side]["peak_rss_mib"])
                growth[side].append(got[side]["peak_rss_mib"] - got[side]["rss_before_mib"])
            ratios.append(got["shim"]["peak_rss_mib"] / got["native"]["peak_rss_mib"])
        if status != "ok":
            results[target] = {"status": status}
            continue
        record = C.ratio_record(peaks["shim"], peaks["native"], ratios, None)
        record.update(status="ok", unit="MiB peak RSS", steps=cfg["steps"], model="cnn",
                      growth_shim_mib=C.summary(growth["shim"])["median"],
                      growth_native_mib=C.summary(growth["native"])["median"])
        results[target] = record
    return {"targets": results, "method": "one process per run, shim/native alternated; ru_maxrss at the end"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    parser.add_argument("--target", default="cpu", choices=C.TARGETS)
    parser.add_argument("--mode", choices=("shim", "port"), required=True)
    parser.add_argument("--steps", type=int, default=FULL["steps"])
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    C.finish_child(args.json, lambda: child(args.target, args.mode, args.steps))


if __name__ == "__main__":
    sys.exit(main())
