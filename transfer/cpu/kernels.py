"""CPU implementations of the ATen ops behind ``torch.nn.SyncBatchNorm``.

Stock PyTorch only ships CUDA kernels for the SyncBatchNorm building blocks
(``batch_norm_stats``, ``batch_norm_gather_stats[_with_counts]``,
``batch_norm_elemt``, ``batch_norm_backward_reduce``,
``batch_norm_backward_elemt``).  :func:`register` installs CPU kernels for
them through ``torch.library`` so that
``torch.nn.modules._functions.SyncBatchNorm`` runs on CPU tensors (with gloo
doing the collectives).

The kernels mirror ``aten/src/ATen/native/cuda/Normalization.cu`` /
``Normalization.cuh``:

* statistics are taken over every dim except dim 1 (``(N, C, *)`` inputs,
  any memory format);
* ``invstd = 1 / sqrt(var_biased + eps)`` (and ``0`` when ``var == 0`` and
  ``eps == 0``, like the CUDA ``InvStd`` transform);
* math is done in the CUDA accumulate type: float32 for half / bfloat16 /
  float32 inputs, float64 for float64 inputs; per-channel statistics
  (mean, invstd, sum_dy, sum_dy_xmu) come back in that accumulate type.

Only the functional overloads are registered: SyncBatchNorm never calls the
``.out`` variants (``batch_norm_elemt.out`` is the only one without a
composite fallback, and it stays unimplemented on CPU).

:func:`register_grad_scaler` adds, where torch lacks them (torch < 2.3),
CPU kernels for the two ops of ``GradScaler`` (``_amp_foreach_non_finite_check_and_unscale_``,
``_amp_update_scale_``), mirroring ``aten/src/ATen/native/cuda/AmpKernels.cu``.

:func:`register_fused_adam` adds, where torch lacks them (torch < 2.4), CPU
kernels for ``_fused_adam_`` / ``_fused_adamw_`` (``Adam/AdamW(fused=True)``),
mirroring ``aten/src/ATen/native/cuda/fused_adam_utils.cuh``. They are Python
over torch ops: about 3x torch's foreach step on a CPU (measured on 2 cores,
torch 2.13, 17M parameters).

Importing this module does not import torch; :func:`register` does.

Usage::

    lib = register()      # idempotent while the library is alive
    ...
    destroy(lib)          # removes the kernels again
"""

from __future__ import annotations

import threading

#: ATen operator names (default overloads) this module implements for CPU, each by a function of that name.
OPS = (
    "batch_norm_stats",
    "batch_norm_gather_stats",
    "batch_norm_gather_stats_with_counts",
    "batch_norm_elemt",
    "batch_norm_backward_reduce",
    "batch_norm_backward_elemt",
)

__all__ = ["register", "is_registered", "OPS", *OPS]

_LOCK = threading.Lock()
_LIB = None  # the live torch.library.Library returned by register()


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def _acc_dtype(dtype):
    """CUDA accumulate type (``at::acc_type<T, /*is_cuda=*/true>``)."""
    import torch

    if not dtype.is_floating_point:
        raise RuntimeError(f"SyncBatchNorm CPU kernels: unsupported dtype {dtype}")
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return dtype


def _check_input(input, name):
    if input.dim() < 2:
        raise RuntimeError(
            f"{name}: expected input with at least 2 dims (N, C, *), got {input.dim()}"
        )


def _reduce_dims(x):
    return [0] + list(range(2, x.dim()))


def _per_channel(t, ndim, dtype):
    """View a (C,) tensor as (1, C, 1, ...) in ``dtype`` for broadcasting."""
    return t.to(dtype).reshape([1, -1] + [1] * (ndim - 2))


def _like_input(result, input):
    """Materialise ``result`` in ``input``'s dtype and memory format."""
    import torch

    out = torch.empty_like(input)  # preserve_format: keeps channels-last
    out.copy_(result)
    return out


# --------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------

