"""Device arguments the way trainers write them, on the cpu target and the vendors'.

CUDA is the oracle: on a CUDA build ``torch.device(0)`` is ``cuda:0``; ``torch.cuda.set_device``
and the device queries take a ``torch.cuda.device`` object (torch's ``_get_device_index`` reads
its ``idx``); ``CUDA_VISIBLE_DEVICES`` decides how many devices ``torch.cuda.device_count()``
reports, in the CUDA runtime's reading (the list ends at the first entry that names no device).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import VENDORS, clean_env, needs_standins, script_beside_a_library

#: torch >= 2.6 reads an int device as the accelerator's (a vendor's plug-in is the accelerator); before, as CUDA's.
INT_IS_ACCELERATORS = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 6)


def _native_int_device():
    try:
        return repr(torch.device(0))
    except RuntimeError as exc:
        return f"RuntimeError: {exc}"


def test_torch_device_int_is_cuda_as_on_a_cuda_build(install_cpu):
    """transformers' device_map="auto" -> {"": 0}, and every `torch.device(local_rank)`: cuda:N, as a
    CUDA build answers; torch's own errors for the rest; uninstall gives torch's own answer back."""
    import transfer

    transfer.uninstall()
    native = _native_int_device()
    install_cpu()
    assert torch.device(0) == torch.device("cuda", 0) and torch.device(1) == torch.device("cuda", 1)
    assert isinstance(torch.device(0), torch.device) and type(torch.device(0)) is torch.device
    assert torch.device("cpu").type == "cpu" and torch.device("cuda", 3).index == 3
    with pytest.raises(RuntimeError, match="Device index must not be negative"):
        torch.device(-1)
    with pytest.raises(TypeError):
        torch.device(True)  # torch refuses a bool as an index
    with pytest.raises(RuntimeError, match="Expected one of"):
        torch.device("CUDA:0")
    assert torch.zeros(2, device=torch.device(0)).device.type == "cpu"  # the device a CUDA tensor is here
    transfer.uninstall()
    assert _native_int_device() == native


def test_torch_device_int_in_a_child_on_a_cpu_only_build():
    """The issue's one-liner, as a user runs it."""
    code = "import torch; print(repr(torch.device(0)), repr(torch.device(7)))"
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET="1"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["device(type='cuda',", "index=0)", "device(type='cuda',", "index=7)"], proc.stdout


class ParallelContext:
    """huggingface/nanotron's ParallelContext.set_device, as written there."""

    def __init__(self):
        self.set_device()

    def set_device(self):
        local_rank = int(os.getenv("LOCAL_RANK", "0"))
        # `torch.cuda.device_count` should return the number of device on a single node.
        device_id = local_rank
        torch.cuda.set_device(torch.cuda.device(device_id))


