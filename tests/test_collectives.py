"""Process groups and collectives as a CUDA script's ranks see them, on every target; the npu stand-in's HCCL.

1. ``tests/scripts/collectives/ddp_metrics.py`` (a CUDA DDP job that never mentions transfer) under torchrun,
   2 ranks, on cpu / npu / sdaa / gcu (ways in rotating). Asserted from outside: every rank finished and wrote
   its results; the group's backend is the target's real one (gloo, hccl, tccl, eccl) and the stand-in's
   statistics show the collectives went through it; the parameters lived on the rank's device; the model
   learned. Its metrics equal what NCCL computes, derived here from torch's documented semantics and each
   rank's recorded inputs (two ranks: a float64 sum of two values is the same in any order; ncclAvg of
   floating tensors is a sum of inputs times 1/world, of integers a sum divided with truncation; uint8 sums
   wrap; a bool SUM is an or, MIN an and). On npu, where hccl refuses float64, complex128, uint8
   reduce_scatter and integer AVG, transfer computes them and names each in TRANSFER_REPORT's substitutions
   with the script's line, and the two calls NCCL refuses (ReduceOp.BAND, recv without src) fail with
   NCCL's error, not hccl's. On gcu, where eccl reduces float64 / int64 (and complex128's float64 view) as
   32-bit types without a word (torch_gcu 2.10's ProcessGroupECCL), transfer computes those and names them; the
   same two calls fail with NCCL's words. On the cpu target gloo computes both (it is laxer than NCCL there:
   not asserted); the sdaa stand-in reduces every dtype (what tccl refuses is not known:
   tests/vendors/README.md).
2. ``tests/scripts/standins/hccl_strict.py``, torch_npu-native on the npu stand-in: each refusal's message is
   torch_npu's, composed from the literals of its source kept in ``tests/vendors/hccl_excerpts.txt``.
3. ``tests/scripts/collectives/pg_subclass_plugin.py``: a plug-in whose creator returns a ProcessGroup
   subclass; on torch >= 2.15 torch alone fails in init_process_group (its flight recorder), transfer runs
   the job and says so.
4. ``tests/scripts/collectives/bool_masks.py``: bool masks broadcast, all-gathered, sent and scattered on the
   cpu target, as NCCL moves them (torch 2.0's gloo moves no bool tensors).
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest
import torch

from conftest import ROOT, SCRIPTS, VENDORS, clean_env, no_gpu, python, vendor_path
from test_e2e_matrix import (BACKENDS, CELL_NO_STANDINS, STANDINS, Cell, Outcome, check_ok, check_reports,  # noqa: F401
                             check_stats, command, environment, extension, launch, torchrun)

pytestmark = pytest.mark.slow

RELEASE = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
CELLS = [Cell("metrics", "cpu", "env"), Cell("metrics", "npu", "env"), Cell("metrics", "sdaa", "runner"),
         Cell("metrics", "gcu", "import")]


def _marks(cell):
    marks = [pytest.mark.compat] if cell.profile == "cpu" else [pytest.mark.standins]
    return marks + ([] if cell.profile == "cpu" else [pytest.mark.skipif(not STANDINS, reason=CELL_NO_STANDINS)])


def run_metrics(cell: Cell, base: str) -> Outcome:
    workdir = os.path.join(base, cell.id)
    os.makedirs(workdir)
    outcome = Outcome(cell, workdir)
    script = os.path.join(SCRIPTS, "collectives", "ddp_metrics.py")
    # one report per rank ({rank}, as users name them): torchrun's launcher, which runs transfer too, writes none
    env = environment(cell, workdir, base, TRANSFER_REPORT=os.path.join(workdir, "report-{rank}.json"))
    launch(outcome, [command(cell, script, [workdir], workdir, torchrun(2))], env)
    return outcome


def ranks(outcome):
    found = {}
    for r in range(2):
        path = os.path.join(outcome.workdir, f"rank{r}.json")
        assert os.path.exists(path), f"rank {r} wrote no results\n{outcome.log()}"
        with open(path) as fh:
            found[r] = json.load(fh)
    return found


def f64(hexes):
    return [float.fromhex(h) for h in hexes]


def expected_outputs(results):
    """What NCCL computes from each rank's inputs (torch's documented semantics; see the module docstring)."""
    a, b = (f64(results[r]["inputs"]["loss_sum"])[0] for r in (0, 1))
    m0, m1 = (f64(results[r]["inputs"]["max_error"])[0] for r in (0, 1))
    avg = [(0 + 0.1) * 0.5 + (1 + 0.1) * 0.5, (3.0 / 1) * 0.5 + (3.0 / 2) * 0.5]
    common = {
        "loss_sum": [a + b], "max_error": [max(m0, m1)], "count": [512], "avg64": avg,
        "int_avg": [math.trunc((7 + 9) / 2), math.trunc((-7 - 8) / 2)], "any_flag": [True, True, False],
        "all_flag": [False, True, False], "bytes": [(200 + 200) % 256, 3],
        "complex": [[0.1 + 0.1, 0.0 + 1.0], [0.0 + 1.0, 1.0 / 3 + 1.0 / 3]],
    }
    inputs = [[i / 3 + r for i in range(4)] for r in (0, 1)]
    sums = [inputs[0][i] + inputs[1][i] for i in range(4)]
    bytes_in = [[(v + r) % 256 for v in (250, 1, 2, 3)] for r in (0, 1)]
    byte_sums = [(bytes_in[0][i] + bytes_in[1][i]) % 256 for i in range(4)]
    per_rank = {
        0: {"reduced": [(1.0 / 3 + 0) + (1.0 / 3 + 1)], "rs64": sums[:2], "rs8": byte_sums[:2],
            "gathered": [[i / 7 + r for i in range(3)] for r in (0, 1)],
            "objects": [{"rank": r, "loss": results[r]["losses"][1]} for r in (0, 1)]},
        1: {"reduced": [1.0 / 3 + 1], "rs64": sums[2:], "rs8": byte_sums[2:], "gathered": None, "objects": None},
    }
    return common, per_rank


def decoded(name, values):
    if name in ("loss_sum", "max_error", "avg64", "reduced", "rs64"):
        return f64(values)
    if name == "complex":
        return [[float.fromhex(re_), float.fromhex(im)] for re_, im in values]
    if name == "gathered":
        return None if values is None else [f64(v) for v in values]
    return values


@pytest.fixture(scope="module")
def metrics(request, tmp_path_factory):
    from concurrent.futures import ThreadPoolExecutor

    base = str(tmp_path_factory.mktemp("collectives"))
    selected = [item.callspec.params["cell"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and "cell" in item.callspec.params]
    selected = [c for c in selected if c.profile == "cpu" or STANDINS]
    if any(c.profile != "cpu" for c in selected):
        request.getfixturevalue("extension")
    with ThreadPoolExecutor(max_workers=int(os.environ.get("E2E_JOBS", "2"))) as pool:
        yield {c.id: pool.submit(run_metrics, c, base) for c in selected}


@pytest.mark.parametrize("cell", [pytest.param(c, marks=_marks(c), id=c.id) for c in CELLS])
def test_ddp_job_and_its_metrics_on_every_target(cell, metrics):
    outcome = metrics[cell.id].result()
    check_ok(outcome)
    assert sorted(int(r) for r in re.findall(r"rank (\d+): done", outcome.stdout)) == [0, 1], outcome.log()
    results = ranks(outcome)
    reports = check_reports(outcome)
    check_stats(outcome, [0, 1], distributed=True)
    for r, result in results.items():
        assert result["backend"] == BACKENDS[cell.profile], result["backend"]
        assert result["parameters_on"] == ("cpu" if cell.profile == "cpu" else f"{cell.profile}:{r}")
        first, last = result["losses"]
        assert last < first / 4, f"rank {r} did not learn: {first} -> {last}"
        assert result["received"] == [float(6.0).hex()] * 2
    common, per_rank = expected_outputs(results)
    for r, result in results.items():
        got = {name: decoded(name, values) for name, values in result["outputs"].items()}
        assert {k: got[k] for k in common} == common, f"rank {r}"
        assert {k: got[k] for k in per_rank[r]} == per_rank[r], f"rank {r}"
    written = sorted(f for f in os.listdir(outcome.workdir) if f.startswith("report-"))
    assert written == ["report-0.json", "report-1.json"], written
    by_rank = [{k: v for k, v in report.get("substitutions", {}).items()  # the collectives' (cpu: float16 autocast)
                if k.split(" of ")[0] in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")}
               for report in reports]
    assert len(by_rank) == 2 and by_rank[0].keys() == by_rank[1].keys(), by_rank  # each rank's own report
    named = by_rank[0]
    if cell.profile == "sdaa":
        return  # what tccl refuses is not known (tests/vendors/README.md): its stand-in reduces every dtype
    # NCCL's refusals, NCCL's words (ValueError before torch 2.15's nccl2, RuntimeError with it), on the cpu
    # target too (gloo would compute both)
    band = results[0]["band"]
    assert band is not None and band["message"].startswith("Cannot use ReduceOp.BAND with NCCL"), band
    assert band["type"] == ("RuntimeError" if RELEASE >= (2, 15) else "ValueError"), band
    assert results[0]["recv_any"]["type"] == "NotImplementedError", results[0]["recv_any"]
    assert results[0]["recv_any"]["message"].startswith("ProcessGroupNCCL does not support recvAnysource")
    # ... and each computation the backend refuses is named once, with the script's line
    float64 = ["all_reduce of float64 tensors", "all_reduce of complex128 tensors", "reduce of float64 tensors",
               "reduce_scatter_tensor of float64 tensors"]
    if cell.profile == "gcu":  # eccl reduces 64-bit types as 32-bit (its AVG of int32 is NCCL's: not computed)
        computed = float64 + ["all_reduce of int64 tensors"]
    else:
        computed = ["all_reduce of int64 tensors with ReduceOp.AVG"]  # gloo's and hccl's AVG fail on integers
    if cell.profile == "npu":
        computed += float64 + ["reduce_scatter_tensor of uint8 tensors"]
    if cell.profile == "cpu" and RELEASE < (2, 12):  # torch's gloo before 2.12: no AVG of floats as NCCL's and
        # (2.1) no reduce_scatter_tensor: computed from an all_gather too (transfer/patches/collectives.py)
        computed += ["all_reduce of float64 tensors with ReduceOp.AVG"]
        computed += [k for k in named if k.startswith("reduce_scatter_tensor of ")]
    if cell.profile == "cpu" and RELEASE < (2, 1):  # torch 2.0's gloo reduces no bool ("Invalid scalar type")
        computed += ["all_reduce of bool tensors"]
    if cell.profile != "cpu":
        assert outcome.stderr.count("transfer: all_reduce of float64 tensors") == 1, outcome.log()  # rank 0, once
    for what in computed:
        assert what in named and "ddp_metrics.py:" in named[what], (what, named)
    assert sorted(named) == sorted(computed), named  # bool / uint8 all_reduce: hccl's own cast, as NCCL computes


# ------------------------------------------------------------ collectives issued from C++ and the functional ones
@pytest.mark.standins
@pytest.mark.skipif(not STANDINS or RELEASE < (2, 3), reason=CELL_NO_STANDINS + " (or no _c10d_functional ops)")
def test_float64_ddp_gradients_and_functional_collectives_as_nccl_computes_them_on_gcu(tmp_path, extension):
    """eccl reduces float64 as float32 without a word (torch_gcu 2.10's ProcessGroupECCL): DDP's reducer (C++)
    and the functional collectives (DTensor's path) never pass through dist.all_reduce. A float64 model's
    averaged gradients and a float64 funcol.all_reduce are NCCL's float64 results (two ranks: a sum of two values,
    the same in any order; DDP pre-divides each gradient by the world size, exact for 2), each named once with
    the script's line. ReduceOp.PREMUL_SUM, which eccl refuses ("ECCL not supprt PreMulSum"), is NCCL's
    pre-multiplied sum. Inside torch's _coalescing_manager the computation cannot run (its all_gather would be
    queued in the block): a clear error (docs/limits.md), never eccl's float32 result or an unfilled buffer."""
    out = str(tmp_path)
    env = clean_env(TRANSFER_DEVICE="gcu", PYTHONPATH=vendor_path("gcu"), PYTHONUNBUFFERED=1, **no_gpu("gcu"))
    script = os.path.join(SCRIPTS, "collectives", "ddp_float64.py")
    proc = python(*torchrun(2), script, out, env=env, timeout=300)
    assert sorted(re.findall(r"rank (\d): done", proc.stdout)) == ["0", "1"], proc.stdout + proc.stderr
    results = {}
    for r in (0, 1):
        with open(os.path.join(out, f"rank{r}.json")) as fh:
            results[r] = json.load(fh)
    # d(sum(x @ w.T + b))/dw: the column sums of x; /db: its rows (2); x = arange(8).view(2, 4) / 3 + rank
    grads = {r: [(j / 3 + r) + ((4 + j) / 3 + r) for j in range(4)] for r in (0, 1)}
    metric = {r: f64(results[r]["metric"]) for r in (0, 1)}
    for r, result in results.items():
        assert result["dtype"] == "torch.float64" and result["device"] == f"gcu:{r}", result
        assert f64(result["grad_weight"]) == [grads[0][j] * 0.5 + grads[1][j] * 0.5 for j in range(4)], result
        assert f64(result["grad_bias"]) == [2.0], result
        assert f64(result["total"]) == [metric[0][i] + metric[1][i] for i in range(2)], result
        # PREMUL_SUM: each input times the factor, then summed (float32: 0.25 and 0.75 are exact, as their sums)
        assert f64(result["premul"]) == [1.0 * 0.25 + 2.0 * 0.25, 3.0 * 0.25 + 3.0 * 0.25], result
        assert f64(result["premul64"]) == [(1.0 / 3) * 0.5 + (1.0 / 3 + 1) * 0.5], result
        # inside _coalescing_manager the all_gather would be queued with it: a clear error instead of eccl's float32
        refused = result["coalesced"]
        assert refused is not None and refused["type"] == "TransferError", result
        assert refused["message"].startswith("transfer: all_reduce of float64 tensors inside _coalescing_manager: "
                                             "eccl does not reduce it as NCCL does") and \
            "Issue this all_reduce outside the block" in refused["message"], refused
    assert results[0]["weight"] == results[1]["weight"]  # DDP broadcast rank 0's parameters
    for what, where in (("all_reduce (DistributedDataParallel's gradients) of float64 tensors (the model built at ",
                         "ddp_float64.py:32)"), ("all_reduce (functional collectives) of float64 tensors (",
                                                 "ddp_float64.py:37)")):
        said = [line for line in proc.stderr.splitlines() if f"transfer: {what}" in line]
        assert len(said) == 1 and where in said[0], (what, proc.stderr[-4000:])


