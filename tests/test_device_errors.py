"""A malformed CUDA device string raises torch's own error at every position transfer translates.

Each position (Tensor.to, factories, Module.to, torch.cuda.*, autocast, DDP's device_ids...) raises,
for each malformed string, the exception torch.device raises natively (type and message): on the cpu
target here, on the npu stand-in in a subprocess. ``x.cuda('cpu')`` raises CUDA's "Invalid device".
"""

import os
import warnings

import pytest
import torch
import torch.nn as nn

from conftest import ROOT, VENDORS, clean_env, needs_standins, python
from test_device_grammar import MALFORMED, torch_verdict


def _native_autocast(text):
    """What torch's own autocast raises for device_type `text` (torch 2.0 words it otherwise than torch.device)."""
    import transfer

    autocast = torch.amp.autocast_mode.autocast
    transfer._active.registry.get_original(autocast, "__init__")(autocast.__new__(autocast), text)


def positions():
    """(name, call taking one device argument, the native call whose error is CUDA's: torch.device)."""
    x = torch.arange(4.0)
    return [
        ("Tensor.to", lambda d: x.to(d), torch.device),
        ("Tensor.to(device=)", lambda d: x.to(device=d, dtype=torch.float64), torch.device),
        ("Tensor.cuda", lambda d: x.cuda(d), torch.device),
        ("Tensor.new_zeros", lambda d: x.new_zeros(2, device=d), torch.device),
        ("torch.zeros", lambda d: torch.zeros(2, device=d), torch.device),
        ("torch.tensor", lambda d: torch.tensor([1.0], device=d), torch.device),
        ("Module.to", lambda d: nn.Linear(2, 2).to(d), torch.device),
        ("torch.Generator", lambda d: torch.Generator(d), torch.device),
        ("with torch.device", lambda d: torch.utils._device.DeviceContext(d), torch.device),
        ("torch.cuda.set_device", lambda d: torch.cuda.set_device(d), torch.device),
        ("torch.cuda.device", lambda d: torch.cuda.device(d), torch.device),
        ("torch.cuda.get_device_name", lambda d: torch.cuda.get_device_name(d), torch.device),
        ("torch.cuda.synchronize", lambda d: torch.cuda.synchronize(d), torch.device),
        ("torch.autocast", lambda d: torch.autocast(d), _native_autocast),
    ]


def check_positions():
    """Each position raises, for each malformed string, the exception (type and message) torch raises natively."""
    wrong = []
    for text in MALFORMED:
        for name, call, native in positions():
            try:
                native(text)
            except Exception as exc:
                want = exc
            else:
                raise AssertionError(f"torch accepts {text!r} in {name}")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    call(text)
            except Exception as exc:
                if type(exc) is not type(want) or str(exc) != str(want):
                    wrong.append(f"{name}({text!r}): {type(exc).__name__}: {exc}")
            else:
                wrong.append(f"{name}({text!r}): accepted")
    return wrong


def test_every_position_raises_torchs_error_on_the_cpu_target(cpu_target):
    assert check_positions() == []


def cuda_of_another_device():
    """x.cuda('cpu') and x.cuda('meta'): CUDA's C method raises "Invalid device, must be cuda device"."""
    x = torch.ones(1)
    out = []
    for other in ("cpu", torch.device("cpu"), "meta"):
        try:
            x.cuda(other)
            out.append("accepted")
        except RuntimeError as exc:
            out.append(str(exc))
    return out


def test_cuda_of_another_device_raises_on_the_cpu_target(cpu_target):
    assert cuda_of_another_device() == ["Invalid device, must be cuda device"] * 3


def test_ddp_device_ids_raise_torchs_error_on_the_cpu_target(cpu_target, tmp_path):
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        for text in ["CUDA:0", "cuda:01"]:
            with pytest.raises(RuntimeError) as raised:
                nn.parallel.DistributedDataParallel(nn.Linear(2, 2).cuda(), device_ids=[text])
            assert str(raised.value) == str(torch_verdict(text))
    finally:
        dist.destroy_process_group()


STANDIN_POSITIONS = """
import sys
sys.path.insert(0, {tests!r})
import torch, transfer
transfer.install("npu")
import test_device_errors as t
print("WRONG", t.check_positions())
print("OTHER", t.cuda_of_another_device())
x = torch.ones(1)
print("WRAPPED", x.to("cuda:256").device, x.to("cuda:1").device)
"""


@needs_standins
def test_every_position_raises_torchs_error_on_the_npu_stand_in():
    env = clean_env(PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET=1, SIM_ACCEL_DEVICE_COUNT=2)
    proc = python("-c", STANDIN_POSITIONS.format(tests=os.path.join(ROOT, "tests")), env=env, timeout=300)
    assert "WRONG []" in proc.stdout, proc.stdout + proc.stderr
    assert "WRAPPED npu:0 npu:1" in proc.stdout  # torch.device('cuda:256') is cuda:0
    assert f"OTHER {['Invalid device, must be cuda device'] * 3}" in proc.stdout
