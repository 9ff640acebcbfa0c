"""torch.compile on the cpu target where triton is installed over a build without CUDA (as many
environments have): inductor compiles the CPU code it compiles natively there, never triton's NVIDIA driver."""

import importlib.util
import os

import pytest

from conftest import clean_env, python

# `nox -s tests` installs the triton torch's CUDA wheel pins into this folder (noxfile.py TRITON_FOR_TORCH), so CI runs
# this test; elsewhere a triton installed in the running Python is used.
FOLDER = os.environ.get("TRANSFER_TEST_TRITON")
TRITON = importlib.util.find_spec("triton")

SCRIPT = """
import torch
import triton  # importable: torch's has_triton() and triton's drivers are asked
x = torch.randn(4, device="cuda")
y = torch.compile(lambda x: x.sin() + 1)(x)
assert torch.allclose(y, x.sin() + 1), (y, x.sin() + 1)
print("compiled", y.device.type, y.is_cuda, "triton", triton.__version__)
"""


@pytest.mark.slow
@pytest.mark.skipif(not FOLDER and TRITON is None,
                    reason="triton is not installed here (`nox -s tests` installs it; or pip install triton)")
def test_compile_with_triton_importable_on_the_cpu_target():
    if FOLDER:
        assert os.path.exists(os.path.join(FOLDER, "triton", "__init__.py")), f"TRANSFER_TEST_TRITON={FOLDER}: no triton"
    site = FOLDER or os.path.dirname(os.path.dirname(TRITON.origin))  # the folder triton is installed in
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1,
                    PYTHONPATH=os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p))
    proc = python("-c", SCRIPT, env=env, timeout=600)
    assert proc.stdout.split()[:4] == ["compiled", "cpu", "True", "triton"], proc.stdout + proc.stderr
