"""apex and amp_C as transfer provides them, on the cpu target in-process.

Every numerical check compares with tests/apex_reference.py: float64 restatements of
apex's documented kernels, never transfer's code. Hypothesis draws shapes and
hyper-parameters. The stand-ins run the same checks in subprocesses
(tests/scripts/thirdparty/apex_numerics.py, test_apex_numerics_on_standins).
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import apex_reference as ref
from conftest import ROOT, SCRIPTS, VENDORS, clean_env, needs_standins, python

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def cpu_target():
    import transfer

    transfer.uninstall()
    saved = {k: os.environ.get(k) for k in ("TRANSFER_QUIET", "TRANSFER_CPU_AMP_DTYPE", "TRANSFER_DISABLE")}
    os.environ["TRANSFER_QUIET"] = "1"
    os.environ.pop("TRANSFER_CPU_AMP_DTYPE", None)
    os.environ.pop("TRANSFER_DISABLE", None)
    transfer.install("cpu")
    yield
    transfer.uninstall()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


shapes = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple)


def _close(got, want, rtol, atol):
    assert got.shape == want.shape
    torch.testing.assert_close(got.to(torch.float64), want, rtol=rtol, atol=atol)


# ------------------------------------------------------------------ optimizers

@SETTINGS
@given(shape_list=st.lists(shapes, min_size=1, max_size=3), lr=st.floats(1e-4, 1e-1), beta1=st.floats(0.5, 0.95),
       beta2=st.floats(0.9, 0.9999), eps=st.sampled_from([1e-8, 1e-6, 1e-3]), wd=st.sampled_from([0.0, 0.01, 0.1]),
       adam_w_mode=st.booleans(), bias_correction=st.booleans(), steps=st.integers(1, 4), seed=st.integers(0, 99))
def test_fused_adam_follows_apex_update_rule(shape_list, lr, beta1, beta2, eps, wd, adam_w_mode, bias_correction,
                                             steps, seed):
    from apex.optimizers import FusedAdam

    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shape_list]
    want = [(p.detach().to(ref.F64), torch.zeros(s, dtype=ref.F64), torch.zeros(s, dtype=ref.F64)) for p, s in
            zip(params, shape_list)]
    opt = FusedAdam(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd, adam_w_mode=adam_w_mode,
                    bias_correction=bias_correction)
    for step in range(1, steps + 1):
        grads = [torch.randn(s, generator=gen) for s in shape_list]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        want = [ref.adam(p, g, m, v, step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=wd,
                         adam_w_mode=adam_w_mode, bias_correction=bias_correction)
                for (p, m, v), g in zip(want, grads)]
    for p, (wp, wm, wv) in zip(params, want):
        _close(p.detach(), wp, rtol=1e-4, atol=1e-5)
        _close(opt.state[p]["exp_avg"], wm, rtol=1e-4, atol=1e-6)
        assert opt.state[p]["exp_avg"].dtype == torch.float32
    assert opt.param_groups[0]["step"] == steps  # one counter per group, as apex


@SETTINGS
@given(shape=shapes, adam_w_mode=st.booleans(), seed=st.integers(0, 99))
def test_fused_adam_bf16_params_keep_fp32_moments(shape, adam_w_mode, seed):
    """apex keeps exp_avg/exp_avg_sq in float32 for half parameters and computes in float32."""
    from apex.optimizers import FusedAdam

    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(shape, generator=gen).to(torch.bfloat16))
    opt = FusedAdam([p], lr=1e-2, weight_decay=0.01, adam_w_mode=adam_w_mode)
    wp, wm, wv = p.detach().to(ref.F64), torch.zeros(shape, dtype=ref.F64), torch.zeros(shape, dtype=ref.F64)
    for step in (1, 2):
        g = torch.randn(shape, generator=gen).to(torch.bfloat16)
        p.grad = g
        opt.step()
        wp, wm, wv = ref.adam(wp, g, wm, wv, step=step, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8,
                              weight_decay=0.01, adam_w_mode=adam_w_mode, bias_correction=True)
        wp = wp.to(torch.bfloat16).to(ref.F64)  # the parameter is stored in bf16 after each step
    assert p.dtype == torch.bfloat16 and opt.state[p]["exp_avg"].dtype == torch.float32
    _close(p.detach(), wp, rtol=1e-2, atol=1e-2)
    _close(opt.state[p]["exp_avg_sq"], wv, rtol=1e-4, atol=1e-6)


def test_fused_adam_rejects_what_apex_rejects():
    from apex.optimizers import FusedAdam

    p = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(RuntimeError, match="does not support the AMSGrad variant"):
        FusedAdam(p, amsgrad=True)
    with pytest.raises(RuntimeError, match="only supported with the capturable version"):
        FusedAdam(p, master_weights=True)
    opt = FusedAdam(p)
    with pytest.raises(RuntimeError, match="call step\\(\\) with no arguments"):
        opt.step(scale=2.0)
    assert opt.defaults["eps"] == 1e-8 and opt.adam_w_mode == 1  # apex's defaults: AdamW mode
    p[0].grad = torch.ones(2)
    opt.zero_grad()
    assert p[0].grad is None  # set_grad_none=True by default


@SETTINGS
@given(shape_list=st.lists(shapes, min_size=1, max_size=3), lr=st.floats(1e-3, 0.5),
       momentum=st.sampled_from([0.0, 0.5, 0.9]), dampening=st.sampled_from([0.0, 0.1]),
       wd=st.sampled_from([0.0, 1e-3]), nesterov=st.booleans(), wd_after=st.booleans(), steps=st.integers(1, 3),
       seed=st.integers(0, 99))
def test_fused_sgd_follows_apex_update_rule(shape_list, lr, momentum, dampening, wd, nesterov, wd_after, steps, seed):
    from apex.optimizers import FusedSGD

    if nesterov and (momentum == 0 or dampening != 0):
        with pytest.raises(ValueError, match="Nesterov momentum requires"):
            FusedSGD([torch.nn.Parameter(torch.zeros(1))], lr=lr, momentum=momentum, dampening=dampening,
                     nesterov=True)
        return
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shape_list]
    want = [[p.detach().to(ref.F64), None] for p in params]
    opt = FusedSGD(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd, nesterov=nesterov,
                   wd_after_momentum=wd_after)
    for step in range(steps):
        grads = [torch.randn(s, generator=gen) for s in shape_list]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        for w, g in zip(want, grads):
            w[0], w[1] = ref.sgd(w[0], g, w[1], lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd,
                                 nesterov=nesterov, wd_after_momentum=wd_after, first_run=step == 0)
    for p, (wp, _) in zip(params, want):
        _close(p.detach(), wp, rtol=1e-5, atol=1e-5)


@SETTINGS
@given(shape_list=st.lists(shapes, min_size=1, max_size=3), lr=st.floats(1e-3, 0.1),
       wd=st.sampled_from([0.0, 0.01]), adam_w_mode=st.booleans(), grad_averaging=st.booleans(),
       max_grad_norm=st.sampled_from([0.5, 1.0, 100.0]), use_nvlamb=st.booleans(), steps=st.integers(1, 3),
       seed=st.integers(0, 99))
def test_fused_lamb_follows_apex_update_rule(shape_list, lr, wd, adam_w_mode, grad_averaging, max_grad_norm,
                                             use_nvlamb, steps, seed):
    from apex.optimizers import FusedLAMB

    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shape_list]
    wp = [p.detach().to(ref.F64) for p in params]
    wm = [torch.zeros(s, dtype=ref.F64) for s in shape_list]
    wv = [torch.zeros(s, dtype=ref.F64) for s in shape_list]
    opt = FusedLAMB(params, lr=lr, weight_decay=wd, adam_w_mode=adam_w_mode, grad_averaging=grad_averaging,
                    max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb)
    for step in range(1, steps + 1):
        grads = [torch.randn(s, generator=gen) for s in shape_list]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        wp, wm, wv, updates = ref.lamb(wp, grads, wm, wv, step=step, lr=lr, beta1=0.9, beta2=0.999, eps=1e-6,
                                       weight_decay=wd, adam_w_mode=adam_w_mode, grad_averaging=grad_averaging,
                                       bias_correction=True, max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb)
        for p, u in zip(params, updates):  # the kernel leaves each update in the gradient's memory
            # float32 against a float64 reference: where L2 decay (adam_w_mode=False) nearly cancels a
            # gradient, an element keeps fewer digits (apex's CUDA kernel computes in float32 too), so the
            # update is compared at its own scale (what LAMB's trust ratio uses), not element by element.
            _close(p.grad, u, rtol=1e-4, atol=max(1e-5, 1e-4 * float(u.abs().max())))
    for p, w in zip(params, wp):
        _close(p.detach(), w, rtol=1e-4, atol=1e-5)


def test_fused_lamb_rejects_bf16_and_amsgrad():
    from apex.optimizers import FusedLAMB

    with pytest.raises(RuntimeError, match="AMSGrad"):
        FusedLAMB([torch.nn.Parameter(torch.zeros(1))], amsgrad=True)
    defaults = FusedLAMB([torch.nn.Parameter(torch.zeros(1))]).defaults  # apex's defaults
    assert (defaults["eps"], defaults["weight_decay"], defaults["max_grad_norm"]) == (1e-6, 0.01, 1.0)
    p = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    p.grad = torch.ones(2, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="only support fp16 and fp32"):
        FusedLAMB([p]).step()


@pytest.mark.parametrize("reg_inside_moment,norm_type,init_zero,bias_correction,grad_averaging,wd", [
    (True, 2, False, False, False, 0.0),  # the settings of apex's own test against its reference Novograd
    (False, 2, True, True, True, 0.01),
    (True, 0, False, True, True, 0.01),
    (False, 0, True, False, False, 0.0),
])
def test_fused_novograd_follows_apex_update_rule(reg_inside_moment, norm_type, init_zero, bias_correction,
                                                 grad_averaging, wd):
    from apex.optimizers import FusedNovoGrad

    gen = torch.Generator().manual_seed(3)
    shape_list = [(4, 3), (5,), (1,)]
    params = [torch.nn.Parameter(torch.rand(s, generator=gen)) for s in shape_list]
    opt = FusedNovoGrad(params, lr=1e-2, betas=(0.95, 0.98), eps=1e-8, weight_decay=wd, grad_averaging=grad_averaging,
                        bias_correction=bias_correction, reg_inside_moment=reg_inside_moment, norm_type=norm_type,
                        init_zero=init_zero)
    wp, wm, norms = [p.detach().to(ref.F64) for p in params], [torch.zeros(s, dtype=ref.F64) for s in shape_list], None
    for step in range(1, 4):
        grads = [torch.rand(s, generator=gen) for s in shape_list]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        wp, wm, norms = ref.novograd(wp, grads, wm, norms, step=step, lr=1e-2, beta1=0.95, beta2=0.98, eps=1e-8,
                                     weight_decay=wd, grad_averaging=grad_averaging, bias_correction=bias_correction,
                                     reg_inside_moment=reg_inside_moment, norm_type=norm_type, init_zero=init_zero)
    for p, w in zip(params, wp):
        _close(p.detach(), w, rtol=1e-5, atol=1e-6)
    got_norms = opt.param_groups[0]["exp_avg_sq"][1]  # [fp16 norms, fp32 norms], the norms themselves
    _close(got_norms, torch.tensor(norms, dtype=ref.F64), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="AMSGrad"):
        FusedNovoGrad(params, amsgrad=True)


def test_fused_mixed_precision_lamb_keeps_float32_masters_and_skips_overflow():
    from apex.optimizers import FusedMixedPrecisionLamb

    gen = torch.Generator().manual_seed(5)
    shape_list = [(6, 4), (3,)]
    start = [torch.randn(s, generator=gen) for s in shape_list]
    params = [torch.nn.Parameter(t.to(torch.bfloat16)) for t in start]
    opt = FusedMixedPrecisionLamb(params, lr=1e-2, weight_decay=0.01, reduced_precision_dtype=torch.bfloat16)
    wp = [t.to(torch.bfloat16).to(ref.F64) for t in start]  # the masters start as the model's values
    wm, wv = [torch.zeros(s, dtype=ref.F64) for s in shape_list], [torch.zeros(s, dtype=ref.F64) for s in shape_list]
    scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
    for step in range(1, 4):
        grads = [torch.randn(s, generator=gen).to(torch.bfloat16) for s in shape_list]
        loss = sum((p.float() * g.float()).sum() for p, g in zip(params, grads))  # d loss / d p = g
        scaler.scale(loss).backward()
        scaler.step(opt)  # the optimizer reads the scale itself (_step_supports_amp_scaling)
        scaler.update()
        opt.zero_grad()
        wp, wm, wv, _ = ref.lamb(wp, grads, wm, wv, step=step, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6,
                                 weight_decay=0.01, adam_w_mode=True, grad_averaging=True, bias_correction=True,
                                 max_grad_norm=1.0, use_nvlamb=False)
    masters = opt.param_groups_full_precision[0]["params"]
    for p, master, w in zip(params, masters, wp):
        assert master.dtype == torch.float32 and opt.state[p]["exp_avg"].dtype == torch.float32
        # the update is stored in the bfloat16 gradient before it is applied (as the kernel does): 2**-8 of lr*|u|
        _close(master, w, rtol=0, atol=1e-2 * 2 ** -7 * 3)
        assert torch.equal(p.detach(), master.to(torch.bfloat16))  # the model gets the masters' new values
    before = [m.clone() for m in masters]
    scaler.scale(params[0].float().sum() * float("inf") + params[1].float().sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert all(torch.equal(b, m) for b, m in zip(before, masters))  # an overflow step changes nothing
    assert int(opt.param_groups[0]["step"]) == 3


def test_fused_sgd_half_rounds_once_as_apex_kernel():
    """apex's tests/L0 TestFusedSGD.test_half compares FusedSGD on float16 with torch.optim.SGD within 1e-3:
    the kernel keeps the new momentum in float32 for the weight update, torch updates from the momentum
    rounded to float16, so 7 steps drift by 1.2e-3 to 2e-3 whatever the seed. The drop-in is the kernel."""
    from apex.optimizers import FusedSGD

    gen = torch.Generator().manual_seed(0)
    start = torch.rand(4096, generator=gen).half()
    p, theirs = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    opt, torch_opt = FusedSGD([p], lr=0.25, momentum=0.125), torch.optim.SGD([theirs], lr=0.25, momentum=0.125)
    want, buf = start.clone(), None
    for step in range(4):
        g = torch.rand(4096, generator=gen).half()
        p.grad, theirs.grad = g.clone(), g.clone()
        opt.step()
        torch_opt.step()
        want, buf = ref.sgd_half(want, g, buf, lr=0.25, momentum=0.125, first_run=step == 0)
        assert torch.equal(p.detach(), want) and torch.equal(opt.state[p]["momentum_buffer"], buf)
    assert not torch.equal(p.detach(), theirs.detach())  # torch's rounding differs, which apex's test sees


def test_fp16_optimizer_keeps_float32_masters_and_skips_overflow_steps(capsys):
    """apex.fp16_utils.FP16_Optimizer as older trainers use it (a half model, the optimizer wrapped, its
    backward): the masters step on the model's gradients / scale; an overflow skips the step and halves
    the scale; the model gets the masters in float16."""
    from apex.fp16_utils import FP16_Optimizer, network_to_half

    torch.manual_seed(0)
    model = network_to_half(torch.nn.Linear(4, 3)).cuda()
    start = [p.detach().float().clone() for p in model.parameters()]
    optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.5), dynamic_loss_scale=True, verbose=False)
    assert optimizer.loss_scale == 2.0 ** 16 and all(p.dtype == torch.float32 for p in optimizer.param_groups[0]["params"])
    x = torch.randn(8, 4, device="cuda")
    optimizer.zero_grad()
    optimizer.backward(model(x).float().pow(2).mean())
    model_grads = [p.grad.float() for p in model.parameters()]  # float16 gradients of the scaled loss
    optimizer.step()
    masters = optimizer.param_groups[0]["params"]
    for master, w0, g in zip(masters, start, model_grads):
        torch.testing.assert_close(master.detach(), w0 - 0.5 * g / 2.0 ** 16)
    for p, master in zip(model.parameters(), masters):
        assert p.dtype == torch.float16 and torch.equal(p.detach(), master.detach().half())
    before = [m.detach().clone() for m in masters]
    optimizer.zero_grad()
    optimizer.backward(model(x).float().sum() * float("inf"))
    optimizer.step()
    assert optimizer.overflow and optimizer.loss_scale == 2.0 ** 15
    assert all(torch.equal(b, m.detach()) for b, m in zip(before, masters))
    assert "Gradient overflow" in capsys.readouterr().out


# ------------------------------------------------------------------ amp_C / multi_tensor_applier

@SETTINGS
@given(shape_list=st.lists(shapes, min_size=1, max_size=4), scale=st.floats(1e-3, 10.0), seed=st.integers(0, 99),
       bad=st.sampled_from([None, "inf", "nan"]), in_place=st.booleans())
def test_multi_tensor_scale_and_overflow_flag(shape_list, scale, seed, bad, in_place):
    import amp_C
    from apex.multi_tensor_apply import multi_tensor_applier

    gen = torch.Generator().manual_seed(seed)
    ins = [torch.randn(s, generator=gen) for s in shape_list]
    if bad:
        ins[-1].view(-1)[0] = float(bad)
    want = [t.to(ref.F64) * torch.tensor(scale, dtype=torch.float32).item() for t in ins]
    outs = ins if in_place else [torch.empty_like(t) for t in ins]
    flag = torch.zeros(1, dtype=torch.int)
    multi_tensor_applier(amp_C.multi_tensor_scale, flag, [ins, outs], scale)
    assert int(flag) == (1 if bad else 0)
    for got, w in zip(outs, want):
        torch.testing.assert_close(got.to(ref.F64), w, rtol=1e-6, atol=1e-7, equal_nan=True)


@SETTINGS
@given(shape_list=st.lists(shapes, min_size=1, max_size=4), seed=st.integers(0, 99), per_tensor=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_multi_tensor_l2norm(shape_list, seed, per_tensor, dtype):
    import amp_C
    from apex.multi_tensor_apply import multi_tensor_applier

    gen = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(s, generator=gen).to(dtype) for s in shape_list]
    flag = torch.zeros(1, dtype=torch.int)
    total, per = multi_tensor_applier(amp_C.multi_tensor_l2norm, flag, [tensors], per_tensor)
    assert total.dtype == torch.float32 and total.shape == (1,)
    assert abs(float(total) - ref.l2norm(tensors)) <= 1e-5 * max(1.0, ref.l2norm(tensors))
    if per_tensor:
        assert per.shape == (len(tensors),)
        for got, t in zip(per, tensors):
            assert abs(float(got) - ref.l2norm([t])) <= 1e-5 * max(1.0, ref.l2norm([t]))
    else:
        assert per.numel() == 0
    assert int(flag) == 0
    tensors[0].view(-1)[0] = float("inf")
    multi_tensor_applier(amp_C.multi_tensor_l2norm, flag, [tensors], per_tensor)
    assert int(flag) == 1


def test_multi_tensor_axpby_checks_the_named_argument():
    import amp_C

    x, y, out = [torch.tensor([1.0, float("inf")])], [torch.tensor([2.0, 3.0])], [torch.empty(2)]
    flag = torch.zeros(1, dtype=torch.int)
    amp_C.multi_tensor_axpby(2048 * 32, flag, [x, y, out], 0.5, 2.0, 1)  # check y only: finite
    assert int(flag) == 0 and out[0][0] == 0.5 * 1.0 + 2.0 * 2.0
    amp_C.multi_tensor_axpby(2048 * 32, flag, [x, y, out], 0.5, 2.0, 0)
    assert int(flag) == 1


def test_amp_c_adam_and_sgd_equal_the_optimizers():
    """The raw kernels (as Megatron's DistributedFusedAdam calls them) compute apex's rules."""
    import amp_C

    p, g = torch.randn(5), torch.randn(5)
    m, v = torch.zeros(5), torch.zeros(5)
    wp, wm, wv = ref.adam(p, g, m, v, step=1, lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1,
                          adam_w_mode=False, bias_correction=True)
    amp_C.multi_tensor_adam(65536, torch.zeros(1, dtype=torch.int), [[g], [p], [m], [v]], 0.1, 0.9, 0.99, 1e-8, 1,
                            0, 1, 0.1)
    _close(p, wp, rtol=1e-5, atol=1e-6)
    flag = torch.ones(1, dtype=torch.int)  # a set flag: sgd skips its update
    before = p.clone()
    amp_C.multi_tensor_sgd(65536, flag, [[g], [p], [torch.zeros(5)]], 0.0, 0.9, 0.0, 0.1, False, True, False, 1.0)
    assert torch.equal(p, before)


def test_amp_c_names_what_it_provides():
    import amp_C

    with pytest.raises(AttributeError, match="provides multi_tensor_scale"):
        amp_C.multi_tensor_lamb_stage1_cuda  # an apex kernel not provided
    assert not hasattr(amp_C, "__path__")  # a module, as apex's extension


# ------------------------------------------------------------------ normalization

@SETTINGS
@given(batch=shapes, normalized=st.lists(st.integers(1, 8), min_size=1, max_size=2).map(tuple),
       affine=st.booleans(), rms=st.booleans(), seed=st.integers(0, 99))
def test_fused_norms_forward_and_backward(batch, normalized, affine, rms, seed):
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    gen = torch.Generator().manual_seed(seed)
    module = (FusedRMSNorm if rms else FusedLayerNorm)(normalized, elementwise_affine=affine)
    assert module.eps == 1e-5
    if affine:
        with torch.no_grad():
            module.weight.copy_(torch.randn(normalized, generator=gen))
            if not rms:
                module.bias.copy_(torch.randn(normalized, generator=gen))
    x = torch.randn(batch + normalized, generator=gen, requires_grad=True)
    y = module(x)
    grad = torch.randn(y.shape, generator=gen)
    y.backward(grad)
    x64 = x.detach().to(ref.F64).requires_grad_()
    w64 = module.weight.detach().to(ref.F64).requires_grad_() if affine else None
    b64 = module.bias.detach().to(ref.F64).requires_grad_() if affine and not rms else None
    y64 = ref.rms_norm(x64, normalized, w64, 1e-5) if rms else ref.layer_norm(x64, normalized, w64, b64, 1e-5)
    y64.backward(grad.to(ref.F64))
    assert y.dtype == torch.float32
    _close(y.detach(), y64.detach(), rtol=1e-4, atol=1e-4)  # one normalized element: 0 up to rstd*|x| rounding
    _close(x.grad, x64.grad, rtol=1e-3, atol=1e-3)  # width 1: var 0, rstd = 1/sqrt(eps) amplifies rounding
    if affine:
        _close(module.weight.grad, w64.grad, rtol=1e-3, atol=1e-4)
        if not rms:
            _close(module.bias.grad, b64.grad, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("weight_dtype", [torch.bfloat16, torch.float32])
def test_mixed_fused_norms_answer_in_the_weights_dtype(rms, weight_dtype):
    from apex.normalization import MixedFusedLayerNorm, MixedFusedRMSNorm

    module = (MixedFusedRMSNorm if rms else MixedFusedLayerNorm)(16).to(weight_dtype)
    x = torch.randn(4, 16)
    y = module(x)
    assert y.dtype == weight_dtype  # the parameters' dtype, whatever the input's
    want = (ref.rms_norm(x, (16,), module.weight, 1e-5) if rms
            else ref.layer_norm(x, (16,), module.weight, module.bias, 1e-5))
    _close(y, want.to(weight_dtype).to(ref.F64), rtol=1e-2, atol=1e-2)
    with pytest.raises(RuntimeError, match="does not support `elementwise_affine = False`"):
        with pytest.warns(UserWarning):
            (MixedFusedRMSNorm if rms else MixedFusedLayerNorm)(16, elementwise_affine=False)


def test_fused_layer_norm_under_autocast_computes_in_the_autocast_dtype():
    """apex casts input and parameters to the autocast dtype and answers in it (torch.nn.LayerNorm
    answers float32 under autocast): here the cpu target's bf16."""
    from apex.normalization import FusedLayerNorm

    module = FusedLayerNorm(8)
    x = torch.randn(3, 8)
    with torch.autocast("cuda", dtype=torch.float16):
        y = module(x)
        native = torch.nn.functional.layer_norm(x, (8,), module.weight, module.bias)
    assert y.dtype == torch.bfloat16 and native.dtype == torch.float32
    want = ref.layer_norm(x.to(torch.bfloat16), (8,), module.weight.to(torch.bfloat16),
                          module.bias.to(torch.bfloat16), 1e-5)
    _close(y, want.to(torch.bfloat16).to(ref.F64), rtol=1e-2, atol=1e-2)


def test_fused_norm_needs_matching_dtypes_as_apex_kernel_does():
    from apex.normalization.fused_layer_norm import fused_layer_norm_affine, fused_rms_norm

    x = torch.randn(2, 4, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="expected scalar type BFloat16 but found Float"):
        fused_layer_norm_affine(x, torch.ones(4), torch.zeros(4), (4,))
    small = torch.randn(2, 4) * 1e-3  # mean(x**2) ~ 1e-6: eps decides the result
    _close(fused_rms_norm(small, (4,)), ref.rms_norm(small, (4,), None, 1e-6), rtol=1e-4, atol=1e-5)  # functions: 1e-6
    from apex.normalization import FusedRMSNorm

    _close(FusedRMSNorm(4, elementwise_affine=False)(small), ref.rms_norm(small, (4,), None, 1e-5), rtol=1e-4,
           atol=1e-5)  # modules: 1e-5
    with pytest.raises(RuntimeError, match="Given normalized_shape=\\[5\\]"):
        fused_rms_norm(torch.randn(2, 4), (5,))


# ------------------------------------------------------------------ amp

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 3)).cuda()