# ---------------------------------------------------------------------------------------- the stand-in's HCCL
EXCERPTS = os.path.join(VENDORS, "hccl_excerpts.txt")
#: case -> (torch_npu's message, the literals of its source that compose it)
HCCL_MESSAGES = {
    "all_reduce_float64": ("HCCL allreduce: Unsupported data type at::kDouble",
                           ['"HCCL " + functionName + ": Unsupported data type "', '"at::kDouble"',
                            "c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allreduce(",
                            "std::string functionName = __FUNCTION__;"]),
    "reduce_float64": ("HCCL reduce: Unsupported data type at::kDouble", ['"at::kDouble"']),
    "reduce_scatter_tensor_float64": ("HCCL _reduce_scatter_base: Unsupported data type at::kDouble",
                                      ["ProcessGroupHCCL::_reduce_scatter_base(", "checkSupportedDataType"]),
    "reduce_scatter_tensor_uint8": ("HCCL _reduce_scatter_base: Unsupported data type at::kByte/at::kBool",
                                    ['{HCCL_DATA_TYPE_UINT8, "at::kByte/at::kBool"}']),
    "all_reduce_band": ("Cannot use ReduceOp.BAND with HCCL",
                        ['"Cannot use ReduceOp." + unsupportedOp[reduceOp] + " with HCCL"', '"BAND"']),
    "all_reduce_bor": ("Cannot use ReduceOp.BOR with HCCL", ['"BOR"']),
    "all_reduce_bxor": ("Cannot use ReduceOp.BXOR with HCCL", ['"BXOR"']),
    "recv_without_source": ("ProcessGroupHCCL does not support recv", ['"ProcessGroupHCCL does not support recv"']),
    "process_group_gather": ("ProcessGroupHCCL does not support gather",
                             ['"ProcessGroupHCCL does not support gather"']),
    "all_to_all_single_0dim": (
        "Scalar tensors (0-dim tensors) are not supported in alltoall. inputTensor.dim()=0, outputTensor.dim()=0. "
        "Please reshape tensors to at least 1-D before calling alltoall.",
        ['"Scalar tensors (0-dim tensors) are not supported in alltoall. "', '"inputTensor.dim()=",',
         '", outputTensor.dim()=",', '". Please reshape tensors to at least 1-D before calling alltoall.",']),
}
#: DIST_ERROR(ErrCode::NOT_SUPPORT): NPUException.cpp formatErrorCode, with DIST = 2 and NOT_SUPPORT = 7.
SUFFIX = re.compile(r"\n\[ERROR\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d \(PID:\d+, Device:(\d+), RankID:(-?\d+)\) "
                    r"ERR02007 DIST feature not supported$")


