"""DeepSpeed as its documentation configures it, under transfer, on the cpu target and every stand-in.

Two 2-rank jobs per target, each launched the way DeepSpeed's tutorials launch it
(``deepspeed --num_gpus 2 train.py --deepspeed --deepspeed_config ds_config.json``), with
``scripts/deepspeed_zero_train.py`` (written for CUDA, never mentioning transfer):

* ZeRO-3 (``ds_zero3_bf16.json``): ``"optimizer": {"type": "AdamW"}`` with no ``torch_adam`` (DeepSpeed
  asks its accelerator for the FusedAdam op), bf16, ``zero.Init`` with starting weights broadcast from
  rank 0 through ``GatheredParameters(modifier_rank=0)``, activation checkpointing
  (``deepspeed.checkpointing``), ``save_checkpoint`` / ``load_checkpoint`` and zero_to_fp32 (in the job,
  ``get_fp32_state_dict_from_zero_checkpoint``; for the npu job also the ``zero_to_fp32.py`` script the
  checkpoint carries, run here on a plain CPU machine: no transfer, no torch_npu).
* ZeRO-2 (``ds_zero2_offload_fp16.json``): ``offload_optimizer: {device: cpu}`` (DeepSpeedCPUAdam, the
  cpu_adam op) and fp16 with its dynamic loss scaler.

Which DeepSpeed accelerator each target gets (transfer/patches/deepspeed.py): npu and sdaa DeepSpeed's
own (its probe finds the plug-in); cpu and gcu (DeepSpeed has none for gcu) DeepSpeed's CUDA accelerator
under the target's names (``cpu``/gloo, ``gcu:N``/eccl) with transfer's FusedAdam op. Asserted from outside, from the result
files: exit 0, both ranks finished, parameters on the target device, the real backend, collectives on
each rank's own device (stand-ins' statistics), the model learned, which accelerator and which Adam
kernel ran, ZeRO-3's partitions really sharded (each rank holds half), the checkpoint reloads exactly and
converts to the fp32 weights the bf16 parameters round from, and the trained weights equal (to the
dtype's precision) those of the same job run by DeepSpeed on its CPU accelerator without transfer
(``DS_ACCELERATOR=cpu``: gloo, DeepSpeed's C++ CPU kernels; no oneCCL needed).

DeepSpeed JIT-builds its C++ CPU ops with the host compiler on first use (cpu_adam for offload; the
reference's CPU accelerator also fused_adam and shm_comm), minutes each on these machines: the jobs share
one torch-extensions folder per builder flavour under ``~/.cache/transfer-tests/`` (torch rebuilds when
sources or flags change), so a machine pays once.

Also accelerate's DeepSpeed plugin (``accelerate launch --config_file`` with ``distributed_type: DEEPSPEED``,
ZeRO-3) and the transformers Trainer with a ZeRO-3 ``deepspeed=`` config, on cpu and npu.

Not run here: ZeRO-2 offload on the npu stand-in. DeepSpeed's NPU cpu_adam builder compiles against
CANN (``$ASCEND_HOME_PATH/include``, ``-lascendcl``, ``-ltorch_npu``), which only a real Ascend host has.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import stock_exit_abort
from test_frameworks import BACKEND, Job, _require, check, script

pytestmark = pytest.mark.slow  # 2-rank DeepSpeed jobs: half a minute to minutes each

TARGETS = ["cpu", "npu", "sdaa", "gcu"]

# DeepSpeed's accelerator on each target, and the function its FusedAdam calls.
ACCELERATOR = {"cpu": "cpu", "npu": "npu", "sdaa": "sdaa", "gcu": "gcu"}
FUSED_ADAM = {"cpu": "transfer.patches.deepspeed.FusedAdamOp.multi_tensor_adam",
              "npu": "deepspeed.ops.op_builder.npu.fused_adam.NPUFusedAdam.multi_tensor_adam",  # torch._fused_adamw_
              "sdaa": "deepspeed.ops.op_builder.sdaa.fused_adam.SDAAFusedAdam.multi_tensor_adam",  # torch.ops.sdaa
              "gcu": "transfer.patches.deepspeed.FusedAdamOp.multi_tensor_adam"}

#: One torch-extensions folder per op-builder flavour (flags differ: sharing would rebuild each time).
EXTENSIONS = os.path.join(os.path.expanduser("~"), ".cache", "transfer-tests", "torch_extensions")
REFERENCE_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_site")
FLAVOUR = {"cpu": "cpu", "gcu": "cpu", "sdaa": "sdaa", "npu": "npu", "reference": "cpu"}


class DeepSpeedJob(Job):
    def env(self, transfer=True):
        env = super().env(transfer)
        env["TORCH_EXTENSIONS_DIR"] = os.path.join(EXTENSIONS, FLAVOUR[self.target if transfer else "reference"])
        if not transfer:
            env["DS_ACCELERATOR"] = "cpu"
            # float16 on DeepSpeed's CPU accelerator on any CPU (reference_site/sitecustomize.py says why)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [REFERENCE_SITE, env.get("PYTHONPATH")]))
        return env

    def launch(self, config, port, transfer=True):
        folder = self.env(transfer)["TORCH_EXTENSIONS_DIR"]
        clear_stale_locks(folder)
        # DeepSpeed JIT-builds its C++ ops in this job (the reference's CPU accelerator: fused_adam, shm_comm): minutes
        # each on 2 loaded cores
        if not transfer or not built(folder):
            self.timeout = BUILD_TIMEOUT
        return self.run([os.path.join(os.path.dirname(sys.executable), "deepspeed"), "--num_gpus", "2",
                         "--master_port", str(port), script("deepspeed_zero_train.py"), self.out,
                         "--deepspeed", "--deepspeed_config", script(config)], transfer=transfer)


#: The bound of a job that builds DeepSpeed's C++ ops first (fused_adam took over 7 minutes on CI's 2 cores beside
#: the background job's own C++ builds, 2026-11-28).
BUILD_TIMEOUT = 1200


def built(folder):
    """Whether every op folder under `folder` holds its built library (no build left to do or to finish)."""
    ops = [os.path.join(folder, d) for d in os.listdir(folder)] if os.path.isdir(folder) else []
    return bool(ops) and all(any(f.endswith(".so") for f in os.listdir(op)) for op in ops if os.path.isdir(op))


def clear_stale_locks(folder):
    """Remove the ``lock`` files a killed JIT build left in the extensions folder: torch's FileBaton waits
    for as long as one exists, so every later DeepSpeed job would hang until its timeout (CI, 2026-11-28:
    a first build killed at the job's timeout under load made every later job hang 420 s). The jobs here
    run one at a time, so a lock present before a job starts is stale."""
    for root, _, files in os.walk(folder):
        if "lock" in files:
            os.remove(os.path.join(root, "lock"))


def deepspeed_job(target, tmp_path, config, transfer=True):
    from conftest import free_port

    _require("deepspeed")
    return DeepSpeedJob(target, tmp_path).launch(config, free_port(), transfer=transfer)


_references = {}


def reference(config, tmp_path_factory):
    """The same job on DeepSpeed's CPU accelerator without transfer (run once per session and config)."""
    if config not in _references:
        try:
            job = deepspeed_job("cpu", tmp_path_factory.mktemp("reference"), config, transfer=False)
            assert job.proc.returncode == 0 or stock_exit_abort(job.proc.returncode, job.log()), job.log()
            results = job.results()
            assert sorted(results) == [0, 1] and results[0]["framework_device"] == "cpu", job.log()
        except BaseException as failed:  # each later test fails at once with this reason, not after a rerun
            _references[config] = failed
            raise
        _references[config] = job
    if isinstance(_references[config], BaseException):
        pytest.fail(f"the reference job for {config} failed earlier in this session: {_references[config]}"[:4000])
    return _references[config]


def gathered(job):
    import torch

    return torch.load(os.path.join(job.out, "gathered.pt"))


def assert_close_to(job, ref, dtype_eps):
    """Trained weights equal the reference's to the dtype's precision (a few units in the last place)."""
    import torch

    mine, theirs = gathered(job), gathered(ref)
    assert sorted(mine) == sorted(theirs)
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=4 * dtype_eps, atol=4 * dtype_eps,
                                   msg=lambda m: f"{name}: {m}")


