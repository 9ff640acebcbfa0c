"""torch.compile on the cpu target where triton is installed over a build without CUDA (as many
environments have): inductor compiles the CPU code it compiles natively there, never triton's NVIDIA driver."""

import importlib.util
import os

import pytest

from conftest import clean_env, python

TRITON = importlib.util.find_spec("triton")

SCRIPT = """
import torch
import triton  # importable: torch's has_triton() and triton's drivers are asked
x = torch.randn(4, device="cuda")
y = torch.compile(lambda x: x.sin() + 1)(x)
assert torch.allclose(y, x.sin() + 1), (y, x.sin() + 1)
print("compiled", y.device.type, y.is_cuda)
"""


@pytest.mark.slow
@pytest.mark.skipif(TRITON is None, reason="triton is not installed here (pip install triton to run this test)")
def test_compile_with_triton_importable_on_the_cpu_target():
    site = os.path.dirname(os.path.dirname(TRITON.origin))  # the folder triton is installed in, for the child
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1,
                    PYTHONPATH=os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p))
    proc = python("-c", SCRIPT, env=env, timeout=600)
    assert proc.stdout.split() == ["compiled", "cpu", "True"], proc.stdout + proc.stderr