@pytest.fixture(scope="module")
def hccl_strict(tmp_path_factory, extension):
    out = str(tmp_path_factory.mktemp("hccl-strict"))
    env = clean_env(PYTHONPATH=VENDORS, PYTHONUNBUFFERED=1, **no_gpu("npu"))
    proc = python(*torchrun(2), os.path.join(SCRIPTS, "standins", "hccl_strict.py"), out, env=env, timeout=420)
    assert sorted(re.findall(r"rank (\d): done", proc.stdout)) == ["0", "1"], proc.stdout + proc.stderr
    results = {}
    for r in (0, 1):
        with open(os.path.join(out, f"rank{r}.json")) as fh:
            results[r] = json.load(fh)
    return results


#: torch 2.1's c10d_logger formats a failed collective's arguments (the float64 tensor's repr), and the strict stand-in
#: refuses that repr's ``min`` on float64 (aclnnMinDim, DeepLink's table of torch_npu 2.1.0.post3), so torch_npu's
#: HCCL words are replaced by that refusal. Whether a real torch_npu 2.1 prints a float64 npu tensor is not known
#: here (tests/vendors/README.md); newer torch formats nothing there.
_REPR_OF_FLOAT64 = pytest.mark.xfail(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 3), strict=True,
    reason="torch 2.1's c10d_logger prints the float64 npu tensor, whose min the strict stand-in refuses")


