"""Shared helpers: targets, child processes, vendor stand-ins, statistics."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENDORS_DIR = os.path.join(ROOT, "tests", "vendors")

#: Every target measured: the cpu target, then the three vendor stand-ins.
TARGETS = ("cpu", "npu", "sdaa", "gcu")
VENDOR_PACKAGES = {"npu": "torch_npu", "sdaa": "torch_sdaa", "gcu": "torch_gcu"}
#: Collective backend of each target (the hand port's init_process_group name).
BACKENDS = {"cpu": "gloo", "npu": "hccl", "sdaa": "tccl", "gcu": "eccl"}

#: Targets from the issues (16: per call, on every torch of the compat matrix).
TARGET_TRANSLATED = 1.2
TARGET_UNTOUCHED = 1.1
TARGET_GETTER = 1.2
TARGET_TRAINING = 1.01
TARGET_IMPORT_AUTO_MS = 20.0
TARGET_STARTUP_DIFF_MS = 1.0


# ----------------------------------------------------------------- processes
def child_env(**extra: Any) -> Dict[str, str]:
    """Environment for a measuring child: no TRANSFER_* from the caller, one thread."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRANSFER_", "_TRANSFER", "TORCH_DEVICE_BACKEND_AUTOLOAD"))}
    env["TRANSFER_QUIET"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["MKL_NUM_THREADS"] = "1"
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ROOT not in parts:
        parts.insert(0, ROOT)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_child(module: str, args: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run ``python -m benchmarks.<module> args --json FILE``; return its JSON or an error record."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="bench_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", f"benchmarks.{module}", *args, "--json", path]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env or child_env(), capture_output=True, text=True,
                              timeout=timeout)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", _text(exc.stdout), _text(exc.stderr)
    elapsed = time.perf_counter() - started
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if data is None:
        tail = (err or out or "").strip().splitlines()[-6:]
        return {"status": f"error: child exited {rc}: " + " | ".join(tail)[-600:], "elapsed_s": elapsed}
    data.setdefault("elapsed_s", elapsed)
    if rc not in (0,) and data.get("status") == "ok":
        data["exit_note"] = f"child exited {rc} after writing its result"
    return data


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def write_json(path: str, data: Dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, default=str)
    os.replace(tmp, path)


# -------------------------------------------------------------------- vendors
def import_vendor(target: str) -> Optional[str]:
    """Import the stand-in for `target` in this process; None, or why it failed.

    Call before transfer.install. One PrivateUse1 backend per process, so each
    vendor is measured in its own child process.
    """
    if target == "cpu":
        return None
    package = VENDOR_PACKAGES[target]
    if VENDORS_DIR not in sys.path:
        sys.path.insert(0, VENDORS_DIR)
    try:
        __import__(package)
        import torch

        module = getattr(torch, target, None)
        if module is None:
            return f"{package} imported but torch.{target} is missing"
        if not module.is_available() or module.device_count() < 1:
            return f"{package} imported but reports no {target} device"
    except BaseException as exc:  # a broken stand-in build must not stop the suite
        text = str(exc).strip().splitlines()
        return f"{package}: {type(exc).__name__}: {text[0] if text else ''}"[:400]
    return None


def enter_child(target: str) -> Optional[Dict[str, Any]]:
    """Start measuring in a child process: import the target's stand-in and use one
    intra-op thread. Returns the 'unavailable' record if the stand-in cannot be
    imported, else None."""
    reason = import_vendor(target)
    if reason:
        return unavailable(reason)
    import torch

    torch.set_num_threads(1)
    return None


def finish_child(json_path: Optional[str], measure: Callable[[], Dict[str, Any]]) -> None:
    """Run `measure`, write its result (or the error, with traceback) to `json_path`
    (None: write nothing, e.g. a DDP rank other than 0), then leave at once:
    os._exit skips interpreter teardown, where gloo/DDP objects and the stand-ins
    may hang or abort (seen on these 2-core machines). Never returns."""
    try:
        result = measure()
    except Exception as exc:  # report, don't hide
        import traceback

        result = {"status": f"error: {type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    if json_path is not None:
        write_json(json_path, result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def unavailable(reason: str) -> Dict[str, Any]:
    return {"status": f"unavailable: {reason}"}


def is_ok(result: Any) -> bool:
    return isinstance(result, dict) and result.get("status") == "ok"


# ----------------------------------------------------------------- statistics
def quantile(values: Sequence[float], q: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    pos = (len(data) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> Dict[str, float]:
    """median, quartiles, min, max and count of `values`."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return {"median": float("nan"), "q1": float("nan"), "q3": float("nan"), "min": float("nan"),
                "max": float("nan"), "n": 0}
    return {"median": statistics.median(values), "q1": quantile(values, 0.25), "q3": quantile(values, 0.75),
            "min": min(values), "max": max(values), "n": len(values)}


def bootstrap_median_diff(a: Sequence[float], b: Sequence[float], rounds: int = 2000, seed: int = 0) -> List[float]:
    """95% bootstrap interval of median(a) - median(b)."""
    if not a or not b:
        return [float("nan"), float("nan")]
    rng = random.Random(seed)
    diffs = []
    for _ in range(rounds):
        ra = [a[rng.randrange(len(a))] for _ in a]
        rb = [b[rng.randrange(len(b))] for _ in b]
        diffs.append(statistics.median(ra) - statistics.median(rb))
    return [quantile(diffs, 0.025), quantile(diffs, 0.975)]


def bootstrap_median(values: Sequence[float], rounds: int = 2000, seed: int = 0) -> List[float]:
    """95% bootstrap interval of median(values)."""
    if not values:
        return [float("nan"), float("nan")]
    rng = random.Random(seed)
    medians = [statistics.median([values[rng.randrange(len(values))] for _ in values]) for _ in range(rounds)]
    return [quantile(medians, 0.025), quantile(medians, 0.975)]


def per_call(fn: Callable[[], Any], calls: int) -> float:
    """Process CPU seconds per call of `fn` over `calls` calls (wall time wanders on a shared machine)."""
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls


def interleaved(first: Callable[[], Any], second: Callable[[], Any], repeats: int, calls: int):
    """Blocks of `calls` calls alternating between the two arms, each arm taking each position in turn:
    (first's seconds per call, second's, first / second) per repeat."""
    a, b, ratios = [], [], []
    for repeat in range(repeats):
        if repeat % 2:
            y, x = per_call(second, calls), per_call(first, calls)
        else:
            x, y = per_call(first, calls), per_call(second, calls)
        a.append(x)
        b.append(y)
        ratios.append(x / y)
    return a, b, ratios


def ratio_record(shim: Sequence[float], native: Sequence[float], ratios: Sequence[float],
                 target: Optional[float], unit_scale: float = 1.0) -> Dict[str, Any]:
    """The standard record of one interleaved comparison."""
    s = summary(ratios)
    record = {
        "ratio": s["median"], "ratio_q1": s["q1"], "ratio_q3": s["q3"], "ratio_min": s["min"],
        "ratio_max": s["max"], "repeats": s["n"],
        "shim": statistics.median(shim) * unit_scale if shim else float("nan"),
        "native": statistics.median(native) * unit_scale if native else float("nan"),
        "target": target,
    }
    record["added"] = record["shim"] - record["native"]
    record["meets_target"] = None if target is None else bool(record["ratio"] <= target)
    return record


def machine() -> Dict[str, Any]:
    import platform

    info: Dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        info["loadavg_at_start"] = list(os.getloadavg())
    except OSError:
        pass
    return info


QUICK_SKIPPED = {"status": "not measured with --quick: measured in full runs"}


def per_target(family: str, targets: Sequence[str], quick: bool, log: Callable[[str], None],
               line: Callable[[str, Dict[str, Any]], str], timeout: float = 1800) -> Dict[str, Any]:
    """`python -m benchmarks.<family> --target T [--quick]` in a child per target, each result logged with
    `line`; with --quick only the cpu target runs (the vendors' figures come from full runs)."""
    results: Dict[str, Any] = {}
    for target in targets:
        if quick and target != "cpu":
            results[target] = dict(QUICK_SKIPPED)
            continue
        log(f"  {family}: {target} ...")
        results[target] = run_child(family, ["--target", target] + (["--quick"] if quick else []),
                                    timeout=600 if quick else timeout)
        log(line(target, results[target]))
    return results
