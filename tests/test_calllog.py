"""TRANSFER_LOG: one JSON line per CUDA-facing call site, exact for example scripts;
the log's wrappers change nothing else (names, pickling, isinstance, uninstall), and
with TRANSFER_LOG unset nothing is wrapped."""

import inspect
import json
import os
import pickle
import re
import subprocess
import sys
from collections import Counter

import pytest
import torch

from conftest import EXAMPLES, INSTALLED, ROOT, SCRIPTS, clean_env, needs_standins

# train_cuda.py --epochs 2, cpu target. One record per (API, line), whatever the loop count:
#  49 torch.cuda.is_available; 54 torch.cuda.manual_seed_all; 57 torch.cuda.set_device;
#  58 get_device_name and device_count; 60 DataLoader(pin_memory=True) (pin_memory dropped on cpu);
#  62 Module.cuda -> Tensor.cuda; 65 GradScaler (device 'cuda' -> 'cpu'); 67 torch.cuda.Event (two on
#  one line: one site); 68 reset_peak_memory_stats; 74 Tensor.to('cuda'); 75 Tensor.cuda; 77 autocast;
#  84 synchronize; 87 max_memory_allocated; 94 Tensor.cuda; 95 torch.load(map_location='cuda:0');
#  100 torch.randn(device='cuda'). Not logged: 50-52 (torch.backends flags are plain attributes, not
#  calls), 53 (torch.manual_seed seeds CUDA by calling torch.cuda.manual_seed_all itself: torch's own
#  call), 61 (torch.Generator() without a device), 86 (Event.elapsed_time: a method of the target's own
#  event). Two differences that are Python's and torch's, not the log's:
#  * Python 3.8 gives a call inside an implicitly concatenated f-string (85-87) the string's first line;
#  * before torch 2.3 there is no torch.amp.GradScaler: torch.cuda.amp.GradScaler is CUDA's own class,
#    which transfer leaves alone (it adds CPU kernels for it), so nothing is intercepted at 65.
EXPECTED_LINES = sorted([49, 54, 57, 58, 58, 60, 62, 67, 68, 74, 75, 77, 84, 94, 95, 100]
                        + [87 if sys.version_info >= (3, 9) else 85]
                        + ([65] if hasattr(torch.amp, "GradScaler") else []))
# examples/ddp_syncbn.py, every rank: 61 set_device; 62 init_process_group; 66 SyncBatchNorm and
# Module.cuda; 67 DistributedDataParallel; 76 Tensor.cuda (x and y: one site). Not logged: 21
# (torch.manual_seed, as above) and 78 (SyncBatchNorm's forward asks torch.cuda.is_available() and
# is_current_stream_capturing() itself, and only on some torch versions).
DDP_SYNCBN_LINES = [61, 62, 66, 66, 67, 76]


def _run_logged(script, tmp_path, *args, device="cpu"):
    env = clean_env(TRANSFER_DEVICE=device, TRANSFER_QUIET="1", TRANSFER_LOG=str(tmp_path / "log"))
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(tmp_path / "log") == ["transfer-log-rank0.jsonl"]
    return proc, _records(tmp_path / "log" / "transfer-log-rank0.jsonl")


