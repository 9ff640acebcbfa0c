"""The legacy CUDA tensor types (torch.cuda.FloatTensor & co., Tensor.type, set_default_tensor_type)
and torch._C's private CUDA entry points, as CUDA answers them (torch's python_tensor.cpp)."""

import os
import warnings

import pytest
import torch

from conftest import NO_STANDINS, STANDINS, VENDORS, clean_env, python


def test_constructors_make_tensors_on_the_device(cpu_target):
    x = torch.cuda.FloatTensor(2, 3)  # sizes: uninitialized
    assert (x.shape, x.dtype, x.is_cuda) == (torch.Size([2, 3]), torch.float32, True)
    assert torch.cuda.FloatTensor(torch.Size([4])).shape == torch.Size([4])
    assert torch.cuda.LongTensor().shape == torch.Size([0])
    ids = torch.cuda.IntTensor([0, 7])  # data
    assert ids.dtype == torch.int32 and ids.tolist() == [0, 7]
    assert torch.cuda.HalfTensor([[1.5]]).dtype == torch.float16
    assert torch.cuda.FloatTensor([1.0], device="cuda:1").tolist() == [1.0]
    assert torch.cuda.FloatTensor(x).data_ptr() == x.data_ptr()  # a tensor of its own type: aliased
    with pytest.raises(TypeError, match="aliases a tensor of its own type"):
        torch.cuda.FloatTensor(torch.zeros(2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="expects a CUDA device"):
        torch.cuda.FloatTensor(2, device="meta")


def test_isinstance_and_class_attributes(cpu_target):
    x = torch.zeros(2, device="cuda")
    assert isinstance(x, torch.cuda.FloatTensor) and isinstance(torch.nn.Parameter(x), torch.cuda.FloatTensor)
    assert not isinstance(x, torch.cuda.HalfTensor) and not isinstance(1.0, torch.cuda.FloatTensor)
    assert not isinstance(torch.zeros(2, device="meta"), torch.cuda.FloatTensor)
    cls = torch.cuda.FloatTensor
    assert (cls.__name__, cls.__module__, cls.dtype, cls.is_cuda, cls.is_sparse) == (
        "FloatTensor", "torch.cuda", torch.float32, True, False)
    assert repr(cls) == "<class 'torch.cuda.FloatTensor'>"
    assert torch.cuda.BFloat16Tensor.dtype == torch.bfloat16 and torch.cuda.BoolTensor.dtype == torch.bool


def test_type_names_and_converts_as_on_cuda(cpu_target):
    x = torch.randn(3, device="cuda")
    assert x.type() == "torch.cuda.FloatTensor"
    assert x.long().type() == "torch.cuda.LongTensor"
    half = x.type("torch.cuda.HalfTensor")
    assert half.dtype == torch.float16 and half.type() == "torch.cuda.HalfTensor"
    assert torch.equal(half.float(), x.half().float())
    assert x.type(torch.cuda.FloatTensor) is x and x.type("torch.cuda.FloatTensor") is x  # already that type
    assert x.type(torch.cuda.DoubleTensor).dtype == torch.float64
    assert x.type(torch.float16).dtype == torch.float16  # torch's own forms still work
    assert x.type(torch.complex64).type() == "torch.ComplexFloatTensor"  # no legacy CUDA name: torch's answer
    with pytest.raises(ValueError):
        x.type("torch.cuda.NoSuchTensor")


def test_set_default_tensor_type(cpu_target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation warning, as on CUDA
        try:
            torch.set_default_tensor_type(torch.cuda.DoubleTensor)
            assert torch.empty(2).dtype == torch.float64 and torch.tensor([1.0]).type() == "torch.cuda.DoubleTensor"
            torch.set_default_tensor_type("torch.cuda.FloatTensor")
            assert torch.get_default_dtype() == torch.float32
            with pytest.raises(TypeError, match="only floating-point types"):
                torch.set_default_tensor_type(torch.cuda.IntTensor)
        finally:
            torch.set_default_tensor_type(torch.FloatTensor)
    assert torch.get_default_dtype() == torch.float32


def test_uninstall_restores_torch_types(cpu_target):
    cpu_target.uninstall()
    assert type(torch.cuda.FloatTensor).__name__ == "tensortype"
    assert torch.randn(1).type() == "torch.FloatTensor"
    assert not hasattr(torch._C, "_cuda_setStream") or torch.cuda.is_available() or torch.version.cuda


def test_torch_test_harness_private_entry_points(cpu_target):
    """torch's own CUDA test harness (common_utils.CudaNonDefaultStream, CudaMemoryLeakCheck) calls torch._C
    directly; its calls as written there (importing it needs expecttest, which the test venv lacks)."""
    before = torch.cuda.current_device()
    streams = []
    for d in range(torch.cuda.device_count()):
        streams.append(torch.cuda.current_stream(d))
        device_stream = torch.cuda.Stream(device=d)
        streams[-1].synchronize()
        torch._C._cuda_setStream(stream_id=device_stream.stream_id, device_index=device_stream.device_index,
                                 device_type=device_stream.device_type)
    torch._C._cuda_setDevice(before)
    torch.cuda.set_device(1)
    assert torch._C._cuda_getDevice() == 1
    torch._C._cuda_setDevice(0)
    assert torch.cuda.current_device() == 0
    torch._C._cuda_clearCublasWorkspaces()
    torch._C._cuda_resetCublasWorkspaceSize()
    assert torch._C._cuda_cudaCachingAllocator_is_enabled() is True
    stream = torch.cuda.Stream(device=1)
    assert (stream.stream_id, stream.device_index, stream.device_type) == (0, 1, 1)
    present = hasattr(torch._C, "_cuda_getDeviceCount")  # torch.cuda._is_compiled(): a CUDA build's other names
    cpu_target.uninstall()
    assert hasattr(torch._C, "_cuda_getDeviceCount") == present  # never added by transfer


STANDIN_SCRIPT = """
import torch
x = torch.cuda.FloatTensor(2, 3).zero_()
ids = torch.cuda.IntTensor([0])
assert isinstance(x, torch.cuda.FloatTensor) and not isinstance(x, torch.cuda.HalfTensor)
h = x.type("torch.cuda.HalfTensor")
torch.set_default_tensor_type(torch.cuda.FloatTensor)
y = torch.randn(2)
torch.set_default_tensor_type(torch.FloatTensor)
print(x.device, ids.device, x.type(), h.type(), h.device, y.device, y.type(), torch.empty(1).device)
"""


@pytest.mark.slow
@pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
def test_legacy_types_on_the_npu_stand_in():
    env = clean_env(TRANSFER_DEVICE="npu", PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    proc = python("-W", "ignore", "-c", STANDIN_SCRIPT, env=env, timeout=600)
    assert proc.stdout.split() == ["npu:0", "npu:0", "torch.cuda.FloatTensor", "torch.cuda.HalfTensor", "npu:0",
                                   "npu:0", "torch.cuda.FloatTensor", "cpu"], proc.stdout + proc.stderr