def test_amp_initialize_returns_what_apex_returns(capsys):
    from apex import amp

    m1, m2 = _mlp(), _mlp()
    o1 = torch.optim.SGD(m1.parameters(), lr=0.1)
    model, opt = amp.initialize(m1, o1, opt_level="O1")
    assert model is m1 and opt is o1
    assert "Selected optimization level O1" in capsys.readouterr().out  # apex's print (verbosity=1)
    models, opts = amp.initialize([_mlp(), _mlp()], [torch.optim.SGD(_mlp().parameters(), lr=1)], verbosity=0)
    assert isinstance(models, list) and len(models) == 2 and isinstance(opts, list)
    assert amp.initialize(m2, opt_level="O0", verbosity=0) is m2
    with pytest.raises(RuntimeError, match="Unexpected optimization level"):
        amp.initialize(_mlp(), opt_level="O4", verbosity=0)
    with pytest.raises(RuntimeError, match="should only be passed through amp.initialize once"):
        amp.initialize(_mlp(), o1, verbosity=0)
    with pytest.raises(RuntimeError, match="AFTER"):
        amp.initialize(torch.nn.DataParallel(_mlp()), verbosity=0)
    half = _mlp().half()
    with pytest.raises(RuntimeError, match="you do not need to call .half\\(\\)"):
        amp.initialize(half, verbosity=0)