def _records(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def _line(record):
    return int(record["site"].rsplit(":", 1)[1])


@pytest.mark.slow
def test_log_of_train_cuda_has_each_call_site_once(tmp_path):
    script = os.path.join(EXAMPLES, "train_cuda.py")
    proc, records = _run_logged(script, tmp_path, "--epochs", "2", "--workdir", str(tmp_path / "w"))
    assert {r["site"].rsplit(":", 1)[0] for r in records} == {script}
    assert sorted(_line(r) for r in records) == EXPECTED_LINES  # 2 epochs, logged once
    by_call = {r["call"]: r for r in records}
    assert by_call["torch.cuda.synchronize()"]["source"] == "torch.cuda.synchronize()"
    assert by_call["torch.cuda.max_memory_allocated()"]["class"] == "placeholder"
    assert by_call["Tensor.to('cuda', non_blocking=True)"]["became"] == "'cuda' -> cpu"
    event = by_call["torch.cuda.Event(enable_timing=True)"]
    assert (_line(event), event["class"], event["became"]) == (67, "translated", "transfer.cpu.runtime.Event")
    by_line = {_line(r): r for r in records}
    assert by_line[60]["call"].startswith("DataLoader(")
    assert (by_line[60]["class"], by_line[60]["became"]) == ("no-op", "pin_memory=True -> False")
    # What the wrapped patches really passed on to torch (the log must not undo the translation).
    if 65 in EXPECTED_LINES:
        assert by_line[65]["became"] == "device='cuda' -> 'cpu'"
    assert by_line[77]["became"] == "device_type='cuda' -> 'cpu', dtype=torch.float16 -> torch.bfloat16"
    assert f"{len(EXPECTED_LINES)} CUDA-facing call site(s) logged" in proc.stderr


def test_is_cuda_reads_streams_and_events_are_logged_once_per_site(tmp_path):
    proc, records = _run_logged(os.path.join(SCRIPTS, "is_cuda_reads.py"), tmp_path)
    assert "after: True True True" in proc.stdout
    got = Counter((_line(r), r["call"].split("(", 1)[0]) for r in records)
    # on_gpu() reads t.is_cuda (line 6) five times: one record.
    assert got == Counter({(10, "Tensor.is_cuda"): 1, (11, "Tensor.cuda"): 1, (6, "Tensor.is_cuda"): 1,
                           (14, "torch.cuda.Event"): 1, (15, "torch.cuda.Stream"): 1, (16, "torch.cuda.stream"): 1,
                           (19, "torch.cuda.synchronize"): 1, (20, "Tensor.is_cuda"): 1})
    is_cuda = [r for r in records if r["call"] == "Tensor.is_cuda"]
    assert {(r["class"], r["became"]) for r in is_cuda} == {("translated", "Tensor.is_cpu (True)")}
    assert {r["source"] for r in is_cuda} >= {"return t.is_cuda"}


@pytest.mark.slow
def test_one_log_file_per_rank_under_torchrun_with_ddp_and_syncbn(tmp_path):
    from conftest import free_port

    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET="1", TRANSFER_LOG=str(tmp_path / "log"))
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    script = os.path.join(EXAMPLES, "ddp_syncbn.py")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", script],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "log")) == ["transfer-log-rank0.jsonl", "transfer-log-rank1.jsonl"]
    for rank in (0, 1):
        records = _records(tmp_path / "log" / f"transfer-log-rank{rank}.jsonl")
        assert {r["rank"] for r in records} == {rank}
        # 21: torch.manual_seed -> _is_in_bad_fork, manual_seed_all; 61 set_device; 62 init_process_group;
        # 66 convert_sync_batchnorm (SyncBatchNorm built inside torch: one site) and .cuda(); 67 DDP;
        # 76 two .cuda() on one line; 78 model(x): SyncBatchNorm's forward asks is_available and
        # is_current_stream_capturing (torch's own calls, logged at the user's line).
        assert sorted(_line(r) for r in records) == DDP_SYNCBN_LINES
        by_call = {r["call"].split("(", 1)[0]: r for r in records}
        assert by_call["torch.cuda.set_device"]["call"] == f"torch.cuda.set_device({rank})"
        assert by_call["torch.distributed.init_process_group"]["became"] == "backend='nccl' -> 'gloo'"
        ddp = by_call["DistributedDataParallel"]
        assert (_line(ddp), ddp["class"]) == (67, "translated")
        assert ddp["became"] == f"device_ids=[{rank}] dropped on cpu, output_device={rank} dropped on cpu"
        syncbn = by_call["SyncBatchNorm"]
        assert (_line(syncbn), syncbn["class"], syncbn["became"]) == (66, "translated", "SyncBatchNorm on cpu")
        assert syncbn["source"] == "model = nn.SyncBatchNorm.convert_sync_batchnorm(model).cuda()"
    assert proc.stderr.count("CUDA-facing call site(s) logged") == 1  # the summary: rank 0 only


