"""Hogwild: one model on the device, ``model.share_memory()``, spawned ``mp.Process`` workers training it.

pytorch/examples' mnist_hogwild (``scripts/idioms/mnist_hogwild``) with ``--cuda``: on CUDA ``share_memory()``
leaves CUDA tensors where they are and they reach the workers through CUDA IPC, so the workers train the
parent's own parameters and the parent, which never trains, tests a trained model. Asserted from outside:
the workers finished, the parent's test accuracy is far above chance (10 classes), the parameters stayed on
the device, no shared-memory segment outlived the job. Where the vendor shares no device memory between
processes the run stops at the first ``p.start()`` with transfer's error naming why and what to use.

What torch_npu itself does, per torch version, is read in its wheels (tests/vendors/torch_npu/_ipc.py has the
table); `test_npu_standin_shares_memory_as_torch_npu_does` holds the stand-in to it.
"""

import glob
import json
import os
import re

import pytest
import torch

from conftest import NO_STANDINS, SCRIPTS, STANDINS, clean_env, needs_standins, python, target_env, vendor_path

HOGWILD = os.path.join(SCRIPTS, "idioms", "mnist_hogwild", "main.py")
TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
#: torch_npu's wheels (pip download torch_npu==<v>): Module.share_memory refused for npu parameters in
#: torch_npu <= 2.12.0 (torch_npu/utils/unsupport_api.py), Tensor.share_memory_ and is_shared too in
#: 2.3.1-2.6.0; npu IPC (torch_npu/multiprocessing/reductions.py) in 2.1.0.post17 and from 2.7.1.
NPU_REFUSES_MODULE = TORCH < (2, 13)
NPU_REFUSES_TENSOR = (2, 3) <= TORCH < (2, 7)
NPU_HAS_IPC = not (2, 3) <= TORCH < (2, 7)


def _segments():
    return set(glob.glob("/dev/shm/sim_accel_*"))


STANDIN_PROBE = r"""
import json, sys, torch, torch_npu
import torch.multiprocessing as mp

def bump(t):
    t.add_(1)

if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    out = {}
    model = torch.nn.Linear(2, 2).to("npu:1")
    for name, call in (("module", lambda: model.share_memory()), ("tensor", lambda: model.weight.share_memory_()),
                       ("is_shared", lambda: model.weight.is_shared())):
        try:
            call()
            out[name] = "ok"
        except RuntimeError as exc:
            out[name] = str(exc)
    t = torch.zeros(3, device="npu:1")
    p = mp.Process(target=bump, args=(t,))
    try:
        p.start()
        p.join()
        out["ipc"] = [p.exitcode, t.tolist(), str(t.device)]
    except RuntimeError as exc:
        out["ipc"] = str(exc)
    cpu = torch.zeros(2).share_memory_()
    out["cpu_shared"] = cpu.is_shared()
    print(json.dumps(out))
"""


@needs_standins
@pytest.mark.standins
def test_npu_standin_shares_memory_as_torch_npu_does(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(STANDIN_PROBE)
    before = _segments()
    proc = python(str(script), env=clean_env(PYTHONPATH=vendor_path("npu")), timeout=900)  # a first build included
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    refusal = (r"<function Module\.{} at 0x[0-9a-f]+> is not supported in npu\.\n"
               r"\[ERROR\] \S+ \(PID:\d+, Device:-?\d+, RankID:-?\d+\) ERR00007 PTA feature not supported$")
    if NPU_REFUSES_MODULE:
        assert re.match(refusal.format("share_memory"), out["module"]), out
    else:
        assert out["module"] == "ok", out
    if NPU_REFUSES_TENSOR:
        assert re.match(refusal.replace("Module", "Tensor").format("share_memory_"), out["tensor"]), out
        assert re.match(refusal.replace("Module", "Tensor").format("is_shared"), out["is_shared"]), out
    if NPU_HAS_IPC:  # the child wrote into the parent's npu memory
        assert out["ipc"] == [0, [1.0, 1.0, 1.0], "npu:1"], out
    else:  # torch's CPU path, as with no IPC at all
        assert "_share_fd_: only available on CPU" in out["ipc"], out
    assert out["cpu_shared"] is True
    assert _segments() <= before  # the sender unlinked what it shared


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", *(pytest.param(v, marks=pytest.mark.skipif(not STANDINS, reason=NO_STANDINS))
                                              for v in ("npu", "sdaa", "gcu"))])
def test_mnist_hogwild_with_cuda(target, tmp_path):
    stats = tmp_path / "stats"
    before = _segments()
    proc = python(HOGWILD, "--cuda", "--lr", "0.05", "--epochs", "1", env=target_env(target, SIM_ACCEL_STATS_DIR=stats),
                  timeout=900, check=False)
    device = "cpu" if target == "cpu" else f"{target}:0"
    if target == "npu" and NPU_HAS_IPC or target == "cpu":
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert sorted(re.findall(r"worker (\d): done, parameters on (\S+)", proc.stdout)) == \
            [("0", device), ("1", device)], proc.stdout
        assert f"parent: workers exited [0, 0], parameters on {device}" in proc.stdout, proc.stdout
        correct, total = map(int, re.search(r"Accuracy: (\d+)/(\d+)", proc.stdout).groups())
        # chance is 1 in 10, and the parent never trains: only its workers' updates make it better
        assert correct >= 0.5 * total, f"the parent's model did not learn from its workers: {correct}/{total}"
        if target != "cpu":  # the parent and both workers worked on npu:0
            records = [json.load(open(f)) for f in glob.glob(str(stats / "*.json"))]
            assert sorted(r["device_indices"] for r in records) == [[0], [0], [0]], records
    else:  # no IPC: transfer's error at the first p.start(), not torch's from its CPU path
        assert proc.returncode != 0 and "worker" not in proc.stdout, proc.stdout
        assert (f"UnsupportedCudaAPI: a tensor on {device} cannot be sent to another process: torch_{target} "
                in proc.stderr), proc.stderr
        assert "Keep the shared model on the CPU" in proc.stderr and "_share_fd_" not in proc.stderr, proc.stderr
    assert _segments() <= before
