"""DeepSpeed's accelerator and FusedAdam op under the cpu target (transfer/patches/deepspeed.py).

The 2-rank jobs are in tests/frameworks/test_engines_deepspeed.py; here, one process each (DeepSpeed binds
its op builders to its accelerator when ``import deepspeed`` runs, so each case is a fresh interpreter
with ``TRANSFER_DEVICE=cpu``): which accelerator DeepSpeed takes, and that DeepSpeed's own FusedAdam class
over transfer's served ``multi_tensor_adam`` computes DeepSpeed's kernel's rule
(csrc/adam/multi_tensor_adam.cu, adapted from apex's; tests/apex_reference.py restates it in float64),
with the moments kept in the parameter's dtype as DeepSpeed's kernel keeps them.
"""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

import apex_reference as ref
from conftest import INSTALLED, clean_env

pytestmark = pytest.mark.slow  # each case imports DeepSpeed in a fresh interpreter: 10-45 s here


@pytest.fixture(autouse=True)
def deepspeed_installed():
    """DeepSpeed, as tests/frameworks requires it: under nox (which installs it) its absence fails; in a
    checkout it skips. Per test, not at collection: suites that deselect these tests (compat) report no skip."""
    try:
        import deepspeed  # noqa: F401
    except ImportError as exc:
        message = f"deepspeed is not installed: pip install -c tests/frameworks/constraints.txt deepspeed ({exc})"
        if INSTALLED:
            pytest.fail(message)
        pytest.skip(message)

PROGRAM = textwrap.dedent("""
    import json, sys
    import torch
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.adam import FusedAdam

    accelerator = get_accelerator()
    out = {"class": type(accelerator).__name__, "names": [accelerator.device_name(), accelerator.device_name(1),
           accelerator.current_device_name()], "backend": accelerator.communication_backend_name(),
           "same_device": torch.ones(2).cuda().device == torch.device(accelerator.current_device_name())}
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for adam_w_mode in (True, False):
            params = [torch.nn.Parameter(torch.randn(n, generator=g).to(dtype).cuda()) for n in (5, 17)]
            start = [p.detach().cpu().tolist() for p in params]
            opt = FusedAdam(params, lr=1e-2, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.05, adam_w_mode=adam_w_mode)
            grads = []
            for step in range(3):
                grads.append([torch.randn(p.shape, generator=g).to(dtype) for p in params])
                for p, grad in zip(params, grads[-1]):
                    p.grad = grad.cuda()
                opt.step()
            out[f"{dtype}-{adam_w_mode}"] = {
                "start": start, "grads": [[t.float().tolist() for t in gs] for gs in grads],
                "params": [p.detach().float().cpu().tolist() for p in params],
                "m": [opt.state[p]["exp_avg"].float().cpu().tolist() for p in params],
                "v": [opt.state[p]["exp_avg_sq"].float().cpu().tolist() for p in params],
                "state_dtypes": sorted({str(opt.state[p][k].dtype) for p in params for k in ("exp_avg", "exp_avg_sq")}),
                "kernel": opt.multi_tensor_adam.__module__}
    print(json.dumps(out))
""")


def run(tmp_path, **env):
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=clean_env(TRANSFER_DEVICE="cpu", **env),
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    return proc


@pytest.fixture(scope="module")
def under_transfer(tmp_path_factory):
    proc = run(tmp_path_factory.mktemp("ds"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_deepspeed_takes_its_cuda_accelerator_under_cpu_names(under_transfer):
    assert under_transfer["class"] == "TargetAccelerator" and under_transfer["backend"] == "gloo", under_transfer
    assert under_transfer["names"] == ["cpu", "cpu", "cpu"] and under_transfer["same_device"], under_transfer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_fused_adam_follows_deepspeeds_rule(under_transfer, dtype, adam_w_mode):
    got = under_transfer[f"{dtype}-{adam_w_mode}"]
    assert got["kernel"] == "transfer.patches.deepspeed", got["kernel"]
    assert got["state_dtypes"] == [str(dtype)]  # DeepSpeed's kernel keeps m and v in the parameter's dtype
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2 ** -7, atol=2 ** -7)
    for i, start in enumerate(got["start"]):
        p = torch.tensor(start, dtype=dtype)
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        for step, grads in enumerate(got["grads"], 1):
            p, m, v = ref.adam(p, torch.tensor(grads[i]), m, v, step=step, lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-6,
                               weight_decay=0.05, adam_w_mode=adam_w_mode, bias_correction=True)
            p, m, v = (t.to(dtype) for t in (p, m, v))  # stored in the parameter's dtype after each step
        for name, want in (("params", p), ("m", m), ("v", v)):
            torch.testing.assert_close(torch.tensor(got[name][i]), want.float(), **tol, msg=lambda s: f"{name}: {s}")


def test_without_the_area_deepspeed_compiles_cuda_for_fused_adam(tmp_path):
    """What the area fixes: DeepSpeed takes its CUDA accelerator (cuda:N names, not where the tensors are)
    and its FusedAdam builder asks to compile multi_tensor_adam.cu, which transfer refuses."""
    proc = run(tmp_path, TRANSFER_DISABLE="deepspeed")
    assert proc.returncode != 0
    assert "UnsupportedCudaAPI" in proc.stderr and "multi_tensor_adam.cu" in proc.stderr, proc.stderr[-3000:]
