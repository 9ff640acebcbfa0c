"""``python -m benchmarks`` / ``python benchmarks/run.py``: run the suite, print, write JSON + chart.

    python -m benchmarks                 # full run (~15-25 min on 2 cores)
    python -m benchmarks --quick         # smoke run (CI): every family, few repeats
    python -m benchmarks --only calls,compile --targets cpu,sdaa --out /tmp/b
    python -m benchmarks --only migrate ~/src/some-repo      # scan/port speed on any checkout

Writes ``<out>/results.json`` and ``<out>/calls.png`` (default out:
benchmarks/results/, git-ignored). Vendor stand-ins (tests/vendors) are probed
first, each in its own process; one that does not import is reported as
"unavailable: <reason>" in every family, never skipped silently.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

if __package__ in (None, ""):  # python benchmarks/run.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "benchmarks"

from benchmarks import _common as C  # noqa: E402

FAMILIES = ("calls", "training", "startup", "compile", "memory", "calllog", "thirdparty", "migrate", "standin")

_PROBE = r"""
import sys, time, json
sys.path.insert(0, sys.argv[2])
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from benchmarks import _common as C
reason = C.import_vendor(sys.argv[1])
t2 = time.perf_counter()
info = {"reason": reason, "import_torch_s": t1 - t0, "import_vendor_s": t2 - t1}
if reason is None:
    mod = getattr(torch, sys.argv[1])
    info["device_count"] = mod.device_count()
print(json.dumps(info))
"""


def probe_vendor(target: str, timeout: float = 900) -> Dict[str, Any]:
    """Import one stand-in in a fresh process (builds its C++ extension on first use)."""
    import json

    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, target, C.VENDORS_DIR, C.ROOT], env=C.child_env(),
                              cwd=C.ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"reason": f"importing {C.VENDOR_PACKAGES[target]} took over {timeout:.0f}s"}
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"reason": f"probe exited {proc.returncode}: {' | '.join(tail)[-400:]}"}


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=C.ROOT, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "transfer"], cwd=C.ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + (" (transfer/ modified)" if dirty else "")
    except Exception:
        return "unknown"


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", metavar="DIR",
                        help="checkouts family migrate measures scan and port on (default: this checkout)")
    parser.add_argument("--quick", action="store_true", help="few repeats: checks the suite works, not the numbers")
    parser.add_argument("--out", default=os.path.join(C.ROOT, "benchmarks", "results"))
    parser.add_argument("--only", default=",".join(FAMILIES), help=f"comma list of {', '.join(FAMILIES)}")
    parser.add_argument("--targets", default=",".join(C.TARGETS), help="comma list of cpu, npu, sdaa, gcu")
    parser.add_argument("--jobs", type=int, default=None,
                        help="families run side by side (default: 2 with --quick, else 1; >1 spoils the timings)")
    args = parser.parse_args(argv)
    families = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if unknown or any(t not in C.TARGETS for t in targets):
        parser.error(f"unknown family or target: {unknown or targets}")
    jobs = args.jobs or (2 if args.quick else 1)
    lock = threading.Lock()

    def log(message: str) -> None:
        with lock:
            print(message, flush=True)

    started = time.perf_counter()
    import torch

    import transfer

    results: Dict[str, Any] = {"meta": {
        "quick": args.quick, "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "torch": torch.__version__, "transfer": transfer.__version__, "commit": _git_commit(),
        "machine": C.machine(), "families": families, "jobs": jobs,
        "threads_per_process": 1, "unavailable": {}, "vendors": {},
    }}
    available = []
    for target in targets:
        if target == "cpu":
            available.append(target)
            continue
        log(f"probing vendor stand-in {C.VENDOR_PACKAGES[target]} ...")
        info = probe_vendor(target)
        results["meta"]["vendors"][target] = info
        if info.get("reason"):
            results["meta"]["unavailable"][target] = info["reason"]
            log(f"  {target}: unavailable: {info['reason']}")
        else:
            available.append(target)
    missing = {t: C.unavailable(results["meta"]["unavailable"][t]) for t in targets if t not in available}

    def run_family(name: str) -> Any:
        log(f"[{name}]")
        t0 = time.perf_counter()
        module = __import__(f"benchmarks.{name}", fromlist=["measure"])
        try:
            if name == "migrate":  # offline tools: no target, the directories given
                result = module.measure(args.paths, args.quick, log)
            elif name == "startup":
                result = module.measure(available, args.quick, log)
                for t, why in missing.items():
                    result.setdefault("import_auto", {})[t] = why
            else:
                result = module.measure(available, args.quick, log)
                result.setdefault("targets", {}).update(missing)
        except Exception as exc:  # one family failing must not lose the others
            import traceback

            result = {"status": f"error: {type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        result["seconds"] = time.perf_counter() - t0
        log(f"[{name}] done in {result['seconds']:.0f}s")
        return result

    # With --quick the families may share the machine (jobs=2): the numbers are
    # meaningless then, but the suite is exercised end to end in half the time.
    lanes = [["calls", "training", "calllog"], ["startup", "compile", "memory", "thirdparty", "migrate", "standin"]] \
        if jobs > 1 \
        else [list(FAMILIES)]
    lanes = [[f for f in lane if f in families] for lane in lanes]
    done: Dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(lanes))) as pool:
        for lane_result in pool.map(lambda lane: {f: run_family(f) for f in lane}, lanes):
            done.update(lane_result)
    for name in families:
        results[name] = done[name]
    results["meta"]["seconds"] = time.perf_counter() - started

    from benchmarks import report

    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "results.json")
    png_path = os.path.join(args.out, "calls.png")
    results["meta"]["targets_missed"] = report.targets_missed(results)
    results["meta"]["findings"] = report.findings(results)
    C.write_json(json_path, results)
    try:
        report.chart(results, png_path)
        written = f"{json_path} and {png_path}"
    except ImportError as exc:  # matplotlib is the optional `bench` extra: the numbers stand without it
        written = f"{json_path} (no chart: {exc}; pip install matplotlib, or transfer[bench], draws it)"
    print()
    print(report.table(results))
    print(f"\nwrote {written} in {results['meta']['seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
