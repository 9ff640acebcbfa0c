"""Smoke run of the benchmark suite: ``python -m benchmarks --quick``.

Keeps the suite working. No timing is asserted: only that every measurement
family produced numbers (ratios, milliseconds, graph-break counts) for the cpu
target, that every vendor target is either measured or carries an explicit
status (e.g. "unavailable: <reason>"), and that the chart was drawn.
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import clean_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow  # python -m benchmarks --quick: minutes
FAMILIES = ("calls", "training", "startup", "compile", "memory", "calllog", "thirdparty", "standin")
TARGETS = ("cpu", "npu", "sdaa", "gcu")


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _explicit(record):
    """A target that was not measured says why, in words."""
    status = record.get("status") if isinstance(record, dict) else None
    return isinstance(status, str) and len(status) > 3


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    env = clean_env()
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1200)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"python -m benchmarks --quick hung: {exc.stdout!s:.2000}")
    assert proc.returncode == 0, f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    with open(out / "results.json") as fh:
        return json.load(fh), out, proc.stdout


def test_every_family_present(quick_run):
    data, _, stdout = quick_run
    assert ("calls.png in" if _has_matplotlib() else "no chart: No module named 'matplotlib'") in stdout, stdout
    for family in FAMILIES:
        assert family in data, family
        assert "traceback" not in data[family], data[family].get("traceback")
    assert data["meta"]["quick"] is True
    assert "Targets missed:" in stdout  # the table was printed


def test_calls_ratios(quick_run):
    data, _, _ = quick_run
    results = data["calls"]["targets"]
    assert set(results) == set(TARGETS)
    assert results["cpu"]["status"] == "ok", results["cpu"]
    for target, res in results.items():
        if res.get("status") != "ok":
            assert _explicit(res) and target != "cpu", (target, res)
            continue
        calls = [row["call"] for row in res["rows"]]
        for wanted in ("x.cuda()", "x.is_cuda", "torch.cuda.is_available()", "torch.zeros(4)"):
            assert wanted in calls, (target, calls)
        for row in res["rows"]:
            for key in ("ratio", "ratio_q1", "ratio_q3", "shim", "native"):
                assert _number(row[key]), (target, row)


def test_training_ratios(quick_run):
    data, _, _ = quick_run
    results = data["training"]["targets"]
    assert set(results) == set(TARGETS)
    for mode in ("single", "ddp"):
        res = results["cpu"][mode]
        assert res["status"] == "ok", res
        for kind in ("mlp", "cnn"):
            assert _number(res["models"][kind]["ratio"]), res
    for target, res in results.items():
        for mode in ("single", "ddp"):
            sub = res.get(mode, res)
            if sub.get("status") == "ok":
                assert all(_number(m["ratio"]) for m in sub["models"].values()), (target, sub)
            else:
                assert _explicit(sub), (target, mode, sub)


def test_startup_numbers(quick_run):
    data, _, _ = quick_run
    res = data["startup"]
    assert res["status"] == "ok", res
    assert _number(res["import_auto"]["cpu"]["median_ms"])
    installed = os.environ.get("TESTING_INSTALLED_TRANSFER") == "1"  # nox: no editable install to compare
    autoload = hasattr(torch, "_import_device_backends")  # torch 2.5+
    for key in ("python_pass", "python_import_torch") + (("device_backends",) if autoload else ()):
        for env in ("wheel",) if installed else ("wheel", "editable"):
            assert _number(res[key][env]["ratio"]) and _number(res[key][env]["diff_ms"]), (key, res[key])
    if not autoload:
        assert res["device_backends"]["status"].startswith("unavailable: torch"), res["device_backends"]
        return
    assert res["environments"]["none"]["transfer_loaded"] is False
    assert res["environments"]["wheel"]["transfer_loaded"] is True


def test_compile_counts(quick_run):
    data, _, _ = quick_run
    res = data["compile"]["targets"]["cpu"]
    assert res["status"] == "ok", res
    summary = res["summary"]
    for key in ("graph_breaks_shim", "graph_breaks_native", "graph_breaks_caused_by_shim"):
        assert isinstance(summary[key], int), summary
    assert isinstance(summary["fullgraph_eager_compiles"], bool)
    assert isinstance(summary["fullgraph_inductor_compiles"], bool)


def test_memory_ratio(quick_run):
    data, _, _ = quick_run
    res = data["memory"]["targets"]
    assert res["cpu"]["status"] == "ok", res["cpu"]
    assert _number(res["cpu"]["ratio"]) and _number(res["cpu"]["shim"]) and _number(res["cpu"]["native"])
    for target, rec in res.items():
        assert rec.get("status") == "ok" or _explicit(rec), (target, rec)


def test_calllog_ratio(quick_run):
    data, _, stdout = quick_run
    res = data["calllog"]["targets"]
    assert set(res) == set(TARGETS) | {"native+plan"}  # native+plan: `transfer-run --plan`'s rehearsal
    assert res["native+plan"]["status"] == "ok" and _number(res["native+plan"]["ratio"]), res["native+plan"]
    cpu = res["cpu"]
    assert cpu["status"] == "ok", cpu
    for key in ("ratio", "ratio_q1", "ratio_q3", "control_ratio", "shim", "native"):
        assert _number(cpu[key]), (key, cpu)
    assert cpu["target"] == 1.05 and cpu["meets_target"] is None  # --quick: not judged
    for target, rec in res.items():
        assert rec.get("status") == "ok" or _explicit(rec), (target, rec)
    assert "[cpu] TRANSFER_LOG on / off: median" in stdout  # the printed line, with q1-q3
    assert "6. TRANSFER_LOG cost" in stdout


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_matplotlib(), reason="matplotlib (the optional `bench` extra) is not installed")
def test_chart_written(quick_run):
    _, out, _ = quick_run
    png = out / "calls.png"
    assert png.exists() and png.stat().st_size > 1000
    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_thirdparty_ratios(quick_run):
    """The CUDA-only packages' replacements against their backends: every case measured on the cpu target."""
    data, _, _ = quick_run
    results = data["thirdparty"]["targets"]
    assert set(results) == set(TARGETS)
    cpu = results["cpu"]
    assert cpu["status"] == "ok", cpu
    expected = {"fused_adam", "fused_sgd", "layer_norm", "l2norm", "scale", "custom_op", "graph_replay"}
    assert expected <= set(cpu["cases"])
    for name, case in cpu["cases"].items():
        assert _number(case["ratio"]) and case["ratio"] > 0 and case["backend"], (name, case)
    for target in TARGETS[1:]:
        assert _explicit(results[target]), results[target]