def test_amp_o2_casts_the_model_and_keeps_fp32_master_weights():
    from apex import amp

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O2", verbosity=0)
    half = torch.bfloat16  # the cpu target's policy for apex's float16 (TRANSFER_CPU_AMP_DTYPE unset)
    assert model[0].weight.dtype == half and model[1].weight.dtype == torch.float32  # BatchNorm kept fp32
    assert all(v.dtype == torch.float32 for v in model.state_dict().values() if v.is_floating_point())
    x, y = torch.randn(5, 6, device="cuda"), torch.randint(0, 3, (5,), device="cuda")
    out = model(x)
    assert out.dtype == torch.float32  # outputs cast back to fp32
    loss = torch.nn.functional.cross_entropy(out, y)
    with amp.scale_loss(loss, opt) as scaled:
        assert float(scaled) == pytest.approx(float(loss) * 2 ** 16, rel=1e-6)  # dynamic scaling starts at 2**16
        scaled.backward()
    masters = list(amp.master_params(opt))
    assert all(p.dtype == torch.float32 for p in masters)
    # master grads: the model's half grads unscaled into float32
    for master, model_param in zip(masters[:1], [model[0].weight]):
        torch.testing.assert_close(master.grad, model_param.grad.float() / 2 ** 16)
    opt.step()
    torch.testing.assert_close(model[0].weight, masters[0].detach().to(half))  # masters copied into the model


