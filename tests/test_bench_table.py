"""docs/performance.md's per-call table is docs/bench.py's output from recorded benchmark runs (docs/bench/)."""

import json
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import bench  # noqa: E402


def _row(call, kind, ratio, q1, q3, target, native=1000.0):
    return {"call": call, "kind": kind, "ratio": ratio, "ratio_q1": q1, "ratio_q3": q3, "target": target,
            "meets_target": None if target is None else ratio <= target, "native": native,
            "shim": native * ratio, "added": native * (ratio - 1)}


def _run(torch, rows, unavailable=()):
    targets = {"cpu": {"status": "ok", "rows": rows}}
    targets.update({t: {"status": f"unavailable: no {t} here"} for t in unavailable})
    return {"meta": {"torch": torch + "+cpu", "date": "2026-11-23T10:00:00", "commit": "abc1234",
                     "machine": {"python": "3.8.18", "cpus": 2, "loadavg_at_start": [1.0, 0.5, 0.25]},
                     "unavailable": {t: f"no {t} here" for t in unavailable}},
            "calls": {"targets": targets}}


def test_each_torch_is_a_column_and_each_cell_its_run(tmp_path):
    (tmp_path / "calls-torch-2.13.0.json").write_text(json.dumps(_run("2.13.0", [
        _row("x.to(torch.float16)", "untouched", 1.04, 1.01, 1.07, 1.1)])))
    (tmp_path / "calls-torch-2.0.1.json").write_text(json.dumps(_run("2.0.1", [
        _row("x.to(torch.float16)", "untouched", 1.15, 1.12, 1.2, 1.1),
        _row("torch.cuda.is_available()", "info", 3000.0, 100.0, 9000.0, None, native=0.0)], unavailable=["npu"])))
    (tmp_path / "notes.json").write_text("{}")  # not a run's file: ignored
    lines = bench.table(bench.runs(str(tmp_path))).splitlines()
    assert lines[0] == "**cpu target**"
    assert lines[2] == "| call | target | torch 2.0.1 | torch 2.13.0 |"  # oldest torch first
    assert lines[4] == "| `x.to(torch.float16)` | 1.1x | 1.15 [1.12-1.20] **MISS** | 1.04 [1.01-1.07] |"
    assert lines[5].startswith("| `torch.cuda.is_available()` | info | +")  # against a constant: ns, no ratio
    assert lines[5].endswith(" ns |  |")
    assert "- torch 2.0.1 (2.0.1+cpu), Python 3.8.18: 2026-11-23 10:00, commit abc1234" in lines[7]
    assert lines[7].endswith("; no stand-in for npu")
    assert "npu" not in "\n".join(lines[:7])  # no table for a stand-in no run has


def test_the_performance_table_is_what_the_recorded_runs_say():
    assert bench.check() == [], "run `python docs/bench.py --write` (docs/performance.md's table was edited or docs/bench changed)"


def test_check_names_a_table_that_differs(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text(f"x\n{bench.BEGIN}\n| stale |\n{bench.END}\n")
    (tmp_path / "calls-torch-2.1.2.json").write_text(json.dumps(_run("2.1.2", [
        _row("torch.zeros(4)", "untouched", 1.05, 1.0, 1.1, 1.1)])))
    assert bench.check(str(page), str(tmp_path)) != []
    bench.write(str(page), str(tmp_path))
    assert bench.check(str(page), str(tmp_path)) == []
    assert "| `torch.zeros(4)` | 1.1x | 1.05 [1.00-1.10] |" in page.read_text()
