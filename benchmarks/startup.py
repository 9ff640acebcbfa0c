"""Activation and start-up cost.

1. ``import transfer.auto`` in a process that has already imported torch (the
   cpu target; each vendor stand-in with its package imported first): the
   whole activation, measured inside fresh processes.

2. Whole-process time of ``python -c pass`` and ``python -c "import torch"``
   with `transfer` installed and TRANSFER_DEVICE unset vs. not installed.

   How `transfer` hooks in, two mechanisms: (a) ``transfer.pth`` at the top
   of site-packages, whose line Python's `site` runs at every interpreter
   start: one environment lookup while TRANSFER_DEVICE is unset (``python -c
   pass`` shows its cost); (b) a ``torch.backends`` entry point, so at the end
   of ``import torch`` torch scans every installed distribution's entry points
   (it does that whether or not transfer is installed), imports ``transfer``
   (one module) and calls ``torch_backend_entry_point()``, which returns after
   one environment lookup (``torch._import_device_backends()`` shows it). An
   editable install (``pip install -e .``, this checkout) also adds
   setuptools' ``.pth`` file that imports a path finder at every start.

   The comparison: three throw-away virtual environments built from this
   interpreter, whose site-packages are symlinks to every entry of the real
   site-packages except transfer's, plus
     * ``none``: nothing else (transfer not installed),
     * ``wheel``: transfer's wheel, built from this checkout and unpacked as
       pip installs it (package, ``.dist-info`` with the entry point, ``transfer.pth``),
     * ``editable``: transfer's editable-install files as pip wrote them here.
   All three start the same interpreter the same way, so the difference is
   transfer alone. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` was rejected as the
   "not installed" stand-in because it also skips torch's entry-point scan,
   which a user without transfer still pays (its effect is reported as a
   separate line). ``-S`` cannot import torch at all.

   Runs rotate through the environments (random order per round) so drift
   cancels; the median difference gets a 95% bootstrap interval. Because a
   whole ``import torch`` varies by tens of ms between runs, the suite also
   times the part that differs precisely: ``torch._import_device_backends()``
   (what ``import torch`` runs last) in fresh processes started with
   ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

from . import _common as C

FULL = {"quick": False, "auto_runs": 15, "auto_runs_vendor": 5, "pass_runs": 150, "torch_runs": 12,
        "backends_runs": 15, "autoload_runs": 6}
QUICK = {"quick": True, "auto_runs": 1, "auto_runs_vendor": 1, "pass_runs": 4, "torch_runs": 1, "backends_runs": 1,
         "autoload_runs": 0}
ENVS = ("none", "wheel", "editable")

_AUTO_CODE = r"""
import sys, time, json
vendor = sys.argv[1]
import torch
if vendor != "cpu":
    sys.path.insert(0, sys.argv[2])
    __import__("torch_" + vendor)
t0 = time.perf_counter()
import transfer.auto
t1 = time.perf_counter()
print(json.dumps({"ms": (t1 - t0) * 1e3, "active": transfer.status().get("device"), "file": transfer.__file__}))
"""

_BACKENDS_CODE = r"""
import time, sys, json
import torch
before = "transfer" in sys.modules
t0 = time.perf_counter()
torch._import_device_backends()
t1 = time.perf_counter()
print(json.dumps({"ms": (t1 - t0) * 1e3, "loaded_before": before, "transfer_loaded": "transfer" in sys.modules,
                  "transfer_file": getattr(sys.modules.get("transfer"), "__file__", None),
                  "editable_finder": any("editable" in str(f).lower() for f in sys.meta_path)}))