def test_dynamic_loss_scale_skips_overflow_steps_and_halves_then_grows(capsys):
    from apex import amp

    model = torch.nn.Linear(3, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=1)
    before = model.weight.detach().clone()
    loss = model(torch.randn(2, 3, device="cuda")).sum() * float("inf")
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
    opt.step()
    assert torch.equal(model.weight, before)  # the overflow step was skipped
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 2.0 ** 15, "unskipped": 0}
    assert "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0" in capsys.readouterr().out
    amp.load_state_dict({"loss_scaler0": {"loss_scale": 2.0 ** 15, "unskipped": 1999}})
    with amp.scale_loss(model(torch.randn(2, 3, device="cuda")).sum(), opt) as scaled:
        scaled.backward()
    opt.step()
    assert not torch.equal(model.weight, before)
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 2.0 ** 16, "unskipped": 0}  # 2000 clean steps: x2
    with pytest.raises(RuntimeError, match="Unexpected key"):
        amp.load_state_dict({"loss_scaler0": {"loss_scale": 1.0, "unskipped": 0}, "other": {}})


def test_amp_o1_gradients_are_unscaled_and_close_to_float64():
    """O1: forward in the autocast dtype, loss scaled by 2**16, grads unscaled before step()."""
    from apex import amp
    from apex.optimizers import FusedAdam

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).cuda()
    ref_model = [p.detach().to(ref.F64).clone().requires_grad_() for p in model.parameters()]
    opt = FusedAdam(model.parameters(), lr=1e-3)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
    x, y = torch.randn(16, 8, device="cuda"), torch.randn(16, 4, device="cuda")
    out = model(x)
    assert out.dtype == torch.float32
    loss = torch.nn.functional.mse_loss(out, y)
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
    w1, b1, w2, b2 = ref_model
    h = torch.nn.functional.gelu(x.to(ref.F64) @ w1.T + b1)
    torch.nn.functional.mse_loss(h @ w2.T + b2, y.to(ref.F64)).backward()
    for p, r in zip(model.parameters(), ref_model):
        _close(p.grad, r.grad, rtol=5e-2, atol=5e-3)  # bf16 forward, fp32 unscaled grads


