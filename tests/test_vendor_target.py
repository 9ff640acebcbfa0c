"""The vendor targets against the stand-ins (tests/vendors), one process each."""

import os
import sys

import pytest
import torch

from conftest import (INSTALLED, NO_STANDINS, NO_XPU_STANDIN, ROOT, SCRIPTS, STANDINS, VENDORS, XPU_STANDIN, clean_env,
                      console_script, python, run, script_beside_a_library, vendor_path)

pytestmark = [pytest.mark.skipif(not STANDINS, reason=NO_STANDINS), pytest.mark.slow]  # every test runs a stand-in


@pytest.mark.parametrize("vendor", ["npu", "sdaa", "gcu", "mlu", "musa", "supa",
                                    pytest.param("xpu", marks=pytest.mark.skipif(not XPU_STANDIN, reason=NO_XPU_STANDIN))])
def test_cuda_namespace_maps_to_the_vendor(vendor):
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=vendor_path(vendor), TRANSFER_QUIET=1)
    proc = python(os.path.join(SCRIPTS, "vendor_probe.py"), env=env, timeout=600)
    assert "PROBE OK" in proc.stdout


@pytest.mark.standins  # torch 2.15 warned at every start of a stand-in process
@pytest.mark.parametrize("vendor", ["npu", "sdaa", "gcu"])
def test_a_cuda_script_on_a_standin_starts_without_torchs_kernel_override_warning(vendor):
    """A plug-in registers each of its kernels once (torch_npu's record_stream: in C++): torch 2.15 printed
    "Overriding a previously registered kernel ... aten::record_stream ... PrivateUse1" in every process."""
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    proc = python("-W", "default", "-c", "import torch; print(torch.ones(2).cuda().device)", env=env, timeout=600)
    assert proc.stdout.split() == [f"{vendor}:0"], proc.stdout + proc.stderr
    assert "Overriding a previously registered kernel" not in proc.stderr, proc.stderr