def test_cuda_device_objects_as_device_arguments(install_cpu, monkeypatch):
    install_cpu(TRANSFER_CPU_DEVICES=2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    ParallelContext()
    assert torch.cuda.current_device() == 1
    one, zero = torch.cuda.device(1), torch.cuda.device(0)
    with torch.cuda.device(zero):
        assert torch.cuda.current_device() == 0
    assert torch.cuda.current_device() == 1
    assert torch.cuda.get_device_name(zero) == torch.cuda.get_device_name(0)
    assert torch.cuda.get_device_properties(one).name == torch.cuda.get_device_properties(1).name
    assert torch.cuda.memory_allocated(one) == torch.cuda.memory_allocated(1)
    torch.cuda.synchronize(zero)
    torch.cuda.set_device(zero)
    assert torch.cuda.current_device() == 0
    with pytest.raises(Exception, match="invalid device ordinal|Invalid device"):
        torch.cuda.set_device(5)


@pytest.mark.parametrize("value, count", [("0", 1), ("1,0", 2), ("0,1,2", 3), ("2,x,3", 1), ("0,0", 1),
                                          ("GPU-8a7b,GPU-9c1d", 2), ("", 2), ("-1", 2)])
def test_cuda_visible_devices_sets_the_device_count(install_cpu, monkeypatch, value, count):
    """Count (and CUDA's reading of the list); an empty list, which hides GPUs, keeps the default."""
    install_cpu(TRANSFER_CPU_DEVICES=None, LOCAL_WORLD_SIZE=None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert torch.cuda.device_count() == count
    torch.cuda.set_device(count - 1)
    with pytest.raises(Exception, match="invalid device ordinal"):
        torch.cuda.set_device(count)


def test_transfer_cpu_devices_wins_over_cuda_visible_devices(install_cpu, monkeypatch):
    install_cpu(TRANSFER_CPU_DEVICES=3, LOCAL_WORLD_SIZE=None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert torch.cuda.device_count() == 3
    monkeypatch.delenv("TRANSFER_CPU_DEVICES")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert torch.cuda.device_count() == 1  # as on CUDA: torchrun's workers see the listed devices


@needs_standins
@pytest.mark.parametrize("vendor", ["npu", "sdaa", "gcu"])
def test_vendor_targets_int_devices_and_cuda_device_objects(vendor):
    """torch.device(0) is cuda:0 to the script, as on CUDA (torch's accelerator is the vendor's plug-in, whose
    device torch >= 2.6 answers alone); a torch.cuda.device object is a device argument there too."""
    code = ("import torch\n"
            "print(torch.device(0), torch.device(1))\n"
            "torch.cuda.set_device(torch.cuda.device(1))\n"
            "print(torch.cuda.current_device(), torch.cuda.memory_allocated(torch.cuda.device(0)))\n")
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["cuda:0", "cuda:1", "1", "0"], proc.stdout


def test_a_cuda_device_mesh_is_the_cpu_targets_and_uninstall_restores_it(install_cpu, monkeypatch):
    """DeviceMesh('cuda') / init_device_mesh('cuda'): the mesh FSDP2 and DTensor place shards by is the
    target's (torch's CPU mesh here); other device types are left alone; uninstall gives torch's back.
    (The 2-rank jobs, process groups included: tests/frameworks/test_engines_fsdp.py.)"""
    import transfer

    device_mesh = pytest.importorskip("torch.distributed.device_mesh", reason="torch < 2.2 has no device_mesh")
    DeviceMesh = device_mesh.DeviceMesh
    monkeypatch.setattr(device_mesh, "get_rank", lambda *args: 0, raising=False)  # rank 0, no process group

    transfer.uninstall()
    native = DeviceMesh.__init__
    install_cpu()
    assert DeviceMesh.__init__ is not native
    assert DeviceMesh("cuda", [0], _init_backend=False).device_type == "cpu"
    assert DeviceMesh(device_type="cuda", mesh=[0], _init_backend=False).device_type == "cpu"
    assert DeviceMesh("meta", [0], _init_backend=False).device_type == "meta"
    transfer.uninstall()
    assert DeviceMesh.__init__ is native
    assert DeviceMesh("cuda", [0], _init_backend=False).device_type == "cuda"


DEVICE_MAP_SCRIPT = """\
import os
import torch
import devlib  # a library, installed under site-packages

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
device_map = {"": local_rank}  # what transformers' device_map="auto" resolves to on one GPU
device = torch.device(device_map[""])
print("device", device, device == torch.device("cuda", local_rank), device.type == "cuda")
model = torch.nn.Linear(4, 2).to(device)
print("parameters", next(model.parameters()).device)
print("library", devlib.device(1))


def shifted(x):
    return x + (1 if torch.device(local_rank) == torch.device("cuda", local_rank) else 2)


x = torch.zeros(2, device=device)
print("compiled", shifted(x).tolist(), torch.compile(shifted, backend="eager", fullgraph=True)(x).tolist())
import transfer
transfer.uninstall()
torch._dynamo.reset()
print("uninstalled", torch.device(0), devlib.device(1), torch.compile(shifted, backend="eager", fullgraph=True)(x).tolist())
"""


@needs_standins
@pytest.mark.standins
def test_a_device_map_int_device_is_cudas_to_the_script_on_npu(tmp_path):
    """A `device_map`-style int device compared with a CUDA device, as a trainer writes it: on CUDA
    torch.device(0) == torch.device("cuda", 0). On npu the script sees the same in eager and compiled code (and the
    model still lands on npu:0); a library keeps the plug-in's answer, and uninstall gives torch's back."""
    out = script_beside_a_library(tmp_path, DEVICE_MAP_SCRIPT,
                                  "import torch\n\ndef device(index):\n    return torch.device(index)\n")
    native = "npu" if INT_IS_ACCELERATORS else "cuda"  # the plug-in alone: torch's own answer
    assert out.splitlines() == ["device cuda:0 True True", "parameters npu:0", f"library {native}:1",
                                "compiled [1.0, 1.0] [1.0, 1.0]",
                                f"uninstalled {native}:0 {native}:1 " + ("[2.0, 2.0]" if native == "npu" else "[1.0, 1.0]")
                                ], out

