"""A device ordinal past the device count raises as on CUDA (InvalidDeviceError, a RuntimeError).

On the cpu target (TRANSFER_CPU_DEVICES) and on the npu stand-in: get_device_name(3), x.cuda(4),
Generator('cuda:4'), Module.to('cuda:4')...; a negative set_device selects nothing and set_device
without an index raises CUDA's ValueError, as natively.
"""

import os

import pytest
import torch

from conftest import ROOT, VENDORS, clean_env, needs_standins, python
from transfer.devices import InvalidDeviceError


BAD_ORDINALS = {
    "get_device_name(3)": lambda x: torch.cuda.get_device_name(3),
    "get_device_properties(6)": lambda x: torch.cuda.get_device_properties(6),
    "get_device_capability(-1)": lambda x: torch.cuda.get_device_capability(-1),
    "synchronize(5)": lambda x: torch.cuda.synchronize(5),
    "memory_allocated(5)": lambda x: torch.cuda.memory_allocated(5),
    "mem_get_info(5)": lambda x: torch.cuda.mem_get_info(5),
    "x.cuda(-1)": lambda x: x.cuda(-1),
    "x.cuda(4)": lambda x: x.cuda(4),
    "x.to('cuda:4')": lambda x: x.to("cuda:4"),
    "x.to(-2)": lambda x: x.to(-2),
    "x.to(device=cuda:4)": lambda x: x.to(device=torch.device("cuda", 4)),
    "x.new_zeros(device='cuda:4')": lambda x: x.new_zeros(1, device="cuda:4"),
    "zeros(device='cuda:4')": lambda x: torch.zeros(1, device="cuda:4"),
    "zeros(device=-1)": lambda x: torch.zeros(1, device=-1),
    "with torch.device('cuda', 4)": lambda x: torch.device("cuda", 4).__enter__(),
    "set_device(4)": lambda x: torch.cuda.set_device(4),
    "with torch.cuda.device(4)": lambda x: torch.cuda.device(4).__enter__(),
    "Generator('cuda:4')": lambda x: torch.Generator("cuda:4"),
    "Module.to('cuda:4')": lambda x: torch.nn.Linear(1, 1).to("cuda:4"),
}


@pytest.mark.parametrize("call", sorted(BAD_ORDINALS))
def test_bad_ordinals_raise_as_on_cuda(install_cpu, call):
    install_cpu(TRANSFER_CPU_DEVICES=2)
    with pytest.raises(InvalidDeviceError) as error:
        BAD_ORDINALS[call](torch.ones(2))
    assert isinstance(error.value, RuntimeError) and isinstance(error.value, AssertionError)
    message = str(error.value)
    assert "has 2 device(s)" in message and "TRANSFER_CPU_DEVICES" in message, message


def test_negative_set_device_selects_nothing_as_on_cuda(install_cpu):
    install_cpu(TRANSFER_CPU_DEVICES=2)
    torch.cuda.set_device(1)
    torch.cuda.set_device(-1)
    with torch.cuda.device(-1):
        assert torch.cuda.current_device() == 1
    assert torch.cuda.get_device_name(1) and torch.ones(1).cuda(1).device.type == "cpu"
    torch.cuda.set_device(0)


def test_set_device_without_an_index_raises_as_on_cuda(install_cpu):
    # torch.cuda.set_device needs an ordinal (torch._utils._get_device_index(optional=False)); the
    # native call on this CPU-only torch raises CUDA's ValueError before it reaches any CUDA code
    install_cpu(TRANSFER_CPU_DEVICES=2)
    torch.cuda.set_device(1)
    for spec in ("cuda", torch.device("cuda")):
        with pytest.raises(ValueError) as native:
            torch._utils._get_device_index(torch.device(spec), optional=False)
        with pytest.raises(ValueError) as ours:
            torch.cuda.set_device(spec)
        assert str(ours.value) == str(native.value), (spec, str(ours.value))
        assert "with a specified index" in str(ours.value)
    assert torch.cuda.current_device() == 1  # unchanged, as on CUDA
    with torch.cuda.device("cuda"):  # the context manager takes an index-less device (optional=True)
        assert torch.cuda.current_device() == 1
    torch.cuda.set_device(0)


VENDOR_ORDINALS = """
import torch, transfer
from transfer.devices import InvalidDeviceError
transfer.install("{vendor}")
x = torch.ones(2)
calls = [lambda: x.cuda(-1), lambda: x.cuda(4), lambda: x.to("cuda:4"), lambda: torch.zeros(1, device="cuda:4"),
         lambda: torch.cuda.set_device(4), lambda: torch.cuda.get_device_properties(7),
         lambda: torch.cuda.get_device_capability(-1), lambda: torch.device("cuda", 4).__enter__()]
for index, call in enumerate(calls):
    try:
        call()
    except InvalidDeviceError as exc:
        assert "has 4 device(s)" in str(exc) and "{env}" in str(exc), exc
    else:
        raise AssertionError(f"call {{index}} did not raise")
print("ORDINALS OK")
"""


@needs_standins
def test_bad_ordinals_on_a_vendor_stand_in():
    code = VENDOR_ORDINALS.format(vendor="sdaa", env="SDAA_VISIBLE_DEVICES")
    proc = python("-c", code, env=clean_env(PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET=1),
                  timeout=600)
    assert "ORDINALS OK" in proc.stdout, proc.stdout + proc.stderr