def batch_norm_stats(input, eps):
    """``batch_norm_stats(input, eps) -> (mean, invstd)``.

    Per-channel mean and ``1/sqrt(biased_var + eps)`` of ``input`` (N, C, *)
    over all dims except 1.  Both outputs have shape (C,) and the accumulate
    dtype (float32 for half/bfloat16 input).
    """
    import torch

    _check_input(input, "batch_norm_stats")
    acc = _acc_dtype(input.dtype)
    var, mean = torch.var_mean(input.to(acc), dim=_reduce_dims(input), correction=0)
    invstd = 1.0 / torch.sqrt(var + eps)
    if eps == 0:
        invstd = invstd.masked_fill(var == 0, 0)
    return mean.contiguous(), invstd.contiguous()


def batch_norm_gather_stats_with_counts(
    input, mean, invstd, running_mean, running_var, momentum, eps, counts
):
    """Combine per-rank statistics into global ones.

    ``mean``/``invstd`` are (world_size, C) rows from :func:`batch_norm_stats`,
    ``counts`` the (world_size,) element counts per channel of each rank.
    Returns the global ``(mean, invstd)`` (shape (C,), dtype of ``mean``,
    float32 when that is half/bfloat16).  ``running_mean``/``running_var``
    (either may be None) are updated in place:
    ``r = (1 - momentum) * r + momentum * stat`` with the *unbiased* variance
    ``var_n / (sum(counts) - 1)``.  ``input`` only selects the dtype when
    there are no running stats.
    """
    import torch

    scalar_type = running_mean.dtype if running_mean is not None else input.dtype
    acc = _acc_dtype(scalar_type)
    out_dtype = mean.dtype
    if out_dtype in (torch.float16, torch.bfloat16):
        out_dtype = torch.float32

    m = mean.to(acc)
    if m.dim() == 1:
        m = m.unsqueeze(0)
    inv = invstd.to(acc).reshape(m.shape)
    c = counts.to(acc).reshape(-1, 1)

    # per-rank biased variance, as the CUDA kernel recovers it from invstd
    v = (1.0 / inv) ** 2 - eps
    n = c.sum()
    avg = (c * m).sum(0) / n
    var_n = (v * c).sum(0) + (c * (m - avg) ** 2).sum(0)
    save_invstd = 1.0 / torch.sqrt(var_n / n + eps)

    if running_mean is not None:
        running_mean.copy_((1 - momentum) * running_mean.to(acc) + momentum * avg)
    if running_var is not None:
        unbiased = var_n / (n - 1)
        running_var.copy_((1 - momentum) * running_var.to(acc) + momentum * unbiased)
    return avg.to(out_dtype), save_invstd.to(out_dtype)


def batch_norm_gather_stats(
    input, mean, invstd, running_mean, running_var, momentum, eps, count
):
    """Like :func:`batch_norm_gather_stats_with_counts` with the same int
    ``count`` for every row of ``mean``."""
    import torch

    dtype = running_mean.dtype if running_mean is not None else input.dtype
    counts = torch.full((mean.size(0),), count, dtype=dtype, device=mean.device)
    return batch_norm_gather_stats_with_counts(
        input, mean, invstd, running_mean, running_var, momentum, eps, counts
    )


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    """``((input - mean) * invstd) * weight + bias`` per channel.

    ``weight``/``bias`` may be None (1 / 0).  ``eps`` is ignored (``invstd``
    is already inverted).  Result has ``input``'s dtype, shape and memory
    format; math in the accumulate dtype.
    """
    _check_input(input, "batch_norm_elemt")
    acc = _acc_dtype(input.dtype)
    nd = input.dim()
    y = (input.to(acc) - _per_channel(mean, nd, acc)) * _per_channel(invstd, nd, acc)
    if weight is not None:
        y = y * _per_channel(weight, nd, acc)
    if bias is not None:
        y = y + _per_channel(bias, nd, acc)
    return _like_input(y, input)


