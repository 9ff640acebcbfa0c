"""The same unmodified CUDA script (moves and random streams) on the cpu target and every stand-in.

Through the environment way in it gives the answers CUDA gives (tests/oracle/cuda_recorded.json for the moves and the
seeding; torch's documentation for the rest).
"""

import json
import os

import pytest

from conftest import NO_STANDINS, STANDINS, VENDORS, clean_env, python


CUDA_SCRIPT = r'''
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

out = {}
x = torch.arange(4.0)
moved = [x.cuda(), x.to("cuda"), x.to("cuda:0", non_blocking=True), x.to(device="cuda"), x.pin_memory(),
         torch.as_tensor(x, device="cuda")]
for y in moved:
    y.add_(1)
out["host_after_moves"] = x.tolist()
model = nn.Linear(2, 2)
data = model.weight.data
before = data.tolist()
model.cuda()
with torch.no_grad():
    model.weight.mul_(0)
out["host_weights_unchanged"] = data.tolist() == before

torch.manual_seed(0)
plain = torch.randperm(10).tolist()
torch.manual_seed(0)
torch.cuda.manual_seed(123)
torch.cuda.manual_seed_all(5)
torch.randn(100, device="cuda")
torch.randint(0, 10, (5,), device="cuda")
F.dropout(torch.ones(64, device="cuda"), 0.5)
out["cpu_stream_kept"] = torch.randperm(10).tolist() == plain
torch.cuda.manual_seed(3)
a = torch.rand(5, device="cuda")
torch.cuda.manual_seed(3)
out["device_seed_repeats"] = torch.equal(a, torch.rand(5, device="cuda"))
torch.manual_seed(7)
torch.cuda.manual_seed(5)
out["initial_seeds"] = [torch.initial_seed(), torch.cuda.initial_seed()]
print("RESULT " + json.dumps(out))
'''

CUDA_ANSWERS = {"host_after_moves": [0.0, 1.0, 2.0, 3.0], "host_weights_unchanged": True,
                "cpu_stream_kept": True, "device_seed_repeats": True, "initial_seeds": [7, 5]}


@pytest.mark.parametrize("target", ["cpu", *(pytest.param(v, marks=pytest.mark.slow) for v in ("npu", "sdaa", "gcu"))])
def test_cuda_script_moves_and_streams(target, tmp_path):
    """A CUDA script, unmodified, through the environment way in: the answers CUDA gives
    [recorded on a GPU for the moves and the seeding; torch docs for the rest]. The stand-ins are real
    devices, so they copy and keep separate generators natively: they show the same answers."""
    if target != "cpu" and not STANDINS:
        pytest.skip(NO_STANDINS)
    script = tmp_path / "train.py"
    script.write_text(CUDA_SCRIPT)
    env = clean_env(TRANSFER_DEVICE=target, TRANSFER_QUIET=1, TRANSFER_CPU_DEVICES=2, SIM_ACCEL_DEVICE_COUNT=2)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if target != "cpu":
        env["PYTHONPATH"] = os.pathsep.join([VENDORS] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = python(str(script), env=env, timeout=600)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == CUDA_ANSWERS, proc.stderr