def common(job, *, optimizer, stage, dtype):
    results = check(job, zero_stage=stage, framework_device=ACCELERATOR[job.target], optimizer=optimizer)
    for r in results.values():
        assert r["param_dtypes"] == [dtype], r
        assert r["last_loss"] < 0.1 * r["first_loss"], r
        assert r["local_rank"] == r["env_local_rank"], r  # the launcher's --local_rank and LOCAL_RANK agree
    if job.target != "cpu":  # ZeRO gathers the updated partitions on each rank's device
        assert all(s["collectives"].get("all_gather_single", 0) > 0 for s in job.stats() if s["device_indices"])
    return results


@pytest.mark.parametrize("target", TARGETS)
def test_deepspeed_zero3_fused_adamw_bf16_checkpointing(target, tmp_path, tmp_path_factory):
    job = deepspeed_job(target, tmp_path, "ds_zero3_bf16.json")
    results = common(job, optimizer="FusedAdam", stage=3, dtype="torch.bfloat16")
    for rank, r in results.items():
        assert r["optimizer_step"] == FUSED_ADAM[target], r
        # ZeRO-3: each rank keeps its half of every parameter between steps, on its device, nothing else.
        assert r["partition_numel"] == r["total_numel"] // 2 == 4996 // 2, r
        assert r["resident_numel"] == 0, r
        assert r["partition_devices"] == (["cpu"] if target == "cpu" else [f"{target}:{rank}"]), r
        assert r["hidden_forwards"] == 2 * r["steps"], f"activation checkpointing did not recompute: {r}"
        assert r["moved"] and r["loaded_equal"], f"load_checkpoint did not restore the saved weights: {r}"
    if target != "cpu":  # gradients reduce-scattered to their partitions; rank 0's starting weights broadcast
        for s in (s for s in job.stats() if s["device_indices"]):
            assert s["collectives"].get("reduce_scatter_single", 0) > 0 and s["collectives"].get("broadcast", 0) > 0, s
    r0 = results[0]
    assert r0["zero_to_fp32_keys_equal"] and r0["zero_to_fp32_dtypes"] == ["torch.float32"], r0
    assert r0["zero_to_fp32_max_diff"] <= 2 ** -8 * 8, r0  # fp32 masters round to the bf16 parameters

    assert_close_to(job, reference("ds_zero3_bf16.json", tmp_path_factory), 2 ** -8)
    if target == "npu":  # the script once (its function ran in every job above): 10-50 s here
        converted_on_a_plain_cpu(job, tmp_path)