def batch_norm_backward_reduce(
    grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g
):
    """Local reductions for the SyncBatchNorm backward.

    Returns ``(sum_dy, sum_dy_xmu, grad_weight, grad_bias)`` where, per
    channel, ``sum_dy = sum(grad_out)``, ``sum_dy_xmu = sum(grad_out *
    (input - mean))`` (both in ``mean``'s dtype, only if ``input_g``),
    ``grad_weight = sum_dy_xmu * invstd`` (only if ``weight_g``) and
    ``grad_bias = sum_dy`` (only if ``bias_g``), the latter two in
    ``weight``'s dtype (``input``'s when weight is None).  Outputs whose flag
    is false are None (undefined tensors).
    """
    _check_input(input, "batch_norm_backward_reduce")
    acc = _acc_dtype(input.dtype)
    nd = input.dim()
    dims = _reduce_dims(input)
    g = grad_out.to(acc)
    xmu = input.to(acc) - _per_channel(mean, nd, acc)
    sum_dy = g.sum(dims)
    sum_dy_xmu = (g * xmu).sum(dims)

    stat_dtype = weight.dtype if weight is not None else input.dtype
    grad_weight = (sum_dy_xmu * invstd.to(acc)).to(stat_dtype) if weight_g else None
    grad_bias = sum_dy.to(stat_dtype) if bias_g else None
    if input_g:
        out_sum_dy = sum_dy.to(mean.dtype)
        out_sum_dy_xmu = sum_dy_xmu.to(mean.dtype)
    else:
        out_sum_dy = out_sum_dy_xmu = None
    return out_sum_dy, out_sum_dy_xmu, grad_weight, grad_bias


def batch_norm_backward_elemt(
    grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count
):
    """Input gradient of (Sync)BatchNorm in training mode.

    ``sum_dy``/``sum_dy_xmu`` are the globally reduced sums and ``count`` the
    per-rank element counts (int32 from SyncBatchNorm); with
    ``N = count.sum()``::

        grad_input = (grad_out - sum_dy / N
                      - (input - mean) * invstd**2 * sum_dy_xmu / N)
                     * invstd * weight

    Result has ``input``'s dtype, shape and memory format.
    """
    import torch

    _check_input(input, "batch_norm_backward_elemt")
    acc = _acc_dtype(input.dtype)
    nd = input.dim()
    total = count.reshape(-1).to(torch.int64).sum().to(acc)
    norm_fct = 1.0 / total

    inv = _per_channel(invstd, nd, acc)
    m_dy = _per_channel(sum_dy, nd, acc) * norm_fct
    factor_1 = inv * inv * _per_channel(sum_dy_xmu, nd, acc) * norm_fct
    factor_2 = inv * _per_channel(weight, nd, acc) if weight is not None else inv
    gi = (grad_out.to(acc) - m_dy - (input.to(acc) - _per_channel(mean, nd, acc)) * factor_1) * factor_2
    return _like_input(gi, input)


_KERNELS = {
    "batch_norm_stats": batch_norm_stats,
    "batch_norm_gather_stats": batch_norm_gather_stats,
    "batch_norm_gather_stats_with_counts": batch_norm_gather_stats_with_counts,
    "batch_norm_elemt": batch_norm_elemt,
    "batch_norm_backward_reduce": batch_norm_backward_reduce,
    "batch_norm_backward_elemt": batch_norm_backward_elemt,
}


# --------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------

def destroy(lib) -> None:
    """Remove the kernels of a Library returned here."""
    if hasattr(lib, "_destroy"):
        lib._destroy()
        return
    # torch < 2.2 has no Library._destroy: drop the C++ handle (that removes the kernels) and the keys.
    import torch.library

    for key in lib._op_impls:
        torch.library._impls.discard(key)
    lib._op_impls.clear()
    lib.m = None


def is_registered():
    """True while a library returned by :func:`register` is alive."""
    return _LIB is not None and getattr(_LIB, "m", None) is not None


def register():
    """Register the CPU kernels; return the ``torch.library.Library``.

    Calling it again while that library is alive returns the same object
    (no double registration).  ``destroy(lib)`` removes the kernels; a
    later ``register()`` then creates a fresh library.  Ops that already
    have a CPU kernel from elsewhere (e.g. a future torch release) are left
    alone.
    """
    global _LIB
    with _LOCK:
        if is_registered():
            return _LIB
        import torch

        lib = torch.library.Library("aten", "IMPL", "CPU")
        for name, fn in _KERNELS.items():
            if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CPU"):
                continue
            lib.impl(name, fn)
        _LIB = lib
        return lib


# --------------------------------------------------------------------------
# GradScaler ops (torch < 2.3 has CUDA kernels only)
# --------------------------------------------------------------------------

def amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    """Multiply each grad by `inv_scale`; set `found_inf` to 1 if any held inf/nan."""
    for grad in grads:
        if not bool(grad.isfinite().all()):
            found_inf.fill_(1.0)
        grad.mul_(inv_scale.to(grad.dtype))


def amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """CUDA's `_amp_update_scale_`: back off on inf, grow after `growth_interval` clean steps."""
    if bool(found_inf.item()):
        scale.mul_(backoff_factor)
        growth_tracker.fill_(0)
        return scale
    successful = int(growth_tracker.item()) + 1
    if successful == growth_interval:
        grown = scale * growth_factor
        if bool(grown.isfinite().all()):
            scale.copy_(grown)
        growth_tracker.fill_(0)
    else:
        growth_tracker.fill_(successful)
    return scale


_GRAD_SCALER_KERNELS = {
    "_amp_foreach_non_finite_check_and_unscale_": amp_foreach_non_finite_check_and_unscale_,
    "_amp_update_scale_": amp_update_scale_,
}


def register_grad_scaler():
    """CPU kernels for GradScaler's ops where torch has none; return the Library, or None."""
    return _register_where_missing(_GRAD_SCALER_KERNELS)


def _register_where_missing(kernels, every_overload=False):
    """One ``aten`` CPU Library holding ``kernels`` (name -> function) for the ops torch has no CPU kernel
    for (each overload of the name with ``every_overload``, else its default one); None when none is missing."""
    import torch

    missing = {name: fn for name, fn in kernels.items()
               if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CPU")}
    if not missing:
        return None
    lib = torch.library.Library("aten", "IMPL", "CPU")
    for name, fn in missing.items():
        overloads = ([schema.overload_name for schema in torch._C._jit_get_schemas_for_operator(f"aten::{name}")]
                     if every_overload else [""])
        for overload in overloads:
            lib.impl(f"{name}.{overload}" if overload else name, fn)
    return lib


# --------------------------------------------------------------------------
# fused Adam / AdamW (torch < 2.4 has CUDA kernels only)
# --------------------------------------------------------------------------

#: Elements a fused step computes at once: bounds its float64 temporaries (CUDA's double arithmetic).
_ADAM_CHUNK = 1 << 16


def _adam_math(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, *, lr, beta1, beta2, weight_decay, eps,
               maximize, grad_scale, bias_correction1, bias_correction2_sqrt, adamw):
    """One chunk of CUDA's ``adam_math`` (``fused_adam_utils.cuh``): the same operations in the same order,
    each in the precision C++ gives it there. Values load into ``opmath`` (float32 for half / bfloat16 /
    float32, float64 for float64); an expression mixing them with the kernel's ``double`` arguments (lr,
    betas, weight decay, eps, grad scale) is computed in float64 and rounded to ``opmath`` where CUDA
    assigns it to an ``opmath_t``; the last update is ``opmath`` throughout. Results are stored back in the
    tensors' own dtype: the gradient only when `grad_scale` is given (unscaled, before ``maximize``)."""
    import torch

    f64 = torch.float64
    opmath = f64 if param.dtype is f64 else torch.float32

    def rounded(t):  # a float64 value assigned to an opmath_t
        return t if opmath is f64 else t.to(opmath).to(f64)

    g = grad.to(f64, copy=True)
    if grad_scale is not None:
        g = rounded(g.div_(grad_scale))
        grad.copy_(g)  # grad_to_store
    if maximize:
        g.neg_()
    p = param.to(f64, copy=True)
    if weight_decay != 0:
        if adamw:
            p = rounded(p.sub_(p * (lr * weight_decay)))
        else:
            g = rounded(g.add_(p * weight_decay))
    m = rounded(exp_avg.to(f64).mul(beta1).add_(g * (1 - beta1)))
    v = rounded(exp_avg_sq.to(f64).mul(beta2).add_((g * (1 - beta2)).mul_(g)))
    if max_exp_avg_sq is not None:
        v_max = torch.maximum(max_exp_avg_sq.to(f64), v)
        denom = v_max.to(opmath, copy=True).sqrt_()
    else:
        denom = v.to(opmath, copy=True).sqrt_()
    denom = denom.div_(bias_correction2_sqrt).to(f64).add_(eps).to(opmath)  # opmath sqrt and division
    step_size = torch.tensor(lr / bias_correction1, dtype=f64).to(opmath)
    param.copy_(p.to(opmath).sub_(m.to(opmath, copy=True).mul_(step_size).div_(denom)))
    exp_avg.copy_(m)
    exp_avg_sq.copy_(v)
    if max_exp_avg_sq is not None:
        max_exp_avg_sq.copy_(v_max)


def _chunks(tensors):
    """The tensors of one parameter in pieces of `_ADAM_CHUNK` elements (views), or whole where one of them is
    not contiguous: a list of tuples, one piece of each tensor."""
    if tensors[0].numel() > _ADAM_CHUNK and all(t.is_contiguous() for t in tensors):
        return list(zip(*(t.view(-1).split(_ADAM_CHUNK) for t in tensors)))
    return [tuple(tensors)]


def _fused_adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                     weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, adamw):
    """CUDA's ``FusedAdamMathFunctor`` over tensor lists: nothing at all when `found_inf` is 1; per tensor the
    bias corrections of its (already incremented) float32 step count, computed in float64 and passed to the
    math as ``opmath``."""
    import math

    import torch

    states = [grads, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else [])
    if any(len(tensors) != len(params) for tensors in states + [state_steps]):
        raise RuntimeError("_fused_adam(w)_: every tensor list must have one tensor per parameter")
    if found_inf is not None and float(found_inf) == 1.0:
        return
    if isinstance(lr, torch.Tensor):  # the tensor_lr overload: CUDA reads a host lr as a double
        lr = float(lr)
    scale = float(grad_scale) if grad_scale is not None else None
    # torch 2.0's kernel rounds 1 - beta2**step to opmath and takes its opmath square root; later ones take
    # the float64 square root and round that
    rounded_first = torch.__version__ < (2, 1)  # torch's TorchVersion compares with tuples
    for i, param in enumerate(params):
        for tensors in states:
            if tensors[i].shape != param.shape or tensors[i].dtype != param.dtype:
                raise RuntimeError("_fused_adam(w)_: each grad and state tensor must have its parameter's "
                                   f"shape and dtype ({tuple(param.shape)}, {param.dtype}), got "
                                   f"({tuple(tensors[i].shape)}, {tensors[i].dtype})")
        opmath = torch.float64 if param.dtype is torch.float64 else torch.float32
        step = float(state_steps[i])
        bias_correction1 = float(torch.tensor(1 - beta1 ** step, dtype=opmath))
        if rounded_first:
            bias_correction2_sqrt = float(torch.tensor(1 - beta2 ** step, dtype=opmath).sqrt())
        else:
            bias_correction2_sqrt = float(torch.tensor(math.sqrt(1 - beta2 ** step), dtype=opmath))
        for piece in _chunks([tensors[i] for tensors in [params] + states]):
            p, g, m, v, vmax = piece if amsgrad else piece + (None,)
            _adam_math(p, g, m, v, vmax, lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps,
                       maximize=maximize, grad_scale=scale, bias_correction1=bias_correction1,
                       bias_correction2_sqrt=bias_correction2_sqrt, adamw=adamw)


