"""Probe of the torch.cuda -> torch.<vendor> mapping, run in its own process.

Run with TRANSFER_DEVICE=<vendor> and the vendor's stand-in on PYTHONPATH; prints
PROBE OK at the end. Each check is an assert with a message.
"""
import inspect
import os

import torch

import transfer
from transfer.errors import UnsupportedCudaAPI

name = os.environ["TRANSFER_DEVICE"]
vendor = getattr(torch, name)
info = transfer.status()
assert info["active"] and info["device_type"] == name, info

# Functions without a device argument run the vendor's own code (a copy named torch.cuda.<fn>, so it
# pickles as torch.cuda.<fn>): zero cost.
for fn in ("is_available", "device_count", "current_device", "manual_seed", "empty_cache"):
    assert getattr(torch.cuda, fn).__code__ is getattr(vendor, fn).__code__, fn
assert torch.cuda.device_count() == int(os.environ.get("SIM_ACCEL_DEVICE_COUNT", "4"))

# Device arguments in CUDA spellings reach the vendor translated.
torch.cuda.set_device("cuda:1")
assert vendor.current_device() == 1
with torch.cuda.device(2):
    assert vendor.current_device() == 2
assert vendor.current_device() == 1
torch.cuda.set_device(torch.device("cuda", 0))
assert torch.cuda.get_device_name("cuda:1") == vendor.get_device_name(1)
assert isinstance(torch.cuda.Stream(), vendor.Stream)
x = torch.ones(3).cuda(1)
assert x.device == torch.device(name, 1) and x.is_cuda
assert torch.zeros(2, device="cuda:1").device == torch.device(name, 1)
assert torch.ones(1).to("cuda").device == torch.device(name, 0)
assert inspect.getattr_static(torch.Tensor, "is_cuda") is inspect.getattr_static(torch.Tensor, f"is_{name}")
assert not torch.ones(1).is_cuda

# CUDA-only helpers torch calls once is_available() is True have an answer.
assert torch.cuda.is_current_stream_capturing() is False
torch.cuda.nvtx.range_push("probe")
torch.cuda.nvtx.range_pop()

# An API the vendor lacks (get_arch_list; torch.xpu has one, torch 2.15's list_gpu_processes too, not memory_summary):
# a clear error naming it and the package.
from transfer import support
from transfer.profiles import PROFILES

lacking = next(n for n in ("get_arch_list", "list_gpu_processes", "memory_summary")
               if support.lookup(name, f"torch.cuda.{n}").cls == support.UNSUPPORTED
               and not hasattr(getattr(torch, PROFILES[name].device_type), n))
try:
    getattr(torch.cuda, lacking)()
except UnsupportedCudaAPI as exc:
    package = PROFILES[name].package or "torch"  # xpu: torch's own
    assert f"torch.cuda.{lacking}" in str(exc) and package in str(exc), exc
else:
    raise AssertionError(f"{lacking} should be unsupported")
# CUDA graphs: the vendor's graph API (npu) or transfer's replay, never the unsupported stand-in class.
graph = torch.cuda.CUDAGraph()
static = torch.ones(2, device="cuda")
with torch.cuda.graph(graph):
    doubled = static * 2
static.fill_(3.0)
graph.replay()
assert doubled.tolist() == [6.0, 6.0], doubled

# AMP on the vendor.
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = torch.nn.Linear(4, 4).cuda()(torch.randn(2, 4).cuda())
assert y.dtype == torch.bfloat16 and y.device.type == name
assert torch.amp.GradScaler("cuda")._device == name

# Out of range: the vendor's own error about the translated device.
try:
    torch.zeros(1, device="cuda:7")
except RuntimeError as exc:
    assert "7" in str(exc)
else:
    raise AssertionError("cuda:7 must fail on a 4-device vendor")

# Uninstall gives torch.cuda back.
transfer.uninstall()
assert torch.cuda.is_available() is False or torch.cuda.is_available is not vendor.is_available
assert "is_cuda" not in torch.Tensor.__dict__
print("PROBE OK")
