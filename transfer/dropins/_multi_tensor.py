"""apex's multi-tensor kernels (csrc/multi_tensor_*.cu) as torch foreach ops.

Shared by ``amp_C`` (transfer/dropins/amp_C.py) and ``apex.optimizers``.
Each function computes what the CUDA kernel computes, in float32 math
(``MATH_T``) whatever the storage dtype, with the kernel's ``noop_flag``
contract: the flag (an int tensor of one element) is set to 1 when an input
the kernel checks is not finite, and never reset; scale/axpby/l2norm check,
adam/lamb ignore it (apex's kernels do), sgd skips its update when it is set.
Nothing here syncs with the host except sgd's flag check.

torch's own fused kernels are used where they compute the same:
GradScaler's ``_amp_foreach_non_finite_check_and_unscale_`` for scale and the
non-finite check, ``_fused_adam(w)_`` for Adam on float32 parameters where the
target has that kernel (`fused_adam_available`).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch

_F32 = torch.float32
_HAS_LERP = hasattr(torch, "_foreach_lerp_")  # torch's foreach Adam's first-moment update (not in every torch)


# ---------------------------------------------------------------- checks (multi_tensor_apply.cuh)

def check_lists(tensor_lists: Sequence[Sequence[torch.Tensor]], depth: int, api: str) -> None:
    """The TORCH_CHECKs apex's multi_tensor_apply makes, with its messages."""
    if len(tensor_lists) != depth:
        raise RuntimeError(f"{api}: tensor_lists.size() != depth (expected {depth} lists, got {len(tensor_lists)})")
    first = tensor_lists[0]
    if len(first) == 0:
        raise RuntimeError(f"{api}: tensor_lists[0].size() is not > 0")
    device = first[0].device
    for tensors in tensor_lists:
        if len(tensors) != len(first):
            raise RuntimeError(f"{api}: Size mismatch among tensor lists")
        for t, ref in zip(tensors, first):
            if not (t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)
                    or (t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d))):
                raise RuntimeError(f"{api}: A tensor was not contiguous.")
            if t.device != device:
                raise RuntimeError(f"{api}: A tensor was not on the same device as the first tensor")
            if t.numel() != ref.numel():
                raise RuntimeError(f"{api}: Size mismatch")


def flag_if(noop_flag: Optional[torch.Tensor], bad: torch.Tensor) -> None:
    """noop_flag = 1 where `bad` (a bool/float tensor of one element) is set; no host sync."""
    if noop_flag is not None:
        noop_flag.masked_fill_((bad if bad.dtype == torch.bool else bad != 0).reshape(noop_flag.shape), 1)


def _groups(*lists: Sequence[torch.Tensor]):
    """Indices of the tensors of lists[0] grouped by the dtype in every list (one launch per group,
    as apex dispatches per dtype). A list spans one device (apex's multi_tensor_apply checks it)."""
    firsts = [lst[0].dtype for lst in lists]
    if all(t.dtype == d for lst, d in zip(lists, firsts) for t in lst):
        return [list(range(len(lists[0])))]
    groups = {}
    for i in range(len(lists[0])):
        groups.setdefault(tuple(lst[i].dtype for lst in lists), []).append(i)
    return list(groups.values())


def _copy_(dsts: List[torch.Tensor], srcs: List[torch.Tensor]) -> None:
    if hasattr(torch, "_foreach_copy_"):  # torch >= 2.1
        torch._foreach_copy_(dsts, srcs)
    else:
        for dst, src in zip(dsts, srcs):
            dst.copy_(src)


def _unscale_(tensors: List[torch.Tensor], factor: float) -> torch.Tensor:
    """tensors *= factor (float32 math) in place; returns found_inf (float32, one element)."""
    device = tensors[0].device
    found = torch.zeros(1, dtype=_F32, device=device)
    factor_t = torch.full((1,), factor, dtype=_F32, device=device)
    for idx in _groups(tensors):
        torch._amp_foreach_non_finite_check_and_unscale_([tensors[i] for i in idx], found, factor_t)
    return found


# ---------------------------------------------------------------- multi_tensor_scale

def scale(ins: List[torch.Tensor], outs: List[torch.Tensor], factor: float,
          noop_flag: Optional[torch.Tensor] = None) -> None:
    """out = float(in) * factor, stored in out's dtype; flag when an input is not finite."""
    if all(i is o for i, o in zip(ins, outs)):
        flag_if(noop_flag, _unscale_(list(outs), factor))
        return
    exact = [i.dtype == o.dtype or o.dtype == _F32 or o.dtype == torch.float64 for i, o in zip(ins, outs)]
    if all(exact):  # the conversion keeps every value: check and scale the outputs in place
        for i, o in zip(ins, outs):
            o.copy_(i)
        flag_if(noop_flag, _unscale_(list(outs), factor))
        return
    work = [i.to(_F32, copy=True) for i in ins]  # a narrowing store: check the inputs in float32
    flag_if(noop_flag, _unscale_(work, factor))
    for w, o in zip(work, outs):
        o.copy_(w)


