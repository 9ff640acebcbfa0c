"""Tests of the CPU-backed vendor stand-ins in tests/vendors.

torch_npu (npu/hccl), torch_sdaa (sdaa/tccl) and torch_gcu (gcu/eccl) are
simulated on the CPU so that the rest of the test suite can run unmodified
CUDA scripts "on" those accelerators. Importing a stand-in renames torch's
PrivateUse1 backend for the whole process, so every check here runs in a
subprocess (``sys.executable``, ``PYTHONPATH`` with tests/vendors, a timeout,
the log shown on failure); pytest's own process never imports one.

The C++ extension is built once (session fixture ``extension``) into the
shared cache and reused by every subprocess.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import NO_GPU, NO_STANDINS, STANDINS, clean_env, free_port, stop_hung, torchrun_standalone

needs_standins = pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
pytestmark = pytest.mark.slow
# nox -s standins runs the tests marked `standins` on the oldest and newest torch: every test here, for every target
# but those added later (issue 35), VendorSpecs of the same extension that differ from the first three in data
# (names, amp dtypes, their backend's refusals): their checks run on the default torch (nox -s tests) only, for
# CI's time (the two sessions would add about 150 s).
standins = pytest.mark.standins

HERE = os.path.dirname(os.path.abspath(__file__))
VENDORS_DIR = os.path.join(HERE, "vendors")
SCRIPTS = os.path.join(HERE, "scripts", "standins")
BACKENDS = {"npu": "hccl", "sdaa": "tccl", "gcu": "eccl", "mlu": "cncl", "musa": "mccl", "supa": "bccl"}
VENDORS = list(BACKENDS)
EVERY_TORCH = ("npu", "sdaa", "gcu")


def vendor_params(vendors):
    """`vendors` as parameters, marked `standins` (every torch) where in EVERY_TORCH."""
    return [pytest.param(v, marks=[standins] if v in EVERY_TORCH else []) for v in vendors]

BUILD_TIMEOUT = 900
RUN_TIMEOUT = 300

DEVICE_CHECKS = [
    "distributed_single_rank",
    "registration",
    "tensors_on_index_1_and_3",
    "printing",
    "save_and_load",
    "training_matches_cpu",
    "fused_adamw_on_device",
    "dropout_and_rng_use_device_generator",
    "autocast_on_device",
    "grad_scaler_kernels",
    "masked_index_on_device",
    "events_and_streams",
    "memory_statistics",
    "device_module_api",
    "parameters_keep_identity_across_module_to",
    "lstm_and_gru_train",
    "norms_on_non_contiguous_inputs",
    "fallback_keeps_aliasing_and_bookkeeping",
    "vendor_names_frameworks_import",
    "pinned_memory",
    "second_vendor_refused",
]


# ---------------------------------------------------------------- helpers

def child_env(**extra) -> dict:
    """Environment for a child: the stand-ins importable, nothing of this machine's that would change
    what they do (conftest.clean_env), no real GPU (a vendor's machine has none)."""
    env = clean_env(PYTHONUNBUFFERED=1, PYTHONFAULTHANDLER=1, **NO_GPU)
    env["PYTHONPATH"] = os.pathsep.join([VENDORS_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update({k: str(v) for k, v in extra.items()})
    return env


def log_of(proc) -> str:
    out = proc.stdout if isinstance(proc.stdout, str) else (proc.stdout or b"").decode(errors="replace")
    err = proc.stderr if isinstance(proc.stderr, str) else (proc.stderr or b"").decode(errors="replace")
    return f"--- stdout ---\n{out}\n--- stderr ---\n{err}"


def run_child(args, *, env=None, timeout=RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """subprocess.run(args) in HERE, output captured; on timeout the child and its children (its own
    session: torchrun's workers) get SIGABRT first, so their faulthandler (PYTHONFAULTHANDLER, child_env)
    prints every thread's stack into the TimeoutExpired's stderr: a hang in CI names where it hung."""
    with subprocess.Popen(args, env=env or child_env(), cwd=HERE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            # the whole session: torchrun's workers hold the pipes and would outlive their agent
            exc.stdout, exc.stderr = stop_hung(proc)
            raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def run(args, *, env=None, timeout=RUN_TIMEOUT, expect_rc=0, what=None):
    """Run a child process with a timeout; fail with its log unless rc matches."""
    what = what or " ".join(os.path.basename(str(a)) for a in args[:4])
    start = time.monotonic()
    try:
        proc = run_child(args, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what}: no exit after {timeout}s\n{log_of(exc)}")
    proc.seconds = time.monotonic() - start
    if expect_rc is not None and proc.returncode != expect_rc:
        pytest.fail(f"{what}: exit code {proc.returncode}, expected {expect_rc}\n{log_of(proc)}")
    return proc


def torchrun(script, *script_args, nproc=2, env=None, timeout=RUN_TIMEOUT, expect_rc=0):
    args = [sys.executable, *torchrun_standalone(nproc), os.path.join(SCRIPTS, script), *map(str, script_args)]
    return run(args, env=env, timeout=timeout, expect_rc=expect_rc, what=f"torchrun {script} {script_args}")


# --------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def extension():
    """Build (or find in the cache) the C++ extension once per session.

    A failed build fails every test that depends on it (never a skip).
    """
    code = (
        "import json, time; start = time.monotonic(); import torch; t0 = time.monotonic()\n"
        "import _sim_accel._build as b\n"
        "mod = b.load_extension()\n"
        "print('BUILD ' + json.dumps({'module': mod.__file__, 'seconds': time.monotonic() - t0,"
        " 'cache': str(b.cache_root())}))\n"
    )
    proc = run([sys.executable, "-c", code], timeout=BUILD_TIMEOUT, what="building the sim_accel extension")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BUILD "))
    info = json.loads(line[len("BUILD "):])
    print(f"\nsim_accel extension: {info['module']} (load/build {info['seconds']:.1f}s)")
    return info


@pytest.fixture(scope="session")
def device_reports(request, extension):
    """device_checks.py run once per vendor this session selected (concurrently)."""

    def one(vendor):
        args = [sys.executable, os.path.join(SCRIPTS, "device_checks.py"), vendor]
        try:
            proc = run_child(args)
        except subprocess.TimeoutExpired as exc:
            return None, f"device_checks.py {vendor}: no exit after {RUN_TIMEOUT}s\n{log_of(exc)}"
        report = None
        for line in proc.stdout.splitlines():
            if line.startswith("REPORT "):
                report = json.loads(line[len("REPORT "):])
        if proc.returncode != 0 or report is None:
            return None, f"device_checks.py {vendor}: exit code {proc.returncode}\n{log_of(proc)}"
        return report, log_of(proc)

    selected = [v for v in VENDORS if any(item.module.__name__ == __name__ and getattr(item, "callspec", None)
                                          and item.callspec.params.get("vendor") == v
                                          and item.originalname == "test_device" for item in request.session.items)]
    with ThreadPoolExecutor(max_workers=max(1, len(selected))) as pool:
        results = dict(zip(selected, pool.map(one, selected)))
    return results


_ddp_cache: dict = {}


@pytest.fixture(scope="module")
def ddp_run(request, extension, tmp_path_factory):
    """One 2-rank DDP + SyncBatchNorm run per vendor (cached for the module)."""

    def get(vendor):
        if vendor not in _ddp_cache:
            out = tmp_path_factory.mktemp(f"ddp_{vendor}")
            stats = out / "stats"
            stats.mkdir()
            proc = torchrun("ddp_syncbn.py", vendor, out, env=child_env(SIM_ACCEL_STATS_DIR=stats))
            _ddp_cache[vendor] = (out, stats, proc)
        return _ddp_cache[vendor]

    return get


# ------------------------------------------------------------------ tests

@standins
@needs_standins
@pytest.mark.smoke  # nox -s newest
def test_extension_builds_and_loads(extension):
    assert os.path.exists(extension["module"])


@needs_standins
@pytest.mark.smoke  # nox -s newest
@pytest.mark.parametrize("check", DEVICE_CHECKS)
@pytest.mark.parametrize("vendor", vendor_params(VENDORS))
def test_device(device_reports, vendor, check):
    report, log = device_reports[vendor]
    if report is None:
        pytest.fail(log)
    assert check in report, f"check {check} did not run\n{log}"
    if report[check] != "ok":
        pytest.fail(f"{vendor}/{check} failed:\n{report[check]}\n{log}")


@needs_standins
@pytest.mark.smoke  # nox -s newest
@pytest.mark.parametrize("vendor", vendor_params(VENDORS))
def test_ddp_syncbn_matches_single_process_cpu(ddp_run, vendor):
    import torch

    sys.path.insert(0, SCRIPTS)
    try:
        import ddp_syncbn
    finally:
        sys.path.remove(SCRIPTS)
    out, _, proc = ddp_run(vendor)
    assert "terminate called" not in proc.stderr, log_of(proc)
    for rank in (0, 1):
        info = json.loads((out / f"rank{rank}.json").read_text())
        assert info["device"] == info["param_device"] == f"{vendor}:{rank}", info
    got = torch.load(out / "state.pt")
    ref = ddp_syncbn.reference_state()
    assert set(got) == set(ref)
    assert any("running_mean" in k for k in ref) and any("running_var" in k for k in ref)
    for key, expected in ref.items():
        actual = got[key]
        assert actual.device.type == "cpu" and actual.dtype == expected.dtype, key
        if expected.is_floating_point():
            diff = (actual.double() - expected.double()).abs().max().item()
            assert diff <= 1e-5, f"{key}: max abs diff {diff}\n{log_of(proc)}"
        else:
            assert torch.equal(actual, expected), key


@needs_standins
@pytest.mark.smoke  # nox -s newest
@pytest.mark.parametrize("vendor", vendor_params(VENDORS))
def test_stats_files_prove_vendor_backend_and_device(ddp_run, vendor):
    out, stats, proc = ddp_run(vendor)
    files = sorted(glob.glob(str(stats / f"{vendor}-*.json")))
    assert len(files) == 2, f"expected one stats file per rank, got {files}\n{log_of(proc)}"
    by_pid = {int(os.path.basename(f)[len(vendor) + 1:-5]): json.loads(open(f).read()) for f in files}
    for rank in (0, 1):
        pid = json.loads((out / f"rank{rank}.json").read_text())["pid"]
        data = by_pid[pid]
        assert data["vendor"] == vendor and data["backend"] == BACKENDS[vendor], data
        counts = data["collectives"]
        assert counts and counts.get("allreduce", 0) > 0, data  # DDP buckets, SyncBN backward
        assert counts.get("all_gather_single", 0) >= 6, data  # SyncBN forward: 2 layers x 3 steps
        assert counts.get("broadcast", 0) > 0, data  # DDP's initial state sync
        assert data["device_indices"] == [rank], data


@standins
@needs_standins
def test_tccl_refuses_init_before_set_device(extension):
    code = (
        "import torch, torch.distributed as dist, torch_sdaa\n"
        "try:\n"
        "    dist.init_process_group('tccl', store=dist.HashStore(), rank=0, world_size=1)\n"
        "except RuntimeError as exc:\n"
        "    print('REFUSED', exc)\n"
        "else:\n"
        "    raise SystemExit('tccl accepted init_process_group before set_device')\n"
        "torch.sdaa.set_device(0)\n"
        "dist.init_process_group('tccl', store=dist.HashStore(), rank=0, world_size=1)\n"
        "t = torch.ones(2, device='sdaa:0'); dist.all_reduce(t); assert t.tolist() == [1.0, 1.0]\n"
        "dist.destroy_process_group(); print('AFTER_SET_DEVICE_OK')\n"
    )
    proc = run([sys.executable, "-c", code], what="tccl before set_device")
    assert "set_device must be called before init_process_group with tccl" in proc.stdout, log_of(proc)
    assert "AFTER_SET_DEVICE_OK" in proc.stdout, log_of(proc)


@standins
@needs_standins
def test_tccl_refuses_two_ranks_on_one_device(extension):
    proc = torchrun("tccl_same_device.py")
    # Split on the marker, not on lines: the ranks share one pipe.
    errors = [part for part in proc.stdout.split("QUIRK_ERROR ")[1:]]
    assert len(errors) == 2, log_of(proc)
    for line in errors:
        assert "both use device sdaa:0" in line and "one process per device" in line, line


TCCL_RANK = (
    "import sys, torch, torch.distributed as dist, torch_sdaa\n"
    "rank = int(sys.argv[1])\n"
    "torch.sdaa.set_device(0)\n"
    "try:\n"
    "    dist.init_process_group('tccl', init_method='file://' + sys.argv[2], rank=rank, world_size=2)\n"
    "except RuntimeError as exc:\n"
    "    print('REFUSED', exc); sys.exit(0)\n"
    "t = torch.ones(1, device='sdaa'); dist.all_reduce(t); print('SUM', t.item(), torch.sdaa.device_count())\n"
    "dist.destroy_process_group()\n"
)


@standins
@needs_standins
@pytest.mark.parametrize("visible, accepted", [(("0", "1"), True), (("2", "2"), False)])
def test_visible_devices_select_physical_devices_for_tccl(extension, tmp_path, visible, accepted):
    """SDAA_VISIBLE_DEVICES as on the real runtime: two launchers on one host, each seeing one
    card as its local device 0 (how a two-node job is tried on one machine), are one process
    per physical device; the same card twice is refused."""
    store = str(tmp_path / "store")
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(
            lambda r: run([sys.executable, "-c", TCCL_RANK, str(r), store],
                          env=child_env(SDAA_VISIBLE_DEVICES=visible[r]), what=f"tccl rank {r}"),
            (0, 1)))
    if accepted:
        assert all("SUM 2.0 1" in p.stdout for p in procs), [log_of(p) for p in procs]
    else:
        assert all("REFUSED" in p.stdout and "sdaa:2" in p.stdout for p in procs), [log_of(p) for p in procs]


@standins
@needs_standins
def test_visible_devices_list_stops_at_the_first_invalid_entry(extension):
    code = "import torch, torch_npu; print(torch.npu.device_count())"
    counts = [run([sys.executable, "-c", code], env=child_env(ASCEND_RT_VISIBLE_DEVICES=value)).stdout.strip()
              for value in ("3,1", "1,9,2", "")]
    assert counts == ["2", "1", "0"]


@needs_standins
@standins
@pytest.mark.parametrize("vendor", ["npu", "gcu"])
def test_hccl_and_eccl_have_no_tccl_quirks(extension, vendor):
    code = (
        f"import torch, torch.distributed as dist, torch_{vendor}\n"
        f"dist.init_process_group('{BACKENDS[vendor]}', store=dist.HashStore(), rank=0, world_size=1)\n"
        f"t = torch.ones(2, device='{vendor}:1'); dist.all_reduce(t); print('OK', t.tolist())\n"
        "dist.destroy_process_group()\n"
    )
    proc = run([sys.executable, "-c", code], what=f"{vendor} init without set_device")
    assert "OK [1.0, 1.0]" in proc.stdout, log_of(proc)


NCCL_DERIVED_RANK = """
import sys, torch, torch.distributed as dist, torch_{vendor}
rank = int(sys.argv[1])
dist.init_process_group('{backend}', init_method='file://' + sys.argv[2], rank=rank, world_size=2)
dev = torch.device('{vendor}', rank)
t = torch.tensor([-3 if rank == 0 else 0, 7], device=dev)
dist.all_reduce(t, op=dist.ReduceOp.AVG)
print('AVG', t.tolist())
for op, x in ((dist.ReduceOp.BAND, torch.ones(2, dtype=torch.int32, device=dev)),
              (dist.ReduceOp.SUM, torch.ones(2, dtype=torch.int16, device=dev)),
              (dist.ReduceOp.AVG, torch.ones(2, dtype=torch.bool, device=dev))):
    try:
        dist.all_reduce(x, op=op)
    except Exception as exc:
        print('REFUSED', type(exc).__name__, str(exc).splitlines()[0])
    else:
        print('COMPUTED', op)
dist.destroy_process_group()
"""
NCCL_DERIVED = {  # backend -> (integer AVG of [-3, 7] and [0, 7], refusals), read in each plug-in's source
    "mlu": ([-2, 7], ["ValueError Cannot use ReduceOp.BAND with CNCL",
                      "RuntimeError Unsupported data type for CNCL process group",
                      "TypeError Cannot use ReduceOp.AVG with boolean inputs"]),
    "musa": ([-1, 7], ["RuntimeError Unexpected ReduceOp: BAND",
                       "RuntimeError Input tensor data type in not supported for MCCL process group: Short",
                       "RuntimeError Cannot use ReduceOp.AVG with Boolean inputs"]),
    "supa": ([-1, 7], ["ValueError Cannot use ReduceOp.BAND with BCCL",
                       "TypeError Input tensor data type is not supported for BCCL process group: Short",
                       "TypeError Cannot use ReduceOp.AVG with boolean inputs"]),
}


@needs_standins
@pytest.mark.parametrize("vendor", vendor_params(sorted(NCCL_DERIVED)))
def test_nccl_derived_backends_refuse_and_average_as_their_sources_do(extension, tmp_path, vendor):
    """cncl floor-divides an integer AVG (torch_mlu's procReduceOutput), mccl and bccl truncate as ncclAvg; each
    refuses bitwise ops, int16 and a bool AVG with its own type and words (_sim_accel/_backend_rules.py)."""
    store, code = str(tmp_path / "store"), NCCL_DERIVED_RANK.format(vendor=vendor, backend=BACKENDS[vendor])
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda r: run([sys.executable, "-c", code, str(r), store], env=child_env(),
                                            what=f"{vendor} rank {r}"), (0, 1)))
    average, refusals = NCCL_DERIVED[vendor]
    for proc in procs:
        assert f"AVG {average}" in proc.stdout, log_of(proc)
        assert [line[len("REFUSED "):] for line in proc.stdout.splitlines() if line.startswith("REFUSED")] == \
            refusals, log_of(proc)


@standins
@needs_standins
def test_device_count_from_environment(extension):
    code = (
        "import torch, torch_gcu\n"
        "assert torch.gcu.device_count() == 2, torch.gcu.device_count()\n"
        "torch.ones(1, device='gcu:1')\n"
        "try:\n"
        "    torch.ones(1, device='gcu:2')\n"
        "except Exception as exc:\n"
        "    print('REFUSED', type(exc).__name__)\n"
    )
    proc = run([sys.executable, "-c", code], env=child_env(SIM_ACCEL_DEVICE_COUNT=2), what="device count 2")
    assert "REFUSED" in proc.stdout, log_of(proc)


@standins
@needs_standins
def test_failed_build_is_a_loud_import_error(extension, tmp_path):
    # Empty build cache and no compiler/ninja on PATH: importing must raise
    # ImportError naming the problem (tests relying on it then fail, not skip).
    code = (
        "try:\n"
        "    import torch_npu\n"
        "except ImportError as exc:\n"
        "    print('IMPORT_ERROR', exc)\n"
        "else:\n"
        "    raise SystemExit('imported without a build')\n"
    )
    env = child_env(SIM_ACCEL_BUILD_DIR=tmp_path / "empty-cache", PATH=str(tmp_path / "no-bin"))
    proc = run([sys.executable, "-c", code], env=env, what="import with no toolchain")
    assert "IMPORT_ERROR simulated accelerator: building the C++ extension failed" in proc.stdout, log_of(proc)


EXIT_RUNS = 10


@standins
@needs_standins
def test_clean_exit_after_backward_repeated(extension):
    """A script that ends right after backward on <vendor>:1 exits 0, every time.

    Without the drain in _sim_accel/_exit.py about a third of such runs abort
    with 'terminate called without an active exception' (rc 134).
    """
    script = os.path.join(SCRIPTS, "train_then_exit.py")
    vendors = [VENDORS[i % len(VENDORS)] for i in range(EXIT_RUNS)]

    def one(vendor):
        try:
            return vendor, run_child([sys.executable, script, vendor])
        except subprocess.TimeoutExpired as exc:
            return vendor, exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, vendors))
    bad = []
    for i, (vendor, proc) in enumerate(results):
        if isinstance(proc, subprocess.TimeoutExpired):
            bad.append(f"run {i} ({vendor}): hung\n{log_of(proc)}")
        elif proc.returncode != 0 or "terminate called" in proc.stderr:
            bad.append(f"run {i} ({vendor}): rc {proc.returncode}\n{log_of(proc)}")
    assert not bad, f"{len(bad)}/{EXIT_RUNS} runs did not exit cleanly:\n" + "\n".join(bad)