def test_auto_picks_an_importable_vendor_with_devices():
    code = "import torch; print(torch.cuda.is_available(), torch.ones(1).cuda().device)"
    env = clean_env(TRANSFER_DEVICE="auto", PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    # All three stand-ins are importable here; auto takes the first in the profile table.
    assert python("-c", code, env=env, timeout=600).stdout.split() == ["True", "npu:0"]


def test_auto_prefers_the_vendor_already_imported():
    code = "import torch, torch_gcu, transfer; transfer.install(); print(torch.ones(1).cuda().device)"
    env = clean_env(PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    assert python("-c", code, env=env, timeout=600).stdout.strip() == "gcu:0"


VENDOR_FIRST = "import torch_{v}\nimport torch\nprint(torch.cuda.device_count(), torch.ones(1).cuda().device)\n"


@pytest.mark.parametrize("vendor, way", [("npu", "env"), ("sdaa", "auto"), ("gcu", "runner")])
def test_script_importing_the_vendor_plugin_first(vendor, way, tmp_path):
    """Vendor plug-ins start with `import torch`: torch's entry point then runs while the
    plug-in is half imported and torch.<vendor> does not exist yet; activation waits."""
    script = tmp_path / "train.py"
    script.write_text(VENDOR_FIRST.format(v=vendor))
    if way == "runner":
        proc = run([console_script("transfer-run"), sys.executable, str(script)], env=clean_env(PYTHONPATH=VENDORS, TRANSFER_QUIET=1),
                   timeout=600)
    else:
        device = vendor if way == "env" else "auto"
        proc = python(str(script), env=clean_env(TRANSFER_DEVICE=device, PYTHONPATH=VENDORS, TRANSFER_QUIET=1),
                      timeout=600)
    assert proc.stdout.split() == ["4", f"{vendor}:0"], proc.stderr


def test_vendor_with_zero_devices_is_a_clear_error():
    env = clean_env(TRANSFER_DEVICE="gcu", PYTHONPATH=VENDORS, SIM_ACCEL_DEVICE_COUNT=0)
    proc = python("-c", "import torch", env=env, check=False, timeout=600)
    assert proc.returncode != 0 and "reports no gcu device" in proc.stderr, proc.stderr
    assert "TOPS_VISIBLE_DEVICES (unset)" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


CAPABILITY_PROBE = """
import torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="file://{store}", rank=0, world_size=1)
dist.broadcast(torch.ones(2, device="cuda"), src=0)  # torch asks get_device_capability itself
objects = [{{"lr": 0.1}}]
dist.broadcast_object_list(objects, src=0)
assert objects == [{{"lr": 0.1}}], objects
print("capability", tuple(torch.cuda.get_device_capability()))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("vendor, capability", [("npu", "(8, 0)"), ("sdaa", "(8, 0)"), ("gcu", "(8, 0)")])
def test_broadcast_works_whatever_the_vendor_says_about_capability(vendor, capability, tmp_path):
    """torch_sdaa has no get_device_capability, torch_npu answers None: torch's own
    dist.broadcast (and broadcast_object_list) must still work, and the user gets a tuple."""
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    proc = python("-c", CAPABILITY_PROBE.format(store=tmp_path / "store"), env=env, timeout=600)
    assert f"capability {capability}" in proc.stdout, proc.stdout + proc.stderr


def test_device_properties_answer_the_cuda_fields_torch_reads():
    """Inductor's cache key reads gcnArchName when torch.version.cuda is None; torch_npu's
    properties lack it. The vendor's own fields still come through."""
    code = (
        "import torch\n"
        "props = torch.cuda.get_device_properties(0)\n"
        "print(props.name, props.gcnArchName, props.warp_size, props.total_memory > 0, sep='|')\n"
        "from torch._inductor.codecache import CacheBase\n"
        "print(CacheBase.get_system()['device'])\n"
    )
    env = clean_env(TRANSFER_DEVICE="npu", PYTHONPATH=VENDORS, TRANSFER_QUIET=1)
    lines = python("-c", code, env=env, timeout=600).stdout.splitlines()
    name = lines[0].split("|")[0]
    assert lines[0].split("|")[1:] == [name, "1", "True"] and name.startswith("Ascend"), lines
    assert lines[1] == f"{{'name': '{name}'}}", lines


ACCELERATOR_SCRIPT = '''\
import sys
import torch
import devlib  # a library, installed under site-packages
acc = torch.accelerator
print("script", acc.current_accelerator(), acc.current_accelerator(check_available=True),
      acc.is_available(), acc.device_count())
print("library", devlib.device())
exec("print('exec', torch.accelerator.current_accelerator())")
device = acc.current_accelerator()
x = torch.ones(2, device=device)
acc.set_device_index(torch.device("cuda", 1))
acc.synchronize(device)
acc.synchronize("cuda:1")
print("tensor", x.device, x.is_cuda, acc.current_device_index())
print("torch", torch.nn.parallel._functions._get_stream(torch.device("npu", 0)) is not None)

def step(x):
    return x + (1 if torch.accelerator.current_accelerator().type == "cuda" else 2)

print("compiled", step(x).tolist(), torch.compile(step, backend="eager", fullgraph=True)(x).tolist())
import transfer
transfer.uninstall()
torch._dynamo.reset()
print("uninstalled", acc.current_accelerator(), devlib.device(), step(x).tolist(),
      torch.compile(step, backend="eager", fullgraph=True)(x).tolist())
'''


@pytest.mark.skipif(not hasattr(torch, "accelerator"), reason=f"torch {torch.__version__} has no torch.accelerator")
def test_torch_accelerator_is_cuda_to_the_script_and_the_vendor_to_torch_and_libraries(tmp_path):
    """On CUDA, torch.accelerator.current_accelerator() is cuda: a CUDA script (pytorch/examples' imagenet) tests
    ``device.type == 'cuda'``. Under transfer its own calls answer cuda, in eager and compiled code alike; torch
    (DataParallel's streams here) and libraries keep the plug-in's device; uninstall gives torch's back, to
    torch.compile too."""
    out = script_beside_a_library(tmp_path, ACCELERATOR_SCRIPT,
                                  "import torch\n\ndef device():\n    return torch.accelerator.current_accelerator()\n")
    assert out.splitlines() == ["script cuda cuda True 2", "library npu", "exec cuda", "tensor npu:0 True 1",
                                "torch True", "compiled [2.0, 2.0] [2.0, 2.0]",
                                "uninstalled npu npu [3.0, 3.0] [3.0, 3.0]"], out
