"""apex's replacements against float64 references on the device (run by tests/test_apex.py on the stand-ins).

Tensors are created on "cuda" as a CUDA script does; under TRANSFER_DEVICE=<vendor> they live on
the vendor's device. References: tests/apex_reference.py (float64, apex's documented rules).
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import amp_C
import apex_reference as ref
from apex.multi_tensor_apply import multi_tensor_applier
from apex.normalization import FusedLayerNorm, FusedRMSNorm, MixedFusedLayerNorm
from apex.optimizers import FusedAdam, FusedLAMB, FusedSGD

SETTINGS = settings(max_examples=6, deadline=None, database=None)
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=2).map(tuple)


def close(got, want, rtol, atol):
    assert got.device.type != "cpu", got.device
    torch.testing.assert_close(got.detach().cpu().to(ref.F64), want.cpu(), rtol=rtol, atol=atol)


@SETTINGS
@given(shape=shapes, adam_w_mode=st.booleans(), bias_correction=st.booleans(), wd=st.sampled_from([0.0, 0.1]),
       seed=st.integers(0, 50))
def check_adam(shape, adam_w_mode, bias_correction, wd, seed):
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(shape, generator=gen).cuda())
    opt = FusedAdam([p], lr=0.01, weight_decay=wd, adam_w_mode=adam_w_mode, bias_correction=bias_correction)
    wp, wm, wv = p.detach().cpu().to(ref.F64), torch.zeros(shape, dtype=ref.F64), torch.zeros(shape, dtype=ref.F64)
    for step in (1, 2):
        g = torch.randn(shape, generator=gen)
        p.grad = g.cuda()
        opt.step()
        wp, wm, wv = ref.adam(wp, g, wm, wv, step=step, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=wd,
                              adam_w_mode=adam_w_mode, bias_correction=bias_correction)
    close(p, wp, 1e-4, 1e-5)


@SETTINGS
@given(shape=shapes, momentum=st.sampled_from([0.0, 0.9]), nesterov=st.booleans(), seed=st.integers(0, 50))
def check_sgd(shape, momentum, nesterov, seed):
    nesterov = nesterov and momentum > 0
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(shape, generator=gen).cuda())
    opt = FusedSGD([p], lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=1e-3)
    wp, buf = p.detach().cpu().to(ref.F64), None
    for step in range(2):
        g = torch.randn(shape, generator=gen)
        p.grad = g.cuda()
        opt.step()
        wp, buf = ref.sgd(wp, g, buf, lr=0.1, momentum=momentum, dampening=0.0, weight_decay=1e-3, nesterov=nesterov,
                          wd_after_momentum=False, first_run=step == 0)
    close(p, wp, 1e-5, 1e-5)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 50))
def check_lamb(shape, seed):
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(shape, generator=gen).cuda())
    opt = FusedLAMB([p], lr=0.01)
    g = torch.randn(shape, generator=gen)
    p.grad = g.cuda()
    want = p.detach().cpu().to(ref.F64)
    opt.step()
    want, _, _, updates = ref.lamb([want], [g], [torch.zeros(shape)], [torch.zeros(shape)], step=1, lr=0.01,
                                   beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01, adam_w_mode=True,
                                   grad_averaging=True, bias_correction=True, max_grad_norm=1.0, use_nvlamb=False)
    close(p, want[0], 1e-4, 1e-5)
    close(p.grad, updates[0], 1e-4, 1e-5)


@SETTINGS
@given(batch=shapes, width=st.integers(1, 8), rms=st.booleans(), seed=st.integers(0, 50))
def check_norm(batch, width, rms, seed):
    gen = torch.Generator().manual_seed(seed)
    module = (FusedRMSNorm if rms else FusedLayerNorm)(width).cuda()
    x = torch.randn(batch + (width,), generator=gen)
    xd = x.cuda().requires_grad_()
    y = module(xd)
    y.backward(torch.ones_like(y))
    x64 = x.to(ref.F64).requires_grad_()
    y64 = ref.rms_norm(x64, (width,), None, 1e-5) if rms else ref.layer_norm(x64, (width,), None, None, 1e-5)
    y64.backward(torch.ones_like(y64))
    close(y, y64.detach(), 1e-4, 1e-4)  # a single normalized element: x - mean = 0 up to 316*|x| rounding
    close(xd.grad, x64.grad, 1e-3, 1e-3)  # width 1: var 0, rstd = 1/sqrt(eps) amplifies rounding


def check_mixed_and_amp_c():
    module = MixedFusedLayerNorm(8).cuda().to(torch.bfloat16)
    assert module(torch.randn(2, 8, device="cuda")).dtype == torch.bfloat16
    flag = torch.zeros(1, dtype=torch.int, device="cuda")
    ts = [torch.randn(3, device="cuda"), torch.randn(2, 2, device="cuda")]
    total, _ = multi_tensor_applier(amp_C.multi_tensor_l2norm, flag, [ts], False)
    assert abs(float(total) - ref.l2norm([t.cpu() for t in ts])) < 1e-5 and int(flag) == 0
    ts[1][0, 0] = float("nan")
    multi_tensor_applier(amp_C.multi_tensor_scale, flag, [ts, ts], 0.5)
    assert int(flag) == 1 and flag.device.type != "cpu"


if __name__ == "__main__":
    for check in (check_adam, check_sgd, check_lamb, check_norm, check_mixed_and_amp_c):
        check()
    print(f"apex numerics OK on {torch.ones(1, device='cuda').device}")