@standins
@needs_standins
def test_exit_code_atexit_and_stats_preserved(extension, tmp_path):
    code = (
        "import atexit, sys, torch, torch_npu\n"
        "atexit.register(lambda: print('USER_ATEXIT', flush=True))\n"
        "x = torch.randn(3, device='npu:2', requires_grad=True)\n"
        "(x * 2).sum().backward()\n"
        "sys.exit(7)\n"
    )
    proc = run([sys.executable, "-c", code], env=child_env(SIM_ACCEL_STATS_DIR=tmp_path), expect_rc=7,
               what="sys.exit(7) after backward")
    assert "USER_ATEXIT" in proc.stdout and "terminate called" not in proc.stderr, log_of(proc)
    (stats,) = glob.glob(str(tmp_path / "npu-*.json"))
    data = json.loads(open(stats).read())
    assert data == {"vendor": "npu", "backend": "hccl", "collectives": {}, "device_indices": [2],
                    "process_groups": [], "compiled_graphs": {}}, data


@standins
@pytest.mark.compat  # CI runs it on torch 2.0.1, the one torch of the CI pairs without PrivateUse1
@pytest.mark.skipif(STANDINS, reason=f"torch {torch.__version__} has the PrivateUse1 mechanism the stand-ins use")
def test_stand_in_on_a_torch_without_privateuse1_is_a_clear_import_error():
    code = "try:\n    import torch_sdaa\nexcept ImportError as exc:\n    print('IMPORT_ERROR', exc)\n"
    proc = run([sys.executable, "-c", code], what="import a stand-in without PrivateUse1")
    assert "IMPORT_ERROR cannot import torch_sdaa" in proc.stdout and "torch >= 2.1" in proc.stdout, log_of(proc)