@pytest.mark.standins
@pytest.mark.skipif(not STANDINS, reason=CELL_NO_STANDINS)
@pytest.mark.parametrize("case", [pytest.param(c, marks=_REPR_OF_FLOAT64) if c.endswith("_float64") and
                                  not c.startswith("gather") else c for c in sorted(HCCL_MESSAGES)])
def test_npu_standin_refuses_as_torch_npu_with_its_words(case, hccl_strict):
    message, literals = HCCL_MESSAGES[case]
    source = open(EXCERPTS).read()
    for literal in literals:
        assert literal in source, f"{literal!r} is not in torch_npu's source excerpt"
    if case == "all_to_all_single_0dim" and not (RELEASE >= (2, 10) or RELEASE == (2, 7)):
        pytest.skip(f"the torch_npu of torch {RELEASE} has no 0-dim check in alltoall (hccl_excerpts.txt)")
    for r in (0, 1):
        error = hccl_strict[r]["cases"][case].get("error")
        assert error is not None and error["type"] == "RuntimeError", (r, hccl_strict[r]["cases"][case])
        text, suffix = error["message"][:len(message)], error["message"][len(message):]
        assert text == message
        match = SUFFIX.fullmatch(suffix)
        assert match and match.groups() == (str(r), str(r)), repr(suffix)  # device r, RANK r (torchrun)


