"""Family 8: the offline tools' speed on a checkout: `transfer scan` and `transfer port`.

    python -m benchmarks --only migrate DIR [DIR ...]     # within the suite (default DIR: this checkout)
    python -m benchmarks.migrate DIR [DIR ...] [--quick]  # alone; one line per DIR

For each DIR, the commands users run, as they run them (``python -m
transfer.cli``, a fresh process each time, so start-up is included), wall
time, median of 3 runs (1 with --quick): ``scan DIR --device npu --format
json`` and ``port DIR --device npu --out TMP`` (and the CPU seconds they used, workers included: on a loaded
machine wall time says more about the load than the tools), with the default worker count
(one per core) and with ``--jobs 1``; then ``port`` over the ported tree,
which must change nothing and leave what the first run left. Reported: .py
files, files/s, changes made, uses left for a person, and the load average
when the measurement started (the machine is shared: say it with the number).
Bars: scan >= 200 files/s, port >= 30 files/s (default workers). The .py files
counted are those port reads (the folders it skips, such as .nox/ and build/, aside).
The port bar is set over karpathy/llm.c, Lightning-AI/litgpt and
ultralytics/yolov5 together (docs/migration.md): pass one folder that holds the
three checkouts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

if __package__ in (None, ""):  # python benchmarks/migrate.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "benchmarks"

from benchmarks import _common as C  # noqa: E402

SCAN_BAR = 200.0  # files/s
PORT_BAR = 30.0
_SUMMARY = re.compile(r"Transformed (\d+) / Skipped (\d+) / Failed (\d+) file\(s\); (\d+) change\(s\), (\d+) left for a "
                      r"person(?:; (\d+) more with --unsafe)?")


def _cli(args: List[str], cwd: str) -> subprocess.CompletedProcess:
    env = C.child_env()
    return subprocess.run([sys.executable, "-m", "transfer.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=3600)


def _timed(args: List[str], cwd: str, repeats: int, before=None):
    """(median wall seconds, median CPU seconds of the command and its workers, the last process)."""
    times, cpu, proc = [], [], None
    for _ in range(repeats):
        if before is not None:
            before()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = _cli(args, cwd)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"transfer {' '.join(args[:2])} exited {proc.returncode}: {proc.stderr[-400:]}")
    return statistics.median(times), statistics.median(cpu), proc


def _summary(stderr: str) -> Dict[str, int]:
    match = _SUMMARY.search(stderr)
    if match is None:
        raise RuntimeError(f"no summary in: {stderr[-300:]}")
    keys = ("transformed", "skipped", "failed", "changes", "left", "unsafe")
    return {k: int(v or 0) for k, v in zip(keys, match.groups())}


def measure_dir(path: str, quick: bool) -> Dict[str, Any]:
    path = os.path.abspath(path)
    repeats = 1 if quick else 3
    record: Dict[str, Any] = {"dir": path, "loadavg_at_start": list(os.getloadavg()), "repeats": repeats}
    work = tempfile.mkdtemp(prefix="bench_migrate_")
    try:
        out, again = os.path.join(work, "out"), os.path.join(work, "again")
        for jobs, suffix in ((None, ""), (1, "_jobs1")):
            extra = [] if jobs is None else ["--jobs", str(jobs)]
            seconds, cpu, proc = _timed(["scan", path, "--device", "npu", "--format", "json", "--no-progress",
                                         *extra], work, repeats)
            record[f"scan_cpu_s{suffix}"] = cpu
            data = json.loads(proc.stdout)
            record[f"scan_s{suffix}"] = seconds
            record[f"scan_files_per_s{suffix}"] = data["summary"]["files"] / seconds if seconds else None
            record["scan_findings"] = data["summary"]["findings"]
            seconds, cpu, proc = _timed(["port", path, "--device", "npu", "--out", out, "--no-progress", *extra],
                                        work, repeats, before=lambda: shutil.rmtree(out, ignore_errors=True))
            record[f"port_cpu_s{suffix}"] = cpu
            first = _summary(proc.stderr)
            record[f"port_s{suffix}"] = seconds
            record["py_files"] = first["transformed"] + first["skipped"] + first["failed"]  # what port reads
            record[f"port_files_per_s{suffix}"] = record["py_files"] / seconds
        record.update(changes=first["changes"], left=first["left"], unsafe=first["unsafe"])
        _, _, proc = _timed(["port", out, "--device", "npu", "--out", again, "--no-progress"], work, 1)
        second = _summary(proc.stderr)
        record.update(second_changes=second["changes"], second_left=second["left"])
        record["consistent"] = second["changes"] == 0 and second["left"] == first["left"]
        for tool, bar in (("scan", SCAN_BAR), ("port", PORT_BAR)):  # --quick: not judged
            record[f"{tool}_meets_bar"] = None if quick else record[f"{tool}_files_per_s"] >= bar
        record["meets_target"] = None if quick else record["scan_meets_bar"] and record["port_meets_bar"]
        record["status"] = "ok"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return record


def line(rec: Dict[str, Any]) -> str:
    if rec.get("status") != "ok":
        return f"  {rec.get('dir')}: {rec.get('status')}"
    load = ", ".join(f"{x:.1f}" for x in rec["loadavg_at_start"])
    return (f"  {rec['dir']}: {rec['py_files']} .py; scan {rec['scan_files_per_s']:.0f} files/s "
            f"(-j1 {rec['scan_files_per_s_jobs1']:.0f}), port {rec['port_files_per_s']:.0f} files/s "
            f"(-j1 {rec['port_files_per_s_jobs1']:.0f}); CPU s per run: scan {rec['scan_cpu_s']:.2f}, port "
            f"{rec['port_cpu_s']:.2f}; {rec['changes']} changes, {rec['left']} left for a person "
            f"({rec['unsafe']} more with --unsafe); second run: {rec['second_changes']} changes, "
            f"{rec['second_left']} left ({'consistent' if rec['consistent'] else 'INCONSISTENT'}); "
            f"bars (default workers): port >= {PORT_BAR:.0f} files/s {verdict(rec.get('port_meets_bar'))}, scan >= "
            f"{SCAN_BAR:.0f} files/s {verdict(rec.get('scan_meets_bar'))}; load {load}")


def verdict(met) -> str:
    return {True: "ok", False: "MISS"}.get(met, "not judged")


def measure(paths: List[str], quick: bool, log=print) -> Dict[str, Any]:
    """The suite's entry: one record per directory (default: this checkout)."""
    result: Dict[str, Any] = {"dirs": {}}
    for path in paths or [C.ROOT]:
        try:
            rec = measure_dir(path, quick)
        except Exception as exc:  # one directory failing must not lose the others
            rec = {"dir": path, "status": f"error: {type(exc).__name__}: {exc}"}
        result["dirs"][path] = rec
        log(line(rec))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.migrate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="checkouts to measure (default: this one)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="also write the records here")
    args = parser.parse_args(argv)
    result = measure(args.paths, args.quick)
    if args.json:
        C.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