_VENDOR_METHODS = r"""
import sys, torch, importlib
vendor = sys.argv[1]
importlib.import_module("torch_" + vendor)
m, x = torch.nn.Linear(2, 2), torch.zeros(2)
out = {"tensor": [str(getattr(x, vendor)(a).device) for a in (1, f"{vendor}:1", torch.device(vendor, 1))],
       "module_index": str(getattr(m, vendor)(1).weight.device), "module_none": str(getattr(m, vendor)().weight.device)}
for name, arg in (("module_device", torch.device(vendor, 1)), ("module_string", f"{vendor}:1")):
    try:
        out[name] = str(getattr(m, vendor)(arg).weight.device)
    except TypeError as exc:
        out[name] = "TypeError"
print(out)
"""


@needs_standins
@pytest.mark.parametrize("vendor", vendor_params(VENDORS))
def test_vendor_methods_have_cuda_signatures(extension, vendor):
    """`transfer port` rewrites x.cuda(i) to x.<dev>(i): Tensor.<dev> (torch's generated method) takes an index,
    a string or a device, like Tensor.cuda; torch_npu 2.13 replaces Module.npu with one that takes an index only
    (torch_npu/utils/_module.py: torch.device("npu", device)), so the npu stand-in does too."""
    proc = run([sys.executable, "-c", _VENDOR_METHODS, vendor], env=child_env(SIM_ACCEL_DEVICE_COUNT=2))
    out = eval(proc.stdout.strip().splitlines()[-1])
    assert out["tensor"] == [f"{vendor}:1"] * 3 and out["module_index"] == f"{vendor}:1"
    assert out["module_none"] == f"{vendor}:0"
    strict = vendor == "npu"
    for name in ("module_device", "module_string"):
        assert out[name] == ("TypeError" if strict else f"{vendor}:1"), (name, out)