def test_amp_disabled_is_a_no_op():
    from apex import amp

    model, opt = _mlp(), torch.optim.SGD(_mlp().parameters(), lr=1)
    assert amp.initialize(model, opt, enabled=False) == (model, opt)


# ------------------------------------------------------------------ parallel

def test_sync_batchnorm_without_process_group_is_batchnorm_and_honours_apex_options():
    from apex.parallel import SyncBatchNorm, convert_syncbn_model

    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(4)
    model = convert_syncbn_model(torch.nn.Sequential(bn, torch.nn.InstanceNorm2d(4)))
    assert isinstance(model[0], SyncBatchNorm) and isinstance(model[1], torch.nn.InstanceNorm2d)
    assert model[0].running_mean is bn.running_mean
    x = torch.randn(3, 4, 5, 5)
    torch.testing.assert_close(model[0](x), torch.nn.functional.batch_norm(x, None, None, bn.weight, bn.bias, True))
    nhwc = SyncBatchNorm(4, channel_last=True, fuse_relu=True)
    z = torch.randn(3, 5, 5, 4)
    got = nhwc(x.permute(0, 2, 3, 1), z)
    want = torch.relu(torch.nn.functional.batch_norm(x, None, None, None, None, True) + z.permute(0, 3, 1, 2))
    torch.testing.assert_close(got, want.permute(0, 2, 3, 1))


