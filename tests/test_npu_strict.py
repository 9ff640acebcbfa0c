"""The npu stand-in is as strict as torch_npu (issue 32): each rule's behaviour AND message, compared with
torch_npu's own source text (quoted, with provenance, in tests/vendors/torch_npu/_data/messages.json, which
tests/vendors/torch_npu/_data/extract.py regenerates from the wheels and Ascend's repositories).

Every check runs the child tests/scripts/standins/npu_strict.py in a subprocess (pytest's process never
imports a stand-in) on the torch of this environment; the expectations that differ between torch_npu
versions (which variable silences warnings, whether TORCH_NPU_FALLBACK_CPU_DISABLE exists, the float64
warning's text) are read from the data for that torch.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys

import pytest
import torch

from test_vendor_standins import child_env, extension, run  # noqa: F401 (extension: the session fixture)
from conftest import NO_STANDINS, STANDINS

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "standins", "npu_strict.py")
DATA = os.path.join(HERE, "vendors", "torch_npu", "_data")
MINOR = ".".join(torch.__version__.split("+")[0].split(".")[:2])
MESSAGES = json.load(open(os.path.join(DATA, "messages.json")))
QUOTES = MESSAGES["quotes"]
# torch_npu's data starts at torch 2.1, where the stand-ins start (STANDINS): read at collection, so torch 2.0
# collects these tests (and skips them); a newer torch without data fails the tests that read it (version())
VERSIONS = MESSAGES["versions"]
pytestmark = [pytest.mark.standins, pytest.mark.slow, pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)]


def version() -> dict:
    assert MINOR in VERSIONS, (f"no torch_npu data for torch {MINOR} in {DATA}/messages.json: regenerate it with "
                               f"tests/vendors/torch_npu/_data/extract.py once torch_npu for {MINOR} is published")
    return VERSIONS[MINOR]


# c10's base WarningHandler (torch_npu's warn_) logs "[W<date> <time> <pid> <file>:<line>] Warning: <msg>
# (function <f>)"; torch < 2.3 prints "[W <file>:<line>] Warning: ...".
C10_WARNING = re.compile(r"^\[W[^\]]*\] Warning: (?P<msg>.*) \(function \w+\)$")


def render(code: str, **values) -> str:
    """The message a quoted TORCH_CHECK / TORCH_NPU_WARN statement builds: its string literals in order, each
    other argument replaced by ``values[<its C++ text>]``; the condition ``false`` is skipped and the text
    stops at OPS_ERROR(...) (torch_npu's error-code suffix, checked apart)."""
    inner = code[code.index("(", code.index("TORCH_")) + 1:]
    args, depth, cur, in_str = [], 0, "", False
    for ch in inner:
        if ch == '"' and not cur.endswith("\\"):
            in_str = not in_str
        if not in_str and ch in "([":
            depth += 1
        if not in_str and ch in ")]":
            if depth == 0:
                break
            depth -= 1
        if not in_str and ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    args.append(cur.strip())
    out = ""
    for arg in args:
        if arg == "false":
            continue
        if arg.startswith("OPS_ERROR("):
            break
        if arg.startswith('"'):
            out += "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', arg))
        else:
            out += values[arg]
    return out


ALL = "fallback,double,fp64_matmul,dims,sparse"  # the sections that need no environment of their own: one process


@functools.lru_cache(maxsize=None)
def _child(mode: str, env: tuple):
    proc = run([sys.executable, SCRIPT, mode], env=child_env(**dict(env)), what=f"npu_strict.py {mode} {env}")
    line = next(l for l in proc.stdout.splitlines() if l.startswith("REPORT "))
    report = json.loads(line[len("REPORT "):])
    warnings = [m.group("msg") for m in map(C10_WARNING.match, proc.stderr.splitlines()) if m]
    return report, warnings, proc.stderr


def child(mode: str, **env):
    """The child's report, its c10 warning messages and its stderr (one process per mode and environment)."""
    return _child(mode, tuple(sorted(env.items())))


def caution(op: str) -> str:
    return render(QUOTES["fallback_warning"]["code"], **{"op.schema().operator_name()": op})


ERROR_SUFFIX = re.compile(r"\n\[ERROR\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d \(PID:\d+, Device:0, RankID:-?\d+\) ERR01007 OPS "
                          r"feature not supported")


def test_unsupported_op_falls_back_to_the_cpu_with_one_caution_per_operator(extension):
    report, warnings, stderr = child(ALL)
    assert report["strict"] is True
    # the CPU's result, on the device (torch_npu's fallback runs the CPU kernel)
    assert report["lgamma_equal"] and report["digamma_equal"] and report["lgamma_device"] == "npu:0"
    assert report["mm_equal"]
    # lgamma is structured: its functional form calls lgamma.out, the kernel torch_npu lacks (on a real
    # torch_npu too: torch's CompositeExplicitAutogradNonFunctional kernel serves every backend)
    expected = [caution("aten::lgamma.out"), caution("aten::digamma.out")]
    assert [w for w in warnings if w.startswith("CAUTION")] == expected, stderr
    assert "CAUTION: The operator 'aten::mm" not in stderr


@pytest.mark.parametrize("rank", ["0", "1"])
def test_caution_only_on_rank_0_or_unset(extension, rank):
    _, warnings, stderr = child(ALL, RANK=rank)
    cautions = [w for w in warnings if w.startswith("CAUTION")]
    assert QUOTES["warning_rank"]["code"].strip() == "return rank_id == 0 || rank_id == -1;"
    assert cautions == ([caution("aten::lgamma.out"), caution("aten::digamma.out")] if rank == "0" else []), stderr


def test_warning_disable_variable_silences_the_caution(extension):
    names = version()["warning_disable_env"]
    assert names, "every torch_npu reads TORCH_NPU_DISABLED_WARNING at least"
    for name in names:
        report, warnings, stderr = child("fallback", **{name: "1"})
        assert report["lgamma_equal"]
        assert not [w for w in warnings if w.startswith("CAUTION")], (name, stderr)
    if "TORCH_NPU_WARNING_DISABLE" not in names:  # this torch_npu does not know the newer name
        _, warnings, _ = child("fallback", TORCH_NPU_WARNING_DISABLE="1")
        assert [w for w in warnings if w.startswith("CAUTION")]


def test_fallback_cpu_disable_raises_torch_npus_error(extension):
    report, warnings, stderr = child("fallback_disabled", TORCH_NPU_FALLBACK_CPU_DISABLE="1")
    assert report["mm_equal"]
    if not version()["fallback_cpu_disable_env"]:  # this torch_npu has no such switch: it still falls back
        assert report["lgamma_error"] is None
        assert [w for w in warnings if w.startswith("CAUTION")] == [caution("aten::lgamma.out")]
        return
    kind = render("TORCH_CHECK(" + QUOTES["fallback_disabled_kind"]["code"].split("?")[1].split(":")[0] + ")")
    reason = re.search(r'"([^"]+)"\);', QUOTES["fallback_disabled_reason"]["code"]).group(1)
    expected = render(QUOTES["fallback_disabled"]["code"], op_name="aten::lgamma.out", fallback_kind=kind,
                      **{'reason.empty() ? "" : " because "': " because ", "reason": reason})
    error = report["lgamma_error"]
    assert error is not None and error.startswith(expected), error
    assert ERROR_SUFFIX.search(error), error
    assert not [w for w in warnings if w.startswith("CAUTION")]


def test_double_cast_returns_float32_with_one_warning(extension):
    report, warnings, stderr = child(ALL)
    # x.double() and x.to(torch.float64): float32; created as float64 or moved with a device: float64
    assert report["dtypes"] == ["torch.float32", "torch.float32", "torch.float64", "torch.float64"]
    assert report["values_equal"]
    text = render(QUOTES["double_cast"]["code"])
    assert text == "Device do not support double dtype now, dtype cast replace with float."
    assert version()["double_cast_warning"].endswith(text) or "repalce" in version()["double_cast_warning"]
    assert [w for w in warnings if "double dtype" in w] == [version()["double_cast_warning"]], stderr
    assert "dtype.has_value() && !layout.has_value() && !device.has_value()" in QUOTES["double_cast_when"]["code"]


def test_fp64_matmul_is_refused_with_the_aclnn_error(extension):
    report, _, _ = child(ALL)
    assert report["fp32_equal"]
    aclnn = json.load(open(os.path.join(DATA, "aclnn.json")))
    for key, api in (("matmul_error", "aclnnMatmul"), ("mm_error", "aclnnMm")):
        error = report[key]
        assert error is not None, key
        allowed = aclnn["dtypes"][api]
        assert "DT_DOUBLE" not in allowed
        assert f"call {api} failed, error code is 161002" in error
        assert "ERR00100 PTA call acl api failed" in error
        listed = re.search(r"EZ1001: \[PID: \d+\] [\d:-]+ self not implemented for DT_DOUBLE, should be in dtype support "
                           r"list \[([A-Z0-9_,]*)\]\.", error)
        assert listed, error
        assert sorted(filter(None, listed.group(1).split(","))) == sorted(allowed)


def test_more_than_8_dimensions_are_refused(extension):
    report, _, _ = child(ALL)
    assert report["eight_equal"]
    assert report["nine_error"] is not None
    assert "call aclnnAbs failed" in report["nine_error"]
    assert "EZ1001" in report["nine_error"] and "The self tensor cannot be larger than 8 dimensions." in report["nine_error"]


def test_sparse_tensors_as_torch_npu_has_them(extension):
    report, _, _ = child(ALL)
    assert report["layout"] == "torch.sparse_coo" and report["device"] == "npu:0"
    assert report["to_dense_equal"] and report["values_equal"]  # ATen's device-generic sparse kernels
    error = report["unsupported_error"]
    assert error is not None
    op = re.search(r"CAUTION: The operator '([\w:.]+)'", error).group(1)
    assert error.startswith(render(QUOTES["sparse_error"]["code"], **{"op.schema().operator_name()": op})), error
    assert ERROR_SUFFIX.search(error), error


def test_permissive_switch_restores_the_old_stand_in(extension):
    report, warnings, stderr = child("permissive", SIM_ACCEL_PERMISSIVE="1")
    assert report["strict"] is False
    assert report == {**report, "fp64_matmul": "torch.float64", "double": "torch.float64", "lgamma_equal": True}
    assert not [w for w in warnings if w.startswith("CAUTION") or "double dtype" in w], stderr