_WORKER_RELEASE = r"""
import datetime, threading, torch, torch_npu
import torch.distributed as dist
from _sim_accel import _build
C = _build.load_extension()
store, groups = dist.HashStore(), {}

def connect(rank):  # two ranks of one gloo group in one process, each with its own worker thread
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout, opts._threads = datetime.timedelta(seconds=60), 1
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    groups[rank] = dist.ProcessGroupGloo(store, rank, 2, opts)

threads = [threading.Thread(target=connect, args=(r,)) for r in (0, 1)]
[t.start() for t in threads]; [t.join() for t in threads]
a, b = torch.ones(3), torch.full((3,), 2.0)
work = groups[0].allreduce([a])  # its worker waits inside gloo for rank 1
held = C.wait_released(work, 0.2)
other = groups[1].allreduce([b])
other.wait()
work.wait()
released = C.wait_released(work, 30.0) and C.wait_released(other, 30.0)  # or a worker frees them at exit
print("RESULT", {"held_while_running": not held, "released_after": released, "sum": a.tolist()})
"""


@standins
@needs_standins
def test_a_finished_collective_is_let_go_by_the_gloo_worker_before_the_stand_in_returns(extension):
    """The stand-ins' collectives run on gloo, whose worker thread marks a work complete and only then drops
    it; when that worker frees the work's tensors it takes the GIL, and a worker not yet scheduled when the
    script ends took it in a finalizing interpreter: "terminate called without an active exception", rank 1
    of a ported ddp_gpu_arg.py run natively on the npu stand-in, about 1 run in 150 on a loaded 2-core machine
    (gdb: ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork -> decref_pyobject -> take_gil). So each collective
    waits for the worker to let go (C.wait_released: True once the caller's Python object is the work's only
    holder); here it reports the worker's hold while the collective runs, and its release once it finished."""
    proc = run([sys.executable, "-c", _WORKER_RELEASE], what="gloo worker release")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    got = eval(line[len("RESULT "):])
    assert got == {"held_while_running": True, "released_after": True, "sum": [3.0, 3.0, 3.0]}, log_of(proc)