@pytest.mark.standins
@pytest.mark.skipif(not STANDINS, reason=CELL_NO_STANDINS)
def test_npu_standin_reduces_as_torch_npu(hccl_strict):
    """What ProcessGroupHCCL computes its own way: bool / uint8 all_reduce as int32 copied back (an or; a sum
    wrapping modulo 256), AVG as a SUM divided in place (floats: the mean; integers: torch's error), gather as an
    all_gather with torch_npu's warning on the destination."""
    for r in (0, 1):
        cases = hccl_strict[r]["cases"]
        assert cases["all_reduce_bool"] == {"result": [True, True, False]}
        assert cases["all_reduce_uint8"] == {"result": [144, 3]}
        assert cases["all_reduce_avg_float32"] == {"result": [1.5, 4.5]}
        assert cases["all_reduce_avg_int64"]["error"]["message"] == \
            "result type Float can't be cast to the desired output type Long"
        assert cases["gather_float64"] == {"result": None} and cases["gather_object"] == {"result": None}
        assert hccl_strict[r]["gather_is"] == "torch_npu.distributed.distributed_c10d._gather"
    assert hccl_strict[0]["gathered"] == [[0.5, 0.5], [1.5, 1.5]]
    assert hccl_strict[0]["objects"] == [{"rank": 0}, {"rank": 1}]
    warning = "HCCL doesn't support gather at the moment. Implemented with allgather instead."
    assert warning in open(EXCERPTS).read()
    assert hccl_strict[0]["gather_warnings"] == [warning] and hccl_strict[1]["gather_warnings"] == []