# ---------------------------------------------------------------- multi_tensor_axpby

def axpby(xs, ys, outs, a: float, b: float, arg_to_check: int, noop_flag: Optional[torch.Tensor] = None) -> None:
    """out = a*x + b*y in float32; flag on non-finite x (0), y (1) or both (-1)."""
    bad = torch.zeros((), dtype=torch.bool, device=xs[0].device)
    for x, y, out in zip(xs, ys, outs):
        if arg_to_check in (-1, 0):
            bad = bad | ~torch.isfinite(x).all()
        if arg_to_check in (-1, 1):
            bad = bad | ~torch.isfinite(y).all()
        out.copy_(x.to(_F32) * a + y.to(_F32) * b)
    flag_if(noop_flag, bad)


# ---------------------------------------------------------------- multi_tensor_l2norm

def norms(tensors: List[torch.Tensor]) -> torch.Tensor:
    """Per-tensor L2 norms in float32 (one tensor of len(tensors) elements)."""
    out = [None] * len(tensors)
    for idx in _groups(tensors):
        group = [tensors[i] for i in idx]
        if group[0].dtype == _F32:
            values = torch._foreach_norm(group)
        else:  # sum of squares in float32, as the kernel accumulates
            values = [torch.linalg.vector_norm(t, 2, dtype=_F32) for t in group]
        for i, v in zip(idx, values):
            out[i] = v
    return torch.stack(out)