_GROUP_FREED_AT_EXIT = r"""
import os, sys, torch, torch_sdaa
import torch.distributed as dist
torch.sdaa.set_device(0)
dist.init_process_group("tccl", rank=0, world_size=1)
t = torch.ones(2, device="sdaa")
dist.all_reduce(t)
# Kept past destroy_process_group by a module imported before the plug-in's (torch): Python frees the group
# while it clears the modules at exit, after the plug-in's own modules (imported later, cleared first).
torch.kept_group = dist.distributed_c10d._get_default_group()
dist.destroy_process_group()
print("reduced", t.tolist())
"""


@standins
@needs_standins
def test_a_group_freed_while_python_clears_the_modules_exits_quietly(extension):
    """A stand-in is as quiet at exit as the real plug-in: SimProcessGroup.__del__ ran after its module's
    globals were cleared and printed "Exception ignored in ... TypeError: 'NoneType' object does not support
    item assignment" (imagenet's main.py on sdaa, stopped with SIGINT)."""
    proc = run([sys.executable, "-c", _GROUP_FREED_AT_EXIT],
               env=child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port()))
    assert "reduced [1.0, 1.0]" in proc.stdout, log_of(proc)
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, log_of(proc)


_LAZY_BITS = r"""
import sys, torch, importlib
vendor = sys.argv[1]
importlib.import_module("torch_" + vendor)
x, c = torch.randn(2, 5), torch.randn(4, dtype=torch.cfloat)
dx, dc = x.to(vendor), c.to(vendor)
written = torch.zeros(4, dtype=torch.cfloat, device=vendor)
written.conj().copy_(dc)  # a copy into a conjugate view
base = torch.randn(20)
out = {
    # torch.fft.hfft conjugates its input lazily: copying the conjugate view recursed until SIGSEGV
    "hfft": torch.equal(torch.fft.hfft(dx).cpu(), torch.fft.hfft(x)),
    "ihfft": torch.equal(torch.fft.ihfft(dx).cpu(), torch.fft.ihfft(x)),
    "conj_to_cpu": torch.equal(dc.conj().cpu(), c.conj()),
    "resolve_conj": torch.equal(dc.conj().resolve_conj().cpu(), c.conj()),
    "neg_view": torch.equal(dc.conj().imag.cpu(), c.conj().imag),
    "item": dc.conj()[1].item() == c.conj()[1].item(),
    "into_conj_view": torch.equal(written.cpu(), c.conj()),
    # as_strided addresses the storage: on the same storage (offset 5 into 20 floats) it reads what the CPU
    # reads (OpInfo's samples move a view with .to(), which copies only the view, on CUDA too)
    "as_strided": torch.equal(torch.as_strided(base.to(vendor)[5:15], (2, 2), (1, 2), 0).cpu(),
                              torch.as_strided(base[5:15], (2, 2), (1, 2), 0)),
}
print(out)
"""


