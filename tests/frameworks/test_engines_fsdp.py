"""FSDP2, DTensor tensor parallelism, FSDP1 and distributed checkpoints on every target.

One 2-rank torchrun job per target runs ``scripts/fsdp_train.py``, written as PyTorch's docs write
these engines for CUDA (``init_device_mesh("cuda", ...)``, ``DeviceMesh("cuda", ...)``, ``device_id=
torch.cuda.current_device()``, ``"nccl"``; the CPU with gloo when there is no GPU, as the tutorials
do); it never mentions transfer. The same script run without transfer on the CPU (gloo) is the
reference: torch's own FSDP on the CPU computes what CUDA computes up to the kernels, and the cpu
target and the stand-ins run the same CPU kernels, so their results must be equal to it.

Asserted from outside (the per-rank result files, the stand-ins' statistics files): exit 0, both
ranks finished, the real process-group backend, parameters and shards on the target's device
(``cpu``; ``<vendor>:<rank>``), the mesh's device type, each rank holding its half of every FSDP2
parameter, of every tensor-parallel weight and of FSDP1's flat parameter, the model learned, the
tensor-parallel block computing what the whole block computes, the full state dicts of FSDP2 and
FSDP1 equal to the reference run's, collectives on each rank's own device (stand-ins), and the
distributed checkpoint written at world size 2 loading at world size 1 on another target with the
same parameters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import (STANDINS, clean_env, communicate_bounded, free_port, no_gpu, stock_exit_abort,
                      torchrun_standalone)

from test_frameworks import BACKEND, TIMEOUT, Job, _require, job_out, script, torchrun

pytestmark = pytest.mark.slow  # 2-rank jobs: ~30 s each on 2 cores

TARGETS = ["cpu", "npu", "sdaa", "gcu"]
#: Where each target's checkpoint is loaded back (world size 1): always another target.
LOAD_ON = {"cpu": "npu", "npu": "sdaa", "sdaa": "gcu", "gcu": "cpu"}
DEVICE_TYPE = {"cpu": "cpu", "npu": "npu", "sdaa": "sdaa", "gcu": "gcu"}
#: Targets whose plug-in turns a dtype-only float64 cast of a device tensor into float32 (torch_npu's _to_copy,
#: ToKernelNpu.cpp: "Device do not support double dtype now, dtype cast replace with float."): a script's
#: ``v.double().sum()`` of device tensors is a float32 sum there, on a real 910B as on the npu stand-in, and
#: transfer names the cast at run time with the script's line.
FLOAT64_AS_FLOAT32 = {"npu"}


def checksum_on(target, key, reference):
    """What a checksum `key` of device tensors (``v.double().sum()``) is on `target`: the reference's float64
    sum, or its float32 sum (`key` + "32", the same values summed in float32) where float64 is cast to float32."""
    return reference[0][key + ("32" if target in FLOAT64_AS_FLOAT32 else "")]


def check_float64_named(target, log, site):
    """Where the plug-in casts float64 to float32, transfer says so once, with the script's line."""
    named = f"{site}: Tensor.double of an {target} tensor returns float32 on {target}, not float64 as on CUDA"
    assert (named in log) == (target in FLOAT64_AS_FLOAT32), (named, log[-4000:])