@needs_standins
def test_ddp_and_syncbn_records_on_a_vendor_under_torchrun(tmp_path):
    from conftest import VENDORS, free_port

    env = clean_env(TRANSFER_DEVICE="npu", TRANSFER_QUIET="1", TRANSFER_LOG=str(tmp_path / "log"),
                    PYTHONPATH=VENDORS if INSTALLED else os.pathsep.join([ROOT, VENDORS]))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", os.path.join(EXAMPLES, "ddp_syncbn.py")],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for rank in (0, 1):
        records = _records(tmp_path / "log" / f"transfer-log-rank{rank}.jsonl")
        assert sorted(_line(r) for r in records) == DDP_SYNCBN_LINES
        by_call = {r["call"].split("(", 1)[0]: r for r in records}
        assert by_call["DistributedDataParallel"]["became"] == (f"device_ids=[{rank}] -> [npu:{rank}], "
                                                                f"output_device={rank} -> npu:{rank}")
        assert by_call["SyncBatchNorm"]["became"] == "SyncBatchNorm on npu"
        assert by_call["torch.distributed.init_process_group"]["became"] == "backend='nccl' -> 'hccl'"
        assert by_call["torch.cuda.set_device"]["became"] == "torch.npu.set_device"
        assert {r["class"] for r in records} == {"translated"}


# ------------------------------------------------------------------ in-process
def _native_is_cuda():
    return inspect.getattr_static(torch.Tensor, "is_cuda")


def test_without_transfer_log_is_cuda_is_the_targets_own_getter(install_cpu, tmp_path):
    import transfer

    native = _native_is_cuda()
    install_cpu(TRANSFER_LOG=None)
    unlogged = _native_is_cuda()
    base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    assert unlogged is base.__dict__["is_cpu"]  # exactly what patches/tensor.py installs: no layer
    transfer.uninstall()
    install_cpu(TRANSFER_LOG=str(tmp_path / "log"))
    logged = _native_is_cuda()
    assert isinstance(logged, property) and logged is not unlogged
    assert torch.ones(1).is_cuda is True
    transfer.uninstall()
    assert _native_is_cuda() is native
    install_cpu(TRANSFER_LOG=None)
    assert _native_is_cuda() is unlogged


def _static(owner, attribute):
    """The attribute as stored; torch._VF answers its names through a module __getattr__."""
    try:
        return inspect.getattr_static(owner, attribute)
    except AttributeError:
        return getattr(owner, attribute, None)  # None: not there (an attribute transfer adds)