def converted_on_a_plain_cpu(job, tmp_path):
    """The zero_to_fp32.py script the checkpoint carries, run on a machine without transfer or the vendor's
    plug-in: float32 weights that round exactly to the trained bf16 parameters."""
    import torch

    converted = os.path.join(str(tmp_path), "fp32")
    proc = subprocess.run([sys.executable, os.path.join(job.out, "ckpt", "zero_to_fp32.py"),
                           os.path.join(job.out, "ckpt"), converted, "--tag", "trained"],
                          env=DeepSpeedJob("cpu", tmp_path / "convert").env(transfer=False), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fp32 = torch.load(os.path.join(converted, "pytorch_model.bin"))
    trained = gathered(job)
    assert sorted(fp32) == sorted(trained)
    for name, value in fp32.items():
        assert value.dtype == torch.float32
        assert torch.equal(value.to(torch.bfloat16).float(), trained[name]), name


OFFLOAD_TARGETS = ["cpu", "sdaa", "gcu"]  # npu: DeepSpeed's NPU cpu_adam builds against CANN (module docstring)


@pytest.mark.parametrize("target", OFFLOAD_TARGETS)
def test_deepspeed_zero2_offload_optimizer_cpu_fp16(target, tmp_path, tmp_path_factory):
    job = deepspeed_job(target, tmp_path, "ds_zero2_offload_fp16.json")
    results = common(job, optimizer="DeepSpeedCPUAdam", stage=2, dtype="torch.float16")
    for r in results.values():
        assert r["master_devices"] == ["cpu"], f"optimizer state not offloaded to the host: {r}"
        assert r["loss_scale"] is not None and r["loss_scale"] > 1, r  # the dynamic loss scaler ran
        assert r["moved"] and r["loaded_equal"], r
    assert_close_to(job, reference("ds_zero2_offload_fp16.json", tmp_path_factory), 2 ** -10)


def test_deepspeed_npu_builder_without_cann_names_set_env(tmp_path):
    """DeepSpeed's NPU op builders read ASCEND_HOME_PATH (CANN's set_env.sh sets it on every Ascend host);
    without it DeepSpeed dies with KeyError: 'ASCEND_HOME_PATH'. Under transfer: an error naming set_env.sh."""
    _require("deepspeed")
    job = Job("npu", tmp_path)
    env = job.env()
    env.pop("ASCEND_HOME_PATH")
    proc = subprocess.run([sys.executable, "-c", "import torch\n"
                           "from deepspeed.ops.adam import FusedAdam\n"
                           "FusedAdam([torch.nn.Parameter(torch.ones(2).cuda())])\n"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "CannNotSourced" in proc.stderr and "set_env.sh" in proc.stderr, proc.stderr[-3000:]
    assert "KeyError" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("target", TARGETS)
def test_accelerate_launch_deepspeed_plugin_zero3(target, tmp_path):
    """accelerate's DeepSpeed plugin (``accelerate launch --config_file`` with ``distributed_type: DEEPSPEED``,
    ZeRO-3) over the same classifier script as the DDP jobs: accelerate wraps the model in DeepSpeed's engine,
    which trains over the target's backend on the target's devices."""
    from conftest import free_port

    _require("accelerate")
    _require("deepspeed")
    job = DeepSpeedJob(target, tmp_path).run([
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", script("accelerate_deepspeed_zero3.yaml"),
        "--main_process_port", str(free_port()), script("accelerate_train.py"), os.path.join(str(tmp_path), "out")])
    check(job, distributed_type="DistributedType.DEEPSPEED", model_class="DeepSpeedEngine")


@pytest.mark.parametrize("target", TARGETS)
def test_transformers_trainer_deepspeed_zero3(target, tmp_path):
    """The transformers Trainer with a DeepSpeed ZeRO-3 config (``deepspeed=``, DeepSpeed's AdamW with the
    Trainer's "auto" values) on a tiny GPT-2 with tied embeddings, under torchrun."""
    from test_frameworks import torchrun

    _require("transformers")
    _require("deepspeed")
    job = torchrun(DeepSpeedJob(target, tmp_path), "transformers_deepspeed_train.py")
    results = check(job, min_accuracy=0.8, wrapper="DeepSpeedEngine", zero_stage=3)
    for r in results.values():
        assert r["tied"] and r["tied_storage"], f"GPT-2's tied embeddings came apart: {r}"