# ---------------------------------------------------------------------------------- torch 2.15's flight recorder
@pytest.mark.compat
def test_a_plugin_returning_a_process_group_subclass_runs_under_transfer(tmp_path):
    script = os.path.join(SCRIPTS, "collectives", "pg_subclass_plugin.py")
    report = str(tmp_path / "report-{pid}.json")
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_REPORT=report, PYTHONUNBUFFERED=1, **no_gpu())
    proc = python(*torchrun(2), script, env=env, timeout=300)
    assert sorted(re.findall(r"rank (\d): all_reduce \[3\.0, 3\.0\]", proc.stdout)) == ["0", "1"], proc.stdout
    assert sorted(re.findall(r"rank (\d): done", proc.stdout)) == ["0", "1"]
    said = proc.stderr.count("cannot attach its flight recorder to pgsub process groups")
    if RELEASE < (2, 15):
        assert said == 0, proc.stderr  # no flight recorder hook before torch 2.15: nothing to say
        return
    assert said == 1, proc.stderr  # rank 0, once
    native = python(*torchrun(2), script, env=clean_env(PYTHONUNBUFFERED=1, **no_gpu()), timeout=300, check=False)
    assert native.returncode != 0 and "Could not find the default backend type 0" in native.stderr, native.stderr


# ------------------------------------------------------------------------------------ bool tensors on old gloo
@pytest.mark.compat
def test_bool_masks_move_between_ranks_as_nccl_moves_them(tmp_path):
    """torch 2.0's gloo refuses bool tensors ("Invalid scalar type"); NCCL moves their bytes. Every torch: the
    values each rank ends with are NCCL's, in bool tensors on the target's device."""
    script = os.path.join(SCRIPTS, "collectives", "bool_masks.py")
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1, PYTHONUNBUFFERED=1, **no_gpu())
    proc = python(*torchrun(2), script, str(tmp_path), env=env, timeout=300)
    said = {r: json.load(open(tmp_path / f"rank{r}.json")) for r in (0, 1) if (tmp_path / f"rank{r}.json").exists()}
    assert sorted(said) == [0, 1], proc.stdout + proc.stderr
    for r, out in said.items():
        assert out["keep"] == [True, False, True, True], (r, out)  # rank 0's mask
        assert out["flags"] == [False, True], (r, out)  # rank r's done flag at index r
        assert out["dtypes"] == ["torch.bool"] and out["device"] == "cpu", (r, out)
    assert said[0]["bad"] == [False, True, True] and said[1]["bad"] == [False, True, True], said  # rank 1's, sent
    assert said[0]["part"] == [True, True] and said[1]["part"] == [True, False], said  # scattered from rank 0