def test_logged_install_keeps_names_pickling_isinstance_and_uninstall_restores(install_cpu, tmp_path):
    import transfer
    from test_pickling_and_introspection import _native_facts, _problems

    install_cpu(TRANSFER_LOG=None)
    records = transfer._active.registry.records()
    transfer.uninstall()
    native = _native_facts(records)
    originals = {r.name: _static(r.owner, r.attribute) for r in records}
    install_cpu(TRANSFER_LOG=str(tmp_path / "log"))
    records = transfer._active.registry.records()
    problems = {r.name: p for r in records if r.name in native for p in [_problems(r, native[r.name])] if p}
    assert not problems, "\n".join(f"{k}: {v}" for k, v in problems.items())
    assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream)
    assert issubclass(type(torch.cuda.current_stream()), torch.cuda.Stream)
    assert pickle.loads(pickle.dumps(torch.cuda.Event)) is torch.cuda.Event
    assert pickle.loads(pickle.dumps(torch.Tensor.cuda)) is torch.Tensor.cuda
    assert isinstance(torch.Generator(device="cuda"), torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    with pytest.raises(transfer.UnsupportedCudaAPI):
        torch.cuda.ExternalStream(0)  # the log does not swallow the class's own error
    transfer.uninstall()
    restored = {name: _static(r.owner, r.attribute) for name, r in
                ((r.name, r) for r in records) if name in originals}
    assert {n for n in originals if restored.get(n) is not originals[n]} == set()
    assert not hasattr(torch.nn.SyncBatchNorm.__init__, "__wrapped__")  # the watch on SyncBatchNorm is gone too


# install with a log, one call, uninstall, then the log folder removed (pytest's tmp_path at session end)
LOG_ENDS = """
import shutil, sys
import torch, transfer
transfer.install("cpu")
torch.zeros(1).cuda()
transfer.uninstall()
print("uninstalled", file=sys.stderr, flush=True)
shutil.rmtree(sys.argv[1])
"""


def test_the_log_ends_with_uninstall_and_nothing_is_left_for_exit(tmp_path):
    """The call-site log once outlived uninstall(): with the folder removed, exit printed
    "Exception ignored in atexit callback ... FileNotFoundError", and a test's log printed its summary
    line at the end of the whole pytest session. The log ends with the install: file and summary then."""
    directory = tmp_path / "log"
    env = clean_env(TRANSFER_QUIET="1", TRANSFER_LOG=str(directory))
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, "-c", LOG_ENDS, str(directory)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and not directory.exists(), proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    # the summary, once, at uninstall: before the line the script prints after it, none at exit
    assert proc.stderr.splitlines() == [f"transfer: 1 CUDA-facing call site(s) logged in {directory}/"
                                        "transfer-log-rank0.jsonl (1 translated)", "uninstalled"], proc.stderr


@pytest.mark.slow  # an mp.spawn job
def test_mp_spawn_workers_log_under_their_own_rank_and_the_job_prints_one_summary(tmp_path):
    """Under mp.spawn the parent and both workers used to write transfer-log-rank0.jsonl, rank 0 in
    every record, and three summaries printed. Each worker logs under the rank init_process_group
    gave it (its record from before init_process_group included), the parent, which has no rank, in
    transfer-log-main.jsonl, and the job prints one summary."""
    from conftest import clean_env, free_port

    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET="1", TRANSFER_LOG=str(tmp_path / "log"),
                       TRANSFER_CPU_DEVICES="2")
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    script = os.path.join(SCRIPTS, "spawn_logged.py")
    proc = subprocess.run([sys.executable, script, str(free_port())], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(re.findall(r"rank (\d): ([\d.]+)", proc.stdout)) == [("0", "2.0"), ("1", "2.0")], proc.stdout
    assert sorted(os.listdir(tmp_path / "log")) == ["transfer-log-main.jsonl", "transfer-log-rank0.jsonl",
                                                    "transfer-log-rank1.jsonl"]
    pids = set()
    for rank in (0, 1):
        records = _records(tmp_path / "log" / f"transfer-log-rank{rank}.jsonl")
        assert {r["rank"] for r in records} == {rank}, records
        by_call = {r["call"].split("(", 1)[0]: r for r in records}
        assert {"torch.cuda.is_available", "torch.distributed.init_process_group", "torch.cuda.set_device",
                "Tensor.cuda"} <= set(by_call), records
        assert by_call["torch.cuda.set_device"]["call"] == f"torch.cuda.set_device({rank})"
        pids |= {r["pid"] for r in records}
    main = _records(tmp_path / "log" / "transfer-log-main.jsonl")
    assert [(r["call"], r["rank"]) for r in main] == [("torch.cuda.device_count()", None)], main
    assert len(pids | {r["pid"] for r in main}) == 3  # three processes, one file each
    assert proc.stderr.count("CUDA-facing call site(s) logged") == 1, proc.stderr


# ---------------------------------------------------------------- the rehearsal (--plan)

PLAN_JOB = r"""
import torch
import torch.nn as nn
model = nn.Linear(4, 2).cuda()
x = torch.randn(8, 4, device="cuda")
y = x.to("cuda:0")
print("allocated", torch.cuda.memory_allocated())
"""


def _plan_records(directory):
    records = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as fh:
            records += [json.loads(line) for line in fh]
    return {r["call"].split("(")[0]: r for r in records}


def test_plan_on_the_cpu_target_classifies_for_the_planned_target(tmp_path):
    """transfer-run --plan npu on the cpu target: the job runs (translated to the CPU) and the log says what npu
    will do: memory_allocated is a placeholder on cpu but translated on npu, 'cuda:0' becomes npu:0."""
    script = tmp_path / "job.py"
    script.write_text(PLAN_JOB)
    env = clean_env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    runner = [sys.executable, "-c", "import sys; from transfer.runner import main; sys.exit(main())"]
    proc = subprocess.run(runner + ["--device", "cpu", "--plan", "npu", "--log", str(tmp_path / "log"),
                                    sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "allocated 0" in proc.stdout, proc.stderr
    records = _plan_records(tmp_path / "log")
    assert {r["plan"] for r in records.values()} == {"npu"}
    assert records["torch.cuda.memory_allocated"]["class"] == "translated"  # npu's answer, not cpu's placeholder
    assert records["torch.cuda.memory_allocated"]["became"] == "torch.npu.memory_allocated"
    assert records["Tensor.to"]["became"] == "'cuda:0' -> npu:0" and records["Tensor.to"]["reason"]
    assert records["Tensor.cuda"]["became"] == "Tensor.to(npu)"
    for bad, why in ((["--plan", "npu"], "add --log DIR"), (["--plan", "tpu", "--log", "x"], "not a target")):
        refused = subprocess.run(runner + ["--device", "cpu", *bad, sys.executable, str(script)], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr


PLAN_NATIVE = r"""
import os, sys, torch, transfer, transfer.selection as selection
selection.select = lambda wanted, prepare=None: (None, selection.NATIVE_CUDA)  # as on a machine with real CUDA
info = transfer.install("auto")
assert not info["active"] and info["plan"] == "npu", info
available = torch.cuda.is_available()  # nothing translated: this machine's own answer
for attempt in (lambda: torch.ones(1, device="cuda:1"), lambda: torch.zeros(1).cuda(1),
                lambda: torch.distributed.init_process_group("nccl", rank=0, world_size=1, init_method="tcp://127.0.0.1:1")):
    try:
        attempt()
    except Exception as exc:  # no CUDA, no NCCL here: the native job fails as it would
        pass
before = torch.Tensor.cuda
transfer.uninstall()
print(available, before is not torch.Tensor.cuda, len(info["call_sites"]))
"""


def test_plan_on_real_cuda_observes_without_changing_anything(tmp_path):
    """Where auto installs nothing (real CUDA), TRANSFER_PLAN + TRANSFER_LOG put logging layers over the CUDA
    entry points: the job runs natively, each site is recorded with the plan's answer, uninstall takes them off.
    (No GPU here: selection is told it found one; the calls then fail natively, after being logged.)"""
    env = clean_env(TRANSFER_PLAN="npu", TRANSFER_LOG=str(tmp_path / "log"))
    proc = subprocess.run([sys.executable, "-c", PLAN_NATIVE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    available, layered, sites = proc.stdout.split()
    assert available == "False" and layered == "True" and int(sites) >= 4
    records = _plan_records(tmp_path / "log")
    assert records["torch.ones"]["became"] == "'cuda:1' -> npu:1" and records["torch.ones"]["plan"] == "npu"
    assert records["Tensor.cuda"]["became"] == "Tensor.to(npu:1)"
    assert records["torch.distributed.init_process_group"]["became"] == "backend 'nccl' -> 'hccl'"
    assert records["torch.cuda.is_available"]["class"] == "translated"