"""


# --------------------------------------------------------------- environments
def _transfer_entries(site_dir: str) -> List[str]:
    return [name for name in os.listdir(site_dir)
            if name.startswith(("cuda_transfer-", "__editable__.cuda_transfer-", "__editable___cuda_transfer_",
                                "transfer-", "__editable__.transfer-", "__editable___transfer_"))  # the old name
            or name in ("transfer", "transfer.pth")]


def _install_wheel(target_site: str, root: str) -> None:
    """transfer's wheel, built from this checkout, unpacked as pip installs it (byte-compiled)."""
    import compileall
    import glob
    import zipfile

    wheel = os.environ.get("WHEEL_UNDER_TEST")  # the nox sessions' wheel; else build one from this checkout
    if not wheel:
        dist = os.path.join(root, "dist")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist,
                        C.ROOT], check=True, capture_output=True)
        (wheel,) = glob.glob(os.path.join(dist, "cuda_transfer-*.whl"))  # the distribution is cuda-transfer
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target_site)
    assert os.path.exists(os.path.join(target_site, "transfer.pth")), "the wheel lacks its .pth gate"
    compileall.compile_dir(os.path.join(target_site, "transfer"), quiet=1)
    with open(os.path.join(glob.glob(os.path.join(target_site, "cuda_transfer-*.dist-info"))[0], "INSTALLER"), "w") as fh:
        fh.write("pip\n")


def build_envs(root: str) -> Dict[str, str]:
    """Create the three environments under `root`; return name -> python executable."""
    import importlib.metadata as md

    site_dir = os.path.dirname(os.path.dirname(os.path.abspath(md.__file__)))  # fallback only
    for candidate in site.getsitepackages():
        if os.path.isdir(os.path.join(candidate, "torch")):
            site_dir = candidate
            break
    ours = set(_transfer_entries(site_dir))
    pythons = {}
    # "editable" exists only where transfer is installed editable (a checkout); the nox sessions
    # measure the installed wheel, which the "wheel" environment is.
    editable = any(entry.startswith("__editable__") for entry in ours)
    for name in (e for e in ENVS if editable or e != "editable"):
        env_dir = os.path.join(root, name)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True,
                       capture_output=True)
        py = os.path.join(env_dir, "bin", "python")
        target_site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     check=True, capture_output=True, text=True).stdout.strip()
        for entry in os.listdir(site_dir):
            if entry in ours:
                continue
            os.symlink(os.path.join(site_dir, entry), os.path.join(target_site, entry))
        if name == "wheel":
            _install_wheel(target_site, root)
        elif name == "editable":
            for entry in ours:
                os.symlink(os.path.join(site_dir, entry), os.path.join(target_site, entry))
        pythons[name] = py
    return pythons