@standins
@needs_standins
def test_lazy_conjugate_and_negative_views_compute_what_the_cpu_computes(extension):
    """A stand-in never crashes: torch.fft.hfft on npu once died with SIGSEGV, the copy of a lazily
    conjugated tensor recursing through the Conjugate fallback. One vendor: the C++ is the same for all. On the
    strict npu stand-in the FFTs hand complex tensors to aclnn as pairs of reals, as op-plugin's FFT kernels do
    (HackComplexintoFloat), so hfft/ihfft compute there as on a 910B (aclnnMatmul refuses complex64)."""
    proc = run([sys.executable, "-c", _LAZY_BITS, "npu"], what="lazy conjugate / negative views on npu")
    out = eval(proc.stdout.strip().splitlines()[-1])
    assert out == dict.fromkeys(out, True) and len(out) == 8, (out, log_of(proc))


@needs_standins
@pytest.mark.parametrize("vendor", VENDORS)
def test_diffusion_unet_trains_in_channels_last_as_on_the_cpu(extension, vendor):
    """Issue 34: diffusion UNet trainers died at GroupNorm on the channels_last conv output ("view size is not
    compatible with input tensor's size and stride"). A diffusers-style UNet trains on the device in
    channels_last, forward and backward, and computes what the same model computes on the CPU."""
    proc = run([sys.executable, os.path.join(SCRIPTS, "unet_block.py"), vendor], what=f"unet_block.py {vendor}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line[len("RESULT "):])
    assert got["param_devices"] == [f"{vendor}:0"], got
    assert got["channels_last_activations"] == [True], got  # the norms really saw channels_last inputs
    torch.testing.assert_close(got["device_losses"], got["cpu_losses"], rtol=1e-5, atol=1e-6)
    assert got["device_losses"][-1] < got["device_losses"][0], got  # it learns
    # 4 AdamW steps of lr 1e-3 move a weight by up to 4e-3; rounding differences stay far below that
    assert got["max_param_diff"] < 1e-4, got