def test_apex_ddp_averages_with_apex_predivide_rule(tmp_path):
    """world size 1: grads * (1/f) -> all-reduce -> * (f/world) with gradient_average; only / f without."""
    import torch.distributed as dist
    from apex.parallel import DistributedDataParallel

    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        for average, factor in ((True, 4.0), (False, 4.0)):
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 2).cuda()
            reference = torch.nn.Linear(3, 2)
            reference.load_state_dict(model.state_dict())
            ddp = DistributedDataParallel(model, gradient_average=average, gradient_predivide_factor=factor,
                                          delay_allreduce=True)
            x = torch.randn(4, 3)
            ddp(x.cuda()).sum().backward()
            reference(x).sum().backward()
            want = reference.weight.grad if average else reference.weight.grad / factor
            torch.testing.assert_close(model.weight.grad, want)
        with pytest.raises(ValueError, match="shared_param is no longer supported"):
            DistributedDataParallel(torch.nn.Linear(1, 1), shared_param=True)
        with pytest.warns(UserWarning, match="allreduce_trigger_params.*not honoured"):
            DistributedDataParallel(torch.nn.Linear(1, 1), allreduce_trigger_params=[])
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------ served under the public names

def test_apex_is_a_real_package_and_goes_away_on_uninstall():
    import importlib.metadata
    import importlib.util

    import apex
    import apex.normalization.fused_layer_norm as fln

    assert apex.__spec__.name == "apex" and apex.__path__ and importlib.util.find_spec("amp_C") is not None
    assert fln.FusedLayerNorm is apex.normalization.FusedLayerNorm
    assert importlib.metadata.version("apex") == "0.1"
    assert sorted(importlib.metadata.packages_distributions()["amp_C"]) == ["apex"]
    with pytest.raises(ModuleNotFoundError, match="apex.contrib.xentropy"):
        import apex.contrib.xentropy  # noqa: F401