def _clean_env(**extra) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRANSFER_", "_TRANSFER", "PYTHON", "TORCH_DEVICE_BACKEND_AUTOLOAD", "VIRTUAL_ENV"))}
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _wall(cmd: List[str], env: Dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {proc.stderr.decode(errors='replace')[-400:]}")
    return took * 1e3


def _json_out(cmd: List[str], env: Dict[str, str], cwd: str) -> Dict[str, Any]:
    import json

    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {proc.stderr[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compare(samples: Dict[str, List[float]], base: str = "none") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, values in samples.items():
        s = C.summary(values)
        entry = {"median_ms": s["median"], "q1_ms": s["q1"], "q3_ms": s["q3"], "min_ms": s["min"],
                 "max_ms": s["max"], "runs": s["n"]}
        if name != base:
            entry["diff_ms"] = s["median"] - statistics.median(samples[base])
            entry["diff_ci95_ms"] = C.bootstrap_median_diff(values, samples[base])
            entry["ratio"] = s["median"] / statistics.median(samples[base])
            entry["target_diff_ms"] = C.TARGET_STARTUP_DIFF_MS
            entry["meets_target"] = bool(entry["diff_ms"] < C.TARGET_STARTUP_DIFF_MS)
        out[name] = entry
    return out


def _rotate(pythons: Dict[str, str], runs: int, fn, rng: random.Random) -> Dict[str, List[float]]:
    samples: Dict[str, List[float]] = {name: [] for name in pythons}
    names = list(pythons)
    for _ in range(runs):
        rng.shuffle(names)
        for name in names:
            samples[name].append(fn(pythons[name]))
    return samples


# ------------------------------------------------------------------- measures
def _package_dir() -> str:
    """The transfer package being measured: this checkout's, or the installed one (nox runs from a copy of tests)."""
    import transfer

    return os.path.dirname(os.path.abspath(transfer.__file__))


def _package_copies(root: str) -> Dict[str, str]:
    """Two copies of the transfer package: byte-compiled (as pip leaves it) and source only."""
    import compileall

    copies = {}
    for name in ("pyc", "no_pyc"):
        parent = os.path.join(root, name)
        shutil.copytree(_package_dir(), os.path.join(parent, "transfer"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if name == "pyc":
            compileall.compile_dir(os.path.join(parent, "transfer"), quiet=1)
        copies[name] = parent
    return copies


def _importtime(env: Dict[str, str], cwd: str, top: int = 12) -> List[Dict[str, Any]]:
    """``-X importtime`` of ``import transfer.auto`` after torch: the slowest modules (one run)."""
    code = "import torch, sys; sys.stderr.write('@@mark\\n'); sys.stderr.flush(); import transfer.auto"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    rows = []
    seen = False
    for line in proc.stderr.splitlines():
        if line.startswith("@@mark"):
            seen = True
            continue
        if not seen or not line.startswith("import time:") or "|" not in line:
            continue
        try:
            self_us, cumulative_us, name = line[len("import time:"):].split("|")
            self_us, cumulative_us = int(self_us), int(cumulative_us)
        except ValueError:
            continue
        rows.append({"module": name.strip(), "self_ms": self_us / 1e3, "cumulative_ms": cumulative_us / 1e3})
    rows.sort(key=lambda r: -r["cumulative_ms"])
    return rows[:top]


def measure_import_auto(targets, cfg, log=print) -> Dict[str, Any]:
    """``import transfer.auto`` after torch, from a byte-compiled copy of the package.

    This environment sets PYTHONDONTWRITEBYTECODE=1 and the checkout holds
    .pyc files for only some modules, so importing from it would time the
    byte-compiler; a pip install compiles every module at install time. A
    source-only copy is timed alongside (runs alternate) for reference.
    """
    out = {}
    root = tempfile.mkdtemp(prefix="bench_pkg_")
    try:
        copies = _package_copies(root)
        for target in targets:
            runs = cfg["auto_runs"] if target == "cpu" else cfg["auto_runs_vendor"]
            cmd = [sys.executable, "-c", _AUTO_CODE, target, C.VENDORS_DIR]
            values: Dict[str, List[float]] = {"pyc": [], "no_pyc": []}
            active, error, files = None, None, set()
            variants = ("pyc", "no_pyc") if (target == "cpu" or not cfg["quick"]) else ("pyc",)
            for rep in range(runs):
                for name in (variants if rep % 2 == 0 else variants[::-1]):
                    env = C.child_env(PYTHONDONTWRITEBYTECODE=1)
                    env["PYTHONPATH"] = os.pathsep.join([copies[name], env["PYTHONPATH"]])
                    try:
                        got = _json_out(cmd, env, root)  # not the checkout: '' must not find transfer
                    except Exception as exc:
                        error = str(exc)
                        break
                    values[name].append(got["ms"])
                    active = got["active"]
                    files.add(os.path.dirname(os.path.dirname(got["file"])))
                if error is not None:
                    break
            if error is not None and not values["pyc"]:
                reason = error.strip().splitlines()[-1] if error.strip() else error
                out[target] = {"status": f"error: {reason}"[:500]}
                continue
            if not files <= set(copies.values()):
                out[target] = {"status": f"error: transfer was imported from {sorted(files)}, not the copies"}
                continue
            s = C.summary(values["pyc"])
            out[target] = {"status": "ok", "median_ms": s["median"], "q1_ms": s["q1"], "q3_ms": s["q3"],
                           "min_ms": s["min"], "max_ms": s["max"], "runs": s["n"], "active": active,
                           "no_pyc_median_ms": C.summary(values["no_pyc"])["median"] if values["no_pyc"] else None,
                           "target_ms": C.TARGET_IMPORT_AUTO_MS,
                           "meets_target": bool(s["median"] < C.TARGET_IMPORT_AUTO_MS)}
            log(f"    import transfer.auto [{target}]: {s['median']:.1f} ms")
            if target == "cpu":
                env = C.child_env(PYTHONDONTWRITEBYTECODE=1)
                env["PYTHONPATH"] = os.pathsep.join([copies["pyc"], env["PYTHONPATH"]])
                out[target]["importtime"] = _importtime(env, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def measure(targets, quick: bool, log=print) -> Dict[str, Any]:
    cfg = QUICK if quick else FULL
    rng = random.Random(1)
    result: Dict[str, Any] = {"status": "ok"}
    log("  startup: import transfer.auto after torch ...")
    result["import_auto"] = measure_import_auto(targets, cfg, log)
    root = tempfile.mkdtemp(prefix="bench_envs_")
    cwd = tempfile.mkdtemp(prefix="bench_cwd_")  # not the checkout: '' on sys.path must not find transfer
    try:
        log("  startup: building the none / wheel / editable environments ...")
        pythons = build_envs(root)
        env = _clean_env()
        off = _clean_env(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        probes: Dict[str, Any] = {}

        def backends(name: str, py: str) -> float:
            got = _json_out([py, "-c", _BACKENDS_CODE], off, cwd)
            probes[name] = {k: v for k, v in got.items() if k != "ms"}
            return got["ms"]

        import torch

        if hasattr(torch, "_import_device_backends"):
            log("  startup: torch._import_device_backends() ...")
            samples = {name: [] for name in pythons}
            names = list(pythons)
            for _ in range(cfg["backends_runs"]):
                rng.shuffle(names)
                for name in names:
                    samples[name].append(backends(name, pythons[name]))
            result["environments"] = probes
            wrong = [n for n, p in probes.items() if p["loaded_before"] or p["transfer_loaded"] != (n != "none")
                     or (n == "wheel" and not str(p["transfer_file"]).startswith(root))
                     or p["editable_finder"] != (n == "editable")]
            if wrong:
                result["status"] = f"error: environments {wrong} not as intended: {probes}"
                return result
            result["device_backends"] = _compare(samples)
        else:  # torch < 2.5: no device-backend autoload; transfer starts through its .pth gate only
            result["device_backends"] = {"status": f"unavailable: torch {torch.__version__} has no device-backend "
                                                  "autoload (torch 2.5+); transfer.pth is its only start-up cost"}
        log("  startup: python -c pass ...")
        result["python_pass"] = _compare(_rotate(pythons, cfg["pass_runs"],
                                                 lambda py: _wall([py, "-c", "pass"], env, cwd), rng))
        log("  startup: python -c 'import torch' ...")
        result["python_import_torch"] = _compare(_rotate(pythons, cfg["torch_runs"],
                                                         lambda py: _wall([py, "-c", "import torch"], env, cwd), rng))
        # The cheaper comparison the issue mentions, for reference: autoload off vs on, transfer installed.
        if not cfg["autoload_runs"]:
            result["autoload_reference"] = {"status": "not measured with --quick: measured in full runs"}
            return result
        log("  startup: TORCH_DEVICE_BACKEND_AUTOLOAD=0 vs 1 (for reference) ...")
        envs = {"autoload_off": off, "autoload_on": env}
        ref: Dict[str, List[float]] = {"autoload_off": [], "autoload_on": []}
        for _ in range(cfg["autoload_runs"]):
            for name in rng.sample(list(envs), 2):
                ref[name].append(_wall([pythons["wheel"], "-c", "import torch"], envs[name], cwd))
        result["autoload_reference"] = _compare(ref, base="autoload_off")
        result["autoload_reference"]["autoload_on"].pop("meets_target", None)
        result["autoload_reference"]["autoload_on"].pop("target_diff_ms", None)
    except Exception as exc:
        import traceback

        result["status"] = f"error: {type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cwd, ignore_errors=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    result = measure(["cpu"], args.quick)
    if args.json:
        C.write_json(args.json, result)
    else:
        import json

        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
