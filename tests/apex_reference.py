"""References for apex's kernels, in float64, written from apex's documented update rules.

Each function restates what apex's CUDA kernel computes (csrc/multi_tensor_adam.cu,
multi_tensor_lamb.cu, multi_tensor_sgd_kernel.cu, layer_norm_cuda_kernel.cu; the
optimizers' Python step() in apex/optimizers/) on float64 copies: it never calls
transfer's implementation. Used in-process (tests/test_apex.py) and in the stand-in
subprocesses (tests/scripts/thirdparty/apex_numerics.py).
"""

import math

import torch

F64 = torch.float64


def adam(p, g, m, v, *, step, lr, beta1, beta2, eps, weight_decay, adam_w_mode, bias_correction):
    """One apex FusedAdam update of float64 tensors; returns (p, m, v)."""
    p, g, m, v = (t.to(F64) for t in (p, g, m, v))
    bc1 = 1 - beta1 ** step if bias_correction else 1.0
    bc2 = 1 - beta2 ** step if bias_correction else 1.0
    if not adam_w_mode:
        g = g + weight_decay * p
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    update = (m / bc1) / (torch.sqrt(v / bc2) + eps)
    if adam_w_mode:
        update = update + weight_decay * p
    return p - lr * update, m, v


def sgd(p, g, buf, *, lr, momentum, dampening, weight_decay, nesterov, wd_after_momentum, first_run, scale=1.0):
    """One apex FusedSGD update; returns (p, buf)."""
    p, g = p.to(F64), g.to(F64) * scale
    buf = None if buf is None else buf.to(F64)
    if weight_decay != 0 and not wd_after_momentum:
        g = g + weight_decay * p
    if momentum != 0:
        buf = g.clone() if first_run else buf * momentum + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf
    if weight_decay != 0 and wd_after_momentum:
        g = g + weight_decay * p
    return p - lr * g, buf


def lamb(params, grads, ms, vs, *, step, lr, beta1, beta2, eps, weight_decay, adam_w_mode, grad_averaging,
         bias_correction, max_grad_norm, use_nvlamb):
    """One apex FusedLAMB step over one group; returns (params, ms, vs, updates)."""
    params, grads, ms, vs = ([t.to(F64) for t in ts] for ts in (params, grads, ms, vs))
    global_norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    clip = global_norm / max_grad_norm if global_norm > max_grad_norm else 1.0
    bc1 = 1 - beta1 ** step if bias_correction else 1.0
    bc2 = 1 - beta2 ** step if bias_correction else 1.0
    beta3 = 1 - beta1 if grad_averaging else 1.0
    out_p, out_m, out_v, updates = [], [], [], []
    for p, g, m, v in zip(params, grads, ms, vs):
        sg = g / clip
        if not adam_w_mode:
            sg = sg + weight_decay * p
        m = m * beta1 + beta3 * sg
        v = v * beta2 + (1 - beta2) * sg * sg
        u = (m / bc1) / (torch.sqrt(v / bc2) + eps)
        if adam_w_mode:
            u = u + weight_decay * p
        ratio = lr
        if use_nvlamb or weight_decay != 0:
            pn, un = float(p.norm()), float(u.norm())
            ratio = lr * pn / un if pn != 0 and un != 0 else lr
        out_p.append(p - ratio * u)
        out_m.append(m)
        out_v.append(v)
        updates.append(u)
    return out_p, out_m, out_v, updates


def novograd(params, grads, ms, norms, *, step, lr, beta1, beta2, eps, weight_decay, grad_averaging,
             bias_correction, reg_inside_moment, norm_type, init_zero):
    """One apex FusedNovoGrad step over one group (csrc/multi_tensor_novograd.cu, multi_tensor_norm_out):
    per-tensor gradient norms n (the norms, not squares; None before the first step) blend as
    sqrt(beta2*n^2 + (1-beta2)*||g||^2) (L-inf: beta2*n + (1-beta2)*max|g|), started at the first
    gradients' norms (0 with init_zero); returns (params, ms, norms)."""
    grads = [g.to(F64) for g in grads]
    new = [float(g.abs().max()) if norm_type == 0 else float(g.norm()) for g in grads]
    if norms is None:
        norms = [0.0] * len(grads) if init_zero else list(new)
    if norm_type == 0:
        norms = [beta2 * n + (1 - beta2) * x for n, x in zip(norms, new)]
    else:
        norms = [math.sqrt(beta2 * n * n + (1 - beta2) * x * x) for n, x in zip(norms, new)]
    bc1 = 1 - beta1 ** step if bias_correction else 1.0
    bc2 = math.sqrt(1 - beta2 ** step) if bias_correction else 1.0
    beta3 = 1 - beta1 if grad_averaging else 1.0
    out_p, out_m = [], []
    for p, g, m, n in zip(params, grads, ms, norms):
        p, m = p.to(F64), m.to(F64)
        denom = n / bc2 + eps
        if reg_inside_moment:
            g = g / denom + weight_decay * p
            m = beta1 * m + beta3 * g
            p = p - lr * m / bc1
        else:
            m = beta1 * m + beta3 * g
            p = p - lr * (m / bc1 / denom + weight_decay * p)
        out_p.append(p)
        out_m.append(m)
    return out_p, out_m, norms


def sgd_half(p, g, buf, *, lr, momentum, first_run):
    """apex's SGDFunctor on float16 weights, momenta and gradients: each loaded to a float32 register,
    v = momentum*v + g (g on the first run), w = w - lr*v in float32, both stored to float16 once.
    (torch.optim.SGD instead rounds v to float16 after each op and updates w from the rounded v.)"""
    f32 = torch.float32
    g32 = g.to(f32)
    v32 = g32.clone() if first_run else buf.to(f32) * momentum + g32
    w32 = p.to(f32) + (-lr) * v32
    return w32.to(torch.float16), v32.to(torch.float16)


def layer_norm(x, normalized_shape, weight, bias, eps):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing dims, biased variance."""
    dims = tuple(range(-len(normalized_shape), 0))
    x = x.to(F64)
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dims, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight.to(F64)
    if bias is not None:
        y = y + bias.to(F64)
    return y


def rms_norm(x, normalized_shape, weight, eps):
    """y = x / sqrt(mean(x**2) + eps) * weight over the trailing dims."""
    dims = tuple(range(-len(normalized_shape), 0))
    x = x.to(F64)
    y = x / torch.sqrt((x * x).mean(dims, keepdim=True) + eps)
    return y if weight is None else y * weight.to(F64)


def l2norm(tensors):
    return math.sqrt(sum(float((t.to(F64) ** 2).sum()) for t in tensors))
