"""F.scaled_dot_product_attention in a CUDA script on every stand-in, on every torch of the standins tier.

nanoGPT computes attention with ``F.scaled_dot_product_attention(..., is_causal=True)``. On torch 2.14's
CUDA build (pip's default torch) ``import torch`` installs Triton overrides of aten ops for the CUDA key
(``torch._native``: ``aten::bmm``); transfer used to register them for the vendor's key too, so every
matmul of SDPA's math path ran CUDA's kernel on the vendor's tensors ("CUDAGuardImpl initialized with
non-CUDA DeviceType: npu"), while the same script natively on the plug-in ran. The test runs a
nanoGPT-style script (tests/scripts/gpt_sdpa.py) on the cpu target and on each stand-in and checks what a
user checks: exit code, the device of the parameters and of attention's output, the model learned, and
the losses equal the cpu target's (the stand-ins compute with the CPU's kernels).
"""

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import SCRIPTS, VENDORS, clean_env, needs_standins, no_gpu, python

pytestmark = [pytest.mark.standins, pytest.mark.smoke]  # nox -s standins (2.1.2, 2.15.0) and nox -s newest

SCRIPT = os.path.join(SCRIPTS, "gpt_sdpa.py")
TARGETS = ("cpu", "npu", "sdaa", "gcu")


def _train(target):
    path = [VENDORS] if target != "cpu" else []
    path += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]  # a source checkout's
    env = clean_env(TRANSFER_DEVICE=target, TRANSFER_QUIET="1", PYTHONPATH=os.pathsep.join(path) or None,
                    **no_gpu(target))
    proc = python(SCRIPT, env=env, timeout=600, check=False)
    assert proc.returncode == 0, f"{target}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_standins
def test_nanogpt_style_sdpa_trains_on_every_standin_as_on_the_cpu_target():
    with ThreadPoolExecutor(2) as pool:  # the machine's two cores
        runs = dict(zip(TARGETS, pool.map(_train, TARGETS)))
    cpu = runs["cpu"]
    assert cpu["device"] == cpu["attention"] == "cpu", cpu
    assert cpu["losses"][-1] < 0.8 * cpu["losses"][0], cpu  # it learns the batch
    for vendor in TARGETS[1:]:
        run = runs[vendor]
        assert run["device"] == run["attention"] == f"{vendor}:0", (vendor, run)
        torch.testing.assert_close(run["losses"], cpu["losses"], msg=lambda m: f"{vendor}: {m}")
