"""Capability checks: one policy per target.

CUDA users pick bf16 with ``torch.cuda.get_device_capability() >= (8, 0)`` (or
``torch.cuda.is_bf16_supported()``), and read ``get_device_properties().major``.
On CUDA both say the same thing, ``(props.major, props.minor) ==
get_device_capability()``, and bf16 is chosen exactly on Ampere-class devices.
Under transfer (policy in transfer/support.py, docs/features.md "Capability checks"):

| target | capability | is_bf16_supported | torch.version.cuda |
| cpu | (8, 0) | True | None |
| npu 910B (bf16) | (8, 0), or TORCH_NPU_DEVICE_CAPABILITY | True | None |
| npu 910A (no bf16) | (7, 0), or TORCH_NPU_DEVICE_CAPABILITY | False | None |
| sdaa, gcu | (8, 0) / (7, 0) from is_bf16_supported | the vendor's | None |

Before this policy the cpu target and torch_npu answered (0, 0) and torch_gcu its own
numbering (3, 0): every `>= (8, 0)` gate took the fp16 path, also on bf16 hardware.
"""

import logging

import pytest
import torch

from conftest import NO_STANDINS, STANDINS, VENDORS, clean_env, python

# What a CUDA script does with the answers (the pattern of nanoGPT, HF examples, Megatron's checks).
PROBE = """
import torch
cap = torch.cuda.get_device_capability()
props = torch.cuda.get_device_properties(0)
dtype = torch.bfloat16 if cap >= (8, 0) else torch.float16
print("cap", tuple(cap), (props.major, props.minor), torch.cuda.is_bf16_supported(), torch.version.cuda, dtype,
      props.name, props.total_memory > 0, props.multi_processor_count > 0, sep="|")
"""


def parse(stdout):
    line = [ln for ln in stdout.splitlines() if ln.startswith("cap|")][-1]
    return line.split("|")[1:]


def test_cpu_target_answers_ampere_class_and_bf16(cpu_target, caplog):
    with caplog.at_level(logging.WARNING, logger="transfer"):
        cap = torch.cuda.get_device_capability()
        assert torch.cuda.get_device_capability("cuda:1") == cap
    assert cap == (8, 0) and cap >= (8, 0) and not cap >= (9, 0)
    props = torch.cuda.get_device_properties(0)
    assert (props.major, props.minor) == cap
    assert torch.cuda.is_bf16_supported() is True
    assert torch.version.cuda is None
    # one notice naming the value, for the script's first call only
    notices = [r.getMessage() for r in caplog.records if "get_device_capability" in r.getMessage()]
    assert len(notices) == 1 and "(8, 0)" in notices[0], notices


def test_cpu_capability_checks_a_bad_ordinal_as_cuda_does(cpu_target):
    with pytest.raises(Exception, match="invalid device ordinal|Invalid device"):
        torch.cuda.get_device_capability("cuda:7")


VENDOR_CASES = [
    # (id, vendor, extra environment, expected capability, expected bf16)
    ("npu-910B", "npu", {}, "(8, 0)", "True"),
    ("npu-910A", "npu", {"SIM_NPU_SOC": "Ascend910A"}, "(7, 0)", "False"),
    ("npu-configured", "npu", {"TORCH_NPU_DEVICE_CAPABILITY": "9.0"}, "(9, 0)", "True"),
    ("sdaa", "sdaa", {}, "(8, 0)", "True"),
    ("gcu", "gcu", {}, "(8, 0)", "True"),
]


@pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
@pytest.mark.parametrize("vendor, extra, capability, bf16", [c[1:] for c in VENDOR_CASES],
                         ids=[c[0] for c in VENDOR_CASES])
def test_vendor_capability_follows_the_hardware(vendor, extra, capability, bf16):
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=VENDORS, TRANSFER_QUIET=1, **extra)
    proc = python("-c", PROBE, env=env, timeout=600)
    cap, props, got_bf16, version, dtype, name, memory, cores = parse(proc.stdout)
    assert (cap, props, got_bf16) == (capability, capability, bf16), proc.stdout + proc.stderr
    assert version == "None"
    assert dtype == ("torch.bfloat16" if capability >= "(8, 0)" else "torch.float16")
    assert memory == cores == "True" and name.endswith("(simulated)")
    if vendor == "npu" and "SIM_NPU_SOC" in extra:
        assert name.startswith("Ascend910A")
    # the user set the value: no derived-value notice then; else one notice naming the value
    if "TORCH_NPU_DEVICE_CAPABILITY" in extra:
        assert "has no CUDA compute capability" not in proc.stderr, proc.stderr
    else:
        assert proc.stderr.count("has no CUDA compute capability") == 1, proc.stderr
        assert f"transfer answers {capability}" in proc.stderr, proc.stderr


# What a CUDA script does with the advice of every UnsupportedCudaAPI message.
GUARDED = """
import torch
print("version", torch.version.cuda)
if torch.version.cuda:
    torch.cuda.utilization()
print("guarded call skipped")
torch.cuda.utilization()
"""


@pytest.mark.compat  # the point is the CUDA builds of the compat matrix (2.0.1+cu117 ... 2.14.1+cu130)
def test_torch_version_cuda_is_none_on_the_target_on_every_build_so_the_advised_guard_holds():
    """torch.version.cuda names the CUDA toolkit torch was built with: None on a CPU build, '13.0' on
    pip's default torch 2.14.1. Under transfer it is None on every target and build (docs/features.md's table),
    so `if torch.version.cuda:`, the guard every UnsupportedCudaAPI message advises, skips the call;
    without transfer the build's own value is untouched."""
    proc = python("-c", GUARDED, env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET="1"), check=False)
    assert "version None" in proc.stdout and "guarded call skipped" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode != 0 and "UnsupportedCudaAPI" in proc.stderr  # the unguarded call raises, as advised
    assert "guard it with `if torch.version.cuda:`" in proc.stderr
    code = ("import torch, transfer\nbuilt = torch.version.cuda\ntransfer.install('cpu')\n"
            "during = torch.version.cuda\ntransfer.uninstall()\nprint(built, during, torch.version.cuda is built)")
    built, during, restored = python("-c", code, env=clean_env(TRANSFER_QUIET="1")).stdout.split()
    assert (during, restored) == ("None", "True"), built  # built: the build's own value ('13.0', '12.1', None)
