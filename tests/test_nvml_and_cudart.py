"""NVML (pynvml) and the CUDA runtime loaded through ctypes, as monitoring and training code calls them
(DeepLearningExamples' GPU affinity and l2_promote, wandb-style memory and utilization polling)."""

import ctypes

import pytest

from conftest import NO_STANDINS, STANDINS, VENDORS, clean_env, python


def test_pynvml_answers_for_the_cpu_target(cpu_target):
    import torch
    import pynvml

    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()  # as NVML: nothing answers before nvmlInit
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        assert count == torch.cuda.device_count() == 2
        handle = pynvml.nvmlDeviceGetHandleByIndex(count - 1)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetHandleByIndex(count)
        assert pynvml.nvmlDeviceGetName(handle) == torch.cuda.get_device_name(count - 1)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        free, total = torch.cuda.mem_get_info(count - 1)
        assert info.total == total and info.used == info.total - info.free and 0 < info.free <= info.total
        with pytest.raises(pynvml.NVMLError_NotSupported, match="nvmlDeviceGetUtilizationRates.*cpu target"):
            pynvml.nvmlDeviceGetUtilizationRates(handle)  # no CPU device utilization in torch: said, not invented
        with pytest.raises(pynvml.NVMLError) as err:
            pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        assert err.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED and "nvmlDeviceGetTemperature" in str(err.value)
        words = pynvml.nvmlDeviceGetCpuAffinity(handle, 2)
        import os

        assert {i for i in range(128) if words[i // 64] >> (i % 64) & 1} == set(os.sched_getaffinity(0)) & set(range(128))
    finally:
        pynvml.nvmlShutdown()


def test_cudart_through_ctypes(cpu_target):
    """Transformer-XL's l2_promote, written as it is there, and the device queries."""
    import torch

    _libcudart = ctypes.CDLL("libcudart.so")
    p_value = ctypes.cast((ctypes.c_int * 1)(), ctypes.POINTER(ctypes.c_int))
    assert _libcudart.cudaDeviceGetLimit(p_value, ctypes.c_int(0x05)) == 215  # unset: cudaErrorUnsupportedLimit
    assert _libcudart.cudaDeviceSetLimit(ctypes.c_int(0x05), ctypes.c_int(128)) == 0
    assert _libcudart.cudaDeviceGetLimit(p_value, ctypes.c_int(0x05)) == 0 and p_value.contents.value == 128
    count = ctypes.c_int()
    assert ctypes.cdll.LoadLibrary("/usr/local/cuda/lib64/libcudart.so.12").cudaGetDeviceCount(ctypes.byref(count)) == 0
    assert count.value == torch.cuda.device_count()
    with pytest.raises(NotImplementedError, match="cudaStreamCreate.*cudaGetDeviceCount"):
        _libcudart.cudaStreamCreate(None)
    libc = ctypes.CDLL(None)  # every other library loads natively
    assert isinstance(libc, ctypes.CDLL) and libc.getpid() > 0
    cpu_target.uninstall()
    with pytest.raises(OSError):
        ctypes.CDLL("libcudart.so.0.transfer-test")  # after uninstall: the loader's own answer


NPU_SCRIPT = """
import pynvml, torch
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(3)
info = pynvml.nvmlDeviceGetMemoryInfo(handle)
rates = pynvml.nvmlDeviceGetUtilizationRates(handle)  # wandb-style polling
try:
    torch.npu.utilization(4)
except AssertionError as err:  # torch_npu's own check
    bad = str(err).splitlines()[0]
print("utilization", rates.gpu, torch.cuda.utilization("cuda:3"), torch.cuda.utilization(), bad, "|")
print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(handle), info.total == torch.npu.mem_get_info(3)[1])
"""


@pytest.mark.slow
@pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
def test_pynvml_answers_for_the_npu_stand_in():
    env = clean_env(TRANSFER_DEVICE="npu", PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    proc = python("-W", "ignore", "-c", NPU_SCRIPT, env=env, timeout=600)
    rates, last = proc.stdout.split("|")
    assert last.split()[-1] == "True" and last.split()[0] == "4", proc.stdout + proc.stderr
    assert torch_name_of(last) == "Ascend910B2 (simulated)"
    # torch.npu.utilization answers (the simulated device is idle between calls: 0) and checks its index
    assert rates.split() == ["utilization", "0", "0", "0", "Invalid", "device", "id"], proc.stdout + proc.stderr


def torch_name_of(stdout):
    return stdout.strip().split(" ", 1)[1].rsplit(" ", 1)[0]