def fused_adam_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    """``aten::_fused_adam_`` (and its ``tensor_lr`` overload): ``Adam(fused=True)``'s step, L2 weight decay
    added to the gradient, as CUDA computes it (`_adam_math`)."""
    _fused_adam_step(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr=lr, beta1=beta1,
                     beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=amsgrad, maximize=maximize,
                     grad_scale=grad_scale, found_inf=found_inf, adamw=False)


def fused_adamw_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    """``aten::_fused_adamw_`` (and its ``tensor_lr`` overload): ``AdamW(fused=True)``'s step, decoupled
    weight decay applied to the parameter first, as CUDA computes it (`_adam_math`)."""
    _fused_adam_step(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr=lr, beta1=beta1,
                     beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=amsgrad, maximize=maximize,
                     grad_scale=grad_scale, found_inf=found_inf, adamw=True)


_FUSED_ADAM_KERNELS = {"_fused_adam_": fused_adam_, "_fused_adamw_": fused_adamw_}


def register_fused_adam():
    """CPU kernels for ``aten::_fused_adam_`` / ``aten::_fused_adamw_`` (each overload this torch has) where
    torch has none (before 2.4); return the Library (``destroy`` removes them), or None."""
    return _register_where_missing(_FUSED_ADAM_KERNELS, every_overload=True)
