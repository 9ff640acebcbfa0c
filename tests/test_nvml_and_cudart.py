"""NVML (pynvml) and the CUDA runtime loaded through ctypes, as monitoring and training code calls them
(DeepLearningExamples' GPU affinity and l2_promote, wandb-style memory and utilization polling)."""

import ctypes
import importlib.machinery
import json
import os

import pytest

from conftest import NO_STANDINS, STANDINS, VENDORS, clean_env, no_gpu, python


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


#: The real nvidia-ml-py (NVIDIA's containers hold it; nvitop and gpustat install it), pinned in tests/constraints.txt:
#: nox installs it beside the venv and names the folder in TRANSFER_TEST_NVML; without nox, one installed here.
REAL_NVML = os.environ.get("TRANSFER_TEST_NVML") or ""
HAS_REAL_NVML = bool(REAL_NVML) or importlib.machinery.PathFinder.find_spec("pynvml") is not None
NO_REAL_NVML = ("nvidia-ml-py is not installed (nox installs the version tests/constraints.txt pins and names its "
                "folder in TRANSFER_TEST_NVML; or: pip install -c tests/constraints.txt nvidia-ml-py)")
#: A monitoring script as users write it: torch first (torch/cuda itself imports pynvml where it is installed) or
#: pynvml first, then NVML's device loop, with the except clause monitoring tools write.
MONITOR = """
import json
{imports}
try:
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    devices = []
    for i in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        devices.append([pynvml.nvmlDeviceGetName(handle), memory.total > 0, memory.used + memory.free == memory.total])
    pynvml.nvmlShutdown()
    outcome = {{"count": count, "devices": devices}}
except pynvml.NVMLError_LibraryNotFound as err:
    outcome = {{"error": str(err)}}
outcome["torch"] = [torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]]
print("MONITOR " + json.dumps(outcome))
"""
ORDERS = {"torch first": "import torch, pynvml", "pynvml first": "import pynvml\nimport torch"}
STANDIN = [pytest.mark.slow, pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)]


def monitor(order, **env):
    path = [p for p in (env.pop("PYTHONPATH", None), REAL_NVML, os.environ.get("PYTHONPATH")) if p]  # a checkout's
    proc = python("-c", MONITOR.format(imports=ORDERS[order]), timeout=600, check=False,
                  env=clean_env(TRANSFER_QUIET="1", PYTHONPATH=os.pathsep.join(path) or None, **env))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("MONITOR ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("MONITOR "):])


@pytest.mark.skipif(not HAS_REAL_NVML, reason=NO_REAL_NVML)
@pytest.mark.parametrize("target, order", [("cpu", "torch first"), ("cpu", "pynvml first"),
                                           pytest.param("npu", "torch first", marks=STANDIN),
                                           pytest.param("npu", "pynvml first", marks=STANDIN),
                                           pytest.param("sdaa", "torch first", marks=STANDIN),
                                           pytest.param("gcu", "torch first", marks=STANDIN)])
def test_pynvml_answers_for_the_target_with_nvidia_ml_py_installed(target, order):
    """`import torch` imports the real pynvml itself (torch/cuda/__init__.py) before transfer installs: NVML's
    calls still answer for the target's devices, whichever the script imports first, on every target."""
    outcome = monitor(order, TRANSFER_DEVICE=target, PYTHONPATH=VENDORS if target != "cpu" else None,
                      **no_gpu(target))
    count, names = outcome["torch"]
    assert "error" not in outcome, outcome  # NVMLError_LibraryNotFound: the real NVML answered
    assert outcome["count"] == count >= 2, outcome
    assert outcome["devices"] == [[name, True, True] for name in names], outcome


@pytest.mark.skipif(not HAS_REAL_NVML, reason=NO_REAL_NVML)
def test_pynvml_is_nvidia_ml_py_without_transfer_and_after_uninstall():
    """Without transfer the script gets nvidia-ml-py itself (what these tests install is the real one), and
    transfer.uninstall() puts it back where install took it over: sys.modules and torch.cuda."""
    script = ("import torch, pynvml, sys\nreal = pynvml.__file__\nimport transfer\ntransfer.install('cpu')\n"
              "import pynvml as served\nserved.nvmlInit()\nprint('OURS', served.nvmlDeviceGetCount(), "
              "torch.cuda.pynvml is served)\ntransfer.uninstall()\nimport pynvml as after\n"
              "print('BACK', after.__file__ == real, torch.cuda.pynvml.__file__ == real, "
              "after.nvmlExceptionClass(12).__name__)")
    path = [p for p in (REAL_NVML, os.environ.get("PYTHONPATH")) if p]
    env = clean_env(TRANSFER_QUIET="1", PYTHONPATH=os.pathsep.join(path) or None, **no_gpu())
    plain = python("-c", "import torch, pynvml; print('REAL', pynvml.__file__, torch.cuda.pynvml is pynvml)",
                   env=env, timeout=300)
    real_file = plain.stdout.split()[1]
    assert plain.stdout.split()[2] == "True" and "transfer" not in real_file.split(os.sep), plain.stdout
    assert importlib.machinery.PathFinder.find_spec("pynvml", [REAL_NVML] if REAL_NVML else None).origin == real_file
    proc = python("-c", script, env=env, timeout=300)
    assert "OURS 2 True" in proc.stdout and "BACK True True NVMLError_LibraryNotFound" in proc.stdout, \
        proc.stdout + proc.stderr[-3000:]