def device_of(target, rank):
    return "cpu" if target == "cpu" else f"{target}:{rank}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """fsdp_train.py without transfer on a machine without a GPU: torch's FSDP on the CPU over gloo."""
    workdir = tmp_path_factory.mktemp("reference")
    out = os.path.join(str(workdir), "out")
    env = clean_env(PYTHONUNBUFFERED=1, **no_gpu())
    env.pop("PYTHONPATH", None)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, *torchrun_standalone(2), script("fsdp_train.py"), out], env=env,
                            cwd=str(workdir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    log, _ = communicate_bounded(proc, TIMEOUT, "fsdp_train.py without transfer")
    print(f"reference (no transfer, CPU): rc {proc.returncode} in {time.monotonic() - start:.0f}s")
    assert proc.returncode == 0 or stock_exit_abort(proc.returncode, log), log[-6000:]
    results = {}
    for rank in (0, 1):
        with open(os.path.join(out, f"result-{rank}.json")) as f:
            results[rank] = json.load(f)
        assert results[rank]["finished"], (rank, log[-6000:])
    return results


def check_sharded(job, reference):
    assert job.proc.returncode == 0, job.log()
    results = job.results()
    assert sorted(results) == [0, 1], f"result files of ranks {sorted(results)}\n{job.log()}"
    target = job.target
    for rank, r in results.items():
        mine = device_of(target, rank)
        assert r["finished"] and r["world_size"] == 2 and r["backend"] == BACKEND[target], r
        # FSDP2: the mesh is the target's; each rank holds half of every parameter, on its device
        assert r["mesh_device_type"] == r["tp_mesh_device_type"] == DEVICE_TYPE[target], r
        assert r["param_devices"] == [mine] and r["local_devices"] == [mine], r
        assert r["sharded_types"] == ["DTensor"], r
        assert r["local_numel"] == [n // 2 for n in r["total_numel"]], r
        assert r["accuracy"] >= 0.9 and r["loss"] < 0.1, f"rank {rank} did not learn: {r}"
        # DTensor tensor parallel: halves of each weight, the whole block's result
        assert r["tp_devices"] == [mine], r
        assert r["tp_local_numel"][:3] == [n // 2 for n in r["tp_total_numel"][:3]], r  # down.bias: replicated
        assert r["tp_local_numel"][3] == r["tp_total_numel"][3], r
        assert r["tp_diff"] <= 1e-5, r
        # FSDP1: flat parameter and sharded state dict split in halves, on the device
        assert r["fsdp1_devices"] == [mine] and r["fsdp1_compute_device"] == mine, r
        assert r["fsdp1_shard_devices"] == [mine], r
        assert 2 * r["fsdp1_local_numel"] == r["fsdp1_total_numel"], r
        assert sum(r["fsdp1_shard_numel"]) == r["fsdp1_local_numel"], r
        assert r["fsdp1_accuracy"] >= 0.9, f"rank {rank}: FSDP1 did not learn: {r}"
        # what torch's FSDP computes on the CPU without transfer
        for key in ("loss", "fsdp1_loss"):  # each rank's last loss, on its half of the data
            assert abs(r[key] - reference[rank][key]) <= 1e-6, (key, r, reference[rank])
    # gathered on rank 0: FSDP2's full state dict offloaded to the host (float64 everywhere), FSDP1's on the device
    for key, expected in (("full_checksum", reference[0]["full_checksum"]),
                          ("fsdp1_full_checksum", checksum_on(target, "fsdp1_full_checksum", reference))):
        assert abs(results[0][key] - expected) <= 1e-9 * max(1.0, abs(expected)), (key, results[0], expected)
    check_float64_named(target, job.proc.stdout, "fsdp_train.py:140")
    if target != "cpu":  # the stand-ins' collectives, each rank on its own device
        stats = [s for s in job.stats() if s["device_indices"]]
        assert sorted(i for s in stats for i in s["device_indices"]) == [0, 1], stats
        for s in stats:
            assert s["backend"] == BACKEND[target], s
            assert s["collectives"].get("all_gather_single", 0) > 0, s  # FSDP's unshard
            assert s["collectives"].get("reduce_scatter_single", 0) > 0, s  # FSDP's gradient reduction
    return results


@pytest.mark.parametrize("target", TARGETS)
def test_fsdp2_dtensor_fsdp1_and_dcp_across_world_sizes_and_targets(target, tmp_path, reference):
    if target != "cpu" and not STANDINS:
        pytest.skip("no stand-ins on this torch")
    job = torchrun(Job(target, tmp_path / "train"), "fsdp_train.py")
    results = check_sharded(job, reference)

    # the checkpoint of 2 ranks, loaded by one process on another target
    other = LOAD_ON[target]
    loader = Job(other, tmp_path / "load")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, script("dcp_load.py"), os.path.join(job.out, "dcp")], env=loader.env(),
                          cwd=loader.workdir, capture_output=True, text=True, timeout=TIMEOUT)
    print(f"{target} -> {other}: dcp.load at world size 1, rc {proc.returncode} in {time.monotonic() - start:.0f}s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["param_devices"] == [device_of(other, 0)], loaded
    assert loaded["checksum_before"] != loaded["checksum"], loaded  # the load changed the parameters
    expected = checksum_on(other, "full_checksum", reference)  # the job's parameters are the reference's (above)
    assert abs(loaded["checksum"] - expected) <= 1e-9 * max(1.0, abs(expected)), (loaded, expected)
    check_float64_named(other, proc.stderr, "dcp_load.py:21")


#: accelerate's own choice of device per target (its native vendor path where it has one).
ACCELERATE_DEVICE = {"cpu": "cuda", "npu": "npu", "sdaa": "sdaa", "gcu": "cuda"}


@pytest.mark.parametrize("target", TARGETS)
def test_accelerate_launch_with_its_fsdp_plugin(target, tmp_path):
    """`accelerate launch --config_file` with `distributed_type: FSDP` (fsdp_version 2, bf16, sharded state
    dict), the config `accelerate config` writes for GPUs. accelerate builds FSDP2's mesh itself (from
    torch's accelerator); it ran on the cpu target before the device_mesh patch too, so this job guards
    the path rather than a fix. Without transfer on a machine without a GPU, accelerate falls back to
    DistributedType.NO (no sharding), so there is no CPU reference run to compare with."""
    _require("accelerate")
    job = Job(target, tmp_path).run([
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", script("accelerate_fsdp_config.yaml"),
        "--main_process_port", str(free_port()), script("accelerate_fsdp_train.py"), job_out(tmp_path)])
    assert job.proc.returncode == 0, job.log()
    results = job.results()
    assert sorted(results) == [0, 1], f"result files of ranks {sorted(results)}\n{job.log()}"
    for rank, r in results.items():
        mine = device_of(target, rank)
        assert r["finished"] and r["world_size"] == 2 and r["backend"] == BACKEND[target], r
        assert r["distributed_type"] == "DistributedType.FSDP" and r["mixed_precision"] == "bf16", r
        assert r["device"] == f"{ACCELERATE_DEVICE[target]}:{rank}", r
        assert r["param_devices"] == [mine] and r["local_devices"] == [mine], r
        assert r["local_numel"] == [n // 2 for n in r["total_numel"]], r
        assert r["accuracy"] >= 0.9, f"rank {rank} did not learn: {r}"
    assert results[0]["full_checksum"] is not None and results[1]["full_checksum"] is None, results
    if target != "cpu":
        for s in (s for s in job.stats() if s["device_indices"]):
            assert s["collectives"].get("all_gather_single", 0) > 0, s
