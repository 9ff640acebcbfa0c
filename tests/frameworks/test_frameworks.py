"""Real frameworks under transfer: 2-rank jobs on the cpu target and on every vendor stand-in.

Each job is a script in ``scripts/`` written the way the framework's users write it for NVIDIA
GPUs (none mentions transfer), launched the framework's way with ``TRANSFER_DEVICE=<target>``:

* accelerate: ``accelerate launch --multi_gpu --num_processes 2``, fp32 and ``--mixed_precision fp16``; and
  its ``*_no_trainer.py`` examples' loop on the npu stand-in;
* Lightning: ``Trainer(accelerator="gpu"|"cuda", devices=2, strategy="ddp", precision="16-mixed")``;
* MMEngine: ``Runner(launcher="pytorch")`` under torchrun, its default wrapper (seed 002's path);
* transformers: ``Trainer`` on a tiny GPT-2 with tied embeddings, built from a config, under torchrun;
* DeepSpeed: ``deepspeed.initialize`` with ZeRO stage 1 (torch AdamW, no compiled ops), under torchrun.

One vendor package is importable per job (``conftest.vendor_path``: ``tests/vendors/only/<vendor>``), as
on a real machine: accelerate and MMEngine import every plug-in they find. Asserted from outside,
from the per-rank result files the scripts write and the stand-ins' statistics files: exit 0,
both ranks finished, parameters on ``<vendor>:<rank>`` (``cpu`` on the cpu target), the real
process-group backend, collectives through it (vendors: every rank's stats file counts
allreduces on its own device; cpu: gloo), identical parameters on both ranks, the model learned
(accuracy far beyond chance), tied weights still tied, and which path the framework took (its
native vendor path or its CUDA path). A control shows what a user gets without transfer.

Libraries are pinned in ``constraints.txt``. (Three causes inside transfer, TorchScript
builtins for MMEngine, `torch.cuda.CUDAGraph | None` for transformers, the cpu target's device count
and `device_id` for Lightning and DeepSpeed, made 11 of these jobs fail before they were fixed.)
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import (INSTALLED, VENDORS, clean_env, communicate_bounded, free_port, no_gpu, torchrun_standalone,
                      vendor_path)

pytestmark = pytest.mark.slow  # 2-rank jobs of real frameworks: minutes

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
TIMEOUT = 420

TARGETS = ["cpu", "npu", "sdaa", "gcu"]
BACKEND = {"cpu": "gloo", "npu": "hccl", "sdaa": "tccl", "gcu": "eccl"}

# Which path each framework takes under transfer: its own vendor support ("native") or CUDA.
ACCELERATE_TYPE = {"cpu": "MULTI_GPU", "npu": "MULTI_NPU", "sdaa": "MULTI_SDAA", "gcu": "MULTI_GPU"}
MMENGINE_DEVICE = {"cpu": "cuda", "npu": "npu", "sdaa": "cuda", "gcu": "cuda"}
TRANSFORMERS_DEVICE = {"cpu": "cuda", "npu": "npu", "sdaa": "sdaa", "gcu": "cuda"}  # accelerate's choice
# DeepSpeed's own accelerator on npu/sdaa; its CUDA one under the target's names on cpu/gcu (transfer/patches/deepspeed.py).
DEEPSPEED_DEVICE = {"cpu": "cpu", "npu": "npu", "sdaa": "sdaa", "gcu": "gcu"}


def _require(module):
    """The framework, or: under nox (which installs them) a failure, in a checkout a skip, naming the install."""
    try:
        __import__(module)
    except ImportError as exc:
        message = (f"{module} is not installed: pip install -c tests/frameworks/constraints.txt "
                   f"accelerate pytorch-lightning mmengine transformers deepspeed ({exc})")
        if INSTALLED:
            pytest.fail(message)
        pytest.skip(message)


# ------------------------------------------------------------------ running a job

class Job:
    def __init__(self, target, workdir):
        self.target = target
        self.workdir = str(workdir)
        self.out = os.path.join(self.workdir, "out")
        self.stats_dir = os.path.join(self.workdir, "stats")
        os.makedirs(self.stats_dir)
        self.proc = None
        self.seconds = 0.0
        self.timeout = TIMEOUT

    def env(self, transfer=True):
        env = clean_env(PYTHONUNBUFFERED=1, HF_HUB_OFFLINE=1, TOKENIZERS_PARALLELISM="false")
        env.pop("PYTHONPATH", None)
        if self.target == "cpu" and not transfer:  # a machine without CUDA (with a GPU, the framework takes it)
            env.update(no_gpu())
        # Under the cpu target no GPU is hidden: torch.cuda is transfer's virtual devices there, and a
        # CUDA_VISIBLE_DEVICES='' would be read by the frameworks themselves (MMEngine's logger maps
        # LOCAL_RANK through it and fails), which a laptop user never sets (docs/limits.md).
        if self.target != "cpu":
            env["PYTHONPATH"] = vendor_path(self.target)
            env["SIM_ACCEL_STATS_DIR"] = self.stats_dir
        if self.target == "npu":  # set by CANN's set_env.sh on every Ascend machine (DeepSpeed reads it)
            env["ASCEND_HOME_PATH"] = os.path.join(self.workdir, "Ascend", "cann")
            os.makedirs(env["ASCEND_HOME_PATH"], exist_ok=True)
        if transfer:
            env["TRANSFER_DEVICE"] = self.target
        return env

    def run(self, args, transfer=True):
        start = time.monotonic()
        proc = subprocess.Popen(args, env=self.env(transfer), cwd=self.workdir, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        out, _ = communicate_bounded(proc, self.timeout, " ".join(args))
        self.seconds = time.monotonic() - start
        self.proc = subprocess.CompletedProcess(args, proc.returncode, out, None)
        print(f"{self.target}: rc {proc.returncode} in {self.seconds:.0f}s")
        return self

    def log(self):
        return f"$ {' '.join(self.proc.args)}\n[rc {self.proc.returncode}]\n{self.proc.stdout[-8000:]}"

    def results(self):
        return {r["rank"]: r for r in (json.load(open(f)) for f in glob.glob(os.path.join(self.out, "result-*.json")))}

    def stats(self):
        return [json.load(open(f)) for f in sorted(glob.glob(os.path.join(self.stats_dir, "*.json")))]


def check(job, *, min_accuracy=0.9, **expected):
    """The assertions every framework job shares (see the module docstring)."""
    assert job.proc.returncode == 0, job.log()
    results = job.results()
    assert sorted(results) == [0, 1], f"result files of ranks {sorted(results)}\n{job.log()}"
    target = job.target
    for rank, r in results.items():
        assert r["finished"] and r["world_size"] == 2, (r, job.log())
        assert r["backend"] == BACKEND[target], r
        assert r["param_devices"] == (["cpu"] if target == "cpu" else [f"{target}:{rank}"]), r
        assert r["accuracy"] >= min_accuracy, f"rank {rank} did not learn: {r}"
        for key, value in expected.items():
            assert str(r[key]).startswith(str(value)), (key, value, r)
    assert results[0]["checksum"] == results[1]["checksum"], "ranks ended with different parameters"
    assert results[0]["pid"] != results[1]["pid"]
    if target != "cpu":
        workers = [s for s in job.stats() if s["device_indices"]]
        assert sorted(s["device_indices"] for s in workers) == [[0], [1]], job.stats()
        for s in workers:
            reduced = s["collectives"].get("allreduce", 0)
            if target == "gcu":  # eccl reduces 64-bit values as 32-bit: transfer computes those all_reduces exactly
                reduced += s["collectives"].get("all_gather_single", 0)  # from an all_gather (patches/collectives.py)
            assert s["backend"] == BACKEND[target] and reduced > 0, s
    return results


def script(name):
    return os.path.join(SCRIPTS, name)


def torchrun(job, name):
    return job.run([sys.executable, *torchrun_standalone(2),
                    script(name), job.out])


# ------------------------------------------------------------------------ tests

@pytest.mark.parametrize("mixed_precision", ["no", "fp16"])
@pytest.mark.parametrize("target", TARGETS)
def test_accelerate_launch_multi_gpu(target, mixed_precision, tmp_path):
    _require("accelerate")
    job = Job(target, tmp_path).run([
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", mixed_precision, "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), script("accelerate_train.py"), job_out(tmp_path)])
    check(job, distributed_type=f"DistributedType.{ACCELERATE_TYPE[target]}", mixed_precision=mixed_precision,
          model_class="DistributedDataParallel")


def test_accelerate_no_trainer_example_on_an_npu_machine(tmp_path):
    """accelerate's ``*_no_trainer.py`` style (gradient accumulation, the scheduler and both loaders prepared,
    ``gather_for_metrics``, ``save_state``) launched with ``--multi_gpu`` under transfer on the npu stand-in:
    accelerate finds torch_npu (MULTI_NPU), hccl underneath, both ranks finish, the evaluation gathered over
    both ranks counts the evaluation set once. The job's path holds torch_npu only, as a machine with Ascend
    cards does (`conftest.vendor_path`); the control below is what all stand-ins on one path did."""
    _require("accelerate")
    out = job_out(tmp_path)
    job = Job("npu", tmp_path).run([
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), script("accelerate_no_trainer.py"), out])
    results = check(job, distributed_type="DistributedType.MULTI_NPU", model_class="DistributedDataParallel",
                    device="npu")
    for r in results.values():  # 512 samples, 2 ranks, batches of 16, 2 accumulation steps, 3 epochs
        assert r["seen"] == 200 and r["completed_steps"] == 24, r
    assert os.path.exists(os.path.join(out, "model.pt")) and os.listdir(os.path.join(out, "state")), job.log()


def test_control_every_standin_on_one_path_breaks_accelerate(tmp_path):
    """Why the jobs above take a one-vendor path: with all of tests/vendors on it, accelerate imports torch_mlu (or
    torch_sdaa) beside torch_npu (its device probes import every plug-in they find), which no machine has and the stand-ins
    refuse, as real plug-ins would fight over PrivateUse1."""
    _require("accelerate")
    env = dict(Job("npu", tmp_path).env(), PYTHONPATH=VENDORS)
    proc = subprocess.run([sys.executable, "-c", "from accelerate import Accelerator; Accelerator()"], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    # the first other plug-in accelerate probes: torch_mlu (before the mlu stand-in joined, torch_sdaa)
    assert re.search(r"cannot import torch_\w+: this process already imported torch_npu", proc.stderr), proc.stderr


# Both spellings users write, alternating over the targets (a Lightning job costs ~40 s here).
LIGHTNING_ACCELERATOR = {"cpu": "gpu", "npu": "cuda", "sdaa": "gpu", "gcu": "cuda"}


@pytest.mark.parametrize("target", TARGETS)
def test_lightning_trainer_ddp_16_mixed(target, tmp_path):
    _require("pytorch_lightning")
    job = Job(target, tmp_path)
    job.run([sys.executable, script("lightning_train.py"), job.out, LIGHTNING_ACCELERATOR[target], "16-mixed"])
    check(job, device="cuda")  # Lightning knows no vendor: its CUDA path


@pytest.mark.parametrize("target", TARGETS)
def test_mmengine_runner_pytorch_launcher(target, tmp_path):
    _require("mmengine")
    job = torchrun(Job(target, tmp_path), "mmengine_train.py")
    check(job, wrapper="MMDistributedDataParallel", framework_device=MMENGINE_DEVICE[target])


@pytest.mark.parametrize("target", TARGETS)
def test_transformers_trainer_tiny_gpt2(target, tmp_path):
    _require("transformers")
    job = torchrun(Job(target, tmp_path), "transformers_train.py")
    results = check(job, min_accuracy=0.8, framework_device=TRANSFORMERS_DEVICE[target])
    for r in results.values():
        assert r["tied"] and r["tied_storage"], f"GPT-2's tied embeddings came apart: {r}"


def test_transformers_trainer_without_torchrun_on_the_visible_device(tmp_path):
    """`python train.py` (no launcher) with CUDA_VISIBLE_DEVICES=0, as a user picks one GPU: the Trainer
    sees one device (n_gpu 1, no DataParallel) and takes 64 steps of 16, as on one GPU. Before the cpu
    target read the variable it saw 2 devices (DataParallel, 32 steps of 32)."""
    _require("transformers")
    job = Job("cpu", tmp_path)
    env = dict(job.env(), CUDA_VISIBLE_DEVICES="0")
    env.pop("TRANSFER_CPU_DEVICES", None)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, script("transformers_train.py"), job_out(tmp_path)], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    print(f"cpu: rc {proc.returncode} in {time.monotonic() - start:.0f}s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = job.results()[0]
    assert r["finished"] and r["world_size"] == 1 and r["param_devices"] == ["cpu"], r
    assert r["n_gpu"] == 1 and r["steps"] == 64 and r["framework_device"] == "cuda:0", r
    assert r["accuracy"] >= 0.8 and r["tied"], r


def test_transformers_device_map_auto_loads_on_device_zero(tmp_path):
    """from_pretrained(device_map="auto"), TRL's default: transformers resolves it to {"": 0} and its
    caching_allocator_warmup calls torch.device(0), which a CPU-only build of torch refused. Loaded,
    the model computes what the same weights compute without a device map."""
    _require("transformers")
    job = Job("cpu", tmp_path)
    proc = subprocess.run([sys.executable, script("transformers_device_map.py"), str(tmp_path / "model")],
                          env=job.env(), cwd=str(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["cuda_available"] and result["param_devices"] == ["cpu"], result
    assert set(result["device_map"].values()) <= {"0", "cuda:0"}, result
    assert result["max_diff"] <= 1e-5, result


@pytest.mark.parametrize("target", TARGETS)
def test_deepspeed_zero1(target, tmp_path):
    _require("deepspeed")
    job = torchrun(Job(target, tmp_path), "deepspeed_train.py")
    check(job, zero_stage=1, framework_device=DEEPSPEED_DEVICE[target])
    if target != "cpu":  # ZeRO gathers the updated partitions
        assert all(s["collectives"].get("all_gather_single", 0) > 0 for s in job.stats() if s["device_indices"])


def test_control_accelerate_without_transfer_runs_undistributed(tmp_path):
    """What a user without the shim gets on a machine without CUDA: `accelerate launch --multi_gpu`
    exits 0, but accelerate reports DistributedType.NO and never wraps the model in DDP: each
    process trains alone on the whole data set (no gradient is ever exchanged)."""
    _require("accelerate")
    job = Job("cpu", tmp_path).run([
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), script("accelerate_train.py"), job_out(tmp_path)],
        transfer=False)
    assert job.proc.returncode == 0, job.log()
    results = job.results()
    assert sorted(results) == [0, 1], job.log()
    for r in results.values():
        assert r["distributed_type"] == "DistributedType.NO" and r["model_class"] == "Sequential", r
        assert r["backend"] not in BACKEND.values(), r


def job_out(tmp_path):
    return os.path.join(str(tmp_path), "out")


def test_transformers_takes_flash_attention_2_and_computes_what_sdpa_computes(tmp_path):
    """transformers' own check finds flash-attention 2 (`is_flash_attn_2_available()`: the package, its
    distribution name and version, CUDA available), a LLaMA built with attn_implementation=
    "flash_attention_2" runs through transfer's flash_attn (the varlen path for a padded batch) and its
    logits equal the same weights under "sdpa" to bfloat16's precision, as both are exact attention on CUDA."""
    _require("transformers")
    import transfer

    job = Job("cpu", tmp_path)
    proc = subprocess.run([sys.executable, script("transformers_flash_attention.py")], env=job.env(), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["available"] is True and result["implementation"] == "flash_attention_2", result
    served = os.path.join(os.path.dirname(os.path.abspath(transfer.__file__)), "dropins")
    assert os.path.abspath(result["flash_attn"]).startswith(served + os.sep), result  # transfer's, not a wheel
    assert result["max_diff"] <= 0.02 * max(1.0, result["scale"]), result  # bfloat16: 8 bits of mantissa