def l2norm(tensors: List[torch.Tensor], per_tensor: bool = False,
           noop_flag: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """(total norm [1], per-tensor norms [n] or [0]), float32; flag when the norm is not finite."""
    per = norms(tensors)
    total = torch.linalg.vector_norm(per, 2).reshape(1)
    flag_if(noop_flag, ~torch.isfinite(total))
    return total, (per if per_tensor else torch.empty(0, dtype=_F32, device=total.device))


# ---------------------------------------------------------------- multi_tensor_adam

def fused_adam_available(param: torch.Tensor, adamw: bool = True) -> bool:
    """torch has the fused kernel `adam` calls for this parameter's device: ``_fused_adamw_`` (`adamw`, mode 1)
    or ``_fused_adam_`` (mode 0). A plug-in may have one without the other (torch_npu: ``_fused_adamw_``)."""
    op = "_fused_adamw_" if adamw else "_fused_adam_"
    if not hasattr(torch, op):
        return False
    key = {"cpu": "CPU", "cuda": "CUDA"}.get(param.device.type, "PrivateUse1")
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", key)
    except RuntimeError:
        return False


def adam(gs, ps, ms, vs, lr: float, beta1: float, beta2: float, eps: float, step: int, mode: int,
         bias_correction: int, weight_decay: float, fused: bool = False) -> None:
    """apex's AdamFunctor: mode 1 (AdamW) p -= lr*(m_hat/(sqrt(v_hat)+eps) + wd*p); mode 0 (L2) g += wd*p first.

    The math is float32; p, m and v are stored back in their own dtypes (apex's
    FusedAdam keeps m and v in float32; DeepSpeed's, adapted from it, in the
    parameter's dtype). The gradients are only read.
    """
    bc1 = 1 - beta1 ** step if bias_correction else 1.0
    bc2 = 1 - beta2 ** step if bias_correction else 1.0
    for idx in _groups(ps):
        p = [ps[i] for i in idx]
        g = [gs[i] for i in idx]
        m = [ms[i] for i in idx]
        v = [vs[i] for i in idx]
        if fused and bias_correction and p[0].dtype == _F32 and all(t.dtype == _F32 for t in g + m + v):
            step_t = torch.full((), float(step), dtype=_F32, device=p[0].device)
            kernel = torch._fused_adamw_ if mode == 1 else torch._fused_adam_
            kernel(p, g, m, v, [], [step_t] * len(p), lr=lr, beta1=beta1, beta2=beta2,
                   weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)
            continue
        narrow = p[0].dtype != _F32
        p32 = [t.to(_F32) for t in p] if narrow else p
        g32 = [t.to(_F32) for t in g] if g[0].dtype != _F32 else g
        m_narrow, v_narrow = m[0].dtype != _F32, v[0].dtype != _F32
        m_out, v_out = m, v
        if m_narrow:
            m = [t.to(_F32) for t in m]
        if v_narrow:
            v = [t.to(_F32) for t in v]
        # apex's formula in the order of torch's foreach Adam (8 list ops):
        # p*(1 - lr*wd) - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) == p - lr*(m_hat/(sqrt(v_hat)+eps) + wd*p)
        if weight_decay != 0:
            if mode == 0:
                g32 = torch._foreach_add(g32, p32, alpha=weight_decay)
            else:
                torch._foreach_mul_(p32, 1 - lr * weight_decay)
        if _HAS_LERP:
            torch._foreach_lerp_(m, g32, 1 - beta1)
        else:
            torch._foreach_mul_(m, beta1)
            torch._foreach_add_(m, g32, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, g32, g32, value=1 - beta2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, math.sqrt(bc2))
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(p32, m, denom, value=-lr / bc1)
        if narrow:
            _copy_(p, p32)
        if m_narrow:
            _copy_(m_out, m)
        if v_narrow:
            _copy_(v_out, v)


# ---------------------------------------------------------------- multi_tensor_sgd

def sgd(gs, ps, moms, wd: float, momentum: float, dampening: float, lr: float, nesterov: bool, first_run: bool,
        wd_after_momentum: bool, factor: float, model_out: Optional[List[torch.Tensor]] = None) -> None:
    """apex's SGDFunctor in float32 math: momentum v = mu*v + (1-dampening)*g (v = g on the first run),
    p -= lr*g (g = v, or g + mu*v with nesterov), weight decay before or after momentum;
    `model_out` (fp16 model copies of fp32 master weights) receives the new weights."""
    for idx in _groups(ps, gs):
        p = [ps[i] for i in idx]
        narrow = p[0].dtype != _F32
        p32 = [t.to(_F32) for t in p] if narrow else p
        g32 = [gs[i] if gs[i].dtype == _F32 else gs[i].to(_F32) for i in idx]  # float32 grads: only read below
        if factor != 1.0:
            g32 = torch._foreach_mul(g32, factor)
        if wd != 0 and not wd_after_momentum:
            g32 = torch._foreach_add(g32, p32, alpha=wd)
        if momentum != 0:
            m = [moms[i] for i in idx]
            m32 = [t.to(_F32) for t in m] if m[0].dtype != _F32 else m
            if first_run:
                _copy_(m32, g32)
            else:
                torch._foreach_mul_(m32, momentum)
                torch._foreach_add_(m32, g32, alpha=1 - dampening)
            g32 = torch._foreach_add(g32, m32, alpha=momentum) if nesterov else m32
            if m32 is not m:
                _copy_(m, m32)
        if wd != 0 and wd_after_momentum:
            g32 = torch._foreach_add(g32, p32, alpha=wd)
        torch._foreach_add_(p32, g32, alpha=-lr)
        if narrow:
            _copy_(p, p32)
        if model_out is not None:
            _copy_([model_out[i] for i in idx], p32)


# ---------------------------------------------------------------- multi_tensor_lamb

def lamb(gs, ps, ms, vs, lr, beta1: float, beta2: float, eps: float, step, bias_correction: int,
         weight_decay: float, grad_averaging: int, mode: int, global_grad_norm: torch.Tensor,
         max_grad_norm, use_nvlamb: bool = False, inv_scale: Optional[torch.Tensor] = None,
         skip: Optional[torch.Tensor] = None, model_out: Optional[List[torch.Tensor]] = None) -> None:
    """apex's multi_tensor_lamb (stage 1 + stage 2), float32 math, no host sync.

    Stage 1 turns each gradient into its update u (written into the gradient's
    memory, as the kernel does): g/clip (clip = ||g||/max_grad_norm when above),
    moments with beta3 = 1-beta1 (grad_averaging) or 1, u = m_hat/(sqrt(v_hat)+eps)
    (+ wd*p in mode 1; g += wd*p before the moments in mode 0). Stage 2: p -= ratio*u
    with ratio = lr*||p||/||u|| (norms before the update; lr when either is 0) where
    weight_decay != 0 or use_nvlamb, else lr.

    apex's multi_tensor_lamb_mp (FusedMixedPrecisionLamb) passes ``lr``, ``step`` and
    ``max_grad_norm`` as one-element tensors, ``inv_scale`` (gradients are read times it),
    ``skip`` (its noop flag: where set, nothing is written) and ``model_out`` (the
    reduced-precision model copies of float32 master parameters, written with them).
    """
    if isinstance(step, torch.Tensor):
        step = step.reshape(()).to(_F32)
    bc1 = 1 - beta1 ** step if bias_correction else 1.0
    bc2 = 1 - beta2 ** step if bias_correction else 1.0
    beta3 = 1 - beta1 if grad_averaging else 1.0
    global_norm = global_grad_norm.reshape(()).to(_F32)
    if isinstance(max_grad_norm, torch.Tensor):
        max_grad_norm = max_grad_norm.reshape(()).to(_F32)
    if isinstance(lr, torch.Tensor):
        lr = lr.reshape(()).to(_F32)
    keep = None if skip is None else (skip.reshape(()) != 0)

    def put(dst, new):  # the kernel's store, none where the noop flag is set
        dst.copy_(new if keep is None else torch.where(keep, dst.to(new.dtype), new))

    clip = torch.where(global_norm > max_grad_norm, global_norm / max_grad_norm, torch.ones_like(global_norm))
    param_norms = norms(list(ps))
    updates = []
    for g, p, m, v in zip(gs, ps, ms, vs):
        p32, m32, v32 = p.to(_F32), m.to(_F32), v.to(_F32)
        sg = g.to(_F32) if inv_scale is None else g.to(_F32) * inv_scale.reshape(()).to(_F32)
        sg = sg / clip
        if mode == 0:
            sg = sg + weight_decay * p32
        m32 = m32 * beta1 + beta3 * sg
        v32 = v32 * beta2 + (1 - beta2) * sg * sg
        u = (m32 / bc1) / (torch.sqrt(v32 / bc2) + eps)
        if mode == 1:
            u = u + weight_decay * p32
        put(m, m32)
        put(v, v32)
        put(g, u)
        updates.append(g)
    update_norms = norms(updates)
    adaptive = use_nvlamb or weight_decay != 0.0
    for i, (g, p) in enumerate(zip(updates, ps)):
        if adaptive:
            pn, un = param_norms[i], update_norms[i]
            ratio = torch.where((pn != 0) & (un != 0), lr * (pn / un), lr * torch.ones_like(pn))
        else:
            ratio = lr
        new_p = p.to(_F32) - ratio * g.to(_F32)
        put(p, new_p)
        if model_out is not None:
            put(model_out[i], new_p)


# ---------------------------------------------------------------- multi_tensor_novograd

def novograd(gs, ps, ms, grad_norms: torch.Tensor, lr: float, beta1: float, beta2: float, eps: float, step: int,
             bias_correction: int, weight_decay: float, grad_averaging: int, moment_mode: int,
             norm_type: int) -> None:
    """apex's multi_tensor_novograd, float32 math. First the per-tensor gradient norms blend into
    ``grad_norms`` in place (multi_tensor_norm_out: L2 n = sqrt(beta2*n^2 + (1-beta2)*||g||^2),
    L-inf n = beta2*n + (1-beta2)*max|g|). Then per element, with beta3 = 1-beta1 (grad_averaging)
    or 1, bc1 = 1-beta1^step and bc2 = sqrt(1-beta2^step) (1 without bias_correction) and
    d = n/bc2 + eps: moment_mode 0 (reg_inside_moment) g = g/d + wd*p, m = beta1*m + beta3*g,
    p -= lr*m/bc1; moment_mode 1 m = beta1*m + beta3*g, p -= lr*(m/bc1/d + wd*p)."""
    bc1 = 1 - beta1 ** step if bias_correction else 1.0
    bc2 = math.sqrt(1 - beta2 ** step) if bias_correction else 1.0
    beta3 = 1 - beta1 if grad_averaging else 1.0
    if norm_type == 0:
        new = torch.stack([g.abs().max().to(_F32) for g in gs])
        grad_norms.copy_(beta2 * grad_norms + (1 - beta2) * new)
    else:
        sums = torch.stack([torch.linalg.vector_norm(g, 2, dtype=_F32) ** 2 for g in gs])
        grad_norms.copy_(torch.sqrt(beta2 * grad_norms * grad_norms + (1 - beta2) * sums))
    denoms = grad_norms / bc2 + eps
    for i, (g, p, m) in enumerate(zip(gs, ps, ms)):
        g32, p32, m32, d = g.to(_F32), p.to(_F32), m.to(_F32), denoms[i]
        if moment_mode == 0:
            g32 = g32 / d + weight_decay * p32
            m32 = beta1 * m32 + beta3 * g32
            p32 = p32 - lr * (m32 / bc1)
        else:
            m32 = beta1 * m32 + beta3 * g32
            p32 = p32 - lr * ((m32 / bc1) / d + weight_decay * p32)
        p.copy_(p32)
        m.copy_(m32)