@needs_standins
@pytest.mark.parametrize("vendor", ["npu", "sdaa", "gcu"])
def test_apex_numerics_on_standins(vendor):
    """The same float64 comparisons on the vendor device (hypothesis, fewer examples), in a subprocess."""
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=os.pathsep.join([VENDORS, os.path.join(ROOT, "tests")]),
                    TRANSFER_QUIET=1)
    proc = python(os.path.join(SCRIPTS, "thirdparty", "apex_numerics.py"), env=env, timeout=900)
    assert f"apex numerics OK on {vendor}:0" in proc.stdout, proc.stdout + proc.stderr


# ------------------------------------------------------------------ the table's torch-native rewrites

def test_native_rewrites_are_rows_and_compute_the_same():
    """rewrites.NATIVE_REWRITES (what `transfer port` may write) holds: under the stated conditions the
    torch-native spelling computes what the apex replacement computes."""
    from transfer import support
    from transfer.migrate import rewrites
    from apex.normalization import FusedLayerNorm, FusedRMSNorm
    from apex.optimizers import FusedAdam, FusedSGD
    from apex.parallel import convert_syncbn_model

    assert set(rewrites.NATIVE_REWRITES) <= set(support.apis())
    gen = torch.Generator().manual_seed(0)
    for adam_w_mode, native in ((True, torch.optim.AdamW), (False, torch.optim.Adam)):
        a = [torch.nn.Parameter(torch.randn(4, 3, generator=gen))]
        b = [torch.nn.Parameter(a[0].detach().clone())]
        ours = FusedAdam(a, lr=1e-2, weight_decay=0.1, adam_w_mode=adam_w_mode)
        theirs = native(b, lr=1e-2, weight_decay=0.1, foreach=True)
        for _ in range(3):
            g = torch.randn(4, 3, generator=gen)
            a[0].grad, b[0].grad = g.clone(), g.clone()
            ours.step()
            theirs.step()
        torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-6)
    a = [torch.nn.Parameter(torch.randn(5, generator=gen))]
    b = [torch.nn.Parameter(a[0].detach().clone())]
    ours, theirs = FusedSGD(a, lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True), torch.optim.SGD(
        b, lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True, foreach=True)
    for _ in range(3):
        g = torch.randn(5, generator=gen)
        a[0].grad, b[0].grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    torch.testing.assert_close(a[0], b[0])
    x = torch.randn(3, 6, generator=gen)
    torch.testing.assert_close(FusedLayerNorm(6)(x), torch.nn.LayerNorm(6)(x))
    if hasattr(torch.nn, "RMSNorm"):
        torch.testing.assert_close(FusedRMSNorm(6, eps=1e-5)(x), torch.nn.RMSNorm(6, eps=1e-5)(x))
    converted = convert_syncbn_model(torch.nn.Sequential(torch.nn.BatchNorm1d(6)))
    native_bn = torch.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.Sequential(torch.nn.BatchNorm1d(6)))
    torch.testing.assert_close(converted(x), native_bn(x))