def test_standin_ratios(quick_run):
    """The npu stand-in against the CPU it runs on (issue 34's LSTM and transformer steps, per-op rows, start-up):
    measured, or an explicit status where the stand-in cannot be built; the other vendors wait for full runs."""
    data, _, _ = quick_run
    results = data["standin"]["targets"]
    assert set(results) == set(TARGETS)
    assert _explicit(results["cpu"]) and results["cpu"]["status"].startswith("not applicable"), results["cpu"]
    npu = results["npu"]
    if npu.get("status") != "ok":
        assert _explicit(npu) and not torch_has_privateuse1(), npu
        return
    assert set(npu["steps"]) == {"lstm", "transformer", "resnet"}, npu
    for name, rec in [*npu["steps"].items(), *npu["ops"].items()]:
        for key in ("ratio", "ratio_q1", "ratio_q3", "shim", "native"):
            assert _number(rec[key]) and rec[key] > 0, (name, rec)
    assert npu["startup"]["status"] == "ok", npu["startup"]
    for key in ("import_standin_ms", "first_op_ms"):
        assert _number(npu["startup"][key]["median"]), npu["startup"]
    for target in ("sdaa", "gcu"):
        assert _explicit(results[target]), results[target]


def torch_has_privateuse1():
    return hasattr(torch.utils, "generate_methods_for_privateuse1_backend")
