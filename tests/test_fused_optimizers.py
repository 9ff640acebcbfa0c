"""``Adam(fused=True)`` / ``AdamW(fused=True)`` on the cpu target, on every torch.

On CUDA a fused optimizer steps by torch's documented update rule (computed in float32 for half and
bfloat16 parameters, the state kept in the parameters' dtype), GradScaler's scale divided out inside the
kernel (the gradients stored back unscaled) and a step with an inf skipped. torch 2.4 and later have CPU
kernels; on 2.0-2.3 transfer supplies them (transfer/patches/optim.py). The expected values here are the
documented rule computed in float64; on torches with their own CPU kernels the rule checks those kernels,
and transfer's kernel is checked against them too.
"""

import json
import math
import os
import warnings

import pytest
import torch

from conftest import SCRIPTS, clean_env, python

pytestmark = pytest.mark.compat  # the point is torch 2.0-2.3, which only the compat pairs have

OPS = {"Adam": "aten::_fused_adam_", "AdamW": "aten::_fused_adamw_"}
TORCH_HAS_CPU_KERNELS = all(torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU") for op in OPS.values())
SCALE = 2.0 ** 16  # GradScaler's initial scale
HYPER = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def documented_steps(kind, param, grads, *, lr, betas, eps, weight_decay, amsgrad, maximize):
    """torch's documented Adam / AdamW update (docs of torch.optim.Adam / AdamW) in float64, parameter and
    state stored in the parameter's dtype after each step, as the fused kernels store them. `grads` are
    the unscaled gradients of the steps taken."""
    dtype = param.dtype
    p = param.double()
    m, v, v_max = torch.zeros_like(p), torch.zeros_like(p), torch.zeros_like(p)
    beta1, beta2 = betas
    for t, g in enumerate(grads, 1):
        g = -g.double() if maximize else g.double()
        if kind == "AdamW":
            p = p - lr * weight_decay * p
        else:
            g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        if amsgrad:
            v_max = torch.maximum(v_max, v)
        v_hat = (v_max if amsgrad else v) / (1 - beta2 ** t)
        p = p - lr * (m / (1 - beta1 ** t)) / (v_hat.sqrt() + eps)
        p, m, v, v_max = (t_.to(dtype).double() for t_ in (p, m, v, v_max))
    return p.to(dtype)


def _scaler():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch >= 2.4: torch.cuda.amp.GradScaler is deprecated
        return torch.cuda.amp.GradScaler()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("scaled", [False, True], ids=["", "GradScaler"])
@pytest.mark.parametrize("kind, amsgrad, maximize", [("AdamW", False, False), ("AdamW", True, True),
                                                     ("Adam", False, False), ("Adam", True, False)])
def test_fused_adam_steps_as_documented(install_cpu, kind, amsgrad, maximize, scaled, dtype):
    """A CUDA script's fused optimizer steps on the cpu target; the parameters after three steps are the
    documented rule's (float32 tolerance; bfloat16: one rounding of the state apart). With GradScaler the
    gradients are scaled by 2**16, unscaled by the kernel (stored back so) and a step with an inf is
    skipped (parameter and step count unchanged, scale halved)."""
    install_cpu()
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(5, 7, generator=generator).to(dtype)
    grads = [(torch.randn(5, 7, generator=generator) * 0.1).to(dtype) for _ in range(3)]
    param = start.to("cuda").requires_grad_()
    optimizer = getattr(torch.optim, kind)([param], fused=True, amsgrad=amsgrad, maximize=maximize, **HYPER)
    scaler = _scaler() if scaled else None
    sequence = grads[:1] + ([torch.full_like(grads[0], math.inf)] if scaled else []) + grads[1:]
    for g in sequence:
        loss = (param.float() * g.float()).sum()  # d loss / d param = g
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
            continue
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if torch.isfinite(g).all():  # the kernel stored the unscaled gradient
            torch.testing.assert_close(param.grad, g, rtol=0, atol=0)
    assert param.device.type == "cpu" and param.dtype == dtype
    assert float(optimizer.state[param]["step"]) == 3.0  # the inf step was not counted
    if scaler is not None:
        assert scaler.get_scale() == SCALE / 2
    expected = documented_steps(kind, start, grads, amsgrad=amsgrad, maximize=maximize, **HYPER)
    torch.testing.assert_close(param.detach(), expected)


def test_tensor_lr(install_cpu):
    """A Tensor lr (torch >= 2.1's ``tensor_lr`` overload of the kernels) steps as the float lr (CUDA reads a
    host Tensor lr as the double of its float32 value: float32 tolerance)."""
    install_cpu()
    if "tensor_lr" not in [s.overload_name for s in torch._C._jit_get_schemas_for_operator(OPS["AdamW"])]:
        pytest.skip(f"torch {torch.__version__}'s fused AdamW takes a float lr only")
    start = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    params = [start.to("cuda").requires_grad_() for _ in range(2)]
    optimizers = [torch.optim.AdamW([params[0]], fused=True, lr=torch.tensor(1e-2)),
                  torch.optim.AdamW([params[1]], fused=True, lr=1e-2)]
    for _ in range(2):
        for param, optimizer in zip(params, optimizers):
            param.grad = torch.ones_like(param)
            optimizer.step()
    assert not torch.equal(params[0], start)
    torch.testing.assert_close(params[0], params[1])


@pytest.mark.skipif(not TORCH_HAS_CPU_KERNELS, reason=f"torch {torch.__version__} has no fused Adam CPU kernel "
                                                      "to compare with (torch >= 2.4 has)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_transfers_kernel_computes_what_torchs_own_cpu_kernel_computes(dtype):
    """Where torch has CPU kernels (>= 2.4; transfer does not register its own there) transfer's kernel,
    called directly, gives their results within float32 tolerance (bfloat16: one rounding apart)."""
    from transfer.cpu import kernels

    generator = torch.Generator().manual_seed(2)
    for op, amsgrad, scaled in [("_fused_adam_", True, True), ("_fused_adamw_", False, False),
                                ("_fused_adamw_", True, True)]:
        base = [torch.randn(300, generator=generator).to(dtype),
                (torch.randn(300, generator=generator) * 0.1 * (SCALE if scaled else 1)).to(dtype),
                (torch.randn(300, generator=generator) * 0.01).to(dtype),
                (torch.rand(300, generator=generator) * 1e-3).to(dtype),
                (torch.rand(300, generator=generator) * 2e-3).to(dtype)]
        runs = {}
        for who, fn in (("torch", getattr(torch, op)), ("transfer", getattr(kernels, op.strip("_") + "_"))):
            state = [t.clone() for t in base]
            fn([state[0]], [state[1]], [state[2]], [state[3]], [state[4]] if amsgrad else [], [torch.tensor(3.0)],
               lr=1e-2, beta1=0.9, beta2=0.95, weight_decay=0.1, eps=1e-8, amsgrad=amsgrad, maximize=False,
               grad_scale=torch.tensor(SCALE) if scaled else None, found_inf=torch.tensor(0.0) if scaled else None)
            runs[who] = state
        for a, b in zip(runs["transfer"], runs["torch"]):
            torch.testing.assert_close(a, b, msg=lambda m: f"{op} amsgrad={amsgrad} scaled={scaled}: {m}")


def test_uninstall_removes_the_kernels(install_cpu):
    """Installed, the cpu target has both kernels and the constructors accept fused=True; uninstalled,
    torch is as it was: no kernels where it had none, and its own error for CPU parameters."""
    install_cpu()
    assert all(torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU") for op in OPS.values())
    torch.optim.AdamW([torch.zeros(2, device="cuda", requires_grad=True)], fused=True)
    import transfer

    transfer.uninstall()
    assert [torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU") for op in OPS.values()] == \
        [TORCH_HAS_CPU_KERNELS] * 2
    for kind in OPS:
        make = lambda: getattr(torch.optim, kind)([torch.zeros(2, requires_grad=True)], fused=True)  # noqa: E731
        if TORCH_HAS_CPU_KERNELS:
            make()
        else:
            with pytest.raises(RuntimeError, match="fused=True` requires all the params"):
                make()


@pytest.mark.skipif(TORCH_HAS_CPU_KERNELS, reason=f"torch {torch.__version__} runs its own fused CPU kernels: "
                                                  "nanoGPT on the cpu target is test_compile's (slow tier)")
def test_nanogpt_with_fused_adamw_and_grad_scaler_trains_on_the_cpu_target():
    """nanoGPT's train.py asks for AdamW(fused=True) on 'cuda' and, for float16, a GradScaler: on the cpu
    target with torch 2.0-2.3 (transfer's kernels) it runs to the end, its parameters on the CPU, and
    learns (before: torch's "`fused=True` requires all the params to be ... CUDA" at the constructor)."""
    script = os.path.join(SCRIPTS, "thirdparty", "nanogpt_compile.py")
    proc = python(script, "--compile=False", "--dtype=float16", "--max_iters=4",
                  env=clean_env(TRANSFER_DEVICE="cpu"), timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["device"] == "cpu"
    assert len(result["losses"]) == 4 and result["losses"][-1] < result["losses"][0], result
